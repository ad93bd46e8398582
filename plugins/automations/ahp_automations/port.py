"""``SqliteAutomations``: the automations port over one SQLite file, and its scheduler.

The core asks; this keeps. Definitions are checked (``checks``) and kept with
the moment each schedule next comes due; the scheduler wakes at the earliest of
those, admits a run for each occurrence that came due (on disk, counted against
``afterRuns``, in one transaction) and hands it to the core to start.

An occurrence is *missed* when the scheduler reaches it more than
``MISFIRE_GRACE`` late (the host was down, the machine asleep). Missed
occurrences follow the trigger's ``misfirePolicy``: ``skip`` drops them,
``runOnce`` (the default) makes one run for the newest of them, marked
``catchUp``. A disabled automation's schedules are not evaluated; switched
back on, each starts from the next occurrence.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from ahp_automations import checks
from ahp_automations.clock import Clock, SystemClock
from ahp_automations.cron import Schedule
from ahp_automations.store import ACTIVE, Database, dumps
from ahpcore.ports import AutomationContext, AutomationEvents

log = logging.getLogger(__name__)

#: How late an occurrence may be reached and still count as on time.
MISFIRE_GRACE = timedelta(seconds=60)
#: Finished runs shown on an entry, and how many more each fetchAutomationRuns shows.
RUN_HISTORY_LIMIT = 20
RUN_SCHEME = "ahp-automation-run:"
#: Where ahp-users says whose a thing is, on an entry and on each of its runs.
OWNER_KEY = "ahp.owner"
HOST_STOPPED = {"errorType": "HostStopped", "message": "host stopped"}


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _signature(trigger: Mapping[str, Any]) -> str:
    schedule = trigger["schedule"]
    return f"{schedule['expression']}\n{schedule['timeZone']}"


def _schedules(definition: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [t for t in definition.get("triggers") or () if t.get("kind") == "schedule"]


@dataclass
class _Held:
    """One automation as held in memory (the file is the truth; this mirrors it)."""

    definition: dict[str, Any]
    created_at: str
    modified_at: str
    run_count: int | None
    #: trigger id -> (signature, next occurrence)
    next_at: dict[str, tuple[str, datetime]]
    meta: dict[str, Any] | None = None


class SqliteAutomations:
    """The automations port (``ahpcore.ports.AutomationsPort``) over ``<folder>/automations.db``."""

    def __init__(
        self,
        folder: Path,
        *,
        clock: Clock | None = None,
        run_history_limit: int = RUN_HISTORY_LIMIT,
        min_interval: int = 1,
    ) -> None:
        """``min_interval``: the closest two runs of one schedule may come, in minutes."""
        self.db = Database(folder / "automations.db")
        self.min_interval = max(1, min_interval)
        self.clock: Clock = clock or SystemClock()
        self.run_history_limit = run_history_limit
        self._held: dict[str, _Held] = {}
        #: Finished runs shown per automation (grows with fetchAutomationRuns); not kept.
        self._window: dict[str, int] = {}
        self._events: AutomationEvents | None = None
        self._wake = anyio.Event()

    def capabilities(self) -> Mapping[str, Any]:
        return {
            "schedules": {"minIntervalMinutes": self.min_interval},
            "runHistoryLimit": self.run_history_limit,
        }

    # -- opening -----------------------------------------------------------------------
    async def start(self, events: AutomationEvents) -> Sequence[Mapping[str, Any]]:
        self._events = events
        now = iso(self.clock.now())

        def load(connection: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
            stopped = connection.execute(
                "SELECT resource, state FROM runs WHERE active = 1"
            ).fetchall()
            for resource, text in stopped:
                state = _loads(text)
                connection.execute(
                    "UPDATE runs SET state = ?, active = 0 WHERE resource = ?",
                    (dumps(_failed(state, now, HOST_STOPPED)), resource),
                )
            if stopped:
                log.warning("%d automation run(s) stopped with the last host: failed", len(stopped))
            rows = connection.execute(
                "SELECT resource, definition, created_at, modified_at, run_count, meta "
                "FROM automations ORDER BY created_at, resource"
            ).fetchall()
            found = connection.execute(
                "SELECT automation, trigger_id, signature, next_at FROM schedules"
            ).fetchall()
            return rows, found

        rows, schedules = await self.db.run(load)
        for resource, definition, created, modified, count, meta in rows:
            self._held[resource] = _Held(
                _loads(definition), created, modified, count, {}, _loads(meta) if meta else None
            )
        for automation, trigger_id, signature, next_at in schedules:
            held = self._held.get(automation)
            if held is not None:
                held.next_at[trigger_id] = (signature, _instant(next_at))
        return [await self._entry(resource) for resource in self._held]

    def close(self) -> None:
        self.db.close()

    # -- definitions -------------------------------------------------------------------
    async def create(
        self, resource: str, definition: Mapping[str, Any], context: AutomationContext
    ) -> Mapping[str, Any]:
        if not resource.startswith("ahp-automation:"):
            raise ValueError("resource: an automation's URI starts with ahp-automation:")
        if resource in self._held:
            raise ValueError(f"resource: {resource} is already an automation")
        normal = checks.check_definition(
            definition, "definition", context, min_interval=self.min_interval
        )
        now = self.clock.now()
        held = _Held(
            normal,
            iso(now),
            iso(now),
            0 if checks.after_runs(normal) is not None else None,
            self._next_occurrences(normal, {}, now),
            {OWNER_KEY: context.owner} if context.owner is not None else None,
        )
        await self.db.run(lambda c: self._write(c, resource, held))
        self._held[resource] = held
        self._wake.set()
        return await self._entry(resource)

    async def update(
        self, resource: str, changes: Mapping[str, Any], context: AutomationContext
    ) -> Mapping[str, Any]:
        current = self._held.get(resource)
        if current is None:
            raise KeyError(resource)
        normal = checks.patched(
            current.definition, changes, context, min_interval=self.min_interval
        )
        now = self.clock.now()
        was_on, is_on = bool(current.definition.get("enabled")), bool(normal.get("enabled"))
        cap_before = checks.after_runs(current.definition)
        cap_after = checks.after_runs(normal)
        count = current.run_count
        if cap_after is None:
            count = None
        elif cap_before is None or (is_on and not was_on):
            count = 0  # a fresh allowance
        elif count is None:
            count = 0
        # Switched back on: schedules start from now, not from what was missed while off.
        kept = {} if is_on and not was_on else current.next_at
        held = _Held(
            normal,
            current.created_at,
            iso(now),
            count,
            self._next_occurrences(normal, kept, now),
            current.meta,
        )
        await self.db.run(lambda c: self._write(c, resource, held))
        self._held[resource] = held
        self._wake.set()
        return await self._entry(resource)

    async def remove(self, resource: str) -> bool:
        if resource not in self._held:
            return False

        def delete(connection: sqlite3.Connection) -> None:
            connection.execute("DELETE FROM automations WHERE resource = ?", (resource,))
            connection.execute("DELETE FROM schedules WHERE automation = ?", (resource,))
            connection.execute("DELETE FROM runs WHERE automation = ?", (resource,))

        await self.db.run(delete)
        self._held.pop(resource, None)
        self._window.pop(resource, None)
        self._wake.set()
        return True

    def _next_occurrences(
        self,
        definition: Mapping[str, Any],
        kept: Mapping[str, tuple[str, datetime]],
        now: datetime,
    ) -> dict[str, tuple[str, datetime]]:
        found = {}
        for trigger in _schedules(definition):
            signature = _signature(trigger)
            held = kept.get(trigger["id"])
            if held is not None and held[0] == signature:
                found[trigger["id"]] = held
                continue
            schedule = Schedule(trigger["schedule"]["expression"], trigger["schedule"]["timeZone"])
            found[trigger["id"]] = (signature, schedule.next_after(now))
        return found

    @staticmethod
    def _write(connection: sqlite3.Connection, resource: str, held: _Held) -> None:
        connection.execute(
            "INSERT INTO automations (resource, definition, created_at, modified_at, run_count, "
            "meta) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (resource) DO UPDATE SET "
            "definition = excluded.definition, modified_at = excluded.modified_at, "
            "run_count = excluded.run_count, meta = excluded.meta",
            (
                resource,
                dumps(held.definition),
                held.created_at,
                held.modified_at,
                held.run_count,
                dumps(held.meta) if held.meta is not None else None,
            ),
        )
        connection.execute("DELETE FROM schedules WHERE automation = ?", (resource,))
        connection.executemany(
            "INSERT INTO schedules (automation, trigger_id, signature, next_at) "
            "VALUES (?, ?, ?, ?)",
            [
                (resource, trigger_id, signature, iso(when))
                for trigger_id, (signature, when) in held.next_at.items()
            ],
        )

    # -- entries -------------------------------------------------------------------------
    async def entry(self, resource: str) -> Mapping[str, Any] | None:
        if resource not in self._held:
            return None
        return await self._entry(resource)

    async def _entry(self, resource: str) -> dict[str, Any]:
        window = self._window.get(resource, self.run_history_limit)
        runs, cursor = await self.db.run(lambda c: _runs_window(c, resource, window))
        return self._build_entry(resource, runs, cursor)

    def _build_entry(
        self, resource: str, runs: list[dict[str, Any]], cursor: str | None
    ) -> dict[str, Any]:
        held = self._held[resource]
        entry: dict[str, Any] = {
            "resource": resource,
            "definition": held.definition,
            "runs": runs,
            # Everyone sees one catalogue: what its owner may do. The core refuses the rest
            # to people who are not its owner or an admin.
            "operations": ["update", "remove", "run"],
            "createdAt": held.created_at,
            "modifiedAt": held.modified_at,
        }
        if held.definition.get("enabled") and held.next_at:
            entry["nextRunAt"] = iso(min(when for _, when in held.next_at.values()))
        if held.run_count is not None:
            entry["runCount"] = held.run_count
        if cursor is not None:
            entry["runsNextCursor"] = cursor
        if held.meta:
            entry["_meta"] = held.meta
        return entry

    async def more_runs(self, automation: str, cursor: str | None) -> Mapping[str, Any]:
        if automation not in self._held:
            raise KeyError(automation)
        current = await self._entry(automation)
        offered = current.get("runsNextCursor")
        if cursor is not None and cursor != offered:
            raise ValueError(f"cursor: {cursor!r} is not the cursor this automation offers")
        if offered is None:
            return current
        self._window[automation] = (
            self._window.get(automation, self.run_history_limit) + self.run_history_limit
        )
        return await self._entry(automation)

    # -- runs ----------------------------------------------------------------------------
    async def admit(
        self, automation: str, origin: Mapping[str, Any], request_id: str | None = None
    ) -> tuple[Mapping[str, Any], bool]:
        if automation not in self._held:
            raise KeyError(automation)
        now = iso(self.clock.now())
        # A run is its automation's owner's, whoever or whatever started it.
        owner = (self._held[automation].meta or {}).get(OWNER_KEY)
        meta = {OWNER_KEY: owner} if owner is not None else None

        def insert(connection: sqlite3.Connection) -> tuple[dict[str, Any], bool]:
            if request_id is not None:
                found = connection.execute(
                    "SELECT state FROM runs WHERE automation = ? AND request_id = ?",
                    (automation, request_id),
                ).fetchone()
                if found is not None:
                    return _loads(found[0]), False
            return _insert_run(connection, automation, dict(origin), now, request_id, meta), True

        return await self.db.run(insert)

    async def run(self, resource: str) -> Mapping[str, Any] | None:
        found = await self.db.run(
            lambda c: c.execute("SELECT state FROM runs WHERE resource = ?", (resource,)).fetchone()
        )
        return _loads(found[0]) if found else None

    async def record(self, run: Mapping[str, Any]) -> Mapping[str, Any]:
        automation = str(run["automation"])
        active = run["lifecycle"]["status"] in ACTIVE
        await self.db.run(
            lambda c: c.execute(
                "UPDATE runs SET state = ?, active = ? WHERE resource = ?",
                (dumps(dict(run)), int(active), run["resource"]),
            )
        )
        if automation not in self._held:
            raise KeyError(automation)
        return await self._entry(automation)

    # -- the scheduler -------------------------------------------------------------------
    async def schedule(self) -> None:
        while True:
            self._wake = anyio.Event()
            await self.tick()
            await self._nap(self._next_wake())

    async def _nap(self, when: datetime | None) -> None:
        woken = self._wake
        async with anyio.create_task_group() as group:

            async def sleep() -> None:
                if when is None:
                    await anyio.sleep_forever()
                else:
                    await self.clock.sleep_until(when)
                woken.set()

            group.start_soon(sleep)
            await woken.wait()
            group.cancel_scope.cancel()

    def _next_wake(self) -> datetime | None:
        moments: list[datetime] = []
        for held in self._held.values():
            if not held.definition.get("enabled"):
                continue
            moments.extend(when for _, when in held.next_at.values())
            cutoff = checks.after_date(held.definition)
            if cutoff is not None:
                moments.append(cutoff + timedelta(milliseconds=1))
        return min(moments, default=None)

    async def tick(self) -> None:
        """Admit a run for every occurrence due now, and switch off what a condition ends."""
        now = self.clock.now()
        for resource in list(self._held):
            held = self._held.get(resource)
            if held is None or not held.definition.get("enabled"):
                continue
            cutoff = checks.after_date(held.definition)
            if cutoff is not None and now > cutoff:
                await self._switch_off(resource, held, now, "afterDate")
                continue
            for trigger in _schedules(held.definition):
                await self._due(resource, trigger, now)
                if not self._held.get(resource, held).definition.get("enabled"):
                    break

    async def _due(self, resource: str, trigger: Mapping[str, Any], now: datetime) -> None:
        held = self._held.get(resource)
        if held is None or trigger["id"] not in held.next_at:
            return
        signature, when = held.next_at[trigger["id"]]
        if when > now:
            return
        schedule = Schedule(trigger["schedule"]["expression"], trigger["schedule"]["timeZone"])
        latest = schedule.latest_at_or_before(now)
        following = schedule.next_after(now)
        origin: dict[str, Any] | None = {
            "kind": "trigger",
            "triggerId": trigger["id"],
            "scheduledFor": iso(latest),
        }
        if now - latest > MISFIRE_GRACE:
            if trigger.get("misfirePolicy") == "skip":
                log.info(
                    "%s: skipped the occurrence of %s missed at %s",
                    resource,
                    trigger["id"],
                    iso(latest),
                )
                origin = None
            else:
                assert origin is not None
                origin["catchUp"] = True
        cap = checks.after_runs(held.definition)
        count = held.run_count
        if origin is not None and cap is not None and (count or 0) >= cap:
            origin = None  # the allowance is spent: switched off below
        definition = held.definition
        if origin is not None and cap is not None:
            count = (count or 0) + 1
        if cap is not None and (count or 0) >= cap:
            definition = {**definition, "enabled": False}
        next_at = {**held.next_at, trigger["id"]: (signature, following)}
        modified = iso(now) if definition is not held.definition else held.modified_at
        updated = _Held(definition, held.created_at, modified, count, next_at, held.meta)
        stamp = iso(now)

        def fire(connection: sqlite3.Connection) -> dict[str, Any] | None:
            # The run, the count and the next occurrence move together or not at all.
            self._write(connection, resource, updated)
            if origin is None:
                return None
            return _insert_run(connection, resource, origin, stamp, None)

        run = await self.db.run(fire)
        self._held[resource] = updated
        if run is not None and self._events is not None:
            log.info(
                "%s: %s fired for %s", resource, trigger["id"], origin and origin["scheduledFor"]
            )
            await self._events.run_admitted(run)
        await self._changed(resource)

    async def _switch_off(self, resource: str, held: _Held, now: datetime, why: str) -> None:
        updated = _Held(
            {**held.definition, "enabled": False},
            held.created_at,
            iso(now),
            held.run_count,
            held.next_at,
            held.meta,
        )
        await self.db.run(lambda c: self._write(c, resource, updated))
        self._held[resource] = updated
        log.info("%s switched itself off (%s)", resource, why)
        await self._changed(resource)

    async def _changed(self, resource: str) -> None:
        if self._events is not None and resource in self._held:
            self._events.entry_changed(await self._entry(resource))


def _loads(text: str) -> Any:
    return json.loads(text)


def _failed(state: Mapping[str, Any], now: str, error: Mapping[str, Any]) -> dict[str, Any]:
    lifecycle = state.get("lifecycle") or {}
    failed: dict[str, Any] = {
        "status": "failed",
        "createdAt": lifecycle.get("createdAt", now),
        "completedAt": now,
        "error": dict(error),
    }
    if lifecycle.get("startedAt"):
        failed["startedAt"] = lifecycle["startedAt"]
    return {**state, "lifecycle": failed}


def _insert_run(
    connection: sqlite3.Connection,
    automation: str,
    origin: dict[str, Any],
    now: str,
    request_id: str | None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    resource = f"{RUN_SCHEME}/{uuid.uuid4()}"
    state: dict[str, Any] = {
        "resource": resource,
        "automation": automation,
        "origin": origin,
        "lifecycle": {"status": "pending", "createdAt": now},
        "sessions": [],
    }
    if meta:
        state["_meta"] = meta
    connection.execute(
        "INSERT INTO runs (resource, automation, request_id, state, active) VALUES (?, ?, ?, ?, 1)",
        (resource, automation, request_id, dumps(state)),
    )
    return state


def summary(run: Mapping[str, Any]) -> dict[str, Any]:
    """An ``AutomationRunSummary`` of a run's state."""
    found: dict[str, Any] = {
        "resource": run["resource"],
        "automation": run["automation"],
        "origin": run["origin"],
        "lifecycle": run["lifecycle"],
        "sessionCount": len(run.get("sessions") or ()),
    }
    if run.get("primarySession"):
        found["primarySession"] = run["primarySession"]
    if run.get("_meta"):
        found["_meta"] = run["_meta"]
    return found


def _runs_window(
    connection: sqlite3.Connection, automation: str, window: int
) -> tuple[list[dict[str, Any]], str | None]:
    """Every active run and the newest ``window`` finished ones, newest first, and the
    cursor of the page after them (None when nothing is older)."""
    active = connection.execute(
        "SELECT seq, state FROM runs WHERE automation = ? AND active = 1", (automation,)
    ).fetchall()
    finished = connection.execute(
        "SELECT seq, state FROM runs WHERE automation = ? AND active = 0 ORDER BY seq DESC LIMIT ?",
        (automation, window + 1),
    ).fetchall()
    cursor = None
    if len(finished) > window:
        finished = finished[:window]
        cursor = f"before-{finished[-1][0]}" if finished else "before-start"
    rows = sorted([*active, *finished], key=lambda row: row[0], reverse=True)
    return [summary(_loads(state)) for _, state in rows], cursor
