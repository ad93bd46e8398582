"""The script model: steps, the rules that pick a turn's steps, and the script that holds them.

A turn's script is a list of steps. Which list runs is decided by rules
matched against the message text (exact, prefix or regex), first match wins;
the script's ``default`` steps run when no rule matches. Strings in steps may
name variables as ``${name}`` (``${message}``, ``${rest}``, a regex's named
groups, ``${answer}``, ``${result}``, ``${input.key}``, ``${context}`` and
whatever the backend adds); unknown names are left as written.

Steps are frozen dataclasses; wherever a list of steps (or rules) is expected,
plain dicts in the file format do as well. That form (see ``ahp_scripted.loader``,
which reads it from JSON and YAML) is parsed here, at the end of this module, so
the classes that take it and the parser that makes them stay together.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

JSON = Any


class ScriptError(ValueError):
    """A script that cannot be loaded or run; the message says where and what."""


@dataclass(frozen=True)
class Say:
    """Visible text, streamed in chunks of ``words`` words, ``delay`` seconds apart."""

    text: str
    delay: float = 0.0
    words: int = 4


@dataclass(frozen=True)
class Think:
    """Reasoning, streamed like ``Say``."""

    text: str
    delay: float = 0.0
    words: int = 4


@dataclass(frozen=True, init=False)
class Tool:
    """A tool call: streamed input, optionally approved by a person, then its result.

    ``options`` (``{id, label, kind}``) are the answers a person picks from (the
    pick is ``${option}``); ``edits`` (``{path, after, before}``) are file edits
    the approval shows. ``fail`` completes the call with success False and that error. ``client``
    runs a tool a client provides (``<clientId>__<name>``; ``name`` may be the
    bare ``<name>``). ``server`` runs one of the host's own tools (``list_sessions``,
    ``add_artifact_or_reference``, ...) with ``input`` as its arguments; its answer
    is the result. A denied approval runs ``on_deny`` and ends the turn. ``kind`` is
    the ``_meta.toolKind`` the call starts with (``terminal`` for a shell command).
    """

    name: str
    input: JSON
    approval: bool
    result: str
    fail: str | None
    client: bool
    display_name: str | None
    intention: str | None
    invocation: str | None
    past_tense: str | None
    title: str | None
    on_deny: tuple[Step, ...]
    options: tuple[Mapping[str, JSON], ...]
    edits: tuple[Mapping[str, JSON], ...]
    server: bool
    kind: str | None

    def __init__(
        self,
        name: str,
        input: JSON = None,
        approval: bool = False,
        result: str = "",
        fail: str | None = None,
        client: bool = False,
        display_name: str | None = None,
        intention: str | None = None,
        invocation: str | None = None,
        past_tense: str | None = None,
        title: str | None = None,
        on_deny: Sequence[StepLike] = (),
        options: Sequence[Mapping[str, JSON]] = (),
        edits: Sequence[Mapping[str, JSON]] = (),
        server: bool = False,
        kind: str | None = None,
    ) -> None:
        _set(
            self,
            server=server,
            kind=kind,
            options=tuple(dict(option) for option in options),
            edits=tuple(dict(edit) for edit in edits),
            name=name,
            input={} if input is None else input,
            approval=approval,
            result=result,
            fail=fail,
            client=client,
            display_name=display_name,
            intention=intention,
            invocation=invocation,
            past_tense=past_tense,
            title=title,
            on_deny=as_steps(on_deny, where="on_deny"),
        )


@dataclass(frozen=True, init=False)
class Ask:
    """Questions for a person (``ChatInputQuestion`` dicts, or one text question as a string).

    The answer becomes ``${answer}``; ``say_answer`` says it back (True, or a
    template). A declined or cancelled request runs ``on_decline`` and ends the turn.
    """

    questions: tuple[Mapping[str, JSON], ...]
    message: str | None
    say_answer: bool | str
    on_decline: tuple[Step, ...]

    def __init__(
        self,
        questions: str | Mapping[str, JSON] | Sequence[Mapping[str, JSON]],
        message: str | None = None,
        say_answer: bool | str = False,
        on_decline: Sequence[StepLike] = (),
    ) -> None:
        if isinstance(questions, str):
            questions = [{"id": "answer", "kind": "text", "message": questions}]
        elif isinstance(questions, Mapping):
            questions = [questions]
        _set(
            self,
            questions=tuple(dict(q) for q in questions),
            message=message,
            say_answer=say_answer,
            on_decline=as_steps(on_decline, where="on_decline"),
        )


@dataclass(frozen=True)
class Usage:
    """Tokens the turn spent."""

    input_tokens: int
    output_tokens: int
    model: str | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    context_used: int | None = None
    context_size: int | None = None
    #: What the turn cost, in ``currency``.
    cost: float | None = None
    currency: str = "USD"


@dataclass(frozen=True)
class Title:
    """The agent names the session."""

    text: str


@dataclass(frozen=True)
class Activity:
    """What the chat is doing, in a line; None clears it."""

    text: str | None


@dataclass(frozen=True)
class Wait:
    """Pause for ``seconds``, or until the Python API releases ``gate`` (``backend.release``)."""

    seconds: float | None = None
    gate: str | None = None

    def __post_init__(self) -> None:
        if (self.seconds is None) == (self.gate is None):
            raise ScriptError("wait needs either seconds or a gate, not both or neither")


@dataclass(frozen=True)
class Fail:
    """The turn ends in error with this message."""

    message: str = "the script failed this turn"


@dataclass(frozen=True)
class Crash:
    """The agent dies mid-turn (raises ``AgentCrashed``)."""

    message: str = "the agent process exited unexpectedly"


@dataclass(frozen=True, init=False)
class Subagent:
    """A tool call that runs a subagent: its ``steps`` run in a child chat.

    ``progress`` lines go out as the call's progress before the steps run.
    """

    name: str
    description: str
    steps: tuple[Step, ...]
    result: str
    progress: tuple[str, ...]

    def __init__(
        self,
        name: str,
        description: str = "",
        steps: Sequence[StepLike] = (),
        result: str = "",
        progress: Sequence[str] = (),
    ) -> None:
        _set(
            self,
            name=name,
            description=description,
            steps=as_steps(steps, where="steps"),
            result=result,
            progress=tuple(progress),
        )


@dataclass(frozen=True)
class Background:
    """Work that runs on after the turn: listed as background work until it ends.

    It ends after ``seconds`` or when ``gate`` is released; then, with a
    ``follow_up``, the agent starts a turn of its own with that text (origin
    ``agent``, or ``systemNotification``).
    """

    id: str
    label: str
    command: str | None = None
    seconds: float | None = None
    gate: str | None = None
    follow_up: str | None = None
    origin: str = "agent"


@dataclass(frozen=True, init=False)
class Meta:
    """Facts about the session merged into its ``_meta`` (a None value removes a key)."""

    values: Mapping[str, JSON]

    def __init__(self, values: Mapping[str, JSON]) -> None:
        _set(self, values=dict(values))


@dataclass(frozen=True)
class Drain:
    """From here on, a cancel takes ``seconds`` to land: the agent drains its stream first."""

    seconds: float = 1.0


Step = (
    Say
    | Think
    | Tool
    | Ask
    | Usage
    | Title
    | Activity
    | Wait
    | Fail
    | Crash
    | Subagent
    | Background
    | Drain
    | Meta
)
#: A step, or a plain dict in the file form (``{"say": "hi"}``).
StepLike = Step | Mapping[str, JSON]
STEP_TYPES = (
    Say,
    Think,
    Tool,
    Ask,
    Usage,
    Title,
    Activity,
    Wait,
    Fail,
    Crash,
    Subagent,
    Background,
    Drain,
    Meta,
)


def _set(obj: object, **values: Any) -> None:
    """Fill a frozen dataclass from its own ``__init__``."""
    for key, value in values.items():
        object.__setattr__(obj, key, value)


def as_steps(steps: Sequence[StepLike], *, where: str = "steps") -> tuple[Step, ...]:
    """Steps from step dataclasses and plain dicts in the file form."""
    if isinstance(steps, str | bytes | Mapping):
        raise ScriptError(f"{where}: expected a list of steps, not {type(steps).__name__}")
    out: list[Step] = []
    for index, step in enumerate(steps):
        if isinstance(step, STEP_TYPES):
            out.append(step)
        elif isinstance(step, Mapping):
            out.append(parse_step(step, f"{where}[{index}]"))
        else:
            raise ScriptError(f"{where}[{index}]: expected a step, not {step!r}")
    return tuple(out)


#: The longest message a regex rule is tried on. The message is the person's, and the
#: search runs on the host's event loop: a pattern that backtracks takes time growing
#: with a power of the text's length (a lazy group before ``\s*$`` took 9 s over a
#: 60 KB prompt, and held every other client that long). Bounding the text bounds it.
MAX_REGEX_TEXT = 4096


@dataclass(frozen=True, init=False)
class Rule:
    """Steps to run when the message matches: ``exact``, ``prefix`` or ``regex`` (one of them).

    Exact compares the stripped text; prefix sets ``${rest}`` to what follows
    it; regex is searched (anchor it yourself) and sets its named groups. A
    message longer than ``MAX_REGEX_TEXT`` characters matches no regex rule.
    """

    steps: tuple[Step, ...]
    exact: str | None
    prefix: str | None
    regex: str | None
    ignore_case: bool
    name: str

    def __init__(
        self,
        steps: Sequence[StepLike],
        exact: str | None = None,
        prefix: str | None = None,
        regex: str | None = None,
        ignore_case: bool = False,
        name: str = "",
    ) -> None:
        named = (("exact", exact), ("prefix", prefix), ("regex", regex))
        given = [kind for kind, pattern in named if pattern is not None]
        if len(given) != 1:
            raise ScriptError(
                f"a rule needs exactly one of exact, prefix or regex, not {given or 'none'}"
            )
        if regex is not None:
            try:
                re.compile(regex)
            except re.error as exc:
                raise ScriptError(f"regex {regex!r} does not compile: {exc}") from None
        _set(
            self,
            steps=as_steps(steps),
            exact=exact,
            prefix=prefix,
            regex=regex,
            ignore_case=ignore_case,
            name=name,
        )

    def match(self, text: str) -> dict[str, str] | None:
        """The variables the match sets, or None when the rule does not apply."""
        fold = str.casefold if self.ignore_case else (lambda s: s)
        if self.exact is not None:
            return {} if fold(text.strip()) == fold(self.exact) else None
        if self.prefix is not None:
            stripped = text.lstrip()
            if not fold(stripped).startswith(fold(self.prefix)):
                return None
            return {"rest": stripped[len(self.prefix) :].strip()}
        assert self.regex is not None
        if len(text) > MAX_REGEX_TEXT:
            return None
        found = re.search(self.regex, text, re.IGNORECASE if self.ignore_case else 0)
        if found is None:
            return None
        groups = {k: v for k, v in found.groupdict().items() if v is not None}
        return {"match": found.group(0), **groups}


@dataclass(frozen=True, init=False)
class Script:
    """Rules tried in order, and the steps run when none matches.

    ``name`` and ``description`` show up in the agent's ``AgentInfo``.
    """

    rules: tuple[Rule, ...]
    default: tuple[Step, ...] | None
    name: str
    description: str

    def __init__(
        self,
        rules: Sequence[Rule | Mapping[str, JSON]] = (),
        default: Sequence[StepLike] | None = None,
        name: str = "Scripted agent",
        description: str = "A deterministic agent that follows a script.",
    ) -> None:
        _set(
            self,
            rules=tuple(
                rule if isinstance(rule, Rule) else _rule_from_mapping(rule, index)
                for index, rule in enumerate(rules)
            ),
            default=None if default is None else as_steps(default, where="default"),
            name=name,
            description=description,
        )

    def select(self, text: str) -> tuple[tuple[Step, ...], dict[str, str]]:
        """The steps a message runs and the variables its match set."""
        for rule in self.rules:
            found = rule.match(text)
            if found is not None:
                return rule.steps, found
        if self.default is not None:
            return self.default, {}
        raise ScriptError(
            f"no rule of script {self.name!r} matches {text!r}, and it has no default"
        )

    def combine(self, other: Script) -> Script:
        """This script's rules, then the other's; this script's default if it has one."""
        return Script(
            rules=self.rules + other.rules,
            default=self.default if self.default is not None else other.default,
            name=self.name,
            description=self.description,
        )


