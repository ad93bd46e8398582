"""reconnect: replay from the buffer, snapshots past it, and channels that are gone."""

from __future__ import annotations

import pytest

from tests.engine.support import add_chat

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"


def bump(engine, count: int) -> None:
    engine.apply(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": count})


async def test_reconnect_replays_what_was_missed(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        chat = "ahp-chat:/c1"
        add_chat(engine, chat, "t")
        first = await running.connect("returning")
        result = await first.initialize(subscriptions=[ROOT, chat])
        last_seen = result["serverSeq"]
        root_snapshot = result["snapshots"][0]["state"]
        await first.close()
        for count in (1, 2, 3):
            bump(engine, count)
        engine.remove_channel(chat)

        again = await running.connect("returning")
        answer = await again.request(
            "reconnect",
            {
                "channel": ROOT,
                "clientId": "returning",
                "lastSeenServerSeq": last_seen,
                "subscriptions": [ROOT, chat],
            },
        )
        assert answer["type"] == "replay"
        assert answer["missing"] == [chat]
        seqs = [envelope["serverSeq"] for envelope in answer["actions"]]
        assert seqs == [last_seen + 1, last_seen + 2, last_seen + 3]
        state = root_snapshot
        from ahpcore import reducers

        for envelope in answer["actions"]:
            state = reducers.reduce("root", state, envelope["action"])
        fresh = await again.request("subscribe", {"channel": ROOT})
        assert fresh["snapshot"]["state"] == state
        # And it is watching again.
        bump(engine, 4)
        live = await again.recv_until(lambda f: f.get("method") == "action")
        assert live["params"]["serverSeq"] == last_seen + 4


async def test_a_gap_longer_than_the_buffer_is_answered_with_snapshots(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        engine.replay.max_count = 2
        client = await running.connect("late")
        last_seen = (await client.initialize())["serverSeq"]
        await client.close()
        for count in range(1, 6):
            bump(engine, count)
        again = await running.connect("late")
        answer = await again.request(
            "reconnect",
            {
                "channel": ROOT,
                "clientId": "late",
                "lastSeenServerSeq": last_seen,
                "subscriptions": [ROOT, "ahp-chat:/never"],
            },
        )
        assert answer["type"] == "snapshot"
        (snapshot,) = answer["snapshots"]
        assert snapshot["resource"] == ROOT
        assert snapshot["state"]["activeSessions"] == 5
        assert snapshot["fromSeq"] == engine.server_seq
        await again.assert_replay_agrees()


async def test_a_sequence_from_another_run_of_the_host_gets_snapshots(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        client = await running.connect("from-before")
        answer = await client.request(
            "reconnect",
            {
                "channel": ROOT,
                "clientId": "from-before",
                "lastSeenServerSeq": engine.server_seq + 1000,
                "subscriptions": [ROOT],
            },
        )
        assert answer["type"] == "snapshot"


async def test_reconnect_at_the_current_sequence_replays_nothing(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        client = await running.connect("steady")
        answer = await client.request(
            "reconnect",
            {
                "channel": ROOT,
                "clientId": "steady",
                "lastSeenServerSeq": engine.server_seq,
                "subscriptions": [ROOT],
            },
        )
        assert answer == {"type": "replay", "actions": [], "missing": []}
        # Refusals and no-op echoes were never buffered, so nothing to replay either.
        seq = await client.dispatch(
            ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 1}
        )
        await client.answer_to(seq)
        assert len(engine.replay) == 0
