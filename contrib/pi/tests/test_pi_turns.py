"""Turns with the real pi CLI: text, tool calls, usage, cancel and steering."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from pi_support import (
    MODEL,
    AnthropicServer,
    Hold,
    Text,
    ToolUse,
    chat_state,
    connect_and_open,
    is_action,
    parts,
    pi_host,
    reply,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def test_a_turn_streams_text_and_runs_tools(
    pi: Path, api: AnthropicServer, tmp_path: Path, workdir: Path
):
    api.script(
        reply("Hello from the script."),
        reply(ToolUse("bash", {"command": "printf made > out.txt && echo wrote it"})),
        reply("The file is there."),
    )
    async with pi_host(tmp_path / "state") as running:
        client, _session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "say hello", "turn-1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        [said] = parts(state)
        assert said["kind"] == "markdown" and said["content"] == "Hello from the script."
        usage = state["turns"][-1]["usage"]
        assert (usage["inputTokens"], usage["outputTokens"]) == (12, 7)
        assert usage["model"] == f"anthropic/{MODEL}"

        await start_turn(client, chat, "make a file", "turn-2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert (workdir / "out.txt").read_text() == "made"
        state = await chat_state(client, chat)
        call, text = parts(state)
        assert call["kind"] == "toolCall"
        tool = call["toolCall"]
        assert tool["toolName"] == "bash" and tool["status"] == "completed"
        assert tool["invocationMessage"].startswith("Running `printf made")
        assert tool["_meta"]["toolKind"] == "terminal"
        assert tool["content"] == [{"type": "text", "text": "wrote it\n"}] or "wrote it" in str(
            tool["content"]
        )
        assert text["content"] == "The file is there."
        # pi sent the tool's result back to the model.
        [result] = api.main_requests()[-1].tool_results()
        assert "wrote it" in str(result["content"])


async def test_a_cancelled_turn_aborts_pi_and_the_next_turn_runs(
    pi: Path, api: AnthropicServer, tmp_path: Path, workdir: Path
):
    hold = Hold()
    api.script(reply(Text("Thinking about it for a long while", hold=hold)), reply("Next."))
    async with pi_host(tmp_path / "state") as running:
        client, _session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "take your time", "turn-1")
        # The first words open the reply's part; the rest are held back.
        await client.recv_until(is_action("chat/responsePart", chat), timeout=60)
        assert hold.reached.is_set()
        await client.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": "turn-1", "duration": 0}
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnCancelled"
        # pi hung up on the model when it was told to abort.
        assert await anyio.to_thread.run_sync(hold.closed.wait, 20)
        await start_turn(client, chat, "go on", "turn-2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        assert parts(state)[-1]["content"] == "Next."


async def test_a_steering_message_reaches_pi_within_the_running_turn(
    pi: Path, api: AnthropicServer, tmp_path: Path, workdir: Path
):
    hold = Hold()
    api.script(
        reply(Text("Working on it", hold=hold), ToolUse("bash", {"command": "echo step one"})),
        reply("Steered ending.", match="change course"),
    )
    state_dir = tmp_path / "state"
    async with pi_host(state_dir) as running:
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "a long job", "turn-1")
        await client.recv_until(is_action("chat/responsePart", chat), timeout=60)
        await client.dispatch(
            chat,
            {
                "type": "chat/pendingMessageSet",
                "kind": "steering",
                "id": "s1",
                "message": {"text": "change course", "origin": {"kind": "user"}},
            },
        )
        removed = await client.recv_until(is_action("chat/pendingMessageRemoved", chat))
        assert removed["params"]["action"]["id"] == "s1"
        hold.release.set()
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        live = await chat_state(client, chat)
        assert [p["kind"] for p in parts(live)] == ["markdown", "toolCall", "markdown"]
        assert parts(live)[-1]["content"] == "Steered ending."
    # Rebuilt from pi's file, the steering message stays inside its turn.
    async with pi_host(state_dir) as running:
        client = await running.connect("c2")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        rebuilt = await chat_state(client, chat)
        assert [t["id"] for t in rebuilt["turns"]] == ["turn-1"]
        assert parts(rebuilt) == parts(live)
