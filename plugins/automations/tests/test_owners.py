"""With ahp-users: an automation is its creator's, and so are its runs and their sessions."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from automations_harness import (
    CATALOGUE,
    AutomationsPlugin,
    ScriptedPlugin,
    agent_text,
    create,
    definition,
    entry_of,
    run_ends,
)

import ahp_users.plugin as users_plugin
from ahpcore.api import HostSettings
from ahpcore.testing import running_host

pytestmark = pytest.mark.anyio

DEPLOYMENT = "deployment-token-0123456789abcdef"


def add(state: Path, name: str, role: str) -> str:
    env = {**os.environ, "AHP_STATE_DIR": str(state)}
    done = subprocess.run(
        [sys.executable, "-m", "ahpcore.cli", "users", "add", name, "--role", role],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


async def test_only_the_owner_or_an_admin_changes_runs_or_removes_an_automation(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    ann, bob, carol = (
        add(state, "ann", "admin"),
        add(state, "bob", "member"),
        add(state, "carol", "member"),
    )
    plugins: list[tuple[str, object]] = [
        ("automations", AutomationsPlugin(None)),
        ("scripted", ScriptedPlugin()),
        ("users", users_plugin),
    ]
    settings = HostSettings(sessions="memory", port=0)
    async with running_host(plugins, settings=settings, state_dir=state, token=DEPLOYMENT) as host:
        b = await host.connect("bob", token=bob)
        c = await host.connect("carol", token=carol)
        a = await host.connect("ann", token=ann)
        for client in (b, c, a):
            await client.initialize()
            await client.request("subscribe", {"channel": CATALOGUE})

        resource = "ahp-automation:/bobs"
        made = await create(b, definition(), resource)
        assert made["action"]["type"] == "automation/createRequested", made
        entry = await entry_of(b, resource)
        assert entry["_meta"]["ahp.owner"] == "user:bob"

        # Carol may see it, and do nothing else with it.
        seq = await c.dispatch(
            CATALOGUE,
            {"type": "automation/updateRequested", "resource": resource, "changes": {"title": "x"}},
        )
        reason = (await c.answer_to(seq)).get("rejectionReason", "")
        assert "user:carol may not update" in reason and "user:bob" in reason
        frame = await c.request_frame(
            "runAutomation", {"automation": resource, "requestId": str(uuid.uuid4())}
        )
        assert frame["error"]["code"] == -32009, frame
        seq = await c.dispatch(CATALOGUE, {"type": "automation/removed", "resource": resource})
        assert "user:carol may not remove" in (await c.answer_to(seq)).get("rejectionReason", "")
        assert (await entry_of(c, resource))["definition"]["title"] == "Morning review"
        assert (await entry_of(c, resource))["runs"] == []

        # Bob runs it: the run and its session are his, so he opens it and reads the answer.
        run = (await b.request("runAutomation", {"automation": resource, "requestId": "r1"}))[
            "resource"
        ]
        ended = await run_ends(b, run)
        assert ended["lifecycle"]["status"] == "completed", ended
        assert ended["_meta"]["ahp.owner"] == "user:bob"
        session = ended["primarySession"]
        assert await agent_text(b, session)
        frame = await c.request_frame("subscribe", {"channel": session})
        assert frame["error"]["code"] == -32009, frame

        # An admin may do what the owner may.
        seq = await a.dispatch(
            CATALOGUE,
            {
                "type": "automation/updateRequested",
                "resource": resource,
                "changes": {"title": "Ann's now"},
            },
        )
        assert "rejectionReason" not in await a.answer_to(seq)
        assert (await entry_of(b, resource))["definition"]["title"] == "Ann's now"
        assert (await entry_of(b, resource))["_meta"]["ahp.owner"] == "user:bob"
        seq = await a.dispatch(CATALOGUE, {"type": "automation/removed", "resource": resource})
        assert "rejectionReason" not in await a.answer_to(seq)
        entries = (await a.request("subscribe", {"channel": CATALOGUE}))["snapshot"]["state"]
        assert entries["entries"] == []


async def test_each_reader_sees_the_operations_they_may_perform(tmp_path: Path) -> None:
    state = tmp_path / "state"
    tokens = {
        name: add(state, name, role)
        for name, role in (("ann", "admin"), ("bob", "member"), ("carol", "member"))
    }
    tokens["vera"] = add(state, "vera", "viewer")
    plugins: list[tuple[str, object]] = [
        ("automations", AutomationsPlugin(None)),
        ("scripted", ScriptedPlugin()),
        ("users", users_plugin),
    ]
    settings = HostSettings(sessions="memory", port=0)
    async with running_host(plugins, settings=settings, state_dir=state, token=DEPLOYMENT) as host:
        people = {}
        for name, token in tokens.items():
            people[name] = await host.connect(name, token=token)
            await people[name].initialize(subscriptions=[CATALOGUE])
        resource = "ahp-automation:/bobs"
        await create(people["bob"], definition(), resource)

        everything = ["update", "remove", "run"]
        seen = {name: (await entry_of(c, resource))["operations"] for name, c in people.items()}
        assert seen == {"ann": everything, "bob": everything, "carol": [], "vera": []}

        # A change reaches each reader with their own operations.
        seq = await people["bob"].dispatch(
            CATALOGUE,
            {"type": "automation/updateRequested", "resource": resource, "changes": {"title": "B"}},
        )
        assert "rejectionReason" not in await people["bob"].answer_to(seq)
        for name, client in people.items():
            envelope = await client.recv_until(
                lambda f: (
                    f.get("method") == "action"
                    and f["params"]["action"]["type"] == "automation/set"
                    and f["params"]["action"]["automation"]["definition"]["title"] == "B"
                )
            )
            assert envelope["params"]["action"]["automation"]["operations"] == seen[name], name
            await client.assert_replay_agrees([CATALOGUE])
