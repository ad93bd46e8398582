"""A schedule fires with nobody connected; a client then reads the run and the agent's answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from automations_harness import (
    ANSWER,
    CATALOGUE,
    ManualClock,
    agent_text,
    create,
    definition,
    entry_of,
    host,
    run_ends,
    schedule,
    until,
)

pytestmark = pytest.mark.anyio

MONDAY_EARLY = datetime(2026, 3, 2, 8, 59, 30, tzinfo=UTC)


async def test_a_schedule_fires_with_nobody_connected(tmp_path: Path) -> None:
    clock = ManualClock(MONDAY_EARLY)
    async with host(tmp_path / "state", clock=clock) as (running, _, _):
        client = await running.connect()
        result = await client.initialize(subscriptions=["ahp-root://", CATALOGUE])
        assert result["automations"] == {
            "create": {},
            "runCancellation": {},
            "schedules": {"minIntervalMinutes": 1},
            "runHistoryLimit": 20,
        }
        answer = await create(
            client, definition(triggers=[schedule("0 9 * * 1-5", "UTC")]), "ahp-automation:/daily"
        )
        assert "rejectionReason" not in answer
        entry = await entry_of(client, "ahp-automation:/daily")
        assert entry["nextRunAt"] == "2026-03-02T09:00:00.000Z"
        assert entry["runs"] == []
        await client.assert_replay_agrees()
        await client.close()

        # Nobody is connected when nine o'clock comes.
        clock.advance(timedelta(seconds=45))
        port = running.host.automations
        assert port is not None

        def fired() -> bool:
            entries = running.host.engine_or_fail.channels[CATALOGUE].state["entries"]
            runs = entries[0]["runs"]
            return bool(runs) and runs[0]["lifecycle"]["status"] == "completed"

        await until(fired)

        later = await running.connect()
        await later.initialize()
        entry = await entry_of(later, "ahp-automation:/daily")
        assert entry["nextRunAt"] == "2026-03-03T09:00:00.000Z"
        (summary,) = entry["runs"]
        assert summary["origin"] == {
            "kind": "trigger",
            "triggerId": "s",
            "scheduledFor": "2026-03-02T09:00:00.000Z",
        }
        assert summary["sessionCount"] == 1
        run = await run_ends(later, summary["resource"])
        assert run["lifecycle"]["status"] == "completed"
        session = run["primarySession"]
        assert run["sessions"] == [session]
        state = (await later.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state["origin"] == {
            "kind": "automation",
            "automation": "ahp-automation:/daily",
            "run": summary["resource"],
        }
        assert await agent_text(later, session) == ANSWER
        chat = (await later.request("subscribe", {"channel": state["defaultChat"]}))["snapshot"]
        (turn,) = chat["state"]["turns"]
        assert turn["message"]["origin"] == {"kind": "automation"}
        assert turn["message"]["text"] == "Review yesterday's commits"
        listed = await later.request("listSessions", {})
        assert [row["origin"] for row in listed["items"]] == [state["origin"]]
