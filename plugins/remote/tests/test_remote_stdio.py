"""A remote machine reached as a child ``ahp serve --stdio``: its providers, turns and approvals."""

from __future__ import annotations

from pathlib import Path

import pytest
from remote_support import (
    MACHINE,
    PROVIDER,
    approve,
    chat_state,
    client_of,
    inner_command,
    machines_env,
    open_session,
    outer_host,
    root_agents,
    said,
    start_turn,
    tools,
    turn_end,
)

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
