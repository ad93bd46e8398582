"""Live turns with an ACP agent run as a real subprocess, over a real host and socket."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from acp_support import (
    PROVIDER,
    acp_host,
    backend_of,
    chat_of,
    chat_state,
    connect_and_open,
    is_action,
    parts,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def test_a_turn_streams_thinking_text_title_and_usage(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hello", "t1")
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        state = await chat_state(client, chat)
        assert [(p["kind"], p["content"]) for p in parts(state)] == [
            ("reasoning", "Greeting. "),
            ("markdown", "Hello there"),
        ]
        usage = state["turns"][-1]["usage"]
        assert (usage["inputTokens"], usage["outputTokens"], usage["model"]) == (10, 4, "fast")
        assert usage["_meta"]["ahp.context"] == {"used": 1200, "size": 200000}
        # The agent says its commands soon after the session starts, in its own time: maybe
        # before this client subscribed (then its snapshot has them), maybe after.
        session_state = (await client.request("subscribe", {"channel": session}))["snapshot"][
            "state"
        ]
        if not session_state.get("customizations"):
            await client.recv_until(is_action("session/customizationsChanged", session), timeout=10)
            session_state = (await client.request("subscribe", {"channel": session}))["snapshot"][
                "state"
            ]
        assert session_state["title"] == "A greeting"
        assert session_state["_meta"]["ahp.model"] == "fast"
        # The slash menu: the agent's commands, as prompts in one container.
        [commands] = session_state["customizations"]
        assert [c["name"] for c in commands["children"]] == ["review"]
        assert commands["children"][0]["_meta"] == {"ahp.argumentHint": "what to look at"}


async def test_the_agent_is_listed_with_what_it_said_of_itself(fake_agent, tmp_path: Path):
    async with acp_host(tmp_path / "state") as running:
        client = await running.connect("c1")
        await client.initialize()
        backend = backend_of(running)
        with anyio.fail_after(20):
            while backend.info is None:
                await anyio.sleep(0.05)
        await client.sync()
        root = (await client.request("subscribe", {"channel": "ahp-root://"}))["snapshot"]["state"]
        [agent] = [a for a in root["agents"] if a["provider"] == PROVIDER]
        assert agent["displayName"] == "Fake"
        assert "Fake agent 1.0" in agent["description"]
        assert backend.abilities.resume and backend.abilities.list_sessions


async def test_a_plan_is_one_call_that_ends_with_the_turn(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "plan", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        [plan] = [p["toolCall"] for p in parts(state) if p["kind"] == "toolCall"]
        assert plan["status"] == "completed" and plan["displayName"] == "Plan"
        assert plan["content"][0]["text"] == "- [x] Look around\n- [x] Say so"
        progress = [
            a["action"]["_meta"]["progressMessage"]
            for a in client.actions_for(chat)
            if a["action"]["type"] == "chat/toolCallContentChanged"
        ]
        assert progress == ["0/2 done: Look around", "2/2 done"]


async def test_a_model_picked_with_a_message_reaches_the_agent(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hello", "t1", model={"id": "smart"})
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        assert state["turns"][-1]["usage"]["model"] == "smart"
        meta = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"][
            "_meta"
        ]
        assert meta["ahp.model"] == "smart"
        # Once a session said which models it offers, the agent lists them.
        root = (await client.request("subscribe", {"channel": "ahp-root://"}))["snapshot"]["state"]
        [agent] = [a for a in root["agents"] if a["provider"] == PROVIDER]
        assert [m["id"] for m in agent["models"]] == ["fast", "smart"]


async def test_a_mode_change_reaches_the_agent_and_comes_back(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, session, _ = await connect_and_open(running, workdir)
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        # The agent tells its modes only in session/new: its first session offers them.
        mode = state["config"]["schema"]["properties"]["mode"]
        assert (mode["enum"], mode["default"]) == (["ask", "code"], "ask")
        seq = await client.dispatch(
            session, {"type": "session/configChanged", "config": {"mode": "code"}}
        )
        answer = await client.answer_to(seq)
        assert "rejectionReason" not in answer, answer["rejectionReason"]
        live = chat_of(
            running,
            (await client.request("subscribe", {"channel": session}))["snapshot"]["state"][
                "defaultChat"
            ],
        )
        with anyio.fail_after(10):
            while live.mode != "code":  # the agent said current_mode_update back
                await anyio.sleep(0.02)
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state["config"]["values"]["mode"] == "code"
        assert state["config"]["schema"]["properties"]["mode"]["enum"] == ["ask", "code"]
        seq = await client.dispatch(
            session, {"type": "session/configChanged", "config": {"mode": "yolo"}}
        )
        answer = await client.answer_to(seq)
        assert "no mode 'yolo'" in answer["rejectionReason"]
