"""VS Code's terminal auto-approve rules answer the real Claude CLI's Bash calls before a
person is asked (``ahp_tool_confirming``), against the scripted API over a real socket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from anthropic_server import ToolUse, reply
from conftest import ClaudePlugin, chat_state, connect_and_open, is_action, start_turn, turn_end

from ahp_vscode.plugin import VSCodePlugin
from ahpcore.testing import host_factory

pytestmark = pytest.mark.anyio

RULES = {"touch": True, "rm": False}


async def test_a_bash_command_the_rules_decide_is_never_put_to_a_person(
    anthropic, claude_env: dict[str, str], tmp_path: Path, workdir: Path
) -> None:
    anthropic.script(
        reply(ToolUse("Bash", {"command": "touch made", "description": "Make a file"})),
        reply("Made it."),
        reply(ToolUse("Bash", {"command": "rm made", "description": "Remove it"})),
        reply("Could not."),
    )
    plugins = [("claude", ClaudePlugin(claude_env)), ("vscode", VSCodePlugin())]
    async with host_factory(plugins)(tmp_path / "state") as running:
        client, session, chat = await connect_and_open(running, workdir)
        push = {"terminalAutoApproveEnabled": True, "terminalAutoApproveRules": RULES}
        seq = await client.dispatch("ahp-root://", {"type": "root/configChanged", "config": push})
        assert "rejectionReason" not in await client.answer_to(seq)

        await start_turn(client, chat, "make a file", "t1")
        assert (await turn_end(client, chat, timeout=60))["type"] == "chat/turnComplete"
        assert (workdir / "made").exists()
        await start_turn(client, chat, "remove it", "t2")
        assert (await turn_end(client, chat, timeout=60))["type"] == "chat/turnComplete"
        assert (workdir / "made").exists()

        assert not [f for f in client.frames if is_action("session/inputNeededSet", session)(f)]
        state = await chat_state(client, chat)
        made, removed = (
            next(p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall")
            for turn in state["turns"]
        )
        assert made["status"] == "completed" and made["confirmed"] == "setting"
        assert "rule touch" in made["_meta"]["ahp.confirmedBy"]
        assert removed["status"] == "cancelled" and "rule rm" in removed["reasonMessage"]
        # The model is told which rule refused it, as it would be told a person's words.
        told = json.dumps(anthropic.main_requests()[-1].tool_results())
        assert "denied by the rule rm" in told

    # Reopened after a restart, the calls say who decided, as they did live.
    async with host_factory(plugins)(tmp_path / "state") as running:
        client = await running.connect("c2")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        state = await chat_state(client, chat)
        made, removed = (
            next(p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall")
            for turn in state["turns"]
        )
        assert made["confirmed"] == "setting"
        assert removed["status"] == "cancelled" and "rule rm" in removed["reasonMessage"]
