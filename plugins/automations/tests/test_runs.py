"""Runs over a real host and WebSocket: by hand, by event, cancelled, across a restart."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from automations_harness import (
    ANSWER,
    CATALOGUE,
    agent_text,
    create,
    definition,
    entry_of,
    host,
    run_ends,
    run_state,
    schedule,
    until,
)

from ahpcore.api import file_uri
from ahpcore.hookspecs import hookimpl
from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio


async def connected(running: Any) -> AhpTestClient:
    client: AhpTestClient = await running.connect()
    await client.initialize(subscriptions=["ahp-root://", CATALOGUE])
    return client


async def run_now(client: AhpTestClient, automation: str, request: str | None = None) -> str:
    result = await client.request(
        "runAutomation",
        {
            "channel": CATALOGUE,
            "automation": automation,
            "requestId": request or str(uuid.uuid4()),
        },
    )
    uri: str = result["resource"]
    return uri


async def test_a_run_by_hand_is_idempotent_and_reads_the_agents_answer(tmp_path: Path) -> None:
    async with host(tmp_path / "state") as (running, _, _):
        client = await connected(running)
        await create(client, definition(), "ahp-automation:/manual")
        first = await run_now(client, "ahp-automation:/manual", "press-1")
        assert await run_now(client, "ahp-automation:/manual", "press-1") == first
        run = await run_ends(client, first)
        assert run["lifecycle"]["status"] == "completed"
        assert run["origin"] == {"kind": "manual"}
        assert await agent_text(client, run["primarySession"]) == ANSWER
        entry = await entry_of(client, "ahp-automation:/manual")
        assert [r["resource"] for r in entry["runs"]] == [first]
        assert "runCount" not in entry
        await client.assert_replay_agrees()


async def test_refusals_name_the_field_and_keep_nothing(tmp_path: Path) -> None:
    async with host(tmp_path / "state") as (running, _, _):
        client = await connected(running)
        cases = [
            (definition(session={"provider": "nobody"}), "definition.session.provider"),
            (
                definition(triggers=[schedule("0 9 * * *"), schedule("0 9 * * *")]),
                "definition.triggers[1].id",
            ),
            (
                definition(triggers=[schedule("@daily")]),
                "definition.triggers[0].schedule.expression",
            ),
            (
                definition(triggers=[schedule("0 9 * * *", "Not/AZone")]),
                "definition.triggers[0].schedule.timeZone",
            ),
            (definition(disableConditions=[{"kind": "afterRuns", "max": 0}]), "disableConditions"),
        ]
        for body, field in cases:
            answer = await create(client, body, "ahp-automation:/refused")
            assert field in answer.get("rejectionReason", ""), (field, answer)
        snapshot = await client.request("subscribe", {"channel": "ahp-automations://catalog"})
        assert snapshot["snapshot"]["resource"] == "ahp-automations://catalog"
        assert snapshot["snapshot"]["state"]["entries"] == []


async def test_a_run_in_the_middle_of_its_turn_fails_when_the_host_stops(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with host(state) as (running, _, _):
        client = await connected(running)
        await create(
            client,
            definition(message={"text": "hold on", "origin": {"kind": "automation"}}),
            "ahp-automation:/held",
        )
        uri = await run_now(client, "ahp-automation:/held")

        async def under_way() -> bool:
            return (await run_state(client, uri))["lifecycle"]["status"] == "running"

        await until(under_way)
    async with host(state) as (running, _, _):
        client = await connected(running)
        entry = await entry_of(client, "ahp-automation:/held")
        assert entry["definition"]["message"]["text"] == "hold on"
        (summary,) = entry["runs"]
        lifecycle = summary["lifecycle"]
        assert lifecycle["status"] == "failed"
        assert lifecycle["error"] == {"errorType": "HostStopped", "message": "host stopped"}
        assert "startedAt" in lifecycle
        run = await run_state(client, uri)
        assert run["lifecycle"] == lifecycle
        # Its session is still there to read.
        session = run["primarySession"]
        snapshot = await client.request("subscribe", {"channel": session})
        assert snapshot["snapshot"]["state"]["origin"]["run"] == uri


async def test_cancelling_a_run_cancels_its_turn(tmp_path: Path) -> None:
    async with host(tmp_path / "state") as (running, _, scripted):
        assert scripted is not None and scripted.backend is not None
        client = await connected(running)
        await create(
            client,
            definition(message={"text": "hold it", "origin": {"kind": "automation"}}),
            "ahp-automation:/c",
        )
        uri = await run_now(client, "ahp-automation:/c")
        with anyio.fail_after(10):
            await scripted.backend.reached("hold")
        await client.request("subscribe", {"channel": uri})
        seq = await client.dispatch(uri, {"type": "automationRun/cancelRequested"})
        assert "rejectionReason" not in await client.answer_to(seq)
        run = await run_ends(client, uri)
        assert run["lifecycle"]["status"] == "cancelled"
        session = await client.request("subscribe", {"channel": run["primarySession"]})
        chat = session["snapshot"]["state"]["defaultChat"]
        turns = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]["turns"]
        assert turns[-1]["state"] == "cancelled"
        again = await client.dispatch(uri, {"type": "automationRun/cancelRequested"})
        assert "cancelled" in (await client.answer_to(again))["rejectionReason"]
        await client.assert_replay_agrees()


async def test_an_automation_whose_provider_is_gone_fails_its_run(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with host(state) as (running, _, _):
        client = await connected(running)
        await create(client, definition(), "ahp-automation:/old")
    async with host(state, provider="other") as (running, _, _):
        client = await connected(running)
        uri = await run_now(client, "ahp-automation:/old")
        run = await run_ends(client, uri)
        assert run["lifecycle"]["status"] == "failed"
        assert run["lifecycle"]["error"]["errorType"] == "SessionCreationFailed"
        assert "scripted" in run["lifecycle"]["error"]["message"]
        # The session it could not make is there to open, saying why.
        assert run["primarySession"] in run["sessions"]
        failed = await client.request("subscribe", {"channel": run["primarySession"]})
        session = failed["snapshot"]["state"]
        assert session["lifecycle"] == "failed"
        assert session["creationError"] == run["lifecycle"]["error"]
        assert session["origin"] == {
            "kind": "automation",
            "automation": "ahp-automation:/old",
            "run": uri,
        }
        # It can still be switched off or pointed at a provider that is here.
        seq = await client.dispatch(
            CATALOGUE,
            {
                "type": "automation/updateRequested",
                "resource": "ahp-automation:/old",
                "changes": {"session": {"provider": "other"}},
            },
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        fixed = await run_ends(client, await run_now(client, "ahp-automation:/old"))
        assert fixed["lifecycle"]["status"] == "completed"


class Pings:
    """A plugin offering an event trigger of its own, fired by the test."""

    host: Any = None

    @hookimpl
    def ahp_root_config(self, host: Any) -> None:
        self.host = host

    @hookimpl
    def ahp_automation_triggers(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"type": "test.pings", "title": "Pings", "events": [{"id": "ping", "title": "A ping"}]}
        ]


async def test_event_triggers_make_a_run_each(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    pings = Pings()
    async with host(tmp_path / "state", extra=(("pings", pings),)) as (running, _, _):
        client = await connected(running)
        offered = await client.request(
            "listAutomationTriggerDefinitions", {"channel": "ahp-root://"}
        )
        assert sorted(item["type"] for item in offered["items"]) == ["ahp.sessions", "test.pings"]
        triggers = [
            {
                "id": "turns",
                "kind": "event",
                "type": "ahp.sessions",
                "title": "?",
                "events": [{"id": "turnFinished", "title": "?"}],
            },
            {
                "id": "pings",
                "kind": "event",
                "type": "test.pings",
                "title": "?",
                "events": [{"id": "ping", "title": "?"}],
            },
        ]
        body = definition(
            session={"provider": "scripted", "workingDirectories": [file_uri(str(folder))]},
            triggers=triggers,
        )
        await create(client, body, "ahp-automation:/events")
        entry = await entry_of(client, "ahp-automation:/events")
        # The host's own words for the triggers, not the client's.
        assert [t["title"] for t in entry["definition"]["triggers"]] == [
            "Sessions in this folder",
            "Pings",
        ]

        pings.host.automation_event("test.pings", "ping", details={"count": 1})
        # A person's session in the folder finishes a turn.
        session = f"scripted:/{uuid.uuid4()}"
        await client.request(
            "createSession",
            {
                "channel": session,
                "provider": "scripted",
                "workingDirectories": [file_uri(str(folder))],
            },
        )
        snapshot = await client.request("subscribe", {"channel": session})
        chat = snapshot["snapshot"]["state"]["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        await client.dispatch(
            chat,
            {
                "type": "chat/turnStarted",
                "turnId": str(uuid.uuid4()),
                "startedAt": "2026-03-02T09:00:00.000Z",
                "message": {"text": "hello", "origin": {"kind": "user"}},
            },
        )

        async def two_done() -> list[dict[str, Any]] | None:
            runs = (await entry_of(client, "ahp-automation:/events"))["runs"]
            done = [r for r in runs if r["lifecycle"]["status"] == "completed"]
            return runs if len(done) == 2 else None

        runs = await until(two_done)
        origins = sorted((r["origin"]["triggerId"], r["origin"]["event"]) for r in runs)
        assert origins == [
            ("pings", {"type": "test.pings", "id": "ping", "count": 1}),
            ("turns", {"type": "ahp.sessions", "id": "turnFinished", "session": session}),
        ]
        # The runs' own sessions finished turns in the same folder: they make no further runs.
        await anyio.sleep(0.3)
        assert len((await entry_of(client, "ahp-automation:/events"))["runs"]) == 2


async def test_older_runs_come_a_page_at_a_time(tmp_path: Path) -> None:
    async with host(tmp_path / "state", history=1) as (running, _, _):
        client = await connected(running)
        await create(client, definition(), "ahp-automation:/paged")
        made = []
        for _ in range(3):
            uri = await run_now(client, "ahp-automation:/paged")
            await run_ends(client, uri)
            made.append(uri)
        entry = await entry_of(client, "ahp-automation:/paged")
        assert [r["resource"] for r in entry["runs"]] == [made[2]]
        cursor = entry["runsNextCursor"]
        refused = await client.request_frame(
            "fetchAutomationRuns",
            {"channel": CATALOGUE, "automation": "ahp-automation:/paged", "cursor": "elsewhere"},
        )
        assert refused["error"]["code"] == -32602
        assert (
            await client.request(
                "fetchAutomationRuns",
                {"channel": CATALOGUE, "automation": "ahp-automation:/paged", "cursor": cursor},
            )
            == {}
        )
        entry = await entry_of(client, "ahp-automation:/paged")
        assert [r["resource"] for r in entry["runs"]] == [made[2], made[1]]
        # Removing it takes it and its runs away, for every client.
        seq = await client.dispatch(
            CATALOGUE, {"type": "automation/removed", "resource": "ahp-automation:/paged"}
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        snapshot = await client.request("subscribe", {"channel": CATALOGUE})
        assert snapshot["snapshot"]["state"]["entries"] == []
        await client.assert_replay_agrees()
