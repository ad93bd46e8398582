"""Every session's ``<uri>/annotations`` channel, over real sockets with the scripted backend:
opened on demand, checked, kept in the store before it is echoed, counted on the session
and its row, back after a restart, gone with the session."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from ahp_scripted import ScriptedBackend
from ahpcore import reducers
from ahpcore.host import HostSettings
from ahpcore.store import FileSessionStore
from ahpcore.testing import AhpTestClient, running_host
from tests.reliability.faults import FaultyBackend, FaultyConnection, Plan
from tests.reliability.test_durability import Wire, kill_hard
from tests.reliability.test_fault_injection import FaultyPlugin
from tests.sessions.conftest import SID, open_session, script, session_uri
from tests.test_cli import start_serve

pytestmark = pytest.mark.anyio


def entry(ident: str, text: str = "Why this?") -> dict[str, Any]:
    return {"id": ident, "text": text}


def annotation(session: str, ident: str, *entries: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": ident,
        "origin": {"session": session},
        "resource": "file:///work/app.py",
        "resolved": False,
        "entries": list(entries),
        **extra,
    }


async def answered(client: AhpTestClient, channel: str, action: dict[str, Any]) -> dict[str, Any]:
    return await client.answer_to(await client.dispatch(channel, action))


async def accepted(client: AhpTestClient, channel: str, action: dict[str, Any]) -> None:
    answer = await answered(client, channel, action)
    assert "rejectionReason" not in answer, answer


async def refused(client: AhpTestClient, channel: str, action: dict[str, Any]) -> str:
    answer = await answered(client, channel, action)
    assert "rejectionReason" in answer, answer
    return str(answer["rejectionReason"])


def counts(summary: dict[str, Any]) -> tuple[int, int]:
    return summary["annotationCount"], summary["entryCount"]


async def row_of(client: AhpTestClient, session: str) -> dict[str, Any]:
    rows = (await client.request("listSessions", {}))["items"]
    [row] = [r for r in rows if r["resource"] == session]
    return row


async def session_replay_agrees(client: AhpTestClient, session: str) -> dict[str, Any]:
    """The session's actions replayed onto its snapshot agree with a fresh one, but for
    ``annotations``: no session action carries it, so only a snapshot says it. Returns the
    fresh state. The session is then left, so the host's closing check does not ask again."""
    await client.sync()
    from_seq, state = client.snapshots[session]
    fresh = (await client.request("subscribe", {"channel": session}))["snapshot"]
    for envelope in client.actions_for(session):
        if from_seq < envelope["serverSeq"] <= fresh["fromSeq"]:
            state = reducers.reduce("session", copy.deepcopy(state), envelope["action"])
    without = {k: v for k, v in fresh["state"].items() if k != "annotations"}
    assert without == {k: v for k, v in state.items() if k != "annotations"}
    await client.notify("unsubscribe", {"channel": session})
    return dict(fresh["state"])


