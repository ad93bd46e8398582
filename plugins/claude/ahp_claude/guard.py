"""Runs the Claude Code CLI for the host and sees that it does not outlive the host.

The SDK starts the CLI as a plain child of the host. A host killed outright (kill -9,
the OOM killer) left it running, re-parented to init: it finished the model call it
was in and wrote a reply nobody saw into the transcript. The backend points the SDK's
``cli_path`` at a script that runs this file, and this guard:

- starts the CLI (named by ``AHP_CLAUDE_CLI``) in a process group of its own, which
  also holds the commands the CLI runs, set to be killed when the guard dies
  (``PR_SET_PDEATHSIG`` on Linux; the guard is single-threaded, so its forking thread
  lives exactly as long as it does);
- follows its own parent, the host (a pidfd where the kernel offers one, else by
  polling): once the host is gone it stops the CLI's group, SIGTERM and then SIGKILL
  after ``GRACE_SECONDS``, and exits;
- passes SIGTERM, SIGINT and SIGHUP on to the CLI's group and exits as the CLI did.

Standard library only, run with ``python -I -S``, so it starts in a few milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

#: The variable naming the CLI to run; removed before the CLI starts.
CLI_VARIABLE = "AHP_CLAUDE_CLI"
#: How long a CLI whose host is gone has to stop after SIGTERM before it is killed.
GRACE_SECONDS = 2.0
#: How often the parent is looked at where no pidfd tells of its end.
POLL_SECONDS = 0.25
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``signum`` to this process when the thread that started it
    ends (Linux); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _watch(pid: int) -> int | None:
    """A descriptor that turns readable when ``pid`` ends, where the kernel has pidfds."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _reap(child: int, within: float) -> int | None:
    """The child's wait status once it ended within ``within`` seconds, else None."""
    deadline = time.monotonic() + within
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _stop(child: int) -> None:
    """The host is gone: the CLI and everything in its group stop, at once or a moment later."""
    _signal_group(child, signal.SIGTERM)
    if _reap(child, GRACE_SECONDS) is None:
        _signal_group(child, signal.SIGKILL)
        _reap(child, GRACE_SECONDS)
    _signal_group(child, signal.SIGKILL)  # what the CLI left running in its group


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    cli = os.environ.pop(CLI_VARIABLE, "")
    if not cli:
        print(f"claude guard: {CLI_VARIABLE} names no CLI to run", file=sys.stderr)
        return 127
    host = os.getppid()
    watch = _watch(host)
    if host == 1 or os.getppid() != host:
        return 1  # the host is gone already: nothing to run for
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    pending: list[int] = []
    for signum in FORWARDED:
        signal.signal(signum, lambda number, _frame: pending.append(number))
    signal.signal(signal.SIGCHLD, lambda _number, _frame: None)  # wakes the select below
    guard = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            os.setpgid(0, 0)
            die_with_parent()
            if os.getppid() != guard:
                os._exit(1)  # the guard died before the CLI started
            for signum in (*FORWARDED, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            os.execv(cli, [cli, *argv])
        except OSError as exc:
            os.write(2, f"claude guard: cannot run {cli}: {exc}\n".encode())
        os._exit(127)
    with contextlib.suppress(OSError):
        os.setpgid(child, child)  # as the child does: whichever runs first
    # The CLI's pipes are its own: the guard holding a copy would hide the CLI's end.
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    os.close(quiet)
    watched = [wake_read] if watch is None else [wake_read, watch]
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            return _exit_code(status)
        if os.getppid() != host or (watch is not None and select.select([watch], [], [], 0)[0]):
            _stop(child)
            return 1
        while pending:
            _signal_group(child, pending.pop(0))
        select.select(watched, [], [], POLL_SECONDS if watch is None else None)
        try:
            while os.read(wake_read, 512):
                pass
        except BlockingIOError:
            pass


def launcher(folder: str) -> tuple[str, dict[str, str]] | None:
    """The ``cli_path`` that runs the CLI through this guard, and what its environment needs;
    None where there is no guard to run (then the CLI runs as the SDK starts it).

    Writes a small script into ``folder`` (the SDK runs ``cli_path`` itself, with no
    interpreter in front). Imports the SDK to find its CLI: not for the guard's own start.
    """
    if os.name != "posix":
        return None
    import logging
    import shlex
    from pathlib import Path

    log = logging.getLogger(__name__)
    try:
        from claude_agent_sdk import ClaudeAgentOptions
        from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

        cli = SubprocessCLITransport("", ClaudeAgentOptions())._find_cli()
    except Exception as exc:  # the SDK moved on: run its CLI unguarded rather than not at all
        log.warning("Claude Code CLIs run unguarded (they may outlive the host): %s", exc)
        return None
    script = Path(folder) / "claude-guarded"
    text = (
        "#!/bin/sh\n"
        f"exec {shlex.quote(sys.executable)} -I -S {shlex.quote(os.path.abspath(__file__))} "
        '"$@"\n'
    )
    try:
        if not script.is_file() or script.read_text() != text:
            script.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            temporary = script.with_name(f"{script.name}.{os.getpid()}.tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.replace(temporary, script)
    except OSError as exc:
        log.warning("Claude Code CLIs run unguarded (they may outlive the host): %s", exc)
        return None
    return str(script), {CLI_VARIABLE: cli}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
