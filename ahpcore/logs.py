"""Log lines the host writes: one event per line, and no secret in any of them.

Clients choose many strings the host logs (a clientId, an action type, a
method name, an Origin header). ``escape`` renders one so a newline or a
terminal escape in it cannot start a line of its own; ``LogHygiene`` does the
same to every message that reaches the handler, the websockets library's
included, and blanks connection tokens (``?token=...``, ``Bearer ...``)
wherever they appear.
"""

from __future__ import annotations

import logging
import re
import sys

#: Characters that would let one log message pass for several, or repaint a terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _any_spelling(word: str) -> str:
    """A pattern for ``word`` with any of its characters percent-encoded, once or more.

    The host takes a token only from names spelled plainly, but a line may still
    carry ``tok%65n=<token>`` (a client that encodes, a guess): redacted all the same.
    """
    return "".join(
        f"(?:{re.escape(c)}|%(?:25)*(?:{ord(c.lower()):02x}|{ord(c.upper()):02x}))" for c in word
    )


_TOKEN = re.compile(
    rf"(?i)((?:{_any_spelling('token')}|{_any_spelling('tkn')})(?:=|%(?:25)*3d)"
    rf"|{_any_spelling('bearer')}(?:\s|\+|%(?:25)*20)+)"
    r"[^\s&\"'<>]+"
)
REDACTED = "[redacted]"

LEVELS = ("debug", "info", "warning", "error")


def escape(text: object) -> str:
    """``text`` with its control characters spelled out (``\\n``, ``\\x1b``)."""

    def spell(match: re.Match[str]) -> str:
        return match.group().encode("unicode_escape").decode("ascii")

    return _CONTROL.sub(spell, str(text))


def redact(text: str) -> str:
    """``text`` with every connection token it carries blanked."""
    return _TOKEN.sub(lambda m: m.group(1) + REDACTED, text)


class LogHygiene(logging.Filter):
    """Redacts tokens and escapes control characters in each record's message.

    A traceback keeps its own lines: it is added by the formatter after this runs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is the logger's bug; show it as it is
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = escape(redact(message))
        record.args = None
        return True


class RedactingFormatter(logging.Formatter):
    """Redacts tokens from the whole line, the traceback a record carries included."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


#: Loggers of libraries whose INFO lines repeat what the host says itself, or say nothing a user needs.
QUIET_LIBRARIES = ("websockets", "claude_agent_sdk", "watchfiles")


def configure(level: str, stream: object = None) -> None:
    """The host's logging: one handler on stderr, hygiene on every line.

    Libraries speak at INFO about their own plumbing (websockets announces each
    connection the host logs itself; the Claude Agent SDK names the CLI it runs
    each time it starts one), so below ``debug`` only their warnings show.
    """
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(LogHygiene())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for library in QUIET_LIBRARIES:
        logging.getLogger(library).setLevel(
            logging.DEBUG if level.lower() == "debug" else logging.WARNING
        )
