"""A client that stops reading is closed at clientQueueBytes; everyone else is unaffected.

Client A never reads after initialize; its socket is opened with a tiny receive
buffer, a one-frame receive queue and no compression, so what the host writes
backs up in the host's outbox within a few frames of the kernel buffers filling
(compression would let random-looking padding through at a fraction of its size
and keep the host's write buffer empty). Client B reads and validates every
frame. The host is then made to emit large root actions until it gives up on A.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from ahpcore import reducers
from ahpcore.engine.replay import Buffered, ReplayBuffer
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.rpc.peer import CLOSE_TOO_FAR_BEHIND
from ahpcore.testing import AhpTestClient, RunningHost

pytestmark = pytest.mark.anyio

MIB = 1 << 20
#: Each action carries this much incompressible text.
PAYLOAD_BYTES = 64 * 1024
#: Far more than A can hold: kernel buffers plus 1 MiB are a few dozen such frames.
MAX_ACTIONS = 400
TIMEOUT = 30.0


# --- helpers ------------------------------------------------------------------------------


def _blob_action(index: int) -> dict[str, Any]:
    # Random hex: a distinct value each time (so every action changes state) that
    # deflate could not shrink much even if it were on.
    blob = f"{index}:" + os.urandom(PAYLOAD_BYTES // 2).hex()
    return {"type": "root/configChanged", "config": {"blob": blob}}


async def _stalled_client(running: RunningHost, client_id: str) -> AhpTestClient:
    """A client whose socket takes almost nothing unless it is read."""
    port = int(running.url.rstrip("/").rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Before connect, so the window the kernel advertises is small from the start.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))  # loopback: completes at once in the listen backlog
    sock.setblocking(False)
    return await running.connect(client_id, sock=sock, max_queue=1, compression=None)


def _peer_of(running: RunningHost, client_id: str) -> Any:
    engine = running.host.engine_or_fail
    (client,) = [c for c in engine.clients if c.client_id == client_id]
    return client.peer


def _envelopes(client: AhpTestClient) -> list[dict[str, Any]]:
    return client.actions_for(ROOT_CHANNEL)


def _fold(state: Any, envelopes: list[dict[str, Any]], after: int) -> Any:
    for envelope in envelopes:
        if envelope["serverSeq"] > after:
            state = reducers.reduce("root", copy.deepcopy(state), envelope["action"])
            after = envelope["serverSeq"]
    return state


def _assert_contiguous(envelopes: list[dict[str, Any]], from_seq: int) -> None:
    seqs = [e["serverSeq"] for e in envelopes]
    assert seqs == list(range(from_seq + 1, from_seq + 1 + len(seqs))), "serverSeq gap or reorder"


async def _read_until_closed(client: AhpTestClient) -> ConnectionClosed:
    while True:
        try:
            await client.recv(timeout=TIMEOUT)
        except ConnectionClosed as closed:
            return closed


# --- the stalled reader -----------------------------------------------------------------


@pytest.mark.parametrize("replay_bytes", [None, MIB], ids=["answered-by-replay", "by-snapshot"])
async def test_a_stalled_reader_is_closed_while_a_reader_keeps_up(
    ahp_host, caplog: pytest.LogCaptureFixture, replay_bytes: int | None
) -> None:
    caplog.set_level(logging.INFO, logger="ahpcore")
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        gone: dict[str, anyio.Event] = {"A": anyio.Event(), "B": anyio.Event()}
        engine.on_disconnect(lambda c: gone[c.client_id].set() if c.client_id in gone else None)

        a = await _stalled_client(running, "A")
        a_init = await a.initialize()
        b = await running.connect("B")
        b_init = await b.initialize()
        a_peer = _peer_of(running, "A")

        # B pushes the bounds down the way any client would: a dispatched config change.
        config: dict[str, Any] = {"clientQueueBytes": MIB}
        if replay_bytes is not None:
            config["replayBytes"] = replay_bytes
        seq = await b.dispatch(ROOT_CHANNEL, {"type": "root/configChanged", "config": config})
        assert "rejectionReason" not in await b.answer_to(seq)
        assert running.host.client_queue_bytes() == MIB

        # Lockstep with B: each action is read by B before the next, so B is never behind
        # and the only client that can fall behind is A.
        with anyio.fail_after(TIMEOUT):
            for index in range(MAX_ACTIONS):
                envelope = engine.apply(ROOT_CHANNEL, _blob_action(index))
                assert envelope is not None
                await b.recv_until(lambda f, s=envelope["serverSeq"]: _is_action(f, s))
                if a_peer.closed:
                    break
            assert a_peer.closed, f"A was still open after {MAX_ACTIONS} actions"
            # The host goes on serving B after giving up on A; enough that a 1 MiB replay
            # buffer no longer reaches back to what A last saw.
            for index in range(MAX_ACTIONS, MAX_ACTIONS + 24):
                envelope = engine.apply(ROOT_CHANNEL, _blob_action(index))
                await b.recv_until(lambda f, s=envelope["serverSeq"]: _is_action(f, s))

            # A's connection ends: the host closed it, with the code for being behind.
            closed = await _read_until_closed(a)
            await gone["A"].wait()
        assert closed.rcvd is not None and closed.rcvd.code == CLOSE_TOO_FAR_BEHIND
        assert not gone["B"].is_set()

        # Logged by id, at the bound: not before the frame that would cross it.
        (warning,) = [r for r in caplog.records if "past clientQueueBytes" in r.getMessage()]
        peer_id, _label, behind, limit = warning.args  # type: ignore[misc]
        assert peer_id == a_peer.id and limit == MIB
        # behind + the frame crossed the bound; a few bytes of slack for websocket headers.
        assert MIB - 2 * PAYLOAD_BYTES < behind <= MIB + 4096
        assert f"client {a_peer.id} (A) disconnected (too far behind)" in caplog.text

        # B got every envelope, in order, numbered without a gap, and its fold agrees.
        b_envelopes = _envelopes(b)
        _assert_contiguous(b_envelopes, b_init["snapshots"][0]["fromSeq"])
        assert b_envelopes[-1]["serverSeq"] == engine.server_seq
        await b.assert_replay_agrees()

        # What A got is a prefix of what B got: frames are only ever dropped at the tail.
        a_envelopes = _envelopes(a)
        a_from = a_init["snapshots"][0]["fromSeq"]
        _assert_contiguous(a_envelopes, a_from)
        assert a_envelopes == b_envelopes[: len(a_envelopes)]
        a_last = a_envelopes[-1]["serverSeq"] if a_envelopes else a_from
        a_state = _fold(a_init["snapshots"][0]["state"], a_envelopes, a_from)

        # A reconnects as any dropped client does.
        expected = "replay" if engine.replay.covers(a_last, engine.server_seq) else "snapshot"
        assert expected == ("replay" if replay_bytes is None else "snapshot")
        a2 = await running.connect("A")
        try:
            answer = await a2.request(
                "reconnect",
                {
                    "channel": ROOT_CHANNEL,
                    "clientId": "A",
                    "lastSeenServerSeq": a_last,
                    "subscriptions": [ROOT_CHANNEL],
                },
            )
        except ConnectionClosed as exc:
            # The replay here is bigger than clientQueueBytes: see
            # test_one_frame_larger_than_the_bound_reaches_a_client_that_is_not_behind.
            pytest.fail(f"the reconnect answer itself closed A, 0 bytes behind: {exc}")
        assert answer["type"] == expected
        if expected == "replay":
            missed = [e for e in b_envelopes if e["serverSeq"] > a_last]
            assert answer["actions"] == missed and answer["missing"] == []
            a_state = _fold(a_state, answer["actions"], a_last)
        else:
            (snapshot,) = answer["snapshots"]
            assert snapshot["resource"] == ROOT_CHANNEL
            assert snapshot["fromSeq"] == engine.server_seq
            a_state = snapshot["state"]
        b_state = _fold(
            b_init["snapshots"][0]["state"], b_envelopes, b_init["snapshots"][0]["fromSeq"]
        )
        assert a_state == b_state == engine.root.state

        # And the reconnected A is live again, from the next serverSeq on.
        envelope = engine.apply(ROOT_CHANNEL, {"type": "root/activeSessionsChanged", "activeSessions": 1})  # fmt: skip
        assert envelope is not None
        live = await a2.recv_until(lambda f: f.get("method") == "action")
        assert live["params"] == envelope
        await b.assert_replay_agrees()


def _is_action(frame: dict[str, Any], seq: int) -> bool:
    return frame.get("method") == "action" and frame["params"]["serverSeq"] == seq


async def test_a_reader_that_keeps_up_is_never_closed(ahp_host) -> None:
    """The same traffic as above, read as it comes: 1 MiB is a bound on lag, not on volume."""
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        reader = await running.connect("reader", compression=None)
        init = await reader.initialize()
        seq = await reader.dispatch(
            ROOT_CHANNEL, {"type": "root/configChanged", "config": {"clientQueueBytes": MIB}}
        )
        await reader.answer_to(seq)
        with anyio.fail_after(TIMEOUT):
            for index in range(64):  # 4 MiB in all, four times the bound
                envelope = engine.apply(ROOT_CHANNEL, _blob_action(index))
                assert envelope is not None
                await reader.recv_until(lambda f, s=envelope["serverSeq"]: _is_action(f, s))
        assert not _peer_of(running, "reader").closed
        _assert_contiguous(_envelopes(reader), init["snapshots"][0]["fromSeq"])
        await reader.assert_replay_agrees()


async def test_one_frame_larger_than_the_bound_reaches_a_client_that_is_not_behind(
    ahp_host,
) -> None:
    """A client 0 bytes behind is not behind, whatever the next frame weighs.

    Counting the frame itself against the bound would close a client that has read
    everything for one frame over clientQueueBytes (a large action, a snapshot, a
    reconnect's replay), and a reconnect answered by a replay bigger than the bound
    would be closed again on every attempt.
    """
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        reader = await running.connect("reader", compression=None)
        await reader.initialize()
        seq = await reader.dispatch(
            ROOT_CHANNEL, {"type": "root/configChanged", "config": {"clientQueueBytes": MIB}}
        )
        await reader.answer_to(seq)
        await reader.sync()  # nothing in flight: the reader is 0 bytes behind
        big = {"type": "root/configChanged", "config": {"blob": os.urandom(MIB).hex()}}
        envelope = engine.apply(ROOT_CHANNEL, big)
        assert envelope is not None
        try:
            frame = await reader.recv_until(lambda f: f.get("method") == "action")
        except ConnectionClosed as exc:
            pytest.fail(f"a reader that was not behind was closed for one large frame: {exc}")
        assert frame["params"]["serverSeq"] == envelope["serverSeq"]
        await reader.assert_replay_agrees()


# --- the replay buffer ------------------------------------------------------------------


def _item(seq: int, weight: int = 10) -> Buffered:
    return Buffered(seq, ROOT_CHANNEL, {"serverSeq": seq}, weight)


def _seqs(buffer: ReplayBuffer) -> list[int]:
    return [item.server_seq for item in buffer.since(-1)]


def test_replay_buffer_keeps_the_last_max_count() -> None:
    buffer = ReplayBuffer(max_count=3, max_bytes=lambda: 1 << 30)
    for seq in range(1, 8):
        buffer.append(_item(seq))
    assert _seqs(buffer) == [5, 6, 7]
    assert len(buffer) == 3 and buffer.bytes == 30 and buffer.oldest_seq == 5


def test_replay_buffer_bytes_bound_is_read_on_each_append() -> None:
    limit = [25]
    buffer = ReplayBuffer(max_count=1000, max_bytes=lambda: limit[0])
    for seq in range(1, 5):
        buffer.append(_item(seq))
    assert _seqs(buffer) == [3, 4] and buffer.bytes == 20
    limit[0] = 45  # a pushed value: the next append may keep more
    for seq in range(5, 9):
        buffer.append(_item(seq))
    assert _seqs(buffer) == [5, 6, 7, 8] and buffer.bytes == 40
    limit[0] = 10  # pushed down: nothing is dropped until the next append reads it
    assert _seqs(buffer) == [5, 6, 7, 8]
    buffer.append(_item(9))
    assert _seqs(buffer) == [9] and buffer.bytes == 10


def test_replay_buffer_keeps_the_newest_whatever_it_weighs() -> None:
    buffer = ReplayBuffer(max_count=1000, max_bytes=lambda: 100)
    buffer.append(_item(1, weight=40))
    buffer.append(_item(2, weight=500))
    assert _seqs(buffer) == [2] and buffer.bytes == 500
    buffer.append(_item(3, weight=500))
    assert _seqs(buffer) == [3]
    buffer.append(_item(4, weight=30))
    assert _seqs(buffer) == [4] and buffer.bytes == 30
    buffer.append(_item(5, weight=30))
    assert _seqs(buffer) == [4, 5] and buffer.bytes == 60


def test_replay_buffer_covers() -> None:
    buffer = ReplayBuffer(max_count=3, max_bytes=lambda: 1 << 30)
    assert buffer.covers(10, 10)  # nothing missed, even with nothing buffered
    assert not buffer.covers(9, 10)  # something missed, nothing to replay it from
    assert not buffer.covers(11, 10)  # a sequence from another run of the host
    for seq in range(11, 16):
        buffer.append(_item(seq))  # holds 13, 14, 15
    assert buffer.covers(15, 15)
    assert buffer.covers(14, 15)
    assert buffer.covers(12, 15)  # 13 onwards is all held
    assert not buffer.covers(11, 15)  # 12 was dropped
    assert not buffer.covers(0, 15)
    assert not buffer.covers(16, 15)
    assert [item.server_seq for item in buffer.since(13)] == [14, 15]
    assert list(buffer.since(15)) == []