async def test_the_channel_opens_empty_and_every_action_is_kept_counted_and_checked(
    session_host,
):
    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, _chat = await open_session(client)
        channel = f"{session}/annotations"
        state = client.snapshots[session][1]
        assert state["annotations"] == {
            "resource": channel,
            "annotationCount": 0,
            "entryCount": 0,
        }
        assert (await row_of(client, session))["annotations"] == state["annotations"]

        snapshot = (await client.request("subscribe", {"channel": channel}))["snapshot"]
        assert snapshot["state"] == {"annotations": []}

        await accepted(
            client,
            channel,
            {
                "type": "annotations/set",
                "annotation": annotation(
                    session,
                    "a1",
                    entry("e1"),
                    range={
                        "start": {"line": 1, "character": 0},
                        "end": {"line": 2, "character": 0},
                    },
                ),
            },
        )
        changed = await client.recv_until(
            lambda f: (
                f.get("method") == "root/sessionSummaryChanged"
                and "annotations" in f["params"]["changes"]
            )
        )
        assert counts(changed["params"]["changes"]["annotations"]) == (1, 1)
        await accepted(
            client,
            channel,
            {"type": "annotations/entrySet", "annotationId": "a1", "entry": entry("e2", "And?")},
        )
        await accepted(
            client, channel, {"type": "annotations/updated", "annotationId": "a1", "resolved": True}
        )
        await accepted(
            client,
            channel,
            {
                "type": "annotations/set",
                "annotation": annotation(session, "a2", entry("e1", {"markdown": "**No**"})),
            },
        )
        assert counts((await row_of(client, session))["annotations"]) == (2, 3)

        # What the protocol forbids, or what the reducer would quietly drop, is refused.
        reasons = [
            await refused(
                client,
                channel,
                {"type": "annotations/set", "annotation": annotation(session, "a3")},
            ),
            await refused(
                client,
                channel,
                {
                    "type": "annotations/set",
                    "annotation": annotation(session, "a3", entry("e1"), entry("e1")),
                },
            ),
            await refused(
                client,
                channel,
                {
                    "type": "annotations/set",
                    "annotation": annotation(session, "a3", entry("e1"), resolved=True),
                },
            ),
            await refused(
                client,
                channel,
                {
                    "type": "annotations/set",
                    "annotation": annotation(session_uri(9), "a3", entry("e1")),
                },
            ),
            await refused(client, channel, {"type": "annotations/updated", "annotationId": "nope"}),
            await refused(client, channel, {"type": "annotations/removed", "annotationId": "nope"}),
            await refused(
                client,
                channel,
                {"type": "annotations/entrySet", "annotationId": "nope", "entry": entry("e9")},
            ),
            await refused(
                client,
                channel,
                {"type": "annotations/entryRemoved", "annotationId": "a1", "entryId": "e9"},
            ),
            await refused(
                client,
                channel,
                {"type": "annotations/entryRemoved", "annotationId": "a2", "entryId": "e1"},
            ),
        ]
        assert "no entries" in reasons[0]
        assert "twice" in reasons[1]
        assert "starts unresolved" in reasons[2]
        assert SID.format(9) in reasons[3]
        assert all("no annotation nope" in r for r in reasons[4:7])
        assert "no entry e9" in reasons[7]
        assert "the last of annotation a2" in reasons[8]

        await accepted(
            client,
            channel,
            {"type": "annotations/entryRemoved", "annotationId": "a1", "entryId": "e1"},
        )
        await accepted(client, channel, {"type": "annotations/removed", "annotationId": "a2"})
        held = (await client.request("subscribe", {"channel": channel}))["snapshot"]["state"]
        [kept] = held["annotations"]
        assert kept["id"] == "a1" and kept["resolved"] is True
        assert [e["id"] for e in kept["entries"]] == ["e2"]
        assert counts((await row_of(client, session))["annotations"]) == (1, 1)

        await client.assert_replay_agrees([channel])
        fresh = await session_replay_agrees(client, session)
        assert counts(fresh["annotations"]) == (1, 1)


async def test_a_dispatcher_that_does_not_watch_is_answered_and_watchers_see_it(session_host):
    async with session_host() as (running, _):
        writer = await running.connect()
        await writer.initialize()
        session, _chat = await open_session(writer)
        await writer.notify("unsubscribe", {"channel": session})
        watcher = await running.connect()
        await watcher.initialize([])
        # Another spelling of the same session names the same channel, and a client that
        # spells the session so is told of its annotations in that spelling.
        alias = f"ahp-session:/{SID.format(1)}/annotations"
        spelled = (await watcher.request("subscribe", {"channel": alias.rpartition("/")[0]}))[
            "snapshot"
        ]["state"]
        assert spelled["annotations"]["resource"] == alias
        await watcher.notify("unsubscribe", {"channel": alias.rpartition("/")[0]})
        await watcher.request("subscribe", {"channel": alias})
        channel = f"{session}/annotations"
        await accepted(
            writer,
            channel,
            {"type": "annotations/set", "annotation": annotation(session, "a1", entry("e1"))},
        )
        seen = await watcher.recv_until(
            lambda f: f.get("method") == "action" and f["params"]["channel"] == alias
        )
        assert seen["params"]["action"]["type"] == "annotations/set"
        await watcher.assert_replay_agrees([alias])


