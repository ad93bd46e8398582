"""initialize, ping, subscribe, unsubscribe and the rules every command shares."""

from __future__ import annotations

import anyio
import pytest

from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"


async def test_ping_works_before_initialize(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        assert await client.request("ping", {"channel": ROOT}) is None
        assert await client.request("ping") is None  # no channel named: nothing wrong named


async def test_other_commands_wait_for_initialize(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        frame = await client.request_frame("subscribe", {"channel": ROOT})
        assert frame["error"]["code"] == INVALID_REQUEST
        assert "initialize" in frame["error"]["message"]


async def test_initialize_answers_snapshots_for_initial_subscriptions(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        result = await client.initialize(subscriptions=[ROOT, "ahp-session:/nobody"])
        # The channel that could not be snapshotted is left out, and not watched.
        assert [s["resource"] for s in result["snapshots"]] == [ROOT]
        snapshot = result["snapshots"][0]
        assert snapshot["fromSeq"] == result["serverSeq"]
        root = snapshot["state"]
        assert root["agents"] == []
        assert root["activeSessions"] == 0
        assert {"clientQueueBytes", "replayBytes"} <= set(root["config"]["schema"]["properties"])
        assert root["_meta"]["ahp.plugins"] == ["core"]
        engine = running.host.engine_or_fail
        (connected,) = engine.clients
        assert list(connected.subscriptions) == [ROOT]


async def test_initialize_negotiation_over_the_wire(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        frame = await client.request_frame(
            "initialize", {"channel": ROOT, "protocolVersions": ["3.0.0"], "clientId": "x"}
        )
        assert frame["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
        assert frame["error"]["data"] == {"supportedVersions": ["1.0.0", "0.10.0", "0.9.0"]}
        frame = await client.request_frame(
            "initialize", {"channel": ROOT, "protocolVersions": ["1.0"], "clientId": "x"}
        )
        assert frame["error"]["code"] == INVALID_PARAMS
        assert "'1.0'" in frame["error"]["message"]
        result = await client.initialize(versions=["0.9.0", "0.10.0"])
        assert result["protocolVersion"] == "0.10.0"


async def test_initialize_ignores_a_wrong_channel_constant(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        result = await client.request(
            "initialize",
            {"channel": "ahp-root:/", "protocolVersions": ["1.0.0"], "clientId": "c"},
        )
        assert result["protocolVersion"] == "1.0.0"


async def test_unknown_method_is_method_not_found(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize()
        frame = await client.request_frame("frobnicate", {})
        assert frame["error"]["code"] == METHOD_NOT_FOUND
        assert "frobnicate" in frame["error"]["message"]


async def test_a_port_backed_command_names_the_missing_port(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize()
        frame = await client.request_frame(
            "createTerminal", {"channel": "ahp-terminal:/t1", "claim": {"kind": "client"}}
        )
        assert frame["error"]["code"] == METHOD_NOT_FOUND
        assert "terminals port" in frame["error"]["message"]


async def test_a_literal_channel_names_the_right_one(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize()
        frame = await client.request_frame("listSessions", {"channel": "ahp-session:/x"})
        assert frame["error"]["code"] == INVALID_PARAMS
        assert "'ahp-root://'" in frame["error"]["message"]
        # Naming no channel names nothing wrong.
        assert await client.request("listSessions", {}) == {"items": []}


async def test_invalid_params_name_the_field(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        frame = await client.request_frame(
            "initialize", {"channel": ROOT, "protocolVersions": ["1.0.0"]}
        )
        assert frame["error"]["code"] == INVALID_PARAMS
        assert "clientId" in frame["error"]["message"]
        await client.initialize()
        frame = await client.request_frame("subscribe", {"channel": 42})
        assert frame["error"]["code"] == INVALID_PARAMS
        assert "params.channel" in frame["error"]["message"]
        frame = await client.request_frame("listSessions", {"limit": "ten"})
        assert "params.limit" in frame["error"]["message"]


async def test_malformed_json_is_a_parse_error(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.send_raw('{"jsonrpc": "2.0", "id": 1, "method": "ping"')
        frame = await client.recv()
        assert frame["error"]["code"] == PARSE_ERROR
        assert frame["id"] is None
        await client.sync()  # the connection is still served


async def test_subscribe_answers_a_snapshot_and_unknown_channels_are_not_found(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize(subscriptions=[])
        result = await client.request("subscribe", {"channel": ROOT})
        assert result["snapshot"]["resource"] == ROOT
        assert result["snapshot"]["fromSeq"] == running.host.engine_or_fail.server_seq
        frame = await client.request_frame("subscribe", {"channel": "ahp-session:/nobody"})
        assert frame["error"]["code"] == NOT_FOUND
        assert "ahp-session:/nobody" in frame["error"]["message"]


async def test_subscribing_twice_is_answered_twice_even_in_flight(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize(subscriptions=[])
        for ident in (101, 102):  # both sent before either is answered
            await client.send(
                {"jsonrpc": "2.0", "id": ident, "method": "subscribe", "params": {"channel": ROOT}}
            )
        answers = [await client.recv_until(lambda f, i=i: f.get("id") == i) for i in (101, 102)]
        assert all(a["result"]["snapshot"]["resource"] == ROOT for a in answers)
        # Watching twice does not deliver twice.
        seq = await client.dispatch(
            ROOT, {"type": "root/configChanged", "config": {"replayBytes": 2 << 20}}
        )
        await client.answer_to(seq)
        await client.sync()
        assert len(client.actions_for(ROOT)) == 1


async def test_a_snapshot_and_the_actions_after_it_agree(ahp_host):
    """Actions pushed while a client subscribes land on top of its snapshot."""
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        client = await running.connect()
        await client.initialize(subscriptions=[])

        async def churn() -> None:
            for count in range(1, 200):
                engine.apply(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": count})
                await anyio.sleep(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(churn)
            await client.request("subscribe", {"channel": ROOT})
        from_seq = client.snapshots[ROOT][0]
        await client.assert_replay_agrees([ROOT])
        seqs = [a["serverSeq"] for a in client.actions_for(ROOT)]
        # Every action after the snapshot arrives once, in order, numbered after it.
        assert seqs == list(range(from_seq + 1, from_seq + 1 + len(seqs)))


async def test_unsubscribe_is_per_connection(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        first = await running.connect()
        second = await running.connect()
        await first.initialize()
        await second.initialize()
        await first.notify("unsubscribe", {"channel": ROOT})
        await first.sync()
        engine.apply(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 5})
        envelope = await second.recv_until(lambda f: f.get("method") == "action")
        assert envelope["params"]["action"]["activeSessions"] == 5
        await first.sync()
        assert first.actions_for(ROOT) == []
        await second.assert_replay_agrees()


async def test_server_seq_moves_with_state_not_messages(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        client = await running.connect()
        await client.initialize()
        start = engine.server_seq
        await client.sync()
        await client.request("listSessions")
        assert engine.server_seq == start
        assert (
            engine.apply(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 0}) is None
        )
        assert engine.server_seq == start  # nothing changed, nothing numbered
        engine.apply(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 1})
        assert engine.server_seq == start + 1
        envelope = await client.recv_until(lambda f: f.get("method") == "action")
        assert envelope["params"]["serverSeq"] == start + 1