def _rule_from_mapping(rule: Any, index: int) -> Rule:
    if not isinstance(rule, Mapping):
        raise ScriptError(f"rules[{index}]: expected a rule, not {rule!r}")
    return parse_rule(rule, f"rules[{index}]")


# -- the file form: steps, rules and scripts as mappings ----------------------------
#: kind key -> (step class, the field a bare value fills)
KINDS: dict[str, tuple[type, str | None]] = {
    "say": (Say, "text"),
    "think": (Think, "text"),
    "tool": (Tool, "name"),
    "ask": (Ask, "questions"),
    "usage": (Usage, None),
    "title": (Title, "text"),
    "activity": (Activity, "text"),
    "wait": (Wait, None),
    "fail": (Fail, "message"),
    "crash": (Crash, "message"),
    "subagent": (Subagent, "name"),
    "background": (Background, "id"),
    "drain": (Drain, "seconds"),
    "meta": (Meta, "values"),
}


class _Problem(Exception):
    """What is wrong with one value; the caller adds where it sits."""


Check = Callable[[Any, str], Any]


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _Problem(f"must be a string, not {_show(value)}")
    return value


def _optional_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _Problem(f"must be true or false, not {_show(value)}")
    return value


def _flag_or_text(value: Any, where: str) -> bool | str:
    if not isinstance(value, bool | str):
        raise _Problem(f"must be true, false or a text template, not {_show(value)}")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _Problem(f"must be a number of seconds (0 or more), not {_show(value)}")
    return float(value)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Problem(f"must be a whole number (0 or more), not {_show(value)}")
    return value


