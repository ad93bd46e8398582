"""A process on a POSIX pseudoterminal, and the task that reads it.

The child leads a new session with the pty as its controlling terminal, so
the line discipline turns ^C into SIGINT for the foreground process group and
a resize into SIGWINCH, exactly as in a terminal window.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import signal
import struct
import subprocess
import termios
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import anyio

from ahp_terminals.marks import Mark, MarkReader
from ahp_terminals.tree import MARK_VARIABLE, ProcessTree, become_subreaper
from ahp_terminals.tree import SUPPORTED as TREE_SUPPORTED
from ahpcore.ports import TerminalEvents, TerminalSpec

log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024
SHELL_DIR = Path(__file__).parent / "shell"
#: How long a terminal's processes get to go after SIGHUP before SIGKILL.
KILL_GRACE = 0.5
#: Input a process has not read yet, beyond which more is dropped (with a warning).
MAX_PENDING_INPUT = 1 << 20


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_terminal() -> None:
    # Runs in the child after setsid(): the pty on stdin becomes its controlling tty.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    # Orphans started from the shell stay below it, where disposal finds them.
    become_subreaper()


def shell_command(spec: TerminalSpec) -> tuple[list[str], dict[str, str], bool]:
    """argv, extra environment, and whether shell integration is injected."""
    shell = spec.shell or os.environ.get("SHELL") or "/bin/sh"
    name = Path(shell).name
    if spec.command is not None:
        return [shell, "-c", spec.command], {}, False
    if name == "bash":
        return [shell, "--rcfile", str(SHELL_DIR / "bashrc"), "-i"], {}, True
    if name == "zsh":
        env = {"ZDOTDIR": str(SHELL_DIR / "zsh")}
        if "ZDOTDIR" in os.environ:
            env["AHP_USER_ZDOTDIR"] = os.environ["ZDOTDIR"]
        return [shell, "-i"], env, True
    return [shell, "-i"], {}, False


class PtyProcess:
    """One terminal's process; ``run`` reads it until every byte is out."""

    def __init__(
        self, spec: TerminalSpec, argv: Sequence[str], env: dict[str, str], integrated: bool
    ) -> None:
        self.spec = spec
        self.name = Path(argv[0]).name
        self.integrated = integrated
        self._detected = False
        #: Every process started from this terminal (Linux); elsewhere its session's group.
        self._tree: ProcessTree | None = None
        token = uuid.uuid4().hex
        mark = {MARK_VARIABLE: token} if TREE_SUPPORTED else {}
        master, slave = os.openpty()
        try:
            _set_size(slave, spec.cols, spec.rows)
            self.process = subprocess.Popen(
                list(argv),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=spec.cwd,
                env={**os.environ, "TERM": "xterm-256color", **env, **mark},
                start_new_session=True,
                preexec_fn=_take_terminal,
                close_fds=True,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        self.fd: int | None = master
        self.pid = self.process.pid
        if TREE_SUPPORTED:
            self._tree = ProcessTree(self.pid, token)
        self._killed = False
        #: Keystrokes not yet taken by the pty; written by ``_write_input``, never blocking.
        self._input = bytearray()
        self._input_ready = anyio.Event()

    # -- TerminalProcess -------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.fd is None:
            return
        if len(self._input) + len(data) > MAX_PENDING_INPUT:
            log.warning("terminal %s: input dropped, the process is not reading", self.spec.uri)
            return
        self._input += data
        self._input_ready.set()

    def resize(self, cols: int, rows: int) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                _set_size(self.fd, cols, rows)

    async def kill(self) -> None:
        self._killed = True
        tree = self._tree
        if tree is not None:
            await self._kill_tree(tree)
            return
        members = self._members()
        self._signal(members, signal.SIGHUP)
        self._signal(members, signal.SIGCONT)
        with anyio.move_on_after(KILL_GRACE):
            while self._members():
                await anyio.sleep(0.02)
        self._signal(self._members(), signal.SIGKILL)
        await anyio.to_thread.run_sync(self._reap)

    # -- internals -----------------------------------------------------------------
    async def _kill_tree(self, tree: ProcessTree) -> None:
        """SIGHUP every process started from the terminal, then SIGKILL what is left."""
        # /proc is walked in a worker thread: a few hundred small reads each time.
        members = await anyio.to_thread.run_sync(lambda: tree.look(environment=True))
        tree.signal(members, signal.SIGHUP)
        tree.signal(members, signal.SIGCONT)
        with anyio.move_on_after(KILL_GRACE):
            while await anyio.to_thread.run_sync(tree.look):
                await anyio.sleep(0.02)
        await anyio.to_thread.run_sync(tree.stop_and_kill)
        await anyio.to_thread.run_sync(self._reap)

    def _members(self) -> set[int]:
        """The terminal's process group, where processes cannot be walked (not Linux)."""
        found: set[int] = set()
        with contextlib.suppress(OSError):
            os.killpg(self.pid, 0)
            found.add(self.pid)
        return found

    def _signal(self, members: set[int], sig: int) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.pid, sig)
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def _reap(self) -> None:
        with contextlib.suppress(Exception):
            self.process.wait(timeout=5)

    async def run(self, events: TerminalEvents) -> None:
        """Read until the pty has nothing more to give, then report the exit."""
        fd = self.fd
        assert fd is not None
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._write_input, fd)
                await self._read_output(fd, events)
                group.cancel_scope.cancel()
        except BaseException:
            # Cancelled (the host is stopping) or failed: leave no process behind.
            if self._tree is not None:
                self._tree.stop_and_kill()
            else:
                self._signal(self._members(), signal.SIGKILL)
            raise
        finally:
            self.fd = None
            os.close(fd)
        code = await anyio.to_thread.run_sync(self.process.wait)
        events.exited(None if code < 0 or self._killed else code)

    async def _read_output(self, fd: int, events: TerminalEvents) -> None:
        marks = MarkReader()
        executed_at: float | None = None
        command_line = ""
        while True:
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            except OSError as error:
                if error.errno == errno.EIO:
                    break  # every writer closed its end: the output is drained
                raise
            if not data:
                break
            for item in marks.feed(data):
                if isinstance(item, bytes):
                    await events.output(item)
                    continue
                executed_at, command_line = self._report(item, events, executed_at, command_line)
        rest = marks.flush()
        if rest:
            await events.output(rest)

    async def _write_input(self, fd: int) -> None:
        while True:
            await self._input_ready.wait()
            self._input_ready = anyio.Event()
            while self._input:
                try:
                    written = os.write(fd, self._input)
                except BlockingIOError:
                    await anyio.wait_writable(fd)
                    continue
                except OSError:
                    self._input.clear()
                    break
                del self._input[:written]

    def _report(
        self, mark: Mark, events: TerminalEvents, executed_at: float | None, command_line: str
    ) -> tuple[float | None, str]:
        if mark.kind == "prompt":
            if not self._detected:
                self._detected = True
                events.detection_available()
        elif mark.kind == "cwd":
            events.cwd(mark.value)
        elif mark.kind == "title":
            events.title(mark.value)
        elif mark.kind == "command-line":
            command_line = mark.value
        elif mark.kind == "executed":
            if not self._detected:
                self._detected = True
                events.detection_available()
            events.command_started(command_line)
            return time.monotonic(), ""
        elif mark.kind == "finished" and executed_at is not None:
            try:
                code: int | None = int(mark.value)
            except ValueError:
                code = None
            events.command_finished(code, int((time.monotonic() - executed_at) * 1000))
            return None, command_line
        return executed_at, command_line
