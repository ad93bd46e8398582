"""The host's own tools on the Claude CLI's in-process ``ahp`` MCP server, run by the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from anthropic_server import ToolUse, reply
from conftest import chat_state, connect_and_open, start_turn, turn_end

pytestmark = pytest.mark.anyio

PR = "https://github.com/octo/repo/pull/9"


async def test_the_model_sees_the_server_tools_and_an_artifact_it_adds_is_published(
    claude_host, anthropic, workdir: Path
):
    anthropic.script(
        reply(
            ToolUse(
                "mcp__ahp__add_artifact_or_reference",
                {
                    "items": [
                        {"type": "pullRequest", "label": "The fix", "isArtifact": True, "link": PR}
                    ]
                },
            )
        ),
        reply("Recorded."),
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert "add_artifact_or_reference" in [t["name"] for t in state["serverTools"]]
        await start_turn(client, chat, "record the PR", "t1")
        end = await turn_end(client, chat, timeout=60)
        assert end["type"] == "chat/turnComplete", end
        # The model was offered the host's tools beside its own (this CLI may defer MCP
        # tools behind its ToolSearch).
        offered = [t.get("name") for t in anthropic.main_requests()[0].body.get("tools", [])]
        assert "mcp__ahp__add_artifact_or_reference" in offered or "ToolSearch" in offered
        # It ran without asking anyone, and the model got the host's answer.
        said = json.dumps(anthropic.main_requests()[-1].tool_results())
        assert "Added artifact: " in said and PR in said
        call = next(
            p["toolCall"]
            for p in (await chat_state(client, chat))["turns"][0]["responseParts"]
            if p["kind"] == "toolCall"
        )
        assert call["status"] == "completed"
        meta = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"][
            "_meta"
        ]
        [entry] = meta["agentHost/sessionArtifacts"]
        assert (entry["type"], entry["link"], entry["isGitHub"]) == ("pullRequest", PR, True)
        await client.assert_replay_agrees()
        live = (await chat_state(client, chat))["turns"][0]
    # Rebuilt from the CLI's transcript, the call is the same MCP call, completed.
    async with claude_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        rebuilt = (await chat_state(client, chat))["turns"][0]
        calls = [
            (p["toolCall"]["toolName"], p["toolCall"]["status"])
            for turn in (live, rebuilt)
            for p in turn["responseParts"]
            if p["kind"] == "toolCall"
        ]
        assert calls[0] == calls[1] == ("mcp__ahp__add_artifact_or_reference", "completed")
        # The artifact outlives the restart with the session's record.
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state["_meta"]["agentHost/sessionArtifacts"][0]["link"] == PR
