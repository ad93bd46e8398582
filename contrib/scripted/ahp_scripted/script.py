"""The script model: steps, the rules that pick a turn's steps, and the script that holds them.

A turn's script is a list of steps. Which list runs is decided by rules
matched against the message text (exact, prefix or regex), first match wins;
the script's ``default`` steps run when no rule matches. Strings in steps may
name variables as ``${name}`` (``${message}``, ``${rest}``, a regex's named
groups, ``${answer}``, ``${result}``, ``${input.key}``, ``${context}`` and
whatever the backend adds); unknown names are left as written.

Steps are frozen dataclasses; wherever a list of steps (or rules) is expected,
plain dicts in the file format (see ``ahp_scripted.loader``) do as well.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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
    bare ``<name>``). A denied approval runs ``on_deny`` and ends the turn.
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
    ) -> None:
        _set(
            self,
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
    from ahp_scripted.loader import parse_step  # the loader imports this module

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
    from ahp_scripted.loader import parse_rule

    if not isinstance(rule, Mapping):
        raise ScriptError(f"rules[{index}]: expected a rule, not {rule!r}")
    return parse_rule(rule, f"rules[{index}]")
