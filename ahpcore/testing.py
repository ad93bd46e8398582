"""Test support shipped with ahpcore, loaded by pytest as a plugin (entry point ``pytest11``).

Fixtures:

* ``ahp_host`` - an async factory: ``async with ahp_host(plugins=[...]) as running:``
  starts a host with exactly the plugins named (no entry points) on a
  WebSocket bound to 127.0.0.1, and ``await running.connect()`` opens a client.
* ``register_plugin`` - register a plugin on a started host for one test.

Every frame an ``AhpTestClient`` receives goes through the strict wire
validator, and ``AhpTestClient.assert_replay_agrees()`` replays every action it
received through the reducers and compares the result with a fresh snapshot.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.protocol import State

from ahpcore.host import Host, HostSettings
from ahpcore.plugins import PluginManager, Selection
from ahpcore.protocol.methods import COMMANDS
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.protocol.versions import SUPPORTED_VERSIONS
from ahpcore.testing_backend import BACKEND_CHECKS, BackendUnderTest, backend_checks

if TYPE_CHECKING:
    from ahpcore.transports.websocket import ConnectionLimits

DEFAULT_TIMEOUT = 10.0


#: Stands in for the client's own action when checking the host's part of a refusal.
_ANY_VALID_ACTION = {"type": "root/activeSessionsChanged", "activeSessions": 0}


def _validate(frame: dict[str, Any], request_method: str | None) -> None:
    from ahpcore.protocol.wire import assert_valid_frame

    params = frame.get("params")
    if frame.get("method") == "action" and isinstance(params, dict) and "rejectionReason" in params:
        # A refusal hands back the client's own action, whatever it was (an
        # unknown type, a missing field); what the host wrote is the rest.
        frame = {**frame, "params": {**params, "action": _ANY_VALID_ACTION}}
    assert_valid_frame(frame, direction="server", request_method=request_method)


@dataclass
class AhpTestClient:
    """A real WebSocket client that checks every frame it is sent."""

    connection: ClientConnection
    client_id: str
    validate: bool = True
    #: Which reducer owns a channel (asked of the host under test).
    kind_of: Callable[[str], str] = lambda uri: "root"
    #: Every frame received, in order.
    frames: list[dict[str, Any]] = field(default_factory=list)
    #: Snapshots received, by channel: (fromSeq, state).
    snapshots: dict[str, tuple[int, Any]] = field(default_factory=dict)
    _ids: Iterable[int] = field(default_factory=lambda: itertools.count(1))
    _methods: dict[Any, str] = field(default_factory=dict)
    _backlog: list[dict[str, Any]] = field(default_factory=list)
    _client_seq: Iterable[int] = field(default_factory=lambda: itertools.count(1))
    #: Run the replay check when the test's host shuts down (off for clients
    #: whose point is a broken exchange).
    conformance: bool = True
    checked_conformance: bool = False

    async def send_raw(self, text: str | bytes) -> None:
        await self.connection.send(text)

    async def send(self, message: dict[str, Any]) -> None:
        if "id" in message and "method" in message:
            self._methods[message["id"]] = message["method"]
        await self.connection.send(json.dumps(message))

    async def _receive(self) -> dict[str, Any]:
        frame = json.loads(await self.connection.recv())
        method = self._methods.pop(frame.get("id"), None) if "method" not in frame else None
        if method not in COMMANDS:
            method = None  # a plugin's own method: only the JSON-RPC envelope is the protocol's
        if self.validate:
            _validate(frame, method)
        self.frames.append(frame)
        result = frame.get("result")
        if isinstance(result, dict):
            self._note_snapshots(result)
        return frame

    def _note_snapshots(self, result: dict[str, Any]) -> None:
        found = list(result.get("snapshots") or [])
        if isinstance(result.get("snapshot"), dict):
            found.append(result["snapshot"])
        for snapshot in found:
            self.snapshots[snapshot["resource"]] = (snapshot["fromSeq"], snapshot["state"])

    async def recv(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """The next frame (including any set aside while waiting for an answer)."""
        if self._backlog:
            return self._backlog.pop(0)
        with anyio.fail_after(timeout):
            return await self._receive()

    async def recv_until(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        """The first frame matching ``predicate``; others are kept for ``recv``."""
        for index, frame in enumerate(self._backlog):
            if predicate(frame):
                return self._backlog.pop(index)
        with anyio.fail_after(timeout):
            while True:
                frame = await self._receive()
                if predicate(frame):
                    return frame
                self._backlog.append(frame)

    async def request_frame(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        """Send a request and return the whole answer frame (result or error)."""
        ident = next(iter(self._ids))
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.recv_until(lambda f: f.get("id") == ident and "method" not in f, timeout)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request; return its result, or raise AssertionError showing the error."""
        frame = await self.request_frame(method, params)
        if "error" in frame:
            raise AssertionError(f"{method} failed: {frame['error']}")
        return frame["result"]

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if method == "unsubscribe":
            self.snapshots.pop(params.get("channel", ""), None)  # no longer ours to check
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def initialize(
        self, subscriptions: Iterable[str] = (ROOT_CHANNEL,), versions: Iterable[str] = ("1.0.0",)
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            "initialize",
            {
                "channel": ROOT_CHANNEL,
                "protocolVersions": list(versions),
                "clientId": self.client_id,
                "initialSubscriptions": list(subscriptions),
            },
        )
        return result

    async def dispatch(self, channel: str, action: dict[str, Any]) -> int:
        """Dispatch an action; returns the clientSeq it carried."""
        seq = next(iter(self._client_seq))
        await self.notify(
            "dispatchAction", {"channel": channel, "clientSeq": seq, "action": action}
        )
        return seq

    async def answer_to(self, client_seq: int, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """The envelope answering one of this client's dispatches."""
        frame = await self.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"].get("origin", {}).get("clientId") == self.client_id
                and f["params"]["origin"].get("clientSeq") == client_seq
            ),
            timeout,
        )
        return dict(frame["params"])

    def actions_for(self, channel: str) -> list[dict[str, Any]]:
        """Envelopes received for ``channel`` that changed state (refusals and echoes excluded)."""
        return [
            f["params"]
            for f in self.frames
            if f.get("method") == "action"
            and f["params"]["channel"] == channel
            and "rejectionReason" not in f["params"]
        ]

    async def assert_replay_agrees(self, channels: Iterable[str] | None = None) -> None:
        """Fold every action received onto its snapshot and compare with a fresh snapshot.

        A snapshot alone is the host agreeing with itself; this checks that a
        client built from the actions ends where a client that subscribes now
        starts. Drains pending frames first so nothing in flight is missed. A
        channel the host no longer has is skipped: there is nothing to compare.
        """
        from ahpcore import reducers

        await self.sync()
        for channel in list(channels or self.snapshots):
            from_seq, state = self.snapshots[channel]
            fresh = await self.request_frame("subscribe", {"channel": channel})
            if "error" in fresh and channels is None:
                continue  # the channel is gone: nothing to compare
            assert "result" in fresh, f"cannot re-subscribe to {channel}: {fresh}"
            up_to = fresh["result"]["snapshot"]["fromSeq"]
            kind = self.kind_of(channel)
            seen: set[int] = set()
            for envelope in self.actions_for(channel):
                seq = envelope["serverSeq"]
                if seq <= from_seq or seq > up_to or seq in seen:
                    continue  # echoes of no-ops repeat the current seq; they change nothing
                seen.add(seq)
                state = reducers.reduce(kind, copy.deepcopy(state), envelope["action"])
            assert fresh["result"]["snapshot"]["state"] == state, (
                f"actions replayed onto the snapshot of {channel} disagree with a fresh snapshot"
            )
            self.checked_conformance = True

    async def sync(self) -> None:
        """Wait until every frame the host sent before now has arrived (a ping round trip)."""
        await self.request("ping", {"channel": ROOT_CHANNEL})

    async def close(self) -> None:
        await self.connection.close()


