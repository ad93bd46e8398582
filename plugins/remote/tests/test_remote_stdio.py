"""A remote machine reached as a child ``ahp serve --stdio``: its providers, turns and approvals."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest
from remote_support import (
    MACHINE,
    PROVIDER,
    approve,
    chat_state,
    client_of,
    inner_command,
    is_action,
    machine_of,
    machines_env,
    open_session,
    outer_host,
    root_agents,
    said,
    start_turn,
    subscribe,
    tools,
    turn_end,
)

from ahp_remote.link import PipeLink

pytestmark = pytest.mark.anyio


@pytest.fixture
def stdio_machine(inner_state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AHP_REMOTE_MACHINES",
        machines_env(**{MACHINE: {"command": inner_command(inner_state)}}),
    )


async def test_remote_providers_are_listed_by_machine(
    stdio_machine: None, outer_state: Path
) -> None:
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        agents = await root_agents(client)
        assert set(agents) == {PROVIDER}
        agent = agents[PROVIDER]
        assert agent["displayName"] == f"Inner agent on {MACHINE}"
        assert "Not available" not in agent["description"]
        assert all(model["provider"] == PROVIDER for model in agent["models"])


async def test_a_turn_with_an_approval_is_relayed(
    stdio_machine: None, outer_state: Path, workdir: Path
) -> None:
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        _, chat = await open_session(client, workdir)
        await start_turn(client, chat, "echo hi there")
        asked = await approve(client, chat)
        assert asked["confirmationTitle"] == "Echo this?"
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        state = await chat_state(client, chat)
        assert said(state) == "I will echo it. echo: hi there"
        (call,) = tools(state)
        assert call["toolName"] == "echo"
        assert call["status"] == "completed" and call["success"] is True
        assert state["turns"][-1]["usage"]["inputTokens"] == 7


async def test_a_denied_approval_is_relayed(
    stdio_machine: None, outer_state: Path, workdir: Path
) -> None:
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        _, chat = await open_session(client, workdir)
        await start_turn(client, chat, "echo no")
        await approve(client, chat, approved=False)
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        state = await chat_state(client, chat)
        assert said(state) == "I will echo it.Not echoing."


async def test_a_killed_link_ends_the_turn_and_the_machine_comes_back(
    stdio_machine: None, outer_state: Path, workdir: Path
) -> None:
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        _, chat = await open_session(client, workdir)
        machine = machine_of(running)
        await start_turn(client, chat, "long")
        await client.recv_until(is_action("chat/responsePart", chat))
        link = machine.link
        assert isinstance(link, PipeLink) and link.process is not None
        link.process.kill()  # the machine's host dies with its link
        end = await turn_end(client, chat)
        assert end["type"] == "chat/error"
        assert f"the link to {MACHINE} dropped mid-turn" in end["part"]["error"]["message"]
        # A child host is started again, and the session is reopened from its store.
        await start_turn(client, chat, "hello")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert said(await chat_state(client, chat)) == "hello from the inner host"
        assert machine.link is not link


async def test_the_outer_host_restarts_and_reopens(
    stdio_machine: None, outer_state: Path, workdir: Path
) -> None:
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        session, chat = await open_session(client, workdir)
        await start_turn(client, chat, "echo kept")
        await approve(client, chat)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        listed = await client.request("listSessions", {"channel": "ahp-root://"})
        assert session in [row["resource"] for row in listed["items"]]
        chat = await subscribe(client, session)
        state = await chat_state(client, chat)
        assert said(state) == "I will echo it. echo: kept"
        (call,) = tools(state)
        assert call["status"] == "completed" and call["confirmed"] == "user-action"


async def test_a_machine_that_is_down_is_listed_with_why(
    outer_state: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fails = [sys.executable, "-c", "import sys; print('no ahp here', file=sys.stderr); sys.exit(3)"]
    monkeypatch.setenv("AHP_REMOTE_MACHINES", machines_env(**{MACHINE: {"command": fails}}))
    monkeypatch.setenv("AHP_REMOTE_PROBE_SECONDS", "1")
    started = time.monotonic()
    async with outer_host(outer_state) as running:
        assert time.monotonic() - started < 10
        client = await client_of(running)
        agents = await root_agents(client)
        agent = agents[f"remote-{MACHINE}"]
        assert agent["displayName"] == MACHINE
        assert "Not available" in agent["description"]
        assert "no ahp here" in agent["description"]
        frame = await client.request_frame(
            "createSession",
            {
                "channel": f"remote-{MACHINE}:/{uuid.uuid4()}",
                "provider": f"remote-{MACHINE}",
                "workingDirectories": [workdir.as_uri()],
            },
        )
        assert "not reachable" in frame["error"]["message"]


async def test_a_subagent_runs_in_a_child_chat_here(
    stdio_machine: None, outer_state: Path, workdir: Path
) -> None:
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        session, chat = await open_session(client, workdir)
        await start_turn(client, chat, "delegate")
        linked = await client.recv_until(
            lambda f: (
                is_action("chat/toolCallContentChanged", chat)(f)
                and any(c["type"] == "subagent" for c in f["params"]["action"]["content"])
            ),
            timeout=30,
        )
        (item,) = linked["params"]["action"]["content"]
        child = item["resource"]
        assert child.startswith(chat + "/subagent/") and item["agentName"] == "helper"
        # The subagent's tool asks in its own chat here, and the answer goes there.
        state = (await client.request("subscribe", {"channel": child}))["snapshot"]["state"]
        active = state.get("activeTurn") or {}
        asking = [
            p["toolCall"]
            for p in active.get("responseParts", [])
            if p.get("kind") == "toolCall" and p["toolCall"]["status"] == "pending-confirmation"
        ]
        if asking:
            call_id, turn_id = asking[0]["toolCallId"], active["id"]
        else:
            ready = await client.recv_until(
                lambda f: (
                    is_action("chat/toolCallReady", child)(f)
                    and "confirmed" not in f["params"]["action"]
                ),
                timeout=30,
            )
            call_id = ready["params"]["action"]["toolCallId"]
            turn_id = ready["params"]["action"]["turnId"]
        await client.dispatch(
            child,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": turn_id,
                "toolCallId": call_id,
                "approved": True,
                "confirmed": "user-action",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert said(await chat_state(client, chat)) == "helper said: found a b c"
        child_state = await chat_state(client, child)
        assert said(child_state) == "child says hi"
        (call,) = tools(child_state)
        assert call["toolName"] == "ls" and call["confirmed"] == "user-action"
        (parent_call,) = tools(await chat_state(client, chat))
        kinds = [c["type"] for c in parent_call["content"]]
        assert kinds.count("subagent") == 1, parent_call
    # Reopened after a restart here, the subagent's chat is rebuilt from the machine's.
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        await subscribe(client, session)
        assert said(await chat_state(client, chat)) == "helper said: found a b c"
        child_state = await chat_state(client, child)
        assert said(child_state) == "child says hi"
        (call,) = tools(child_state)
        assert call["toolName"] == "ls" and call["confirmed"] == "user-action"