def _optional_count(value: Any, where: str) -> int | None:
    return None if value is None else _count(value, where)


def _positive(value: Any, where: str) -> int:
    if _count(value, where) < 1:
        raise _Problem(f"must be 1 or more, not {value}")
    return int(value)


def _json_value(value: Any, where: str) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise _Problem(f"must be JSON data: {exc}") from None
    return value


def _optional_seconds(value: Any, where: str) -> float | None:
    return None if value is None else _seconds(value, where)


def _json_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise _Problem(f"must be a list of mappings, not {_show(value)}")
    return [dict(item) for item in value]


def _json_mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _Problem(f"must be a mapping, not {_show(value)}")
    return dict(_json_value(value, where))


def _text_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _Problem(f"must be a list of strings, not {_show(value)}")
    return list(value)


def _origin(value: Any, where: str) -> str:
    if value not in ("agent", "systemNotification"):
        raise _Problem(f"must be 'agent' or 'systemNotification', not {_show(value)}")
    return str(value)


def _steps(value: Any, where: str) -> tuple[Step, ...]:
    if not isinstance(value, list | tuple):
        raise _Problem(f"must be a list of steps, not {_show(value)}")
    return tuple(parse_step(step, f"{where}[{index}]") for index, step in enumerate(value))


#: Whether questions written as protocol shapes are checked against the strict schema.
#: The packaged demo is checked by its tests, so loading it when the host starts
#: skips the several hundred strict models the check would import.
_check_shapes: ContextVar[bool] = ContextVar("check_shapes", default=True)