@dataclass
class RunningHost:
    host: Host
    url: str
    token: str | None
    _clients: list[AhpTestClient] = field(default_factory=list)
    _ids: Iterable[int] = field(default_factory=lambda: itertools.count(1))

    async def connect(
        self,
        client_id: str | None = None,
        *,
        validate: bool = True,
        conformance: bool = True,
        token: str | None = None,
        **kwargs: Any,
    ) -> AhpTestClient:
        """Open a real WebSocket client to the host (with the host's token unless told)."""
        url = self.url
        chosen = self.token if token is None else token
        if chosen:
            url += f"?token={chosen}"
        connection = await connect(url, max_size=None, **kwargs)
        engine = self.host.engine_or_fail
        client = AhpTestClient(
            connection,
            client_id or f"test-client-{next(iter(self._ids))}",
            validate,
            kind_of=lambda uri: engine.channels[engine.canonical(uri)].kind,
            conformance=conformance,
        )
        self._clients.append(client)
        return client

    async def aclose(self, check: bool = True) -> None:
        """Close every client, first running the replay check on those still open."""
        for client in self._clients:
            if (
                check
                and client.conformance
                and client.snapshots
                and client.connection.state is State.OPEN
            ):
                await client.assert_replay_agrees()
            await client.close()


@asynccontextmanager
async def running_host(
    plugins: Iterable[object | tuple[str, object]] = (),
    *,
    no_plugins: bool = False,
    token: str | None = None,
    settings: HostSettings | None = None,
    state_dir: Path | None = None,
    limits: ConnectionLimits | None = None,
) -> AsyncIterator[RunningHost]:
    """A started host with exactly ``plugins`` (no entry points), serving 127.0.0.1.

    ``limits``: the server's bounds across connections (``ConnectionLimits()`` when None).
    """

    settings = settings or HostSettings(sessions="memory", port=0)
    if state_dir is not None:
        settings.state_dir = state_dir
    manager = PluginManager(
        plugins=plugins, entry_points=False, selection=Selection(protocol_only=no_plugins)
    )
    host = Host(manager, settings)
    async with host, _served(host, settings, token, limits) as running:
        yield running