async def test_annotations_survive_a_restart_and_go_with_their_session(session_host):
    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, _chat = await open_session(client)
        other, _ = await open_session(client, 2)
        for uri in (session, other):
            await accepted(
                client,
                f"{uri}/annotations",
                {
                    "type": "annotations/set",
                    "annotation": annotation(uri, "a1", entry("e1"), entry("e2")),
                },
            )
        for uri in (session, other):
            await client.notify("unsubscribe", {"channel": uri})
        await client.notify("unsubscribe", {"channel": f"{session}/annotations"})

    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        # Listed before anything reopens the session, with its counts.
        row = await row_of(client, session)
        assert counts(row["annotations"]) == (1, 2)
        assert row["annotations"]["resource"] == f"{session}/annotations"
        # Naming the channel rebuilds the session from its transcript and its record.
        alias = f"ahp-session:/{SID.format(1)}/annotations"
        state = (await client.request("subscribe", {"channel": alias}))["snapshot"]["state"]
        [kept] = state["annotations"]
        assert [e["id"] for e in kept["entries"]] == ["e1", "e2"]
        session_state = (await client.request("subscribe", {"channel": session}))["snapshot"][
            "state"
        ]
        assert counts(session_state["annotations"]) == (1, 2)
        await client.notify("unsubscribe", {"channel": session})

        await client.request("disposeSession", {"channel": session})
        gone = await client.request_frame("subscribe", {"channel": f"{session}/annotations"})
        assert "error" in gone
        await client.notify("unsubscribe", {"channel": alias})

    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        listed = [r["resource"] for r in (await client.request("listSessions", {}))["items"]]
        assert session not in listed
        gone = await client.request_frame("subscribe", {"channel": f"{session}/annotations"})
        assert "error" in gone
        # The other session keeps its own.
        state = (await client.request("subscribe", {"channel": f"{other}/annotations"}))[
            "snapshot"
        ]["state"]
        assert [a["id"] for a in state["annotations"]] == ["a1"]


async def test_an_annotation_the_store_could_not_write_is_refused_and_not_applied(tmp_path):
    FaultyConnection.plan = Plan()
    backend = FaultyBackend(ScriptedBackend(tmp_path / "scripted", script()), Plan())
    store = FileSessionStore(
        tmp_path / "state" / "sessions.sqlite3", retry_delays=(), factory=FaultyConnection
    )
    settings = HostSettings(port=0, state_dir=tmp_path / "state")
    async with running_host(
        [("faulty", FaultyPlugin(backend, store))], settings=settings
    ) as running:
        client = await running.connect()
        await client.initialize()
        session, _ = await open_session(client)
        channel = f"{session}/annotations"
        await client.request("subscribe", {"channel": channel})
        FaultyConnection.plan = Plan(point="store")
        reason = await refused(
            client,
            channel,
            {"type": "annotations/set", "annotation": annotation(session, "a1", entry("e1"))},
        )
        assert reason.startswith("the annotations were not saved") and "disk I/O" in reason
        state = (await client.request("subscribe", {"channel": channel}))["snapshot"]["state"]
        assert state == {"annotations": []}
        # The next one is written, and the store holds it.
        await accepted(
            client,
            channel,
            {"type": "annotations/set", "annotation": annotation(session, "a2", entry("e1"))},
        )
        record = await store.get(SID.format(1))
        assert [a["id"] for a in record["annotations"]] == ["a2"]
        await session_replay_agrees(client, session)


async def test_an_echoed_annotation_survives_kill_9(tmp_path: Path):
    session = "scripted:/00000000-0000-4000-8000-0000000000ab"
    channel = f"{session}/annotations"
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            await client.request("createSession", {"channel": session, "provider": "scripted"})
            action = {
                "type": "annotations/set",
                "annotation": annotation(session, "a1", entry("e1")),
            }
            await client.ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "dispatchAction",
                        "params": {"channel": channel, "clientSeq": 1, "action": action},
                    }
                )
            )
            echo = await client.until(
                lambda f: (
                    f.get("method") == "action"
                    and f["params"].get("origin", {}).get("clientSeq") == 1
                )
            )
            assert "rejectionReason" not in echo["params"]
            kill_hard(served)  # at once: nothing is written after the echo
    finally:
        served.process.kill()
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            state = (await client.request("subscribe", {"channel": channel}))["snapshot"]["state"]
            assert [a["id"] for a in state["annotations"]] == ["a1"]
    finally:
        served.process.terminate()
        served.process.wait(timeout=10)