def _questions(value: Any, where: str) -> Any:
    if isinstance(value, str):
        return value
    items = [value] if isinstance(value, Mapping) else value
    if not isinstance(items, list | tuple) or not items:
        raise _Problem("must be a question text, a ChatInputQuestion or a non-empty list of them")
    if not _check_shapes.get():
        return tuple(items)
    from ahpcore.protocol.wire import format_issues, validate_value

    for index, question in enumerate(items):
        issues = validate_value("ChatInputQuestion", question, path=f"questions[{index}]")
        if issues:
            raise _Problem(f"not a ChatInputQuestion: {format_issues(issues)}")
    return tuple(items)


FIELDS: dict[type, dict[str, Check]] = {
    Say: {"text": _text, "delay": _seconds, "words": _positive},
    Think: {"text": _text, "delay": _seconds, "words": _positive},
    Tool: {
        "name": _text,
        "input": _json_value,
        "approval": _flag,
        "result": _text,
        "fail": _optional_text,
        "client": _flag,
        "server": _flag,
        "display_name": _optional_text,
        "intention": _optional_text,
        "invocation": _optional_text,
        "past_tense": _optional_text,
        "title": _optional_text,
        "on_deny": _steps,
        "options": _json_list,
        "edits": _json_list,
        "kind": _optional_text,
    },
    Ask: {
        "questions": _questions,
        "message": _optional_text,
        "say_answer": _flag_or_text,
        "on_decline": _steps,
    },
    Usage: {
        "input_tokens": _count,
        "output_tokens": _count,
        "model": _optional_text,
        "cache_read_tokens": _optional_count,
        "cache_write_tokens": _optional_count,
        "reasoning_tokens": _optional_count,
        "context_used": _optional_count,
        "context_size": _optional_count,
        "cost": _optional_seconds,
        "currency": _text,
    },
    Title: {"text": _text},
    Activity: {"text": _optional_text},
    Wait: {"seconds": _seconds, "gate": _text},
    Fail: {"message": _text},
    Crash: {"message": _text},
    Subagent: {
        "name": _text,
        "description": _text,
        "steps": _steps,
        "result": _text,
        "progress": _text_list,
    },
    Background: {
        "id": _text,
        "label": _text,
        "command": _optional_text,
        "seconds": _optional_seconds,
        "gate": _optional_text,
        "follow_up": _optional_text,
        "origin": _origin,
    },
    Drain: {"seconds": _seconds},
    Meta: {"values": _json_mapping},
}


