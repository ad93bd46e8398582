"""The Dev Container relay (``vscode/devContainers/*``): a session run in a container here.

The window asks this host to start the Dev Container of one of its folders
with the Dev Container CLI (``devcontainer up``), then to run an agent host
inside it (``ahp serve --stdio`` through ``docker exec``) and to carry that
host's AHP frames both ways: ``relaySend`` writes one message to it,
``vscode/devContainers/relayMessage`` brings back each message it writes, one
line of its stdio each. The CLI's own output goes to the window as
``vscode/devContainers/output``. A relay that ends for any reason is told
(``relayClose`` then ``closeConnection``) and forgotten; nothing waits on it.

Nothing is launched, stopped or removed before the window said the folder is
trusted (``vscode/requestWorkspaceTrust``, a request to the client). Each
``connectionId`` is the window's own, and belongs to the connection that chose
it: another connection cannot send through it or close it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import subprocess
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from ahpcore.api import PluginHost, file_uri
from ahpcore.protocol.errors import (
    CONFLICT,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    NOT_FOUND,
    PERMISSION_DENIED,
    ProtocolError,
)

log = logging.getLogger(__name__)

PREFIX = "vscode/devContainers/"
IS_DOCKER_AVAILABLE = PREFIX + "isDockerAvailable"
CONNECT = PREFIX + "connect"
DISCONNECT = PREFIX + "disconnect"
STOP = PREFIX + "stop"
REMOVE = PREFIX + "remove"
RELAY_SEND = PREFIX + "relaySend"
RELAY_MESSAGE = PREFIX + "relayMessage"
OUTPUT = PREFIX + "output"
RELAY_CLOSE = PREFIX + "relayClose"
CLOSE_CONNECTION = PREFIX + "closeConnection"
TRUST = "vscode/requestWorkspaceTrust"
#: ``_meta`` flag: set only when Docker answers and the Dev Container CLI is on PATH.
FLAG = "vscode.devContainers"

#: What runs inside the container: an agent host on stdio (``AHP_DEVCONTAINER_HOST`` changes it).
HOST_COMMAND_ENV = "AHP_DEVCONTAINER_HOST"
DEFAULT_HOST_COMMAND = "ahp serve --stdio"
#: How long ``docker version`` may take before Docker counts as not answering.
DOCKER_SECONDS = 5.0
#: A person answers the trust prompt; past this the launch is refused.
TRUST_SECONDS = 600.0
#: Building an image can take long, but not forever.
UP_SECONDS = 1800.0
#: ``docker exec`` of the host's ``--version``, ``docker stop`` / ``rm`` / ``ps``.
DOCKER_COMMAND_SECONDS = 120.0
#: Longest connectionId the window may choose.
MAX_ID = 256
#: One message from the host inside, at most (the host's own frame bound).
MAX_MESSAGE_BYTES = 16 << 20
#: What may wait to be written to the host inside before relaySend is refused.
MAX_PENDING_BYTES = 64 << 20
#: Label the Dev Container CLI puts on the containers it makes for a folder.
FOLDER_LABEL = "devcontainer.local_folder"


@dataclass(eq=False)
class Relay:
    """One ``connectionId`` of one connection, from ``connect`` until it is gone."""

    owner: Any
    ident: str
    folder: str
    #: Set once trust is granted and the launch begins.
    started: bool = False
    process: Process | None = None
    #: Frames for the host inside, in the order they came, and their bytes.
    pending: deque[bytes] = field(default_factory=deque)
    pending_bytes: int = 0
    wake: anyio.Event = field(default_factory=anyio.Event)
    closed: bool = False


def _found(name: str) -> str | None:
    return shutil.which(name)


async def _run(
    argv: Sequence[str], seconds: float, *, on_output: Any = None
) -> tuple[int | None, str, str]:
    """Run ``argv`` to its end: (exit code, stdout, stderr); None for the code when it
    outlived ``seconds`` (it is killed then). ``on_output(text)`` hears it as it comes."""
    out: list[str] = []
    err: list[str] = []
    process = await anyio.open_process(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    async def drain(stream: Any, into: list[str]) -> None:
        async for chunk in stream:
            text = chunk.decode("utf-8", "replace")
            into.append(text)
            if on_output is not None:
                on_output(text)

    code: int | None = None
    try:
        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as group:
                group.start_soon(drain, process.stdout, out)
                group.start_soon(drain, process.stderr, err)
            code = await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            await _kill(process)  # only one still running is killed
    return code, "".join(out), "".join(err)


async def _kill(process: Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    with anyio.move_on_after(5):
        await process.wait()
    await process.aclose()


def up_result(stdout: str) -> dict[str, Any] | None:
    """The last line of ``devcontainer up`` saying it succeeded, as the CLI wrote it."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(value, dict)
            and value.get("outcome") == "success"
            and isinstance(value.get("containerId"), str)
            and isinstance(value.get("remoteWorkspaceFolder"), str)
        ):
            return value
    return None


