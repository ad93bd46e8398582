"""dispatchAction: refusals, no-ops and real changes, and the root channel's rules."""

from __future__ import annotations

from typing import Any

import pytest

from ahpcore.hookspecs import hookimpl
from ahpcore.rpc.framing import dumps
from tests.engine.support import add_chat

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"
MIB = 1 << 20


async def pair(running) -> tuple[Any, Any]:
    sender = await running.connect("sender")
    watcher = await running.connect("watcher")
    await sender.initialize()
    await watcher.initialize()
    return sender, watcher


async def test_a_real_change_reaches_every_subscriber_with_origin(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        sender, watcher = await pair(running)
        seq = await sender.dispatch(
            ROOT, {"type": "root/configChanged", "config": {"replayBytes": 2 * MIB}}
        )
        mine = await sender.answer_to(seq)
        theirs = (await watcher.recv_until(lambda f: f.get("method") == "action"))["params"]
        assert mine == theirs
        assert theirs["origin"] == {"clientId": "sender", "clientSeq": seq}
        assert "rejectionReason" not in theirs
        assert running.host.engine_or_fail.root.state["config"]["values"]["replayBytes"] == 2 * MIB
        assert len(running.host.engine_or_fail.replay) == 1
        await sender.assert_replay_agrees()
        await watcher.assert_replay_agrees()


async def test_a_host_only_action_is_refused_to_the_sender_alone(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        sender, watcher = await pair(running)
        before = engine.server_seq
        seq = await sender.dispatch(
            ROOT, {"type": "root/activeSessionsChanged", "activeSessions": 9}
        )
        refusal = await sender.answer_to(seq)
        assert "cannot claim it happened" in refusal["rejectionReason"]
        assert refusal["serverSeq"] == before  # moves nothing
        assert engine.server_seq == before and len(engine.replay) == 0  # not buffered
        assert engine.root.state["activeSessions"] == 0
        await watcher.sync()
        assert [f for f in watcher.frames if f.get("method") == "action"] == []


async def test_an_action_that_changes_nothing_is_answered_to_its_sender_only(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        sender, watcher = await pair(running)
        change = {"type": "root/configChanged", "config": {"replayBytes": 3 * MIB}}
        await sender.answer_to(await sender.dispatch(ROOT, change))
        await watcher.recv_until(lambda f: f.get("method") == "action")
        at = engine.server_seq
        seq = await sender.dispatch(ROOT, change)
        echo = await sender.answer_to(seq)
        assert echo == {
            "channel": ROOT,
            "action": change,
            "serverSeq": at,
            "origin": {"clientId": "sender", "clientSeq": seq},
        }
        assert engine.server_seq == at and len(engine.replay) == 1
        await watcher.sync()
        assert len([f for f in watcher.frames if f.get("method") == "action"]) == 1
        await sender.assert_replay_agrees()


@pytest.mark.parametrize(
    ("action", "words"),
    [
        ({"type": "root/nonsense"}, "unknown action type"),
        ({"type": "root/configChanged"}, "config"),  # missing a required field
        ({"type": "root/configChanged", "config": {"bogusKey": 1}}, "no config key named bogusKey"),
        ({"type": "root/configChanged", "config": {"clientQueueBytes": 1024}}, "at least 1048576"),
        ({"type": "root/configChanged", "config": {"replayBytes": "big"}}, "replayBytes must be"),
        ({"type": "chat/isReadChanged", "isRead": True}, "ahp-root:// is a root channel"),
    ],
)
async def test_refusals_say_what_was_wrong(ahp_host, action, words):
    async with ahp_host(no_plugins=True) as running:
        sender, _ = await pair(running)
        seq = await sender.dispatch(ROOT, action)
        refusal = await sender.answer_to(seq)
        assert words in refusal["rejectionReason"], refusal
        assert running.host.engine_or_fail.root.state["config"]["values"] == {}


async def test_dispatch_to_a_channel_that_does_not_exist_is_refused(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        sender, _ = await pair(running)
        seq = await sender.dispatch(
            "ahp-chat:/gone", {"type": "chat/isReadChanged", "isRead": True}
        )
        refusal = await sender.answer_to(seq)
        assert "no channel ahp-chat:/gone" in refusal["rejectionReason"]


async def test_unknown_config_keys_are_refused_by_name_and_the_rest_applied(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        sender, watcher = await pair(running)
        seq = await sender.dispatch(
            ROOT, {"type": "root/configChanged", "config": {"replayBytes": 4 * MIB, "madeUp": True}}
        )
        frames = [await sender.answer_to(seq), await sender.answer_to(seq)]
        refusal = next(f for f in frames if "rejectionReason" in f)
        applied = next(f for f in frames if "rejectionReason" not in f)
        assert "madeUp" in refusal["rejectionReason"]
        assert refusal["action"]["config"] == {"madeUp": True}
        assert applied["action"]["config"] == {"replayBytes": 4 * MIB}
        seen = (await watcher.recv_until(lambda f: f.get("method") == "action"))["params"]
        assert seen == applied
        assert running.host.engine_or_fail.root.state["config"]["values"] == {
            "replayBytes": 4 * MIB
        }
        await watcher.assert_replay_agrees()


async def test_pushed_budgets_apply_where_they_are_read(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        sender, _ = await pair(running)
        seq = await sender.dispatch(
            ROOT,
            {"type": "root/configChanged", "config": {"clientQueueBytes": MIB, "replayBytes": MIB}},
        )
        await sender.answer_to(seq)
        host = running.host
        assert host.client_queue_bytes() == MIB
        assert host.engine_or_fail.replay.max_bytes() == MIB


async def test_dispatch_before_initialize_is_refused(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.notify(
            "dispatchAction",
            {
                "channel": ROOT,
                "clientSeq": 1,
                "action": {"type": "root/configChanged", "config": {}},
            },
        )
        frame = await client.recv_until(lambda f: f.get("method") == "action")
        assert "initialize" in frame["params"]["rejectionReason"]


async def test_actions_on_other_channel_kinds_follow_the_same_rules(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        chat = "ahp-chat:/c1"
        add_chat(engine, chat, "first")
        sender, watcher = await pair(running)
        await watcher.request("subscribe", {"channel": chat})
        await sender.request("subscribe", {"channel": chat})
        seq = await sender.dispatch(chat, {"type": "chat/isReadChanged", "isRead": True})
        assert (await sender.answer_to(seq))["action"]["isRead"] is True
        seen = (await watcher.recv_until(lambda f: f.get("method") == "action"))["params"]
        assert seen["origin"]["clientSeq"] == seq
        seq = await sender.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": "none", "duration": 0}
        )
        echo = await sender.answer_to(seq)  # cancelling a turn that is not running changes nothing
        assert "rejectionReason" not in echo and echo["serverSeq"] == engine.server_seq
        await watcher.sync()
        assert len(watcher.actions_for(chat)) == 1
        await watcher.assert_replay_agrees([chat])


class Announcer:
    """Stands in for the sessions layer: it makes the host's engine notify (the test
    hands it the engine, which no plugin reaches)."""

    engine: Any = None

    @hookimpl
    def ahp_rpc_methods(self, host, register):
        def announce(client, params):
            summary = {
                "resource": "scripted:/s1",
                "provider": "scripted",
                "title": "hello",
                "status": 1,
                "createdAt": "2026-01-01T00:00:00Z",
                "modifiedAt": "2026-01-01T00:00:00Z",
            }
            self.engine.notify_root("root/sessionAdded", {"summary": summary})
            return {}

        def work(client, params):
            for step in (1, 2):
                self.engine.progress(client, params["progressToken"], step, 2)
            return {}

        register("test/announce", announce)
        register("test/work", work)


async def test_root_notifications_reach_root_watchers_only(ahp_host):
    announcer = Announcer()
    async with ahp_host(plugins=[("announcer", announcer)]) as running:
        announcer.engine = running.host.engine_or_fail
        watching = await running.connect()
        elsewhere = await running.connect()
        await watching.initialize()
        await elsewhere.initialize(subscriptions=[])
        await elsewhere.request("test/announce")
        note = await watching.recv_until(lambda f: f.get("method") == "root/sessionAdded")
        assert note["params"]["channel"] == ROOT
        assert "serverSeq" not in note["params"]
        await elsewhere.sync()
        assert not [f for f in elsewhere.frames if f.get("method") == "root/sessionAdded"]


async def test_progress_goes_only_to_the_client_that_asked(ahp_host):
    announcer = Announcer()
    async with ahp_host(plugins=[("announcer", announcer)]) as running:
        announcer.engine = running.host.engine_or_fail
        asking = await running.connect()
        other = await running.connect()
        await asking.initialize()
        await other.initialize()
        await asking.request("test/work", {"progressToken": "tok-1"})
        progress = [f["params"] for f in asking.frames if f.get("method") == "root/progress"]
        assert progress == [
            {"channel": ROOT, "progressToken": "tok-1", "progress": 1, "total": 2},
            {"channel": ROOT, "progressToken": "tok-1", "progress": 2, "total": 2},
        ]
        await other.sync()
        assert not [f for f in other.frames if f.get("method") == "root/progress"]


def test_envelope_frames_are_compact_json():
    assert dumps({"a": [1, 2]}) == '{"a":[1,2]}'


async def test_a_handler_that_fails_still_answers_the_sender(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        chat = "ahp-chat:/c1"
        add_chat(engine, chat, "t")

        async def broken(dispatch):
            raise RuntimeError("something inside broke")

        engine.on_action("chat/isReadChanged", broken)
        sender, watcher = await pair(running)
        await watcher.request("subscribe", {"channel": chat})
        seq = await sender.dispatch(chat, {"type": "chat/isReadChanged", "isRead": True})
        refusal = await sender.answer_to(seq)
        assert "something inside broke" in refusal["rejectionReason"]
        await watcher.sync()
        assert watcher.actions_for(chat) == []


async def test_a_sender_not_watching_gets_the_frame_the_watchers_got(ahp_host):
    # The sender's answer reuses the frame already encoded for the watchers; it
    # must be that very envelope, under the sender's own spelling when it differs.
    async with ahp_host(no_plugins=True) as running:
        engine = running.host.engine_or_fail
        chat = "ahp-chat:/c1"
        add_chat(engine, chat, "first")
        sender, watcher = await pair(running)
        await watcher.request("subscribe", {"channel": chat})
        seq = await sender.dispatch(chat, {"type": "chat/isReadChanged", "isRead": True})
        mine = await sender.answer_to(seq)
        theirs = (await watcher.recv_until(lambda f: f.get("method") == "action"))["params"]
        assert mine == theirs and mine["serverSeq"] == engine.server_seq
        assert mine["origin"] == {"clientId": "sender", "clientSeq": seq}
        await watcher.assert_replay_agrees([chat])
