"""200 seeded runs, each with one fault injected at a random point of a real backend (start,
run_turn, each reporter call, close) or of the real store (each write): the host keeps
serving, the other sessions keep their state, and the client that caused the work is told."""

from __future__ import annotations

import logging
import random
from typing import Any

import anyio
import pytest

from ahp_scripted import Rule, Say, ScriptedBackend, Think, Title, Tool, Usage
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.store import FileSessionStore
from ahpcore.testing import AhpTestClient, running_host
from tests.reliability.faults import FaultyBackend, FaultyConnection, Plan
from tests.sessions.conftest import open_session, script, session_uri, start_turn, turn_end

pytestmark = pytest.mark.anyio

RUNS = 200
POINTS = ("start", "run_turn", "report", "close", "store", "none")
TURN = Rule(
    exact="go",
    steps=[
        Think("thinking it over"),
        Say("here is what I found"),
        Tool("ls", {"path": "."}, result="a b"),
        Title("Named by the agent"),
        Usage(input_tokens=3, output_tokens=2),
    ],
)


class FaultyPlugin:
    def __init__(self, backend: FaultyBackend, store: FileSessionStore) -> None:
        self.backend = backend
        self.store = store

    @hookimpl
    def ahp_backends(self, host, register):
        register(self.backend)

    @hookimpl
    def ahp_session_store(self, host):
        return self.store


def plan_for(seed: int) -> Plan:
    rng = random.Random(seed)
    point = rng.choice(POINTS)
    # start, run_turn and close happen once a run; a turn makes about ten reports and a
    # run about four writes.
    nth = {"report": rng.randint(1, 10), "store": rng.randint(1, 4)}.get(point, 1)
    return Plan(point=point, nth=nth)


async def states(client: AhpTestClient, *channels: str) -> list[Any]:
    found = []
    for channel in channels:
        found.append((await client.request("subscribe", {"channel": channel}))["snapshot"]["state"])
    return found


async def one_run(
    n: int, plan: Plan, victim: AhpTestClient, running: Any
) -> tuple[list[str], str | None]:
    """Drive one session through create, title, a turn and dispose; returns what the
    victim was told (error messages, rejections, chat errors) and the session it made."""
    told: list[str] = []
    session = session_uri(n + 10)
    frame = await victim.request_frame(
        "createSession", {"channel": session, "provider": "scripted"}
    )
    if "error" in frame:
        told.append(frame["error"]["message"])
        return told, None
    await victim.request("subscribe", {"channel": session})
    chat = (await victim.request("subscribe", {"channel": session}))["snapshot"]["state"][
        "defaultChat"
    ]
    await victim.request("subscribe", {"channel": chat})
    seq = await victim.dispatch(session, {"type": "session/titleChanged", "title": f"run {n}"})
    answer = await victim.answer_to(seq)
    if "rejectionReason" in answer:
        told.append(answer["rejectionReason"])
    await start_turn(victim, chat, "go", f"turn-{n}")
    ending = await turn_end(victim, chat)
    if ending["type"] == "chat/error":
        told.append(ending["part"]["error"]["message"])
    frame = await victim.request_frame("disposeSession", {"channel": session})
    if "error" in frame:
        told.append(frame["error"]["message"])
    return told, session


async def test_faults_at_random_points_stay_with_their_session(tmp_path, caplog):
    plan = Plan()
    backend = FaultyBackend(ScriptedBackend(tmp_path / "scripted", script(TURN)), plan)
    store = FileSessionStore(
        tmp_path / "state" / "sessions.sqlite3", retry_delays=(), factory=FaultyConnection
    )
    settings = HostSettings(port=0, state_dir=tmp_path / "state")
    caplog.set_level(logging.WARNING)
    async with running_host(
        [("faulty", FaultyPlugin(backend, store))], settings=settings
    ) as running:
        bystander = await running.connect("bystander")
        await bystander.initialize()
        kept_session, kept_chat = await open_session(bystander, 1)
        await start_turn(bystander, kept_chat, "go", "kept-turn")
        await turn_end(bystander, kept_chat)
        await bystander.sync()
        baseline = await states(bystander, kept_session, kept_chat)
        victim = await running.connect("victim", conformance=False)
        await victim.initialize([ROOT_CHANNEL])
        fired: dict[str, int] = {}
        for n in range(RUNS):
            plan = plan_for(n)
            backend.plan = plan
            FaultyConnection.plan = plan
            caplog.clear()
            with anyio.fail_after(20):
                told, made = await one_run(n, plan, victim, running)
                await bystander.sync()
            injected = [m for m in told if "injected fault" in m]
            if plan.fired:
                fired[plan.point] = fired.get(plan.point, 0) + 1
                logged = any(
                    "injected fault" in r.getMessage() or "injected fault" in str(r.exc_info)
                    for r in caplog.records
                )
                if plan.point in ("start", "run_turn", "report"):
                    assert injected, f"run {n}: {plan} fired but the client was told {told}"
                else:
                    assert injected or logged, f"run {n}: {plan} fired, neither told nor logged"
            else:
                assert not injected, f"run {n}: told of a fault that did not fire: {told}"
            # The host serves, and the other session is as it was.
            assert await states(bystander, kept_session, kept_chat) == baseline, f"run {n}"
            if made is not None and not told:
                assert made not in running.host.engine_or_fail.channels
        newcomer = await running.connect("newcomer")
        await newcomer.initialize()
        await newcomer.sync()
    print(f"faults fired: {fired}")
    assert set(fired) >= {"start", "run_turn", "report", "close", "store"}
