"""Faults on demand in real parts: the scripted backend and the SQLite store, wrapped.

A ``Plan`` names one point to fail at. ``FaultyBackend`` wraps a
``ScriptedBackend`` (start, each agent's run_turn, each reporter call, close);
``FaultyConnection`` is a real SQLite connection whose n-th COMMIT fails the
way a failing disk makes it fail. Each records whether its fault fired.
"""

from __future__ import annotations

import inspect
import sqlite3
from dataclasses import dataclass
from typing import Any

from ahp_scripted import ScriptedBackend


class InjectedFault(RuntimeError):
    """What an injected fault raises."""


@dataclass
class Plan:
    #: start | run_turn | report | close | store | none
    point: str = "none"
    #: For report and store: fail at the n-th call (1-based) after arming.
    nth: int = 1
    calls: int = 0
    fired: bool = False

    def hit(self, point: str) -> None:
        if point != self.point or self.fired:
            return
        self.calls += 1
        if self.calls >= self.nth:
            self.fired = True
            raise InjectedFault(f"injected fault at {point} #{self.nth}")


class FaultyReporter:
    def __init__(self, inner: Any, plan: Plan) -> None:
        self._inner = inner
        self._plan = plan

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute
        plan = self._plan
        if inspect.iscoroutinefunction(attribute):

            async def call_async(*args: Any, **kwargs: Any) -> Any:
                plan.hit("report")
                return await attribute(*args, **kwargs)

            return call_async

        def call(*args: Any, **kwargs: Any) -> Any:
            plan.hit("report")
            return attribute(*args, **kwargs)

        return call


class FaultyAgent:
    def __init__(self, inner: Any, plan: Plan) -> None:
        self._inner = inner
        self._plan = plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def run_turn(self, turn: Any, report: Any) -> None:
        self._plan.hit("run_turn")
        await self._inner.run_turn(turn, FaultyReporter(report, self._plan))

    async def close(self) -> None:
        await self._inner.close()
        self._plan.hit("close")


class FaultyBackend:
    def __init__(self, inner: ScriptedBackend, plan: Plan) -> None:
        self._inner = inner
        self.plan = plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def start(self, start: Any) -> FaultyAgent:
        self.plan.hit("start")
        return FaultyAgent(await self._inner.start(start), self.plan)


class FaultyConnection(sqlite3.Connection):
    """A real SQLite connection; the plan's n-th COMMIT fails and leaves its transaction open."""

    plan: Plan = Plan()

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        if sql == "COMMIT":
            try:
                FaultyConnection.plan.hit("store")
            except InjectedFault as fault:
                raise sqlite3.OperationalError(f"disk I/O error ({fault})") from None
        return super().execute(sql, *args)
