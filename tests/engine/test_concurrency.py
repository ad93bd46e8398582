"""Many clients at once: one order for everyone, no client slowed by another, nothing left behind."""

from __future__ import annotations

import os
import socket
from typing import Any

import anyio
import pytest

from ahpcore.engine.clients import Client
from ahpcore.hookspecs import hookimpl
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.testing import AhpTestClient, RunningHost

pytestmark = pytest.mark.anyio

MIB = 1 << 20
TIMEOUT = 30.0


def _actions(client: AhpTestClient) -> list[dict[str, Any]]:
    return client.actions_for(ROOT_CHANNEL)


async def _read_actions(client: AhpTestClient, count: int) -> None:
    """Read until ``count`` state-changing envelopes have arrived in all."""
    while len(_actions(client)) < count:
        await client.recv(timeout=TIMEOUT)


def _assert_contiguous(envelopes: list[dict[str, Any]], from_seq: int) -> None:
    seqs = [e["serverSeq"] for e in envelopes]
    assert seqs == list(range(from_seq + 1, from_seq + 1 + len(seqs)))


async def test_many_clients_see_every_action_in_one_order(ahp_host) -> None:
    clients_n, host_actions, dispatches_each = 20, 200, 5
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        clients = [await running.connect(f"c{i}") for i in range(clients_n)]
        inits = [await client.initialize() for client in clients]
        total = host_actions + clients_n * dispatches_each

        async def push_from_host() -> None:
            for count in range(1, host_actions + 1):
                assert engine.apply(
                    ROOT_CHANNEL, {"type": "root/activeSessionsChanged", "activeSessions": count}
                )
                if count % 7 == 0:
                    await anyio.sleep(0)  # let readers and dispatchers interleave with it

        async def dispatch_from(index: int, client: AhpTestClient) -> None:
            for j in range(dispatches_each):
                # A distinct value each time, so each one changes state and takes a number.
                value = MIB + index * 100 + j
                action = {"type": "root/configChanged", "config": {"replayBytes": value}}
                await client.dispatch(ROOT_CHANNEL, action)
                await anyio.sleep(0)

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for client in clients:
                    tg.start_soon(_read_actions, client, total)
                for index, client in enumerate(clients):
                    tg.start_soon(dispatch_from, index, client)
                tg.start_soon(push_from_host)

        reference = _actions(clients[0])
        assert len(reference) == total
        assert reference[-1]["serverSeq"] == engine.server_seq
        for client, init in zip(clients, inits, strict=True):
            assert _actions(client) == reference, f"{client.client_id} saw another order"
            _assert_contiguous(_actions(client), init["snapshots"][0]["fromSeq"])
        # Every client's dispatches came back to everyone with its origin, in its own order.
        for client in clients:
            mine = [
                e["origin"]["clientSeq"]
                for e in reference
                if e.get("origin", {}).get("clientId") == client.client_id
            ]
            assert mine == list(range(1, dispatches_each + 1))
        for client in clients:
            await client.assert_replay_agrees()


async def _unread_client(running: RunningHost, client_id: str) -> AhpTestClient:
    """A client that reads nothing it is not asked to: a tiny socket buffer, a 1-frame queue."""
    port = int(running.url.rstrip("/").rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return await running.connect(client_id, sock=sock, max_queue=1, compression=None)


async def test_a_client_that_does_not_read_never_delays_the_others(ahp_host) -> None:
    fast_n, actions_n, payload = 5, 200, 16 * 1024
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        slow = await _unread_client(running, "slow")
        await slow.initialize()
        slow_read = len(slow.frames)
        fast = [await running.connect(f"fast{i}", compression=None) for i in range(fast_n)]
        for client in fast:
            await client.initialize()
        (slow_peer,) = [c.peer for c in engine.clients if c.client_id == "slow"]

        async def push() -> None:
            for index in range(actions_n):
                blob = f"{index}:" + os.urandom(payload // 2).hex()
                engine.apply(ROOT_CHANNEL, {"type": "root/configChanged", "config": {"blob": blob}})
                await anyio.sleep(0)

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for client in fast:
                    tg.start_soon(_read_actions, client, actions_n)
                tg.start_soon(push)

        # Every fast client has everything, while the slow one has read nothing and the
        # host still holds frames for it: its writer was stuck the whole time, not drained.
        for client in fast:
            assert len(_actions(client)) == actions_n
        assert len(slow.frames) == slow_read
        backlog = slow_peer.queued_bytes + (slow_peer.wire.buffered_bytes() or 0)
        assert backlog > payload, "the slow client kept up after all; the test proved nothing"
        assert not slow_peer.closed  # 3 MiB behind is well inside the default 16 MiB

        # Once it reads, the slow client gets the same actions in the same order.
        with anyio.fail_after(TIMEOUT):
            await _read_actions(slow, actions_n)
        assert _actions(slow) == _actions(fast[0])
        await slow.assert_replay_agrees()


class SlowPlugin:
    """Serves ``test/slow``, which waits forever, and records what became of each call."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.cancelled = anyio.Event()
        self.finished_otherwise = False
        self.callers: list[Client] = []

    @hookimpl
    def ahp_rpc_methods(self, host: Any, register: Any) -> None:
        register("test/slow", self.slow)

    async def slow(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        self.callers.append(client)
        self.started.set()
        try:
            await anyio.Event().wait()  # nobody sets it
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise
        self.finished_otherwise = True
        return {}


@pytest.mark.parametrize("how", ["close", "abort"])
async def test_a_client_leaving_mid_request_leaves_nothing_behind(ahp_host, how: str) -> None:
    plugin = SlowPlugin()
    async with ahp_host(plugins=[("slowplugin", plugin)]) as running:
        engine = running.host.engine_or_fail
        left, emptied = anyio.Event(), anyio.Event()
        engine.on_disconnect(lambda client: left.set())
        # Whether listeners run before or after the client leaves the set, this is the last one.
        engine.on_disconnect(lambda client: None if engine.clients - {client} else emptied.set())
        watcher = await running.connect("watcher")
        await watcher.initialize()
        client = await running.connect("leaver")
        await client.initialize()
        await client.send({"jsonrpc": "2.0", "id": 1, "method": "test/slow", "params": {}})
        with anyio.fail_after(TIMEOUT):
            await plugin.started.wait()
            if how == "close":
                await client.close()  # a clean close handshake
            else:
                client.connection.transport.abort()  # the socket just goes away
            await plugin.cancelled.wait()
            await left.wait()

        (leaver,) = plugin.callers
        assert not plugin.finished_otherwise
        assert leaver not in engine.clients
        assert {c.client_id for c in engine.clients} == {"watcher"}
        assert leaver.peer.closed and leaver.subscriptions == {} and leaver.held == {}
        assert all(leaver not in channel.subscribers for channel in engine.channels.values())
        # The host notices nothing else: the watcher is served as before.
        envelope = engine.apply(ROOT_CHANNEL, {"type": "root/activeSessionsChanged", "activeSessions": 3})  # fmt: skip
        assert envelope is not None
        await watcher.recv_until(lambda f: f.get("method") == "action")
        await watcher.assert_replay_agrees()

        # Closing the last connection empties the engine's client set.
        await watcher.close()
        with anyio.fail_after(TIMEOUT):
            await emptied.wait()
        assert engine.clients == set()
        assert all(not channel.subscribers for channel in engine.channels.values())