#: ``host(state_dir)``: a started host keeping its state in ``state_dir``.
HostFactory = Callable[[Path], AbstractAsyncContextManager[RunningHost]]


def host_factory(
    plugins: Iterable[object | tuple[str, object]]
    | Callable[[], Iterable[object | tuple[str, object]]],
    **settings: Any,
) -> HostFactory:
    """``host(state_dir)`` starting a host with exactly ``plugins``, what a backend's tests
    and ``BackendUnderTest.host`` need.

    Its sessions are kept in a file under ``state_dir``, so a second host on the same
    folder is a restart. ``plugins`` may be a function called at each start, for plugins
    that hold on to what one host gave them. ``settings`` are further ``HostSettings``.
    """

    def host(state_dir: Path) -> AbstractAsyncContextManager[RunningHost]:
        chosen = plugins() if callable(plugins) else plugins
        fields = {"sessions": "file", "port": 0, **settings, "state_dir": state_dir}
        return running_host(list(chosen), settings=HostSettings(**fields))

    return host


@asynccontextmanager
async def _served(
    host: Host, settings: HostSettings, token: str | None, limits: ConnectionLimits | None
) -> AsyncIterator[RunningHost]:
    from ahpcore.transports.websocket import start_websocket_server

    server = await start_websocket_server(
        host.serve_connection,
        host="127.0.0.1",
        port=settings.port,
        token=token,
        max_frame_bytes=settings.max_frame_bytes,
        compression=settings.compression,
        limits=limits,
        people=host.identify,
    )
    port = next(iter(server.sockets)).getsockname()[1]
    running = RunningHost(host, f"ws://127.0.0.1:{port}/", token)
    try:
        yield running
    except BaseException:
        await running.aclose(check=False)
        raise
    else:
        await running.aclose()
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def ahp_host(tmp_path: Path) -> Callable[..., Any]:
    """Factory: ``async with ahp_host(plugins=[...]) as running`` (state under tmp_path)."""

    def factory(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("state_dir", tmp_path / "state")
        return running_host(*args, **kwargs)

    return factory


@pytest.fixture
def register_plugin() -> Iterable[Callable[[Host, object, str | None], str]]:
    """``register_plugin(host, plugin, name=None)``; unregistered when the test ends."""
    added: list[tuple[Host, str]] = []

    def register(host: Host, plugin: object, name: str | None = None) -> str:
        registered = host.plugins.register(plugin, name)
        added.append((host, registered))
        return registered

    yield register
    for host, name in added:
        host.plugins.unregister(name)


#: The actions that end a turn.
TURN_ENDS = ("chat/turnComplete", "chat/turnCancelled", "chat/error")


def is_action(kind: str, channel: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """A ``recv_until`` test: an action of ``kind`` (on ``channel``) that was not refused."""

    def match(frame: dict[str, Any]) -> bool:
        return (
            frame.get("method") == "action"
            and frame["params"]["action"]["type"] == kind
            and (channel is None or frame["params"]["channel"] == channel)
            and "rejectionReason" not in frame["params"]
        )

    return match


async def turn_end(client: AhpTestClient, chat: str, timeout: float = 30) -> dict[str, Any]:
    """The action that ended the running turn of ``chat``."""
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and "rejectionReason" not in f["params"]
            and f["params"]["action"]["type"] in TURN_ENDS
        ),
        timeout=timeout,
    )
    return dict(frame["params"]["action"])


async def chat_state(client: AhpTestClient, chat: str) -> dict[str, Any]:
    """A chat's state as a fresh snapshot gives it, once the host has caught up."""
    await client.sync()
    return dict((await client.request("subscribe", {"channel": chat}))["snapshot"]["state"])


def turn_parts(state: dict[str, Any], turn: int = -1) -> list[dict[str, Any]]:
    """The response parts of one turn of a chat's state (the last by default)."""
    return list(state["turns"][turn]["responseParts"])


__all__ = [
    "BACKEND_CHECKS",
    "SUPPORTED_VERSIONS",
    "TURN_ENDS",
    "AhpTestClient",
    "BackendUnderTest",
    "HostFactory",
    "RunningHost",
    "backend_checks",
    "chat_state",
    "host_factory",
    "is_action",
    "running_host",
    "turn_end",
    "turn_parts",
]