def up_failure(stdout: str, stderr: str) -> str:
    """What ``devcontainer up`` said went wrong, in a line or two."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("outcome") == "error":
            return str(value.get("message") or value.get("description") or line)
    tail = (stderr.strip() or stdout.strip()).splitlines()[-3:]
    return " / ".join(tail) or "no output"


class DevContainers:
    """The relay for one host: every connection's ``connectionId`` and the containers
    launched for each folder."""

    def __init__(self, host: PluginHost, *, docker_seconds: float = DOCKER_SECONDS) -> None:
        self.host = host
        self.docker_seconds = docker_seconds
        #: (connection, connectionId) -> its relay.
        self.relays: dict[tuple[int, str], Relay] = {}
        #: Host folder -> the container launched for it (this run, or found by its label).
        self.containers: dict[str, str] = {}
        #: Folders whose container was stopped or removed: connect needs ``resume``.
        self.suspended: set[str] = set()
        self._locks: dict[str, anyio.Lock] = {}

    # -- Docker ------------------------------------------------------------------------
    async def docker_answers(self) -> bool:
        """Whether ``docker version`` succeeds within ``docker_seconds``."""
        docker = _found("docker")
        if docker is None:
            return False
        try:
            code, _, _ = await _run([docker, "version"], self.docker_seconds)
        except OSError:
            return False
        return code == 0

    async def can_launch(self) -> bool:
        """Docker answers and the Dev Container CLI is there: the flag may be set."""
        return _found("devcontainer") is not None and await self.docker_answers()

    async def is_docker_available(self, client: Any, params: Any) -> bool:
        if params not in (None, {}):  # none sent reaches a handler as {}
            raise ProtocolError(INVALID_PARAMS, f"{IS_DOCKER_AVAILABLE} takes no params")
        return await self.docker_answers()

    def _docker(self) -> str:
        docker = _found("docker")
        if docker is None:
            raise ProtocolError(INTERNAL_ERROR, "Docker is not available on this host")
        return docker

    # -- params ------------------------------------------------------------------------
    @staticmethod
    def _ident(method: str, params: Any) -> str:
        ident = params.get("connectionId") if isinstance(params, dict) else None
        if not isinstance(ident, str) or not ident.strip() or len(ident) > MAX_ID or "\0" in ident:
            raise ProtocolError(
                INVALID_PARAMS,
                f"{method}: connectionId must be a non-empty identifier of at most {MAX_ID} "
                "characters",
            )
        return ident

    @staticmethod
    def _folder(method: str, params: Any) -> str:
        folder = params.get("workspaceFolder") if isinstance(params, dict) else None
        if not isinstance(folder, str) or not os.path.isabs(folder) or "\0" in folder:
            raise ProtocolError(
                INVALID_PARAMS, f"{method}: workspaceFolder must be an absolute path on this host"
            )
        return os.path.normpath(folder)

    def _owned(self, client: Any, method: str, ident: str) -> Relay:
        relay = self.relays.get((id(client), ident))
        if relay is None or relay.owner is not client:
            raise ProtocolError(
                NOT_FOUND,
                f"{method}: Dev Container connection {ident!r} is not owned by this client",
            )
        return relay

    def _allowed(self, client: Any, method: str) -> None:
        """A container runs code as this host's user: whoever may not start a session
        (a viewer, with ahp-users) may not start, stop or remove one either."""
        reason = self.host.refusal(client, "createSession", {})
        if reason is not None:
            raise ProtocolError(PERMISSION_DENIED, f"{method}: {reason}")

    def _lock(self, folder: str) -> anyio.Lock:
        lock = self._locks.get(folder)
        if lock is None:
            lock = self._locks[folder] = anyio.Lock()
        return lock

    # -- trust -------------------------------------------------------------------------
    async def _trusted(self, client: Any, folder: str, what: str) -> None:
        """Ask the window whether ``folder`` is trusted; refuse ``what`` unless it says so."""
        refused = f"Workspace trust is required to {what}"
        try:
            answer = await self.host.ask_connection(
                client, TRUST, {"workspace": file_uri(folder)}, timeout=TRUST_SECONDS
            )
        except ProtocolError as error:
            raise ProtocolError(
                PERMISSION_DENIED, f"{refused}: the client answered {TRUST} with {error.message}"
            ) from None
        except TimeoutError:
            raise ProtocolError(
                PERMISSION_DENIED, f"{refused}: no answer to {TRUST} in {TRUST_SECONDS:.0f} s"
            ) from None
        if not (isinstance(answer, dict) and answer.get("trusted") is True):
            raise ProtocolError(PERMISSION_DENIED, f"{refused} ({folder} is not trusted)")

    # -- connect -----------------------------------------------------------------------
    async def connect(self, client: Any, params: Any) -> dict[str, Any]:
        ident = self._ident(CONNECT, params)
        folder = self._folder(CONNECT, params)
        name = params.get("name")
        if not isinstance(name, str) or not name.strip() or "\0" in name:
            raise ProtocolError(INVALID_PARAMS, f"{CONNECT}: name must be a non-empty string")
        resume = params.get("resume")
        if resume is not None and not isinstance(resume, bool):
            raise ProtocolError(INVALID_PARAMS, f"{CONNECT}: resume must be a boolean")
        self._allowed(client, CONNECT)
        key = (id(client), ident)
        if key in self.relays:
            raise ProtocolError(
                INVALID_PARAMS, f"{CONNECT}: Dev Container connectionId {ident!r} is already in use"
            )
        relay = self.relays[key] = Relay(client, ident, folder)
        try:
            await self._trusted(client, folder, "start a Dev Container")
            if relay.closed:
                raise ProtocolError(NOT_FOUND, f"{CONNECT}: {ident!r} was disconnected")
            relay.started = True
            async with self._lock(folder):
                return await self._launch(relay, name, resume is True)
        except BaseException:
            self._forget(relay)
            if relay.process is not None:
                with anyio.CancelScope(shield=True):
                    await _kill(relay.process)
            raise

    def _output(self, relay: Relay, text: str) -> None:
        if not relay.closed:
            self.host.tell_connection(
                relay.owner, OUTPUT, {"connectionId": relay.ident, "data": text}
            )

    async def _launch(self, relay: Relay, name: str, resume: bool) -> dict[str, Any]:
        folder = relay.folder
        if folder in self.suspended and not resume:
            raise ProtocolError(
                CONFLICT,
                f"{CONNECT}: the Dev Container for {folder} is stopped; connect with "
                "resume: true to start it again",
            )
        cli = _found("devcontainer")
        if cli is None:
            raise ProtocolError(
                INTERNAL_ERROR, "the Dev Container CLI (devcontainer) is not on this host's PATH"
            )
        docker = self._docker()
        up = [cli, "up", "--workspace-folder", folder]
        self._output(relay, "$ " + shlex.join(["devcontainer", *up[1:]]) + "\n")
        code, stdout, stderr = await _run(
            up, UP_SECONDS, on_output=lambda text: self._output(relay, text)
        )
        result = up_result(stdout) if code == 0 else None
        if result is None:
            why = (
                f"timed out after {UP_SECONDS:.0f} s"
                if code is None
                else up_failure(stdout, stderr)
            )
            raise ProtocolError(INTERNAL_ERROR, f"devcontainer up failed for {folder}: {why}")
        container = result["containerId"]
        inside = result["remoteWorkspaceFolder"]
        self.containers[folder] = container
        self.suspended.discard(folder)
        command = shlex.split(os.environ.get(HOST_COMMAND_ENV) or DEFAULT_HOST_COMMAND)
        options = ["-w", inside]
        if isinstance(result.get("remoteUser"), str) and result["remoteUser"]:
            options = ["-u", result["remoteUser"], *options]
        # The agent host must be in the image; say so plainly rather than relay nothing.
        probe = [docker, "exec", *options, container, command[0], "--version"]
        code, stdout, stderr = await _run(probe, DOCKER_COMMAND_SECONDS)
        if code != 0:
            said = (stderr.strip() or stdout.strip()).splitlines()[-1:] or ["no output"]
            raise ProtocolError(
                INTERNAL_ERROR,
                f"no agent host to run in the Dev Container for {folder}: `{command[0]} "
                f"--version` failed there ({said[0]}); install ahp in the image, or name the "
                f"command with {HOST_COMMAND_ENV}",
            )
        if relay.closed:
            raise ProtocolError(NOT_FOUND, f"{CONNECT}: {relay.ident!r} was disconnected")
        argv = [docker, "exec", "-i", *options, container, *command]
        self._output(relay, "$ " + shlex.join(["docker", *argv[1:]]) + "\n")
        relay.process = await anyio.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.host.spawn(self._carry, relay, name=f"Dev Container relay {relay.ident!r}")
        log.info("vscode: Dev Container %s of %s relays its agent host", container[:12], folder)
        return {
            "connectionId": relay.ident,
            "address": f"devcontainer:{container}",
            "name": name,
            "remoteWorkspaceFolder": inside,
            "hostWorkspaceFolder": folder,
        }

    # -- the relay ---------------------------------------------------------------------
    async def _carry(self, relay: Relay) -> None:
        """Carry frames both ways until the host inside ends, then say the relay is gone."""
        process = relay.process
        assert process is not None and process.stdout is not None
        stdout = BufferedByteReceiveStream(process.stdout)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._write, relay)
                group.start_soon(self._stderr, relay)
                while True:
                    try:
                        line = await stdout.receive_until(b"\n", MAX_MESSAGE_BYTES)
                    except (anyio.EndOfStream, anyio.IncompleteRead):
                        break
                    except anyio.DelimiterNotFound:
                        log.warning("vscode: the Dev Container host wrote a frame too large")
                        break
                    text = line.decode("utf-8", "replace").strip()
                    if text and not relay.closed:
                        self.host.tell_connection(
                            relay.owner, RELAY_MESSAGE, {"connectionId": relay.ident, "data": text}
                        )
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await _kill(process)
                self._ended(relay, process.returncode)

    async def _write(self, relay: Relay) -> None:
        process = relay.process
        assert process is not None and process.stdin is not None
        while True:
            while relay.pending:
                frame = relay.pending.popleft()
                relay.pending_bytes -= len(frame)
                try:
                    await process.stdin.send(frame)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return
            relay.wake = anyio.Event()
            await relay.wake.wait()

    async def _stderr(self, relay: Relay) -> None:
        process = relay.process
        assert process is not None and process.stderr is not None
        async for chunk in process.stderr:
            self._output(relay, chunk.decode("utf-8", "replace"))

    def _ended(self, relay: Relay, code: int | None) -> None:
        """The host inside is gone: tell the window, unless the window closed it itself."""
        if relay.closed:
            return
        self._forget(relay)
        log.info("vscode: Dev Container relay %r ended (exit code %s)", relay.ident, code)
        self._output(relay, f"\nThe agent host in the Dev Container ended (exit code {code}).\n")
        for method in (RELAY_CLOSE, CLOSE_CONNECTION):
            self.host.tell_connection(relay.owner, method, {"connectionId": relay.ident})
        relay.closed = True

    def _forget(self, relay: Relay) -> None:
        key = (id(relay.owner), relay.ident)
        if self.relays.get(key) is relay:
            del self.relays[key]

    def _close(self, relay: Relay) -> None:
        """End a relay the window (or its going) asked to end: no notification follows."""
        self._forget(relay)
        relay.closed = True
        relay.pending.clear()
        relay.wake.set()
        if relay.process is not None and relay.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                relay.process.kill()

    def relay_send(self, client: Any, params: Any) -> None:
        ident = self._ident(RELAY_SEND, params)
        relay = self._owned(client, RELAY_SEND, ident)
        if not relay.started or relay.process is None:
            raise ProtocolError(NOT_FOUND, f"{RELAY_SEND}: Dev Container relay is not connected")
        data = params.get("data")
        if not isinstance(data, str):
            raise ProtocolError(INVALID_PARAMS, f"{RELAY_SEND}: data must be a string")
        try:
            message = json.loads(data)
        except ValueError:
            raise ProtocolError(
                INVALID_PARAMS, f"{RELAY_SEND}: data must be one serialized JSON-RPC message"
            ) from None
        if not isinstance(message, dict):
            raise ProtocolError(INVALID_PARAMS, f"{RELAY_SEND}: data must be a JSON object")
        # One message per line for the host inside: a line break inside it is re-written away.
        if "\n" in data or "\r" in data:
            data = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
        frame = data.encode("utf-8") + b"\n"
        if relay.pending_bytes + len(frame) > MAX_PENDING_BYTES:
            raise ProtocolError(
                INTERNAL_ERROR, f"{RELAY_SEND}: the Dev Container host is not reading its input"
            )
        # Queued before anything is awaited, so frames reach the host in the order sent.
        relay.pending.append(frame)
        relay.pending_bytes += len(frame)
        relay.wake.set()
        return None

    def disconnect(self, client: Any, params: Any) -> None:
        ident = self._ident(DISCONNECT, params)
        self._close(self._owned(client, DISCONNECT, ident))
        return None

    def connection_ended(self, client: Any) -> None:
        """The window's connection is gone: so are its relays."""
        for relay in [r for r in self.relays.values() if r.owner is client]:
            self._close(relay)

    # -- stop and remove ---------------------------------------------------------------
    async def stop(self, client: Any, params: Any) -> bool:
        return await self._change(client, STOP, params)

    async def remove(self, client: Any, params: Any) -> bool:
        return await self._change(client, REMOVE, params)

    async def _change(self, client: Any, method: str, params: Any) -> bool:
        folder = self._folder(method, params)
        self._allowed(client, method)
        await self._trusted(client, folder, "manage a Dev Container")
        async with self._lock(folder):
            users = [r for r in self.relays.values() if r.folder == folder and r.started]
            if any(r.owner is not client for r in users):
                log.info("vscode: %s left running: another client relays through it", folder)
                return False
            docker = self._docker()
            container = self.containers.get(folder) or await self._labelled(docker, folder)
            if container is None:
                return True  # no container for it: it is as stopped as it gets
            self.suspended.add(folder)
            for relay in users:
                self._close(relay)
                for note in (RELAY_CLOSE, CLOSE_CONNECTION):
                    self.host.tell_connection(client, note, {"connectionId": relay.ident})
            argv = (
                [docker, "stop", container]
                if method == STOP
                else [docker, "rm", "--force", container]
            )
            code, _, stderr = await _run(argv, DOCKER_COMMAND_SECONDS)
            gone = "no such container" in stderr.lower()
            if code != 0 and not gone:
                why = "timed out" if code is None else stderr.strip() or f"exit code {code}"
                raise ProtocolError(
                    INTERNAL_ERROR, f"docker {argv[1]} of {container[:12]} failed: {why}"
                )
            if method == REMOVE or gone:
                self.containers.pop(folder, None)
            return True

    async def _labelled(self, docker: str, folder: str) -> str | None:
        """The container the Dev Container CLI made for ``folder``, by its label."""
        argv = [docker, "ps", "-aq", "--filter", f"label={FOLDER_LABEL}={folder}"]
        code, stdout, _ = await _run(argv, DOCKER_COMMAND_SECONDS)
        found = stdout.split() if code == 0 else []
        return found[0] if found else None
