"""What the real CLI is told about the host's artifact tools, and root config switching them off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from anthropic_server import reply
from conftest import ClaudePlugin, connect_and_open, start_turn, turn_end

import ahp_vscode.plugin
from ahpcore.testing import host_factory

pytestmark = pytest.mark.anyio

ARTIFACT_TOOLS = {
    "add_artifact_or_reference",
    "remove_artifact_or_reference",
    "list_artifacts_and_references",
}


def system_of(anthropic) -> str:  # type: ignore[no-untyped-def]
    return json.dumps(anthropic.main_requests()[0].body.get("system"))


async def test_the_model_is_told_when_to_record_an_artifact(claude_host, anthropic, workdir: Path):
    anthropic.script(reply("Fine."))
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hello", "t1")
        assert (await turn_end(client, chat, timeout=60))["type"] == "chat/turnComplete"
        said = system_of(anthropic)
        assert "add_artifact_or_reference" in said
        assert "recording nothing is the normal case" in said


async def test_artifact_tools_false_takes_the_tools_and_their_instruction_away(
    claude_env, anthropic, workdir: Path, tmp_path: Path
):
    """VS Code's window pushes artifactTools (ahp-vscode declares it) from
    chat.artifactTools.enabled."""
    anthropic.script(reply("Fine."))
    plugins = [("claude", ClaudePlugin(claude_env)), ("vscode", ahp_vscode.plugin)]
    async with host_factory(plugins)(tmp_path / "state") as running:
        client = await running.connect("admin")
        await client.initialize()
        seq = await client.dispatch(
            "ahp-root://", {"type": "root/configChanged", "config": {"artifactTools": False}}
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        client, session, chat = await connect_and_open(running, workdir)
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        names = {tool["name"] for tool in state["serverTools"]}
        assert not names & ARTIFACT_TOOLS and "list_sessions" in names
        await start_turn(client, chat, "hello", "t1")
        assert (await turn_end(client, chat, timeout=60))["type"] == "chat/turnComplete"
        said = system_of(anthropic)
        assert "add_artifact_or_reference" not in said
        offered = [t.get("name") for t in anthropic.main_requests()[0].body.get("tools", [])]
        assert "mcp__ahp__add_artifact_or_reference" not in offered
