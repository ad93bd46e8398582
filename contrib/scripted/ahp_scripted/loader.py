"""Reading scripts from JSON and YAML, with errors that say where and what.

The file format, in YAML::

    name: My agent
    rules:
      - prefix: "echo "
        steps:
          - say: "Echoing."
          - tool: echo
            input: {text: "${rest}"}
            approval: true
            result: "${input.text}"
    default:
      - say: "Try `echo hi`."

A step is a mapping with one kind key (say, think, tool, ask, usage, title,
activity, wait, fail, crash). Its value is the step's main field (the text,
the tool's name, the questions, the seconds or gate name of a wait) or a
mapping of all its fields; other fields sit beside the kind key. Keys are the
step dataclasses' field names.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ahp_scripted.script import (
    Activity,
    Ask,
    Background,
    Crash,
    Drain,
    Fail,
    Meta,
    Rule,
    Say,
    Script,
    ScriptError,
    Step,
    Subagent,
    Think,
    Title,
    Tool,
    Usage,
    Wait,
)

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
SUFFIXES = (".json", ".yaml", ".yml")


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
        "display_name": _optional_text,
        "intention": _optional_text,
        "invocation": _optional_text,
        "past_tense": _optional_text,
        "title": _optional_text,
        "on_deny": _steps,
        "options": _json_list,
        "edits": _json_list,
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


def _yaml() -> Any:
    # Imported by name so the module's missing type stubs do not matter.
    return importlib.import_module("yaml")


def loads_script(
    text: str, *, format: str = "json", source: str = "<script>", check_shapes: bool = True
) -> Script:
    """A script from JSON or YAML text (``format`` is "json" or "yaml").

    ``check_shapes=False`` leaves protocol shapes embedded in the script
    (questions) unchecked: only for scripts whose tests check them.
    """
    if format == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScriptError(f"{source}: not valid JSON: {exc}") from None
    elif format == "yaml":
        yaml = _yaml()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ScriptError(f"{source}: not valid YAML: {exc}") from None
    else:
        raise ScriptError(f"{source}: unknown script format {format!r} (json or yaml)")
    token = _check_shapes.set(check_shapes)
    try:
        return parse_script(data, source)
    finally:
        _check_shapes.reset(token)


def load_script(path: str | Path) -> Script:
    """A script from a .json, .yaml or .yml file, or every such file of a directory in name order."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES)
        if not files:
            raise ScriptError(f"{path}: no {', '.join(SUFFIXES)} script files in this directory")
        scripts = [load_script(file) for file in files]
        combined = scripts[0]
        for script in scripts[1:]:
            combined = combined.combine(script)
        return combined
    if path.suffix not in SUFFIXES:
        raise ScriptError(f"{path}: a script file ends in {', '.join(SUFFIXES)}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read the script: {exc.strerror or exc}") from None
    return loads_script(text, format="json" if path.suffix == ".json" else "yaml", source=str(path))
