"""Running the ``git`` command, and reading what it prints.

Every call is an argument list (never a shell), paths go after ``--`` and are
passed as bytes, and every listing is read with ``-z`` so a path is taken
byte for byte: spaces, newlines and bytes that are not UTF-8 included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import anyio

Arg = str | bytes

#: Options every call carries: pathspecs are literal (a file named ``*`` is that file), and
#: no program the repository's config names runs on the host's behalf (a client able to
#: write ``.git/config`` could otherwise have every ``git status`` run its program).
#: ``-c`` reaches submodules too: git passes it on in ``GIT_CONFIG_PARAMETERS``.
_BASE: tuple[str, ...] = (
    "--no-pager",
    "--literal-pathspecs",
    "-c",
    "core.quotepath=false",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.pager=cat",
    # A folder a client wrote to look like a bare repository (HEAD, config, objects/)
    # is not taken for one: its config could name programs. Only explicit --git-dir.
    "-c",
    "safe.bareRepository=explicit",
)
#: Added unless a call says ``hooks=True``: only what a user asked for runs the user's hooks.
_NO_HOOKS: tuple[str, ...] = ("-c", f"core.hooksPath={os.devnull}")
#: Taken out of the environment git runs in: a diff program that is not git's own.
_UNSET = ("GIT_EXTERNAL_DIFF",)


class GitError(Exception):
    """git answered with a failure; ``message`` is what it said."""

    def __init__(self, message: str, *, returncode: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.returncode = returncode


class GitMissing(GitError):
    """There is no ``git`` command on this machine."""


def git_executable() -> str | None:
    return shutil.which("git")


async def run(
    args: Sequence[Arg],
    cwd: bytes | str,
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    stdin: bytes | None = None,
    hooks: bool = False,
) -> subprocess.CompletedProcess[bytes]:
    """``git <args>`` in ``cwd``, off the event loop; GitError when it fails.

    ``hooks``: run the repository's hooks, for what the user asked for (a commit);
    the host's own reading and bookkeeping runs none.
    """
    exe = git_executable()
    if exe is None:
        raise GitMissing("git is not installed on this machine (no 'git' on PATH)")
    full_env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    # Nothing may stop to ask a person on a terminal that is not there.
    full_env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_PAGER": "cat",
            "PAGER": "cat",
            "LC_ALL": "C",
        }
    )
    if env:
        full_env.update(env)
    options = _BASE if hooks else _BASE + _NO_HOOKS
    try:
        done = await anyio.run_process(
            [exe, *options, *args], cwd=cwd, env=full_env, check=False, input=stdin
        )
    except FileNotFoundError as exc:
        raise GitError(f"cannot run git in {os.fsdecode(cwd)}: {exc.strerror}") from None
    if check and done.returncode != 0:
        said = (
            done.stderr.decode("utf-8", "replace").strip()
            or done.stdout.decode("utf-8", "replace").strip()
        )
        raise GitError(said or f"git {args[0]!r} failed", returncode=done.returncode)
    return done


@dataclass(frozen=True)
class StatusEntry:
    """One record of ``git status --porcelain=v2 -z``; paths are relative to the top level."""

    kind: str  # "1" changed, "2" renamed or copied, "u" unmerged, "?" untracked
    xy: str  # the index letter and the worktree letter ("." for unchanged)
    path: bytes
    orig_path: bytes | None = None
    #: "R" or "C" for a kind "2" record.
    rename: str | None = None
    #: The path is in HEAD (its HEAD mode is not 000000).
    in_head: bool = True
    #: The path is in the working tree.
    in_worktree: bool = True


@dataclass
class Status:
    entries: list[StatusEntry] = field(default_factory=list)
    head: str | None = None  # None before the first commit
    branch: str | None = None  # None when detached
    upstream: str | None = None
    ahead: int | None = None
    behind: int | None = None


def parse_status(out: bytes) -> Status:
    """Parse ``git status --porcelain=v2 -z --branch`` output."""
    status = Status()
    records = out.split(b"\0")
    i = 0
    while i < len(records):
        record = records[i]
        i += 1
        if not record:
            continue
        tag = record[:1]
        if tag == b"#":
            _branch_header(status, record[2:].decode("utf-8", "replace"))
        elif tag == b"1":
            parts = record.split(b" ", 8)
            status.entries.append(
                StatusEntry(
                    "1",
                    parts[1].decode(),
                    parts[8],
                    in_head=parts[3] != b"000000",
                    in_worktree=parts[5] != b"000000",
                )
            )
        elif tag == b"2":
            parts = record.split(b" ", 9)
            orig = records[i]
            i += 1
            status.entries.append(
                StatusEntry(
                    "2",
                    parts[1].decode(),
                    parts[9],
                    orig,
                    parts[8][:1].decode(),
                    in_head=parts[3] != b"000000",
                    in_worktree=parts[5] != b"000000",
                )
            )
        elif tag == b"u":
            parts = record.split(b" ", 10)
            status.entries.append(
                StatusEntry(
                    "u",
                    parts[1].decode(),
                    parts[10],
                    in_head=parts[4] != b"000000",  # stage 2 is ours, what HEAD had
                    in_worktree=parts[6] != b"000000",
                )
            )
        elif tag == b"?":
            status.entries.append(StatusEntry("?", "??", record[2:], in_head=False))
        # "!" (ignored) records are not asked for.
    return status


def _branch_header(status: Status, text: str) -> None:
    key, _, value = text.partition(" ")
    if key == "branch.oid":
        status.head = None if value == "(initial)" else value
    elif key == "branch.head":
        status.branch = None if value == "(detached)" else value
    elif key == "branch.upstream":
        status.upstream = value
    elif key == "branch.ab":
        ahead, _, behind = value.partition(" ")
        status.ahead, status.behind = int(ahead), -int(behind)


@dataclass(frozen=True)
class TreeChange:
    """One record of ``git diff --raw -z -M -C`` between two trees."""

    status: str  # A, D, M, T, R, C
    path: bytes  # the new path (or the deleted one)
    orig_path: bytes | None = None
    added: int | None = None
    removed: int | None = None
    binary: bool = False


def parse_raw_numstat(out: bytes) -> list[TreeChange]:
    """Parse ``git diff --raw --numstat -z -M -C``: raw records first, then numstat ones."""
    records = out.split(b"\0")
    changes: list[dict[str, object]] = []
    i = 0
    while i < len(records) and records[i].startswith(b":"):
        meta = records[i].split(b" ")
        letter = meta[4][:1].decode()
        if letter in ("R", "C"):
            orig, path = records[i + 1], records[i + 2]
            i += 3
            changes.append({"status": letter, "path": path, "orig_path": orig})
        else:
            changes.append({"status": letter, "path": records[i + 1]})
            i += 2
    # numstat: "added\tremoved\tpath" or, for a rename, "added\tremoved\t" then two paths.
    n = 0
    while i < len(records) and n < len(changes):
        record = records[i]
        if not record:
            i += 1
            continue
        added, removed, rest = record.split(b"\t", 2)
        i += 1 if rest else 3
        change = changes[n]
        n += 1
        if added == b"-":
            change["binary"] = True
        else:
            change["added"], change["removed"] = int(added), int(removed)
    return [TreeChange(**c) for c in changes]  # type: ignore[arg-type]
