"""Big and oddly shaped frames: bounded work per frame, the sender answered by its id,
other clients served meanwhile; and what an internal error may say."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from ahp_scripted import Rule, ScriptedBackend
from ahpcore.defaults import DEFAULT_MAX_FRAME_BYTES
from ahpcore.hookspecs import hookimpl
from ahpcore.protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.rpc.framing import MAX_JSON_CONTAINERS, MAX_JSON_DEPTH
from tests.sessions.conftest import ScriptedPlugin, open_session, script, start_turn, turn_end

pytestmark = pytest.mark.anyio


def _ping_wrapping(payload: str, ident: Any = 7) -> str:
    head = json.dumps({"jsonrpc": "2.0", "id": ident, "method": "ping"})[:-1]
    return f'{head}, "params": {{"channel": "{ROOT_CHANNEL}", "_meta": {{"x": {payload}}}}}}}'


async def _worst_ping_latency(client: Any, until: anyio.Event) -> float:
    worst = 0.0
    while not until.is_set():
        started = time.monotonic()
        await client.sync()
        worst = max(worst, time.monotonic() - started)
    return worst


async def test_a_huge_frame_of_empty_arrays_is_refused_by_id_while_others_are_served(ahp_host):
    # Just under the default limit: millions of "[]" the parser would build one by one.
    count = (DEFAULT_MAX_FRAME_BYTES - 200) // 3
    frame = _ping_wrapping("[" + "[]," * (count - 1) + "[]]")
    assert len(frame) < DEFAULT_MAX_FRAME_BYTES
    async with ahp_host(no_plugins=True) as running:
        bystander = await running.connect("bystander")
        await bystander.initialize()
        sender = await running.connect("sender", compression=None)
        await sender.initialize()
        answered = anyio.Event()
        latencies: list[float] = []

        async def watch() -> None:
            latencies.append(await _worst_ping_latency(bystander, answered))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await sender.send_raw(frame)
            refusal = await sender.recv_until(lambda f: f.get("id") == 7, timeout=30)
            answered.set()
        assert refusal["error"]["code"] == PARSE_ERROR
        assert f"more than {MAX_JSON_CONTAINERS} arrays and objects" in refusal["error"]["message"]
        # Refused without building the arrays: other clients wait a fraction of a second
        # (parsing it, as before, stalled every client for over 4 s on an idle machine).
        # The bound leaves room for a loaded CI machine.
        assert latencies[0] < 3.0, latencies
        await sender.sync()  # the sender is still served too


async def test_a_frame_past_the_default_limit_closes_only_that_connection(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        bystander = await running.connect("bystander")
        await bystander.initialize()
        # A bare connection: the client library cannot close cleanly a socket the host
        # dropped while the client still had megabytes of this frame queued.
        sender = await connect(running.url, compression=None, max_size=None)
        try:
            with anyio.fail_after(30):
                await sender.send(_ping_wrapping('"' + "x" * DEFAULT_MAX_FRAME_BYTES + '"'))
                with pytest.raises(ConnectionClosed) as closed:
                    await sender.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        finally:
            if not sender.transport.is_closing():
                sender.transport.abort()
        await bystander.sync()


async def test_brackets_inside_strings_do_not_count_as_nesting(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize()
        await client.send_raw(_ping_wrapping(json.dumps("[" * 300 + "{" * 300), ident="quoted"))
        answer = await client.recv_until(lambda f: f.get("id") == "quoted")
        assert answer == {"jsonrpc": "2.0", "id": "quoted", "result": None}


async def test_real_nesting_is_refused_with_the_request_id(ahp_host):
    depth = MAX_JSON_DEPTH + 10
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize()
        await client.send_raw(_ping_wrapping("[" * depth + "]" * depth, ident=41))
        answer = await client.recv_until(lambda f: f.get("id") == 41)
        assert answer["error"]["code"] == PARSE_ERROR
        assert f"deeper than {MAX_JSON_DEPTH}" in answer["error"]["message"]


async def test_a_prompt_of_300_brackets_runs_its_turn(ahp_host, tmp_path):
    prompt = "[" * 300
    backend = ScriptedBackend(
        tmp_path / "scripted", script(Rule(exact=prompt, steps=[{"say": "brackets seen"}]))
    )
    async with ahp_host([("scripted", ScriptedPlugin(backend))]) as running:
        client = await running.connect()
        await client.initialize()
        _, chat = await open_session(client)
        echo = await start_turn(client, chat, prompt, "t1")
        assert "rejectionReason" not in echo
        ending = await turn_end(client, chat)
        assert ending["type"] == "chat/turnComplete"


class Failing:
    @hookimpl
    def ahp_rpc_methods(self, host, register):
        def explode(client, params):
            raise FileNotFoundError(2, "No such file or directory", "/srv/secret/layout/db.sqlite")

        register("test.explode", explode)


async def test_an_internal_error_does_not_reveal_server_paths(ahp_host):
    async with ahp_host([("failing", Failing())]) as running:
        client = await running.connect()
        await client.initialize()
        frame = await client.request_frame("test.explode", {})
        assert frame["error"]["code"] == INTERNAL_ERROR
        message = frame["error"]["message"]
        assert "test.explode failed" in message and "db.sqlite" in message
        assert "/srv" not in message and "secret" not in message


async def test_dispatch_action_sent_as_a_request_is_told_it_is_a_notification(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize()
        action = {"type": "root/configChanged", "config": {}}
        frame = await client.request_frame(
            "dispatchAction", {"channel": ROOT_CHANNEL, "clientSeq": 1, "action": action}
        )
        assert frame["error"]["code"] == INVALID_REQUEST
        assert "dispatchAction is a notification" in frame["error"]["message"]
