"""A real host with the automations plugin (on a clock a test may move) and the scripted agent."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from ahp_automations import ManualClock, SqliteAutomations
from ahp_automations.clock import Clock
from ahp_scripted import Rule, Say, Script, ScriptedBackend, Wait
from ahpcore.api import HostSettings
from ahpcore.hookspecs import hookimpl
from ahpcore.testing import AhpTestClient, RunningHost, running_host

CATALOGUE = "ahp-automations://"
ANSWER = "Yesterday: three commits, all tests."
#: What the agent does with any message: answers it, or (``hold``) waits at a gate first.
SCRIPT = Script(
    rules=[Rule([Wait(gate="hold"), Say("held, then done")], prefix="hold")],
    default=[Say(ANSWER)],
)


class AutomationsPlugin:
    def __init__(self, clock: Clock | None, history: int = 20) -> None:
        self.clock = clock
        self.history = history
        self.port: SqliteAutomations | None = None

    @hookimpl
    def ahp_automations(self, host: Any) -> SqliteAutomations:
        self.port = SqliteAutomations(
            host.settings.state_dir / "automations",
            clock=self.clock,
            run_history_limit=self.history,
        )
        return self.port


class ScriptedPlugin:
    def __init__(self, provider: str = "scripted") -> None:
        self.provider = provider
        self.backend: ScriptedBackend | None = None

    @hookimpl
    def ahp_backends(self, host: Any, register: Callable[[Any], None]) -> None:
        backend = ScriptedBackend(host.settings.state_dir / self.provider, SCRIPT)
        if self.provider != "scripted":
            backend.provider = self.provider  # one more provider name for the same agent
        self.backend = backend
        register(backend)


@asynccontextmanager
async def host(
    state: Path,
    *,
    clock: Clock | None = None,
    provider: str | None = "scripted",
    history: int = 20,
    extra: tuple[tuple[str, object], ...] = (),
) -> AsyncIterator[tuple[RunningHost, AutomationsPlugin, ScriptedPlugin | None]]:
    automations = AutomationsPlugin(clock, history)
    scripted = ScriptedPlugin(provider) if provider is not None else None
    plugins: list[tuple[str, object]] = [("automations", automations)]
    if scripted is not None:
        plugins.append(("scripted", scripted))
    plugins.extend(extra)
    # Sessions kept in a file, as ahp serve keeps them: they come back after a restart.
    settings = HostSettings(sessions="file", port=0)
    async with running_host(plugins, state_dir=state, settings=settings) as running:
        yield running, automations, scripted


def definition(**overrides: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "title": "Morning review",
        "message": {"text": "Review yesterday's commits", "origin": {"kind": "automation"}},
        "session": {"provider": "scripted"},
        "enabled": True,
        "triggers": [],
    }
    found.update(overrides)
    return found


def schedule(expression: str, zone: str = "UTC", ident: str = "s", **more: Any) -> dict[str, Any]:
    return {
        "id": ident,
        "kind": "schedule",
        "schedule": {"expression": expression, "timeZone": zone},
        **more,
    }


async def create(
    client: AhpTestClient, body: dict[str, Any], resource: str | None = None
) -> dict[str, Any]:
    """Dispatch automation/createRequested; the envelope that answered it (set or refusal)."""
    resource = resource or f"ahp-automation:/{uuid.uuid4()}"
    seq = await client.dispatch(
        CATALOGUE,
        {"type": "automation/createRequested", "resource": resource, "definition": body},
    )
    return await client.answer_to(seq)


async def entry_of(client: AhpTestClient, resource: str) -> dict[str, Any]:
    """The entry as a fresh catalogue snapshot shows it."""
    result = await client.request("subscribe", {"channel": CATALOGUE})
    entries = result["snapshot"]["state"]["entries"]
    found = [e for e in entries if e["resource"] == resource]
    assert found, f"no entry {resource} in {entries}"
    return found[0]


async def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``check`` (sync or async) until it answers something truthy."""
    with anyio.fail_after(timeout):
        while True:
            found = check()
            if hasattr(found, "__await__"):
                found = await found
            if found:
                return found
            await anyio.sleep(0.02)


async def run_state(client: AhpTestClient, run: str) -> dict[str, Any]:
    result = await client.request("subscribe", {"channel": run})
    state: dict[str, Any] = result["snapshot"]["state"]
    return state


async def run_ends(client: AhpTestClient, run: str, timeout: float = 10.0) -> dict[str, Any]:
    """The run's state once its lifecycle is terminal."""

    async def ended() -> dict[str, Any] | None:
        state = await run_state(client, run)
        return state if state["lifecycle"]["status"] not in ("pending", "running") else None

    found: dict[str, Any] = await until(ended, timeout)
    return found


async def agent_text(client: AhpTestClient, session: str) -> str:
    """Everything the agent said in the session's default chat."""
    snapshot = await client.request("subscribe", {"channel": session})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
    said = []
    for turn in state.get("turns", []):
        for part in turn.get("responseParts", []):
            if part.get("kind") == "markdown":
                said.append(part.get("content", ""))
    return "".join(said)


__all__ = ["ANSWER", "CATALOGUE", "ManualClock", "host"]