def _show(value: Any) -> str:
    text = json.dumps(value) if _is_json(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _unknown(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"expected one of {', '.join(known)}"
    return f"unknown key {key!r} ({hint})"


def _kind_of(step: Mapping[str, Any], where: str) -> str:
    present = [key for key in step if key in KINDS]
    # A tool step may carry `fail` and `title` fields: the kind is the key whose
    # fields hold every other kind key present.
    kinds = [k for k in present if all(o == k or o in FIELDS[KINDS[k][0]] for o in present)]
    if len(kinds) == 1:
        return kinds[0]
    if not present:
        keys = ", ".join(repr(key) for key in step) or "nothing"
        raise ScriptError(f"{where}: a step needs one of {', '.join(KINDS)}; it has {keys}")
    raise ScriptError(f"{where}: a step has one kind, this one names {' and '.join(present)}")


def parse_step(step: Any, where: str = "step") -> Step:
    """One step from its file form; ``where`` starts the message of any error."""
    if not isinstance(step, Mapping):
        raise ScriptError(
            f"{where}: a step must be a mapping like {{say: hello}}, not {_show(step)}"
        )
    kind = _kind_of(step, where)
    cls, main = KINDS[kind]
    here = f"{where} ({kind})"
    value = step[kind]
    fields = {key: item for key, item in step.items() if key != kind}
    # An ask's questions and a meta's values are mappings themselves, never its fields.
    if isinstance(value, Mapping) and kind not in ("ask", "meta"):
        if fields:
            raise ScriptError(f"{here}: give fields either inside {kind!r} or beside it, not both")
        fields = dict(value)
    elif kind == "wait":
        fields["gate" if isinstance(value, str) else "seconds"] = value
    elif main is None:
        raise ScriptError(f"{here}: expected a mapping of its fields, not {_show(value)}")
    else:
        fields[main] = value
    checks = FIELDS[cls]
    converted: dict[str, Any] = {}
    for key, item in fields.items():
        if key not in checks:
            raise ScriptError(f"{here}: {_unknown(str(key), list(checks))}")
        try:
            converted[key] = checks[key](item, f"{here}.{key}")
        except _Problem as problem:
            raise ScriptError(f"{here}: {key!r} {problem}") from None
    parameters = inspect.signature(cls).parameters.values()
    required = [p.name for p in parameters if p.default is inspect.Parameter.empty]
    missing = [name for name in required if name not in converted]
    if missing:
        raise ScriptError(f"{here}: missing {', '.join(repr(m) for m in missing)}")
    try:
        made: Step = cls(**converted)
    except ScriptError as exc:
        raise ScriptError(f"{here}: {exc}") from None
    return made


def parse_rule(rule: Any, where: str = "rule") -> Rule:
    """One rule from its file form."""
    if not isinstance(rule, Mapping):
        raise ScriptError(f"{where}: a rule must be a mapping, not {_show(rule)}")
    known = ["exact", "prefix", "regex", "ignore_case", "name", "steps"]
    for key in rule:
        if key not in known:
            raise ScriptError(f"{where}: {_unknown(str(key), known)}")
    if "steps" not in rule:
        raise ScriptError(f"{where}: missing 'steps'")
    for key in ("exact", "prefix", "regex", "name"):
        if key in rule and not isinstance(rule[key], str):
            raise ScriptError(f"{where}: {key!r} must be a string, not {_show(rule[key])}")
    try:
        steps = _steps(rule["steps"], f"{where}.steps")
        ignore_case = _flag(rule.get("ignore_case", False), where)
    except _Problem as problem:
        raise ScriptError(f"{where}: {problem}") from None
    try:
        return Rule(
            steps=steps,
            exact=rule.get("exact"),
            prefix=rule.get("prefix"),
            regex=rule.get("regex"),
            ignore_case=ignore_case,
            name=rule.get("name", ""),
        )
    except ScriptError as exc:
        raise ScriptError(f"{where}: {exc}") from None


def parse_script(data: Any, source: str = "<script>") -> Script:
    """A script from decoded JSON or YAML; ``source`` (a file name) starts every error."""
    if not isinstance(data, Mapping):
        raise ScriptError(f"{source}: a script must be a mapping with 'rules', not {_show(data)}")
    known = ["name", "description", "rules", "default"]
    for key in data:
        if key not in known:
            raise ScriptError(f"{source}: {_unknown(str(key), known)}")
    rules = data.get("rules", [])
    if not isinstance(rules, list):
        raise ScriptError(f"{source}: 'rules' must be a list, not {_show(rules)}")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise ScriptError(f"{source}: {key!r} must be a string, not {_show(data[key])}")
    parsed = [parse_rule(rule, f"{source}: rules[{index}]") for index, rule in enumerate(rules)]
    default = None
    if data.get("default") is not None:
        try:
            default = _steps(data["default"], f"{source}: default")
        except _Problem as problem:
            raise ScriptError(f"{source}: 'default' {problem}") from None
    extra = {key: data[key] for key in ("name", "description") if key in data}
    return Script(rules=tuple(parsed), default=default, **extra)
