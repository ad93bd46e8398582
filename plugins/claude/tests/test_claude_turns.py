"""Live turns with the real Claude Code CLI against the scripted API, over a real socket."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from anthropic_server import Hold, Thinking, ToolUse, reply
from conftest import (
    agent_of,
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


async def test_a_text_turn_streams_thinking_and_text(claude_host, anthropic, workdir: Path):
    anthropic.script(reply(Thinking("Let me see."), "Hello from Claude", cache_read=5))
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
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
        client, session, chat = await connect_and_open(running, workdir)
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
        # The prompt says what it asks, in its title as in the request a person sees.
        assert request["toolCall"]["confirmationTitle"] == "Run this command?"
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
        live = state["turns"][0]
    # After a restart the call is rebuilt from the transcript as it was: asked, then approved.
    async with claude_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        rebuilt = (await chat_state(client, chat))["turns"][0]
        assert rebuilt["id"] == live["id"] == "t1"
        call = next(p["toolCall"] for p in rebuilt["responseParts"] if p["kind"] == "toolCall")
        assert (call["status"], call["confirmed"]) == ("completed", "user-action")
        assert [p["kind"] for p in rebuilt["responseParts"]] == [
            p["kind"] for p in live["responseParts"]
        ]


async def test_two_asks_wait_together_and_a_denied_one_does_not_run(
    claude_host, anthropic, workdir: Path, tmp_path: Path
):
    # Reads outside the working directory ask, and reads run side by side.
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text(f"secret {name}")
    anthropic.script(
        reply(
            ToolUse("Read", {"file_path": str(tmp_path / "a.txt")}),
            ToolUse("Read", {"file_path": str(tmp_path / "b.txt")}),
        ),
        reply("One of two."),
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "read two files", "t1")
        first = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        second = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        calls = [
            f["params"]["action"]["request"]["toolCall"]["toolCallId"] for f in (first, second)
        ]
        assert len(set(calls)) == 2  # both held at once, each under its own id
        await confirm(client, chat, "t1", calls[1], False)
        await confirm(client, chat, "t1", calls[0], True)
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        state = await chat_state(client, chat)
        tools = {
            p["toolCall"]["toolCallId"]: p["toolCall"]
            for p in state["turns"][0]["responseParts"]
            if p["kind"] == "toolCall"
        }
        assert tools[calls[0]]["status"] == "completed"
        assert "secret a" in tools[calls[0]]["content"][0]["text"]
        assert tools[calls[1]]["status"] == "cancelled"
        assert tools[calls[0]]["_meta"] == {"toolKind": "read"}
        # What the model got back: the file it was allowed, and a refusal for the other.
        results = anthropic.main_requests()[-1].tool_results()
        said = {r["tool_use_id"]: json.dumps(r["content"]) for r in results}
        assert "secret a" in said[calls[0]] and "denied" in said[calls[1]]


async def test_cancel_drains_and_the_next_turn_starts_at_once(claude_host, anthropic, workdir):
    hold = Hold()
    anthropic.script(reply("Starting", hold, "never said"), reply("Second answer"))
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "go slowly", "t1")
        await reached(hold)
        await client.dispatch(chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 0})
        assert (await turn_end(client, chat))["type"] == "chat/turnCancelled"
        await start_turn(client, chat, "again", "t2")
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        state = await chat_state(client, chat)
        assert state["turns"][-1]["responseParts"][-1]["content"] == "Second answer"
        assert "never said" not in str(state["turns"])


async def test_a_killed_cli_ends_the_turn_in_an_error_and_the_next_turn_resumes(
    claude_host, anthropic, workdir
):
    hold = Hold()
    anthropic.script(reply("Working", hold), reply("Back again"))
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "work", "t1")
        await reached(hold)
        pid = agent_of(running, chat).pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        end = await turn_end(client, chat, timeout=2)
        assert end["type"] == "chat/error"
        await start_turn(client, chat, "still there?", "t2")
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        assert agent_of(running, chat).pid != pid
        # The new CLI resumed the conversation: the model saw the first prompt again.
        first = json.dumps(anthropic.main_requests()[-1].body["messages"])
        assert "work" in first and "still there?" in first


@pytest.mark.parametrize("credentials", ["refused", "none"])
async def test_without_credentials_a_turn_says_how_to_sign_in(
    claude_host, anthropic, workdir, credentials
):
    # A key the API refuses (401), or none at all: then the CLI answers "Not logged in ·
    # Please run /login" itself, which is neither a reply nor a command the user has.
    anthropic.unauthorized = credentials == "refused"
    env = {"ANTHROPIC_API_KEY": ""} if credentials == "none" else {}
    async with claude_host(env) as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hi", "t1")
        end = await turn_end(client, chat)
        assert end["type"] == "chat/error"
        said = end["part"]["error"]["message"]
        assert "`ahp claude login`" in said and "ANTHROPIC_API_KEY" in said
        [turn] = (await chat_state(client, chat))["turns"]
        assert [part["kind"] for part in turn["responseParts"]] == ["error"]


async def test_ask_user_question_becomes_a_question_and_the_answer_goes_back(
    claude_host, anthropic, workdir
):
    asked = {
        "questions": [
            {
                "question": "Which color?",
                "header": "Color",
                "options": [
                    {"label": "Red", "description": "warm"},
                    {"label": "Blue", "description": "cool"},
                ],
                "multiSelect": False,
            }
        ]
    }
    anthropic.script(reply(ToolUse("AskUserQuestion", asked)), reply("Blue it is."))
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "pick for me", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        request = needed["params"]["action"]["request"]["request"]
        [question] = request["questions"]
        assert question["kind"] == "single-select" and question["message"] == "Which color?"
        assert [o["label"] for o in question["options"]] == ["Red", "Blue"]
        answer = {"state": "submitted", "value": {"kind": "selected", "value": "Blue"}}
        await client.dispatch(
            chat,
            {
                "type": "chat/inputCompleted",
                "requestId": request["id"],
                "response": "accept",
                "answers": {question["id"]: answer},
            },
        )
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        [result] = anthropic.main_requests()[-1].tool_results()
        assert "Blue" in json.dumps(result["content"])


async def test_a_clients_tool_runs_in_the_client_and_its_result_reaches_the_model(
    claude_host, anthropic, workdir
):
    call = ToolUse("mcp__ahp__owner__openFile", {"path": "a.txt"}, id="toolu_client_1")
    anthropic.script(reply(call), reply("Opened."))
    async with claude_host() as (running, _):
        client = await running.connect("owner")
        await client.initialize()
        session, chat = await open_session(client, workdir)
        tool = {
            "name": "openFile",
            "description": "Open a file in the editor",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
        await client.dispatch(
            session,
            {
                "type": "session/activeClientSet",
                "activeClient": {"clientId": "owner", "tools": [tool]},
            },
        )
        await client.recv_until(is_action("session/activeClientSet", session))
        await start_turn(client, chat, "open a.txt", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        request = needed["params"]["action"]["request"]
        assert request["kind"] == "toolClientExecution" and request["clientId"] == "owner"
        assert request["toolCall"]["toolCallId"] == "toolu_client_1"
        assert request["toolCall"]["toolName"] == "owner__openFile"
        result = {
            "success": True,
            "pastTenseMessage": "Opened a.txt",
            "content": [{"type": "text", "text": "opened in tab 3"}],
        }
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallComplete",
                "turnId": "t1",
                "toolCallId": "toolu_client_1",
                "result": result,
            },
        )
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        [sent] = anthropic.main_requests()[-1].tool_results()
        assert "opened in tab 3" in json.dumps(sent["content"])
        # The CLI was offered the tool under the ahp server.
        names = [t.get("name") for t in anthropic.main_requests()[0].body.get("tools", [])]
        assert "mcp__ahp__owner__openFile" in names or "ToolSearch" in names


async def test_a_steering_message_joins_the_running_turn(claude_host, anthropic, workdir):
    hold = Hold()
    anthropic.script(reply("Working on it.", hold), reply("Changed course."))
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "long job", "t1")
        await reached(hold)
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
        end = await turn_end(client, chat)
        assert end["type"] == "chat/turnComplete", end
        assert "change course" in anthropic.main_requests()[-1].tail_text()
        state = await chat_state(client, chat)
        assert len(state["turns"]) == 1
        assert "Changed course." in str(state["turns"][0]["responseParts"])


async def test_shell_init_scripts_run_before_each_bash_command(claude_host, anthropic, workdir):
    anthropic.script(
        reply(ToolUse("Bash", {"command": "echo greeting=$AHP_GREETING", "description": "Greet"})),
        reply("Done."),
    )
    scripts = [
        {"shell": "bash", "script": "export AHP_GREETING=hello-from-profile"},
        {"shell": "pwsh", "script": "$env:AHP_GREETING = 'not bash'"},
    ]
    # Without a bash SHELL the CLI prefers zsh where one is installed, which never reads BASH_ENV.
    async with claude_host({"SHELL": "/bin/sh"}) as (running, _):
        client, session, chat = await connect_and_open(
            running, workdir, config={"shellInitScripts": scripts}
        )
        await start_turn(client, chat, "greet", "t1")
        # A command that expands a variable asks first; the script must not change that.
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        call = needed["params"]["action"]["request"]["toolCall"]
        assert json.loads(call["toolInput"])["command"] == "echo greeting=$AHP_GREETING"
        await confirm(client, chat, "t1", call["toolCallId"], True)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        [result] = anthropic.main_requests()[-1].tool_results()
        assert "greeting=hello-from-profile" in json.dumps(result["content"])


async def test_a_write_shows_its_diff_before_approval_and_allow_always_stops_the_asking(
    claude_host, anthropic, workdir
):
    target = workdir / "notes.txt"
    target.write_text("old line\n")
    edit = {"file_path": str(target), "old_string": "old line", "new_string": "new line"}
    again = {"file_path": str(target), "old_string": "new line", "new_string": "third line"}
    anthropic.script(
        reply(ToolUse("Edit", edit)),
        reply("Edited."),
        reply(ToolUse("Edit", again)),
        reply("Edited again."),
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "edit it", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        call = needed["params"]["action"]["request"]["toolCall"]["toolCallId"]
        ready = next(
            a["action"]
            for a in client.actions_for(chat)
            if a["action"]["type"] == "chat/toolCallReady" and a["action"]["toolCallId"] == call
        )
        ids = [o["id"] for o in ready["options"]]
        assert ids[0] == "allow" and ids[-1] == "deny" and "allow-always" in ids
        [item] = ready["edits"]["items"]
        assert item["after"]["uri"] == target.as_uri()
        after = await client.request("resourceRead", {"uri": item["after"]["content"]["uri"]})
        assert after["data"] == "new line\n"  # the diff is drawn before anybody decides
        assert target.read_text() == "old line\n"
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": call,
                "approved": True,
                "confirmed": "user-action",
                "selectedOptionId": "allow-always",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert target.read_text() == "new line\n"
        # Allowed always: the next edit runs without asking.
        await start_turn(client, chat, "edit it again", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert target.read_text() == "third line\n"
        state = await chat_state(client, chat)
        second = next(
            p["toolCall"] for p in state["turns"][1]["responseParts"] if p["kind"] == "toolCall"
        )
        assert second["confirmed"] == "not-needed" and second["status"] == "completed"


async def test_a_permission_mode_change_reaches_the_running_cli(claude_host, anthropic, workdir):
    target = workdir / "new.txt"
    anthropic.script(
        reply("Ready."),
        reply(ToolUse("Write", {"file_path": str(target), "content": "hi"})),
        reply("Wrote it."),
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hello", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        seq = await client.dispatch(
            session, {"type": "session/configChanged", "config": {"permissionMode": "acceptEdits"}}
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        await start_turn(client, chat, "write it", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert target.read_text() == "hi"  # written without asking: edits are accepted now
        seq = await client.dispatch(
            session, {"type": "session/configChanged", "config": {"permissionMode": "yolo"}}
        )
        refused = await client.answer_to(seq)
        assert "yolo" in refused.get("rejectionReason", "")


async def test_an_agent_call_runs_its_subagent_in_a_child_chat(claude_host, anthropic, workdir):
    task = {
        "description": "Look around",
        "prompt": "Find the answer",
        "subagent_type": "general-purpose",
        "run_in_background": False,  # in the foreground, so the script's order is the order
    }
    anthropic.script(
        reply(ToolUse("Agent", task, id="toolu_agent_1")),
        reply(ToolUse("Glob", {"pattern": "*.md"}, id="toolu_sub_glob")),  # the subagent's
        reply("The answer is 42."),
        reply("My helper says 42."),
    )
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "delegate", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        call = next(
            p["toolCall"] for p in state["turns"][0]["responseParts"] if p["kind"] == "toolCall"
        )
        assert call["toolCallId"] == "toolu_agent_1" and call["status"] == "completed"
        start = next(
            a["action"]
            for a in client.actions_for(chat)
            if a["action"]["type"] == "chat/toolCallStart"
        )
        assert start["_meta"] == {"toolKind": "subagent"}
        # Setting the subagent and progress on the call keeps what it started with.
        assert call["_meta"]["toolKind"] == "subagent"
        assert "progressMessage" not in call["_meta"]
        child = call["_meta"]["subagentChatUri"]
        assert call["_meta"]["subagentDescription"] == "Look around"
        child_state = await chat_state(client, child)
        assert "The answer is 42." in str(child_state["turns"][-1]["responseParts"])
        assert state["turns"][0]["responseParts"][-1]["content"] == "My helper says 42."
        # The CLI's word of its progress is a line on the running call.
        progress = [
            a["action"]["_meta"]["progressMessage"]
            for a in client.actions_for(chat)
            if a["action"]["type"] == "chat/toolCallContentChanged"
            and "progressMessage" in a["action"].get("_meta", {})
        ]
        assert progress == ["Finding *.md"]


async def test_usage_names_the_model_the_cli_ran_on(claude_host, anthropic, workdir: Path):
    anthropic.script(reply("Hi"))
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hi", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        usage = (await chat_state(client, chat))["turns"][-1]["usage"]
        [request] = anthropic.main_requests()
        assert usage["model"] == request.body["model"]


async def test_usage_says_how_full_the_context_is(claude_host, anthropic, workdir: Path):
    anthropic.script(
        reply(ToolUse("Glob", {"pattern": "*.txt"}), input_tokens=10),
        reply("Done", input_tokens=30, cache_read=100, cache_write=20, output_tokens=5),
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "look", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        usage = (await chat_state(client, chat))["turns"][-1]["usage"]
        # The latest call's prompt and answer, not the sum over the turn's calls.
        assert usage["_meta"]["ahp.context"]["used"] == 30 + 100 + 20 + 5
        assert usage["_meta"]["ahp.context"]["size"] >= 200_000
    # Rebuilt from the transcript after a restart, the context used is the same.
    async with claude_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        rebuilt = (await chat_state(client, chat))["turns"][-1]["usage"]
        assert rebuilt["_meta"]["ahp.context"]["used"] == 30 + 100 + 20 + 5


async def test_compaction_shows_as_a_system_notification(claude_host, anthropic, workdir: Path):
    anthropic.script(reply("First answer"))
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hello", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await start_turn(client, chat, "/compact", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        parts = (await chat_state(client, chat))["turns"][-1]["responseParts"]
        [note] = [p for p in parts if p["kind"] == "systemNotification"]
        assert note["_meta"]["kind"] == "compaction" and note["_meta"]["trigger"] == "manual"
