"""Schedule math and the scheduler, on a clock the test moves (the port alone, on real SQLite)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from automations_harness import definition, schedule

from ahp_automations import ManualClock, SqliteAutomations
from ahp_automations.cron import Schedule
from ahpcore.ports import AutomationContext

pytestmark = pytest.mark.anyio

CONTEXT = AutomationContext(providers=("scripted",))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_spring_forward_runs_the_skipped_time_when_the_clock_jumps() -> None:
    berlin = Schedule("30 2 * * *", "Europe/Berlin")
    # 2026-03-29: 02:00 becomes 03:00 in Berlin; 02:30 never happens, so it runs at 03:00.
    assert berlin.next_after(at("2026-03-28T12:00:00+00:00")) == at("2026-03-29T03:00:00+02:00")
    assert berlin.next_after(at("2026-03-29T01:00:00+00:00")) == at("2026-03-30T02:30:00+02:00")


def test_fall_back_runs_a_fixed_time_once_and_a_frequent_one_in_both_hours() -> None:
    daily = Schedule("30 2 * * *", "Europe/Berlin")
    # 2026-10-25: 03:00 becomes 02:00 again; 02:30 happens twice and the job runs once.
    first = daily.next_after(at("2026-10-24T12:00:00+00:00"))
    assert first == at("2026-10-25T02:30:00+02:00")
    assert daily.next_after(first) == at("2026-10-26T02:30:00+01:00")
    half_hourly = Schedule("*/30 * * * *", "Europe/Berlin")
    seen = []
    moment = at("2026-10-24T23:50:00+00:00")
    for _ in range(5):
        moment = half_hourly.next_after(moment)
        seen.append(moment)
    # Every half hour of real time, the repeated hour included.
    assert [b - a for a, b in itertools.pairwise(seen)] == [timedelta(minutes=30)] * 4


def test_weekday_nine_in_new_york_follows_its_offset() -> None:
    nine = Schedule("0 9 * * MON-FRI", "America/New_York")
    # Friday before the change is 09:00 EST (-5); Monday after it is 09:00 EDT (-4).
    friday = nine.next_after(at("2026-03-06T12:00:00+00:00"))
    assert friday == at("2026-03-06T14:00:00+00:00")
    monday = nine.next_after(friday)
    assert monday == at("2026-03-09T13:00:00+00:00")
    assert nine.latest_at_or_before(at("2026-03-09T12:59:00+00:00")) == friday


class Events:
    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.entries: list[dict[str, Any]] = []
        self.moved = anyio.Event()

    async def run_admitted(self, run: Mapping[str, Any]) -> None:
        self.runs.append(dict(run))

    def entry_changed(self, entry: Mapping[str, Any]) -> None:
        self.entries.append(dict(entry))
        self.moved.set()
        self.moved = anyio.Event()


@asynccontextmanager
async def port(folder: Path, clock: ManualClock) -> AsyncIterator[tuple[SqliteAutomations, Events]]:
    automations = SqliteAutomations(folder, clock=clock)
    events = Events()
    await automations.start(events)
    try:
        yield automations, events
    finally:
        automations.close()


async def test_an_occurrence_fires_once_and_next_run_moves_on(tmp_path: Path) -> None:
    clock = ManualClock(at("2026-03-02T08:59:00+00:00"))
    async with port(tmp_path, clock) as (automations, events):
        entry = await automations.create(
            "ahp-automation:/a", definition(triggers=[schedule("0 9 * * *")]), CONTEXT
        )
        assert entry["nextRunAt"] == "2026-03-02T09:00:00.000Z"
        await automations.tick()
        assert events.runs == []
        clock.set(at("2026-03-02T09:00:05+00:00"))
        await automations.tick()
        await automations.tick()  # nothing more is due
        (run,) = events.runs
        assert run["origin"] == {
            "kind": "trigger",
            "triggerId": "s",
            "scheduledFor": "2026-03-02T09:00:00.000Z",
        }
        assert run["lifecycle"]["status"] == "pending"
        assert events.entries[-1]["nextRunAt"] == "2026-03-03T09:00:00.000Z"
        assert [r["resource"] for r in events.entries[-1]["runs"]] == [run["resource"]]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(None, [True]), ("runOnce", [True]), ("skip", [])],
)
async def test_missed_occurrences_while_down_follow_the_misfire_policy(
    tmp_path: Path, policy: str | None, expected: list[bool]
) -> None:
    clock = ManualClock(at("2026-03-02T08:00:00+00:00"))
    extra = {"misfirePolicy": policy} if policy else {}
    async with port(tmp_path, clock) as (automations, _):
        await automations.create(
            "ahp-automation:/a", definition(triggers=[schedule("0 * * * *", **extra)]), CONTEXT
        )
    # Down from 08:00 to 12:20: four hourly occurrences missed.
    clock.set(at("2026-03-02T12:20:00+00:00"))
    async with port(tmp_path, clock) as (automations, events):
        await automations.tick()
        assert [run["origin"].get("catchUp") for run in events.runs] == expected
        if expected:
            assert events.runs[0]["origin"]["scheduledFor"] == "2026-03-02T12:00:00.000Z"
        entry = await automations.entry("ahp-automation:/a")
        assert entry is not None
        assert entry["nextRunAt"] == "2026-03-02T13:00:00.000Z"


async def test_after_runs_counts_scheduled_runs_only_and_switches_off(tmp_path: Path) -> None:
    clock = ManualClock(at("2026-03-02T08:59:30+00:00"))
    body = definition(
        triggers=[schedule("* * * * *")], disableConditions=[{"kind": "afterRuns", "max": 2}]
    )
    async with port(tmp_path, clock) as (automations, events):
        entry = await automations.create("ahp-automation:/a", body, CONTEXT)
        assert entry["runCount"] == 0
        # A manual run is never counted.
        await automations.admit("ahp-automation:/a", {"kind": "manual"}, "press-1")
        for _ in range(4):
            clock.advance(timedelta(minutes=1))
            await automations.tick()
        assert len(events.runs) == 2
        final = events.entries[-1]
        assert final["runCount"] == 2
        assert final["definition"]["enabled"] is False
        assert "nextRunAt" not in final
        # Switched back on: a fresh allowance, from the next occurrence on.
        again = await automations.update("ahp-automation:/a", {"enabled": True}, CONTEXT)
        assert again["runCount"] == 0
        assert again["nextRunAt"] == "2026-03-02T09:04:00.000Z"


async def test_after_date_switches_the_automation_off(tmp_path: Path) -> None:
    clock = ManualClock(at("2026-03-02T08:00:00+00:00"))
    body = definition(
        triggers=[schedule("0 12 * * *")],
        disableConditions=[{"kind": "afterDate", "date": "2026-03-02T10:00:00Z"}],
    )
    async with port(tmp_path, clock) as (automations, events):
        await automations.create("ahp-automation:/a", body, CONTEXT)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(automations.schedule)
                await anyio.sleep(0.05)
                clock.set(at("2026-03-02T10:00:01+00:00"))
                while not events.entries:
                    await events.moved.wait()
                group.cancel_scope.cancel()
        assert events.runs == []
        assert events.entries[-1]["definition"]["enabled"] is False


async def test_the_scheduler_sleeps_until_the_clock_moves(tmp_path: Path) -> None:
    clock = ManualClock(at("2026-03-02T08:59:59+00:00"))
    async with port(tmp_path, clock) as (automations, events):
        await automations.create(
            "ahp-automation:/a", definition(triggers=[schedule("0 9 * * *")]), CONTEXT
        )
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(automations.schedule)
                await anyio.sleep(0.05)
                assert events.runs == []
                clock.advance(timedelta(seconds=2))
                while not events.runs:
                    await events.moved.wait()
                group.cancel_scope.cancel()
        assert len(events.runs) == 1


async def test_a_run_left_running_is_failed_at_the_next_start(tmp_path: Path) -> None:
    clock = ManualClock(at("2026-03-02T08:00:00+00:00"))
    async with port(tmp_path, clock) as (automations, _):
        await automations.create("ahp-automation:/a", definition(), CONTEXT)
        run, made = await automations.admit("ahp-automation:/a", {"kind": "manual"}, "r1")
        assert made
        again, made = await automations.admit("ahp-automation:/a", {"kind": "manual"}, "r1")
        assert (again["resource"], made) == (run["resource"], False)
        running = {
            **run,
            "lifecycle": {
                "status": "running",
                "createdAt": run["lifecycle"]["createdAt"],
                "startedAt": "2026-03-02T08:00:01.000Z",
            },
        }
        await automations.record(running)
    # The process ends without a word (the file is all that is left).
    async with port(tmp_path, clock) as (automations, _):
        found = await automations.run(run["resource"])
        assert found is not None
        assert found["lifecycle"]["status"] == "failed"
        assert found["lifecycle"]["error"] == {
            "errorType": "HostStopped",
            "message": "host stopped",
        }
        assert found["lifecycle"]["startedAt"] == "2026-03-02T08:00:01.000Z"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"session": {"provider": "gone"}}, "definition.session.provider"),
        (
            {"triggers": [schedule("0 9 * * *"), schedule("0 10 * * *")]},
            "definition.triggers[1].id",
        ),
        ({"triggers": [schedule("0 0 L * *")]}, "definition.triggers[0].schedule.expression"),
        (
            {"triggers": [schedule("0 9 * * *", "Mars/Olympus")]},
            "definition.triggers[0].schedule.timeZone",
        ),
        (
            {"disableConditions": [{"kind": "afterRuns", "max": 0}]},
            "definition.disableConditions[0].max",
        ),
        (
            {
                "triggers": [
                    {"id": "e", "kind": "event", "type": "nope", "title": "x", "events": []}
                ]
            },
            "definition.triggers[0].type",
        ),
    ],
)
async def test_a_refusal_names_the_field_and_keeps_nothing(
    tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    clock = ManualClock(at("2026-03-02T08:00:00+00:00"))
    async with port(tmp_path, clock) as (automations, _):
        with pytest.raises(ValueError) as refused:
            await automations.create("ahp-automation:/a", definition(**changes), CONTEXT)
        assert str(refused.value).startswith(f"{field}: ")
        assert await automations.entry("ahp-automation:/a") is None
    async with port(tmp_path, clock) as (automations, _):
        assert await automations.entry("ahp-automation:/a") is None
