"""The terminal auto-approve rules the VS Code window pushes as root config.

``terminalAutoApproveEnabled`` switches them on; ``terminalAutoApproveRules``
maps a pattern to ``true`` (approve), ``false`` (deny), ``null`` (no opinion)
or ``{approve, matchCommandLine}``. As VS Code reads them: a pattern written
``/…/flags`` is a regular expression, anything else matches a command that
starts with it, whole words (a pattern with a ``/`` or ``\\`` is a path and
matches either separator, with or without a leading ``./``). Rules are held
against each command of a command line (split at ``;``, ``&&``, ``||``, ``|``,
``&`` and line breaks outside quotes); with ``matchCommandLine`` against the
whole line. A deny rule wins over any approval; a line is approved when every
command in it is, or a whole-line rule approves it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENABLED_KEY = "terminalAutoApproveEnabled"
RULES_KEY = "terminalAutoApproveRules"

#: A command that sets a variable for itself can run anything: never approved by a rule.
_TRANSIENT_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=", re.IGNORECASE)
_NEVER = re.compile(r"(?!.*)")
_JS_REGEX = re.compile(r"^/(?P<pattern>.+)/(?P<flags>[dgimsuvy]*)$", re.DOTALL)
_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}


@dataclass(frozen=True)
class Rule:
    source: str
    regex: re.Pattern[str]
    approve: bool
    whole_line: bool


@dataclass(frozen=True)
class Verdict:
    """``approved``, ``denied`` or ``noMatch``; ``reason`` says which rule decided."""

    result: str
    reason: str
    rule: str | None = None


def to_regex(source: str) -> re.Pattern[str]:
    """A rule's pattern as the regular expression VS Code would build from it."""
    found = _JS_REGEX.match(source)
    if found:
        pattern = found["pattern"]
        flags = 0
        for letter in found["flags"]:
            flags |= _FLAGS.get(letter, 0)
        # JavaScript's named groups are spelled (?<name>…), Python's (?P<name>…).
        pattern = re.sub(r"\(\?<(?![=!])", "(?P<", pattern)
        try:
            return re.compile(pattern, flags)
        except re.error:
            return _NEVER  # a pattern that does not compile approves and denies nothing
    if source == "":
        return _NEVER
    if "/" in source or "\\" in source:
        parts = re.split(r"[/\\]+", source)
        body = r"[/\\]".join(re.escape(part) for part in parts)
        return re.compile(r"^(?:\.[/\\])?" + body + r"\b")
    return re.compile("^" + re.escape(source) + r"\b")


def rules_of(value: Any) -> list[Rule]:
    """The rules of a ``terminalAutoApproveRules`` value; entries of no known shape are left out."""
    found: list[Rule] = []
    if not isinstance(value, Mapping):
        return found
    for source, verdict in value.items():
        if not isinstance(source, str):
            continue
        if isinstance(verdict, bool):
            found.append(Rule(source, to_regex(source), verdict, False))
        elif isinstance(verdict, Mapping) and isinstance(verdict.get("approve"), bool):
            whole = verdict.get("matchCommandLine") is True
            found.append(Rule(source, to_regex(source), verdict["approve"], whole))
    return found


def split_commands(line: str) -> list[str]:
    """The commands of a shell command line, split at its operators outside quotes."""
    commands: list[str] = []
    current: list[str] = []
    quote: str | None = None
    index = 0
    while index < len(line):
        char = line[index]
        if quote is not None:
            current.append(char)
            if char == "\\" and quote == '"' and index + 1 < len(line):
                current.append(line[index + 1])
                index += 1
            elif char == quote:
                quote = None
        elif char == "\\" and index + 1 < len(line):
            current.append(line[index : index + 2])
            index += 1
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char in ";|&\n":
            if char in "|&" and line[index + 1 : index + 2] == char:
                index += 1  # && and ||
            commands.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    commands.append("".join(current))
    return [c.strip().lstrip("({ ").strip() for c in commands if c.strip().lstrip("({ ").strip()]


def _first(rules: list[Rule], approve: bool, whole: bool, text: str) -> Rule | None:
    return next(
        (
            r
            for r in rules
            if r.approve is approve and r.whole_line is whole and r.regex.search(text)
        ),
        None,
    )


def judge(line: str, rules_value: Any) -> Verdict:
    """What the rules say of running ``line``."""
    rules = rules_of(rules_value)
    line = line.strip()
    denied = _first(rules, False, True, line)
    if denied is not None:
        return Verdict("denied", f"`{line}` is denied by the rule {denied.source}", denied.source)
    commands = split_commands(line)
    verdicts: list[Verdict] = []
    for command in commands:
        if _TRANSIENT_ENV.match(command):
            verdicts.append(
                Verdict("noMatch", f"`{command}` sets an environment variable for itself")
            )
            continue
        rule = _first(rules, False, False, command)
        if rule is not None:
            reason = f"`{command}` is denied by the rule {rule.source}"
            return Verdict("denied", reason, rule.source)
        rule = _first(rules, True, False, command)
        if rule is None:
            verdicts.append(Verdict("noMatch", f"no rule approves `{command}`"))
        else:
            verdicts.append(Verdict("approved", f"approved by the rule {rule.source}", rule.source))
    approved = _first(rules, True, True, line)
    if approved is not None:
        return Verdict(
            "approved", f"`{line}` is approved by the rule {approved.source}", approved.source
        )
    if verdicts and all(v.result == "approved" for v in verdicts):
        return Verdict("approved", "; ".join(v.reason for v in verdicts))
    missing = next((v for v in verdicts if v.result != "approved"), None)
    return Verdict("noMatch", missing.reason if missing else "no command")
