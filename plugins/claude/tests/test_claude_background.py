"""Background work, the turns the CLI starts by itself, and the model in the session's _meta,
with the real Claude Code CLI against the scripted API, over a real socket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import Hold, ToolUse, reply
from conftest import (
    agent_of,
    chat_state,
    confirm,
    connect_and_open,
    is_action,
    message,
    reached,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


def sent(client: Any, chat: str, kind: str) -> list[dict[str, Any]]:
    return [a["action"] for a in client.actions_for(chat) if a["action"]["type"] == kind]


async def the_cli_follows_up(client: Any, chat: str) -> dict[str, Any]:
    """The turn the CLI starts once its background work ended, run to its end."""
    started = (await client.recv_until(is_action("chat/turnStarted", chat)))["params"]["action"]
    assert started["message"]["origin"] == {"kind": "systemNotification"}
    end = await turn_end(client, chat)
    assert end["turnId"] == started["turnId"] and end["type"] == "chat/turnComplete", end
    return dict(started["message"])


async def test_a_background_shell_is_listed_until_it_ends_and_the_cli_then_follows_up(
    claude_host, anthropic, workdir: Path
):
    gate = workdir / "gate"
    command = f"for i in $(seq 300); do [ -e {gate} ] && break; sleep 0.1; done; echo waited"
    bash = {"command": command, "description": "Wait for the gate", "run_in_background": True}
    anthropic.script(
        reply(ToolUse("Bash", bash, id="toolu_bg_shell")),
        reply("Started it."),
        reply("The wait is over."),
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "wait in the background", "t1")
        ready = await client.recv_until(is_action("chat/toolCallReady", chat))
        if "confirmed" not in ready["params"]["action"]:
            await confirm(client, chat, "t1", "toolu_bg_shell", True)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        (work,) = (await chat_state(client, chat))["backgroundWork"]
        assert work["id"].startswith("shell:") and work["kind"] == "shell"
        assert (work["label"], work["command"]) == ("Wait for the gate", command)
        gate.touch()
        said = await the_cli_follows_up(client, chat)
        assert 'Background command "Wait for the gate" completed' in said["text"]
        assert len(sent(client, chat, "chat/backgroundWorkSet")) == 1  # said once
        assert sent(client, chat, "chat/backgroundWorkRemoved") == [
            {"type": "chat/backgroundWorkRemoved", "id": work["id"]}
        ]
        state = await chat_state(client, chat)
        assert not state.get("backgroundWork")
        live = state["turns"][-1]
        assert live["responseParts"][-1]["content"] == "The wait is over."
        assert live["usage"]["outputTokens"] > 0
    # Read back from the transcript after a restart, the CLI's turn is the same turn.
    async with claude_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        rebuilt = (await chat_state(client, chat))["turns"][-1]
        assert (rebuilt["id"], rebuilt["message"]) == (live["id"], live["message"])
        assert rebuilt["responseParts"] == live["responseParts"]


async def test_a_background_subagent_links_its_chat_and_its_end_starts_a_turn(
    claude_host, anthropic, workdir: Path
):
    hold = Hold()  # the subagent answers once its parent's turn is over
    task = {
        "description": "Look around",
        "prompt": "Find the answer",
        "subagent_type": "general-purpose",
        "run_in_background": True,
    }
    anthropic.script(
        reply(ToolUse("Agent", task, id="toolu_bg_agent")),
        reply(hold, "The answer is 42.", match="Find the answer"),
        reply("My helper is on it."),
        reply("My helper found 42."),
    )
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "delegate", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        (work,) = state["backgroundWork"]
        call = next(
            p["toolCall"] for p in state["turns"][0]["responseParts"] if p["kind"] == "toolCall"
        )
        assert work["kind"] == "subagent" and work["label"] == "Look around"
        assert work["chat"] == call["_meta"]["subagentChatUri"]
        await client.request("subscribe", {"channel": work["chat"]})  # the chat exists
        hold.release.set()
        said = await the_cli_follows_up(client, chat)
        assert said["text"] == 'Agent "Look around" finished'
        state = await chat_state(client, chat)
        assert not state.get("backgroundWork")
        assert state["turns"][-1]["responseParts"][-1]["content"] == "My helper found 42."


async def test_the_session_meta_names_the_model_the_cli_runs_on(
    claude_host, anthropic, workdir: Path
):
    anthropic.script(reply("Hi"), reply("Hi again"), reply("Hi once more"))
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hi", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        first = anthropic.main_requests()[-1].body["model"]
        assert (await chat_state(client, session))["_meta"]["ahp.model"] == first
        agent = agent_of(running, chat)
        # What each alias runs, as this CLI lists it.
        models = {m["value"]: m["resolvedModel"] for m in agent.model_meta.models}
        assert models["haiku"] != first != models["sonnet"]

        async def said(model: str) -> None:
            await client.recv_until(
                lambda f: (
                    is_action("session/metaChanged", session)(f)
                    and f["params"]["action"]["_meta"].get("ahp.model") == model
                )
            )

        # The CLI's own switch (a slash command run as a turn) is said before the next turn.
        await start_turn(client, chat, "/model haiku", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await said(models["haiku"])
        await start_turn(client, chat, "hi", "t3")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert anthropic.main_requests()[-1].body["model"] == models["haiku"]
        # A client's pick travels with its message (Message.model, with the model's config).
        seq = await client.dispatch(
            chat,
            {
                "type": "chat/turnStarted",
                "turnId": "t4",
                "startedAt": "2026-11-30T00:00:00.000Z",
                "message": {
                    **message("hi"),
                    "model": {"id": "sonnet", "config": {"thinkingLevel": "low"}},
                },
            },
        )
        await client.answer_to(seq)
        await said(models["sonnet"])
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert (await chat_state(client, session))["_meta"]["ahp.model"] == models["sonnet"]
        request = anthropic.main_requests()[-1].body
        assert request["model"] == models["sonnet"]
        # The thinking level restarted the CLI at that effort, resuming the same transcript.
        assert request["output_config"]["effort"] == "low"
        assert "Hi again" in json.dumps(request["messages"])


async def test_a_background_subagent_keeps_its_chat_turn_after_its_parent_turn_ended(
    claude_host, anthropic, workdir: Path
):
    hold = Hold()  # the subagent works on once its parent's turn is over
    task = {
        "description": "Look around",
        "prompt": "Find the answer",
        "subagent_type": "general-purpose",
        "run_in_background": True,
    }
    bash = {"command": "touch bg-marker", "description": "Leave a marker"}
    anthropic.script(
        reply(ToolUse("Agent", task, id="toolu_bg_agent")),
        reply(hold, ToolUse("Bash", bash, id="toolu_bg_bash"), match="Find the answer"),
        reply("My helper is on it."),
        reply("The answer is 42."),
        reply("My helper found 42."),
    )
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "delegate", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        (work,) = (await chat_state(client, chat))["backgroundWork"]
        child = work["chat"]
        # The child's turn outlives its parent's: the subagent still runs.
        assert (await chat_state(client, child)).get("activeTurn", {}).get("id") == "toolu_bg_agent"
        hold.release.set()
        # Its later calls, and their approvals, happen in its own chat.
        ready = await client.recv_until(is_action("chat/toolCallReady", child))
        assert ready["params"]["action"]["toolCallId"] == "toolu_bg_bash"
        assert "confirmed" not in ready["params"]["action"]  # it asks, in the child chat
        await confirm(client, child, "toolu_bg_agent", "toolu_bg_bash", True)
        assert (await turn_end(client, child))["type"] == "chat/turnComplete"
        parts = (await chat_state(client, child))["turns"][-1]["responseParts"]
        calls = [p["toolCall"] for p in parts if p["kind"] == "toolCall"]
        assert [(c["toolCallId"], c["status"]) for c in calls] == [("toolu_bg_bash", "completed")]
        assert parts[-1]["content"] == "The answer is 42."
        assert (workdir / "bg-marker").exists()
        # What the CLI said of its progress: the child chat's activity, the work entry's _meta.
        assert {"type": "chat/activityChanged", "activity": "Running Leave a marker"} in sent(
            client, child, "chat/activityChanged"
        )
        assert not (await chat_state(client, child)).get("activity")  # cleared at its end
        progressed = [a["work"].get("_meta") for a in sent(client, chat, "chat/backgroundWorkSet")]
        assert {"ahp.progress": "Running Leave a marker", "ahp.lastToolName": "Bash"}.items() <= (
            progressed[-1] or {}
        ).items()
        assert progressed[-1]["ahp.toolUses"] >= 1
        said = await the_cli_follows_up(client, chat)
        assert said["text"] == 'Agent "Look around" finished'


async def test_a_reopened_session_names_its_model_before_its_first_turn(
    claude_host, anthropic, workdir: Path
):
    anthropic.script(reply("Hi"), reply("Hi again"), reply("Hi once more"))
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "/model haiku", "t1")  # the CLI's own switch
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await start_turn(client, chat, "hi", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        ran = anthropic.main_requests()[-1].body["model"]
        assert (await chat_state(client, session))["_meta"]["ahp.model"] == ran
    async with claude_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        assert (await chat_state(client, session)).get("_meta", {}).get("ahp.model") == ran
        # Its CLI then says what it runs on now, as before.
        chat = (await chat_state(client, session))["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        await start_turn(client, chat, "hi", "t3")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        now = anthropic.main_requests()[-1].body["model"]
        assert (await chat_state(client, session))["_meta"]["ahp.model"] == now


async def test_a_subagent_the_cli_runs_in_the_background_unasked_is_live_in_its_chat(
    claude_host, anthropic, workdir: Path
):
    # No run_in_background: this CLI backgrounds the Agent call anyway, and says so only
    # in what it reports of the task.
    hold = Hold()
    task = {"description": "Look around", "prompt": "Find the answer"}
    anthropic.script(
        reply(ToolUse("Agent", task, id="toolu_unasked")),
        reply(hold, "The answer is 42.", match="Find the answer"),
        reply("My helper is on it."),
        reply("My helper found 42."),
    )
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "delegate", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        (work,) = (await chat_state(client, chat))["backgroundWork"]
        child = work["chat"]
        # The subagent still works: its chat's turn is open, not an empty finished one.
        child_state = await chat_state(client, child)
        assert child_state.get("activeTurn", {}).get("id") == "toolu_unasked", child_state
        hold.release.set()
        assert (await turn_end(client, child))["type"] == "chat/turnComplete"
        parts = (await chat_state(client, child))["turns"][-1]["responseParts"]
        assert parts[-1]["content"] == "The answer is 42."
        said = await the_cli_follows_up(client, chat)
        assert said["text"] == 'Agent "Look around" finished'


async def test_a_message_sent_as_the_cli_starts_its_own_turn_is_queued_not_lost(
    claude_host, anthropic, workdir: Path
):
    gate = workdir / "gate"
    command = f"for i in $(seq 300); do [ -e {gate} ] && break; sleep 0.1; done; echo waited"
    bash = {"command": command, "description": "Wait for the gate", "run_in_background": True}
    answering = Hold()  # the CLI's own turn is still answering when the person's message comes
    anthropic.script(
        reply(ToolUse("Bash", bash, id="toolu_bg_shell")),
        reply("Started it."),
        reply(answering, "The wait is over."),
        reply("Here is your answer.", match="and one more thing"),
    )
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "wait in the background", "t1")
        ready = await client.recv_until(is_action("chat/toolCallReady", chat))
        if "confirmed" not in ready["params"]["action"]:
            await confirm(client, chat, "t1", "toolu_bg_shell", True)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        gate.touch()
        own = (await client.recv_until(is_action("chat/turnStarted", chat)))["params"]["action"]
        assert own["message"]["origin"] == {"kind": "systemNotification"}
        await reached(answering)
        # The person's window had not seen the CLI's turn begin: it sends a turn of its own.
        seq = await client.dispatch(
            chat,
            {
                "type": "chat/turnStarted",
                "turnId": "t2",
                "startedAt": "2026-11-30T00:00:00.000Z",
                "message": message("and one more thing"),
            },
        )
        answer = await client.answer_to(seq)
        assert "rejectionReason" not in answer, answer
        assert answer["action"] == {
            "type": "chat/pendingMessageSet",
            "kind": "queued",
            "id": "t2",
            "message": message("and one more thing"),
        }
        assert [m["id"] for m in (await chat_state(client, chat))["queuedMessages"]] == ["t2"]
        answering.release.set()
        end = await turn_end(client, chat)
        assert (end["turnId"], end["type"]) == (own["turnId"], "chat/turnComplete")
        # Once the CLI's turn is over, the queued message runs as the next turn.
        mine = (await client.recv_until(is_action("chat/turnStarted", chat)))["params"]["action"]
        assert mine["queuedMessageId"] == "t2"
        assert mine["message"]["text"] == "and one more thing"
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        assert not state.get("queuedMessages")
        assert state["turns"][-1]["responseParts"][-1]["content"] == "Here is your answer."
        assert "and one more thing" in anthropic.main_requests()[-1].tail_text()
