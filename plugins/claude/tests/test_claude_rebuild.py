"""A past session reopened after a restart reads as it did live: subagents, compaction, usage."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic_server import Hold, Thinking, ToolUse, reply
from conftest import (
    chat_state,
    confirm,
    connect_and_open,
    is_action,
    open_session,
    reached,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


def comparable(state: dict[str, Any]) -> dict[str, Any]:
    """A chat state without what only says when it happened (a rebuild reads the transcript's;
    durations are compared apart, by ``about_the_same``). Its title is left out: no chat
    action changes a chat's own title, so the session's row of the chat holds it (a name
    given after the first message, a rename) and a restart starts the chat with that."""
    turns = [
        {k: v for k, v in t.items() if k not in ("startedAt", "duration")} for t in state["turns"]
    ]
    return {"origin": state.get("origin"), "turns": turns}


async def test_a_reopened_session_has_its_subagent_chat_and_compaction_as_live(
    claude_host, anthropic, claude_env, workdir: Path
):
    task = {
        "description": "Look around",
        "prompt": "Find the answer",
        "subagent_type": "general-purpose",
        "run_in_background": False,
    }
    answering = Hold()  # the subagent takes a while, so its chat's duration is worth comparing
    anthropic.script(
        reply(ToolUse("Agent", task, id="toolu_agent_1")),
        # The subagent runs a command that asks, then answers.
        reply(
            ToolUse(
                "Bash",
                {"command": "touch made && echo 42", "description": "Say it"},
                id="toolu_sub_1",
            )
        ),
        reply(answering, "The answer is 42."),
        reply("My helper says 42.", cache_write=20),
        reply("A summary of it all."),  # what /compact asks the model for
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "delegate", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        request = needed["params"]["action"]["request"]
        child = request["chat"]
        assert child != chat and request["toolCall"]["toolCallId"] == "toolu_sub_1"
        await confirm(client, child, "toolu_agent_1", "toolu_sub_1", approved=True)
        await reached(answering)
        await anyio.sleep(0.8)
        answering.release.set()
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await start_turn(client, chat, "/compact", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        live = await chat_state(client, chat)
        live_child = await chat_state(client, child)
    # Sanity: what is compared below holds what this test is about.
    [sub_call] = [p["toolCall"] for p in live_child["turns"][0]["responseParts"][:1]]
    assert (sub_call["status"], sub_call["confirmed"]) == ("completed", "user-action")
    assert [p["kind"] for p in live["turns"][1]["responseParts"]] == ["systemNotification"]

    rebuilt, rebuilt_child = await reopen(claude_host, session, chat, child)
    assert comparable(rebuilt) == comparable(live)
    assert about_the_same(rebuilt, live), (durations(rebuilt), durations(live))
    assert rebuilt["turns"][0]["responseParts"][0]["toolCall"]["_meta"]["subagentChatUri"] == child
    assert comparable(rebuilt_child) == comparable(live_child)
    # The child chat's turn lasted as long as it did live (its subagent waited for an answer).
    assert durations(live_child)[0] >= 800
    assert about_the_same(rebuilt_child, live_child), (
        durations(rebuilt_child),
        durations(live_child),
    )

    # An older CLI kept a subagent's entries in the main transcript, as a sidechain that
    # named no agent.
    [path] = Path(claude_env["CLAUDE_CONFIG_DIR"]).glob("projects/*/*.jsonl")
    [agent] = path.with_suffix("").glob("subagents/agent-*.jsonl")
    sidechain = [json.loads(line) for line in agent.read_text().splitlines()]
    for entry in sidechain:
        entry.pop("agentId", None)
    shutil.rmtree(path.with_suffix(""))
    with path.open("a") as handle:
        handle.writelines(json.dumps(entry) + "\n" for entry in sidechain)
    _, rebuilt_child = await reopen(claude_host, session, chat, child)
    assert comparable(rebuilt_child) == comparable(live_child)
    assert about_the_same(rebuilt_child, live_child)

    # Without what the host kept, the transcript's timestamps say about as much: from the
    # call to its result (live, the chat opens with the subagent's first word, a bit later).
    shutil.rmtree(Path(claude_env["HOME"]).parent / "state" / "claude" / "sidecar")
    _, bare_child = await reopen(claude_host, session, chat, child)
    assert about_the_same(bare_child, live_child), (durations(bare_child), durations(live_child))


async def reopen(claude_host: Any, session: str, *chats: str) -> list[dict[str, Any]]:
    """The states of ``chats`` as a restarted host rebuilds them."""
    async with claude_host() as (running, _):
        client = await running.connect("again")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        return [await chat_state(client, chat) for chat in chats]


ASKED = {
    "questions": [
        {
            "question": "Which color?",
            "header": "Color",
            "options": [
                {"label": "Red", "description": "warm"},
                {"label": "Blue", "description": ""},
            ],
            "multiSelect": False,
        }
    ]
}


async def test_reopened_calls_questions_and_commands_read_as_live(
    claude_host, anthropic, workdir: Path
):
    bash = {"command": "touch made", "description": "Make a file"}
    anthropic.script(
        reply(Thinking("Careful."), ToolUse("Bash", bash, id="toolu_denied")),
        reply("Not made."),
        reply(ToolUse("AskUserQuestion", ASKED, id="toolu_ask")),
        reply("Blue it is."),
        reply(ToolUse("Bash", bash, id="toolu_waits")),
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)

        async def needed() -> dict[str, Any]:
            frame = await client.recv_until(is_action("session/inputNeededSet", session), 30)
            return dict(frame["params"]["action"]["request"])

        await start_turn(client, chat, "make it", "t1")
        await needed()
        await confirm(client, chat, "t1", "toolu_denied", approved=False)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await start_turn(client, chat, "pick", "t2")
        request = (await needed())["request"]
        answer = {"state": "submitted", "value": {"kind": "selected", "value": "Blue"}}
        await client.dispatch(
            chat,
            {
                "type": "chat/inputCompleted",
                "requestId": request["id"],
                "response": "accept",
                "answers": {request["questions"][0]["id"]: answer},
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await start_turn(client, chat, "/model opus", "t3")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await start_turn(client, chat, "make it now", "t4")
        await needed()
        await client.dispatch(chat, {"type": "chat/turnCancelled", "turnId": "t4", "duration": 0})
        assert (await turn_end(client, chat))["type"] == "chat/turnCancelled"
        live = await chat_state(client, chat)
    assert [t["state"] for t in live["turns"]] == ["complete"] * 3 + ["cancelled"]

    [rebuilt] = await reopen(claude_host, session, chat)
    assert comparable(rebuilt) == comparable(live)
    assert about_the_same(rebuilt, live), (durations(rebuilt), durations(live))


async def test_a_reopened_client_tool_call_says_what_the_client_said(
    claude_host, anthropic, workdir: Path
):
    call = ToolUse("mcp__ahp__owner__openFile", {"path": "a.txt"}, id="toolu_client_1")
    anthropic.script(reply(call), reply("Opened."))
    async with claude_host() as (running, _):
        client = await running.connect("owner")
        await client.initialize()
        session, chat = await open_session(client, workdir)
        schema = {"type": "object", "properties": {"path": {"type": "string"}}}
        tool = {"name": "openFile", "description": "Open a file", "inputSchema": schema}
        active = {"clientId": "owner", "tools": [tool]}
        await client.dispatch(session, {"type": "session/activeClientSet", "activeClient": active})
        await client.recv_until(is_action("session/activeClientSet", session))
        await start_turn(client, chat, "open a.txt", "t1")
        await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        result = {"success": True, "pastTenseMessage": "Opened a.txt", "content": []}
        done = {"turnId": "t1", "toolCallId": "toolu_client_1", "result": result}
        await client.dispatch(chat, {"type": "chat/toolCallComplete", **done})
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        live = (await chat_state(client, chat))["turns"][0]["responseParts"][0]["toolCall"]
    [rebuilt] = await reopen(claude_host, session, chat)
    call_state = rebuilt["turns"][0]["responseParts"][0]["toolCall"]
    keys = ("toolName", "status", "confirmed", "invocationMessage", "pastTenseMessage")
    assert {k: call_state[k] for k in keys} == {k: live[k] for k in keys}
    assert live["pastTenseMessage"] == "Opened a.txt"


@pytest.mark.parametrize("credentials", ["refused", "none"])
async def test_a_failed_turn_reopens_as_the_same_error(
    claude_host, anthropic, workdir: Path, credentials: str
):
    anthropic.unauthorized = credentials == "refused"
    env = {"ANTHROPIC_API_KEY": ""} if credentials == "none" else {}
    async with claude_host(env) as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hi", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/error"
        live = await chat_state(client, chat)
    [rebuilt] = await reopen(claude_host, session, chat)
    # A rebuilt error cannot name the exception the live turn failed with; the rest agrees.
    for state in (live, rebuilt):
        state["turns"][0]["responseParts"][0]["error"].pop("errorType")
    assert comparable(rebuilt) == comparable(live)
    assert about_the_same(rebuilt, live), (durations(rebuilt), durations(live))
    assert [part["kind"] for part in rebuilt["turns"][0]["responseParts"]] == ["error"]
    assert "`ahp claude login`" in rebuilt["turns"][0]["responseParts"][0]["error"]["message"]


async def test_a_reopened_chat_knows_each_turn_by_the_entry_it_began_at(
    claude_host, anthropic, workdir: Path
):
    # The host keeps a turn's reference in memory only; after a restart it has it
    # again from the transcript, as a truncation or a fork needs it.
    anthropic.script(reply("One."), reply("Two."))
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        for n in (1, 2):
            await start_turn(client, chat, f"say {n}", f"t{n}")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        live = dict(running.host.sessions.registry.chat_by_uri(chat).references)
        record = await running.host.session_store.get(session.split("/")[-1])
    assert sorted(live) == ["t1", "t2"] and len(set(live.values())) == 2
    assert all("references" not in kept for kept in record["chats"])  # not in every save
    async with claude_host() as (running, _):
        client = await running.connect("again")
        await client.initialize()
        await client.request("subscribe", {"channel": chat})
        assert running.host.sessions.registry.chat_by_uri(chat).references == live


def durations(state: dict[str, Any]) -> list[int]:
    return [int(t.get("duration") or 0) for t in state["turns"]]


def about_the_same(rebuilt: dict[str, Any], live: dict[str, Any]) -> bool:
    """Whether each rebuilt turn took about as long as it did live (to a tenth, or 250 ms)."""
    said, took = durations(rebuilt), durations(live)
    return len(said) == len(took) and all(
        abs(r - w) <= 250 + w // 10 for r, w in zip(said, took, strict=True)
    )


async def test_durations_decisions_and_forks_rebuild_as_they_were_live(
    claude_host, anthropic, claude_env, workdir: Path
):
    # Real clients name turns by UUID; the first turn's id is no UUID, so the transcript
    # knows it by another.
    t1, t2, f1, g1 = "write-it", *(str(uuid.uuid4()) for _ in range(3))
    written = workdir / "a.txt"
    write = {"file_path": str(written), "content": "hello\n"}
    thinking = Hold()  # a turn that takes a while, so its duration is worth comparing
    anthropic.script(
        reply(ToolUse("Write", write, id="toolu_write")),
        reply("Written."),
        reply(thinking, "Thought it over."),
        reply("Forked answer."),
        reply("Forked again."),
    )
    fork, again = "ahp-chat://fork/rebuilt", "ahp-chat://fork/again"
    async with claude_host() as (running, backend):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "write it", t1)
        ready = await client.recv_until(is_action("chat/toolCallReady", chat), 30)
        assert "allow" in [o["id"] for o in ready["params"]["action"].get("options") or ()]
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": t1,
                "toolCallId": "toolu_write",
                "approved": True,
                "confirmed": "user-action",
                "selectedOptionId": "allow",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert written.read_text() == "hello\n"
        await start_turn(client, chat, "think it over", t2)
        await reached(thinking)
        await anyio.sleep(0.8)
        thinking.release.set()
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        # A fork of the first turn, and a fork of that fork.
        for source, at, made, turn_id, text in (
            (chat, t1, fork, f1, "in the fork"),
            (fork, f1, again, g1, "in the fork of the fork"),
        ):
            source_of = {"kind": "fork", "chat": source, "turnId": at}
            await client.request(
                "createChat", {"channel": session, "chat": made, "source": source_of}
            )
            await client.request("subscribe", {"channel": made})
            await start_turn(client, made, text, turn_id)
            assert (await turn_end(client, made))["type"] == "chat/turnComplete"
        live = {c: await chat_state(client, c) for c in (chat, fork, again)}
        [again_id] = [i for i, a in backend.live.items() if a.start.chat_uri == again]
    call = live[chat]["turns"][0]["responseParts"][0]["toolCall"]
    assert (call["confirmed"], call["selectedOption"]["id"]) == ("user-action", "allow")
    assert [t["id"] for t in live[again]["turns"]] == [t1, f1, g1]
    assert live[again]["turns"][0] == live[chat]["turns"][0]
    assert durations(live[chat])[1] >= 800

    rebuilt = dict(zip(live, await reopen(claude_host, session, *live), strict=True))
    for uri, state in rebuilt.items():
        assert comparable(state) == comparable(live[uri]), uri
        assert about_the_same(state, live[uri]), (uri, durations(state), durations(live[uri]))

    # The fork of the fork moved out to a session of its own outlives the session it left.
    async with claude_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        moved = await client.request(
            "moveChat", {"channel": again, "destination": {"kind": "newSession"}}
        )
        assert moved["session"] == f"claude:/{again_id}"
        await client.request("disposeSession", {"channel": session})
    [alone] = await reopen(claude_host, f"claude:/{again_id}", again)
    assert comparable(alone)["turns"] == comparable(live[again])["turns"]
    assert about_the_same(alone, live[again])

    # A session begun in a terminal has no sidecar: its durations come from the timestamps,
    # which leave out only the CLI's start.
    shutil.rmtree(Path(claude_env["HOME"]).parent / "state" / "claude" / "sidecar")
    [bare] = await reopen(claude_host, f"claude:/{again_id}", again)
    assert 0 < durations(bare)[0] <= durations(live[again])[0]
