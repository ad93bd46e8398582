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
import logging.handlers
import os
import re
import sys
from io import TextIOWrapper
from pathlib import Path

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
#: A person's token (ahp-users), wherever it appears, named or not.
_PERSON_TOKEN = re.compile(r"ahpu-[0-9a-f]{8}\.[A-Za-z0-9_-]+")

LEVELS = ("debug", "info", "warning", "error")


def escape(text: object) -> str:
    """``text`` with its control characters spelled out (``\\n``, ``\\x1b``)."""

    def spell(match: re.Match[str]) -> str:
        return match.group().encode("unicode_escape").decode("ascii")

    return _CONTROL.sub(spell, str(text))


def redact(text: str) -> str:
    """``text`` with every connection token it carries blanked."""
    text = _PERSON_TOKEN.sub(REDACTED, text)
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


#: A log file is rotated when it reaches this size ...
LOG_FILE_BYTES = 10 << 20
#: ... keeping this many older files beside it (``ahp.log.1`` the newest): 60 MiB at most.
LOG_FILE_BACKUPS = 5
#: Log files hold what clients asked and where the user works: the user's alone.
LOG_FILE_MODE = 0o600


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file that is the owner's alone, each rotated file too.

    ``RotatingFileHandler`` opens each new file with ``open``, whose mode the
    umask decides (0644 usually); this one is made 0600 before a line is written.
    """

    def __init__(
        self, path: Path, max_bytes: int = LOG_FILE_BYTES, backups: int = LOG_FILE_BACKUPS
    ) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")

    def _open(self) -> TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_FILE_MODE)
        try:
            os.fchmod(fd, LOG_FILE_MODE)  # a file made before, or by a wider umask
        except BaseException:
            os.close(fd)
            raise
        return open(fd, "a", encoding=self.encoding, errors=self.errors)


#: Where the host keeps its log in the state folder when no ``--log-file`` is given.
STATE_LOG_FILE = Path("logs") / "ahp.log"


def state_log_file(state_dir: Path) -> Path:
    """The log file a host on ``state_dir`` writes by default (``ahp logs`` reads it)."""
    return state_dir / STATE_LOG_FILE


def _file_handler(log_file: Path) -> logging.Handler:
    from ahpcore.store.private import private_folder

    private_folder(log_file.parent, tighten=False)  # missing folders made 0700
    handler = PrivateRotatingFileHandler(log_file)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(LogHygiene())
    return handler


def also_to_file(log_file: Path) -> None:
    """Keep a copy of the log in ``log_file`` (rotated, owner-only, redacted as the rest),
    beside the handler ``configure`` set. Raises ``OSError`` when it cannot be opened."""
    logging.getLogger().addHandler(_file_handler(log_file))


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of ``path`` (read from its end, so a large file costs little)."""
    if lines <= 0:
        return []
    with path.open("rb") as file:
        end = file.seek(0, os.SEEK_END)
        block, data = 64 << 10, b""
        while end > 0 and data.count(b"\n") <= lines:
            start = max(0, end - block)
            file.seek(start)
            data = file.read(end - start) + data
            end = start
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def configure(level: str, stream: object = None, log_file: Path | None = None) -> None:
    """The host's logging: one handler on stderr, or on ``log_file`` (rotated, owner-only)
    when given; hygiene on every line either way.

    Libraries speak at INFO about their own plumbing (websockets announces each
    connection the host logs itself; the Claude Agent SDK names the CLI it runs
    each time it starts one), so below ``debug`` only their warnings show.
    Raises ``OSError`` when the log file cannot be opened.
    """
    handler: logging.Handler
    if log_file is not None:
        handler = _file_handler(log_file)
    else:
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
