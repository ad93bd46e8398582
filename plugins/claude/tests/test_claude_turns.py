"""Live turns with the real Claude Code CLI against the scripted API, over a real socket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import Thinking, ToolUse, reply
from conftest import open_session

pytestmark = pytest.mark.anyio


def message(text: str) -> dict[str, Any]:
    return {"text": text, "origin": {"kind": "user"}}


async def start_turn(client: Any, chat: str, text: str, turn_id: str) -> None:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-30T00:00:00.000Z",
            "message": message(text),
        },
    )
    await client.answer_to(seq)


def is_action(kind: str, channel: str | None = None) -> Any:
    def match(frame: dict[str, Any]) -> bool:
        return (
            frame.get("method") == "action"
            and frame["params"]["action"]["type"] == kind
            and (channel is None or frame["params"]["channel"] == channel)
            and "rejectionReason" not in frame["params"]
        )

    return match


async def turn_end(client: Any, chat: str, timeout: float = 30) -> dict[str, Any]:
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"]["type"]
            in ("chat/turnComplete", "chat/turnCancelled", "chat/error")
        ),
        timeout=timeout,
    )
    return dict(frame["params"]["action"])


async def chat_state(client: Any, chat: str) -> dict[str, Any]:
    await client.sync()
    return (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]


async def test_a_text_turn_streams_thinking_and_text(claude_host, anthropic, workdir: Path):
    anthropic.script(reply(Thinking("Let me see."), "Hello from Claude", cache_read=5))
    async with claude_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client, workdir)
        await start_turn(client, chat, "hi there", "t1")
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        deltas = [
            a["action"] for a in client.actions_for(chat) if a["action"]["type"] == "chat/delta"
        ]
        assert deltas  # streamed in pieces, not one block at the end
        state = await chat_state(client, chat)
        parts = state["turns"][-1]["responseParts"]
        assert [(p["kind"], p["content"]) for p in parts] == [
            ("reasoning", "Let me see."),
            ("markdown", "Hello from Claude"),
        ]
        usage = state["turns"][-1]["usage"]
        assert usage["inputTokens"] == 12 and usage["cacheReadTokens"] == 5
        [request] = anthropic.main_requests()
        assert "hi there" in request.tail_text()


async def test_a_bash_call_asks_and_runs_once_approved(claude_host, anthropic, workdir: Path):
    anthropic.script(
        reply(
            ToolUse("Bash", {"command": "touch made && echo done", "description": "Make a file"})
        ),
        reply("Made it."),
    )
    async with claude_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client, workdir)
        await start_turn(client, chat, "make a file", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        request = needed["params"]["action"]["request"]
        assert request["kind"] == "toolConfirmation"
        call = request["toolCall"]["toolCallId"]
        assert call.startswith("toolu_")  # the model's own tool-use id
        start = next(
            a["action"]
            for a in client.actions_for(chat)
            if a["action"]["type"] == "chat/toolCallStart"
        )
        assert start["_meta"] == {"toolKind": "terminal"}
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": call,
                "approved": True,
                "confirmed": "user-action",
            },
        )
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        assert (workdir / "made").exists()
        state = await chat_state(client, chat)
        tool = next(
            p["toolCall"] for p in state["turns"][0]["responseParts"] if p["kind"] == "toolCall"
        )
        assert tool["status"] == "completed" and tool["confirmed"] == "user-action"
        assert json.loads(tool["toolInput"])["command"] == "touch made && echo done"
        assert "done" in tool["content"][0]["text"]
        assert state["turns"][0]["responseParts"][-1]["content"] == "Made it."
