"""One frame to many watchers: built once for every connection without deflate, each
compressed connection framed on its own, and never a frame between another message's
fragments. A burst of frames reaches a plain connection in few socket writes, in order
with everything else written to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame

from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.transports.websocket import COALESCE_BYTES, WebSocketWire

pytestmark = pytest.mark.anyio

ACTIONS = 40


def _config_change(index: int) -> dict[str, Any]:
    return {"type": "root/configChanged", "config": {"step": index, "pad": "x" * (index * 37)}}


async def _config_envelopes(client: Any, count: int) -> list[dict[str, Any]]:
    envelopes = []
    while len(envelopes) < count:
        frame = await client.recv()
        if frame.get("method") == "action":
            envelopes.append(frame["params"])
    return envelopes


async def _watchers(running: Any, plain: int, deflate: int) -> tuple[list[Any], list[Any]]:
    """``plain`` clients without deflate and ``deflate`` with it, each watching the root."""
    plain_clients = [await running.connect(f"plain{i}", compression=None) for i in range(plain)]
    deflate_clients = [await running.connect(f"deflate{i}") for i in range(deflate)]
    for client in plain_clients + deflate_clients:
        await client.initialize()
    return plain_clients, deflate_clients


async def test_plain_and_deflate_watchers_each_get_every_frame_whole_and_in_order(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        plain, deflate = await _watchers(running, 3, 3)
        engine = running.host.engine_or_fail
        sent = [engine.apply(ROOT_CHANNEL, _config_change(i)) for i in range(ACTIONS)]
        assert all(envelope is not None for envelope in sent)
        for client in plain + deflate:
            received = await _config_envelopes(client, ACTIONS)
            assert received == sent, client.client_id


async def test_the_frame_is_built_once_for_every_watcher_without_deflate(ahp_host, monkeypatch):
    built: list[int] = []
    serialize = Frame.serialize

    def counting(self: Frame, **kwargs: Any) -> bytes:
        built.append(len(self.data))
        return serialize(self, **kwargs)

    async with ahp_host(no_plugins=True) as running:
        plain, deflate = await _watchers(running, 5, 2)
        engine = running.host.engine_or_fail
        monkeypatch.setattr(Frame, "serialize", counting)
        envelope = engine.apply(ROOT_CHANNEL, _config_change(1))
        monkeypatch.setattr(Frame, "serialize", serialize)
        # Once for the five plain connections, once for each compressed one.
        assert len(built) == 1 + len(deflate), built
        for client in plain + deflate:
            assert await _config_envelopes(client, 1) == [envelope]


async def test_no_frame_lands_between_the_fragments_of_another_message(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect("reader", compression=None)
        await client.initialize()
        # The host's side of that client's connection.
        (host_side,) = [c for c in running.host.engine_or_fail.clients if c.client_id == "reader"]
        wire = host_side.peer.wire
        assert isinstance(wire, WebSocketWire)
        first_sent, go_on = asyncio.Event(), asyncio.Event()

        async def fragments() -> AsyncIterator[str]:
            yield '{"jsonrpc":"2.0","method":"x/fragmented",'
            first_sent.set()
            await go_on.wait()
            yield '"params":{"whole":true}}'

        async with anyio.create_task_group() as tg:
            tg.start_soon(wire.connection.send, fragments())
            await first_sent.wait()
            # Mid-message: the frame is refused, not written into the middle of it.
            assert WebSocketWire.write_many([wire], '{"jsonrpc":"2.0","method":"x/between"}') == [
                wire
            ]
            with pytest.raises(ConnectionError):
                wire.write_now('{"jsonrpc":"2.0","method":"x/between"}')
            go_on.set()
        client.validate = False  # the test's own method names are not the protocol's
        frame = await client.recv_until(lambda f: f.get("method", "").startswith("x/"))
        assert frame == {"jsonrpc": "2.0", "method": "x/fragmented", "params": {"whole": True}}
        # Once the message is whole, frames go out again.
        assert WebSocketWire.write_many([wire], '{"jsonrpc":"2.0","method":"x/after"}') == []
        after = await client.recv_until(lambda f: f.get("method", "").startswith("x/"))
        assert after == {"jsonrpc": "2.0", "method": "x/after"}


def _host_side(running: Any, client_id: str) -> WebSocketWire:
    """The host's end of one client's connection."""
    (client,) = [c for c in running.host.engine_or_fail.clients if c.client_id == client_id]
    wire = client.peer.wire
    assert isinstance(wire, WebSocketWire)
    return wire


def _count_socket_writes(wire: WebSocketWire, monkeypatch: Any) -> list[int]:
    """The size of every write onto ``wire``'s socket transport (which still writes)."""
    sizes: list[int] = []
    transport = wire.connection.transport
    write = transport.write

    def counted(data: Any) -> None:
        sizes.append(len(data))
        write(data)

    monkeypatch.setattr(transport, "write", counted)
    return sizes


async def _one_watcher(running: Any, kind: str) -> tuple[Any, WebSocketWire]:
    """A client of ``kind`` (plain or deflate) watching the root, and the host's end of it."""
    plain, deflate = await _watchers(running, int(kind == "plain"), int(kind == "deflate"))
    (client,) = plain + deflate
    return client, _host_side(running, f"{kind}0")


@pytest.mark.parametrize("kind", ["plain", "deflate"])
async def test_a_burst_reaches_a_watcher_in_few_writes_and_in_order(ahp_host, monkeypatch, kind):
    async with ahp_host(no_plugins=True) as running:
        client, wire = await _one_watcher(running, kind)
        writes = _count_socket_writes(wire, monkeypatch)
        burst = 200
        sent = _apply_burst(running, 1)
        assert len(writes) == 1  # the turn's first frame waits for nothing
        sent += _apply_burst(running, burst - 1, start=1)
        assert await _config_envelopes(client, burst) == sent
        # The turn's first frame at once, then one write per COALESCE_BYTES held,
        # and the rest at the end of the turn.
        assert len(writes) <= sum(writes) // COALESCE_BYTES + 2, writes
        if kind == "plain":  # (deflate shrinks the test's padding to little)
            assert sum(writes) > 4 * COALESCE_BYTES


def _apply_burst(running: Any, count: int, start: int = 0) -> list[dict[str, Any]]:
    engine = running.host.engine_or_fail
    sent = [engine.apply(ROOT_CHANNEL, _config_change(i)) for i in range(start, start + count)]
    assert all(envelope is not None for envelope in sent)
    return sent  # type: ignore[return-value]


@pytest.mark.parametrize("kind", ["plain", "deflate"])
async def test_held_frames_go_out_before_an_answer_and_before_the_close(ahp_host, kind):
    async with ahp_host(no_plugins=True) as running:
        client, wire = await _one_watcher(running, kind)
        before_answer = _apply_burst(running, 3)
        # An answer written through websockets itself, in the same turn as the burst.
        await wire.send('{"jsonrpc":"2.0","method":"x/answer"}')
        before_close = _apply_burst(running, 2, start=3)
        await wire.close()
        client.validate = False  # the test's own method name is not the protocol's
        client.conformance = False  # the host closed it mid-conversation on purpose
        received = []
        with pytest.raises(ConnectionClosed):
            while True:
                received.append(await client.recv())
        assert received == [
            *({"jsonrpc": "2.0", "method": "action", "params": e} for e in before_answer),
            {"jsonrpc": "2.0", "method": "x/answer"},
            *({"jsonrpc": "2.0", "method": "action", "params": e} for e in before_close),
        ]
