"""Every step kind, run through the real TurnRecorder and folded through the real reducers."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from scripted_harness import Chat, backend, chat_start, message

from ahp_scripted import (
    Activity,
    AgentCrashed,
    Ask,
    Crash,
    Fail,
    Rule,
    Say,
    Script,
    ScriptedTurnFailed,
    Think,
    Title,
    Tool,
    Usage,
    Wait,
)
from ahpcore.ports.backend import Approval, InputAnswer, TurnInput
from ahpcore.protocol.wire import validate_value

pytestmark = pytest.mark.anyio

#: SessionStatus bits: the activity mask and two of its values.
ACTIVITY, ERROR, INPUT_NEEDED = 0b11111, 0b10, 0b11000


async def chat_for(*steps: Any, rules: tuple[Rule, ...] = (), **kwargs: Any) -> Chat:
    scripted = backend(None, Script(rules=rules, default=list(steps)))
    agent = await scripted.start(chat_start(client_tools=kwargs.pop("client_tools", ())))
    return Chat(agent, **kwargs)


async def test_say_streams_in_chunks_into_one_markdown_part() -> None:
    chat = await chat_for(Say("one two three four five six seven", words=3))
    assert await chat.turn("hi") == "complete"
    assert chat.parts() == [
        {"kind": "markdown", "id": "t1.1", "content": "one two three four five six seven"}
    ]
    assert len(chat.of_type("chat/responsePart")) == 1
    assert [a["content"] for a in chat.of_type("chat/delta")] == ["four five six ", "seven"]
    assert chat.last_turn["state"] == "complete"
    assert validate_value("ChatState", chat.chat_state) == []


async def test_think_then_say_open_separate_parts() -> None:
    chat = await chat_for(Think("Let me see."), Say("Done."), Think("Again"))
    await chat.turn("hi")
    assert [(p["kind"], p["content"]) for p in chat.parts()] == [
        ("reasoning", "Let me see."),
        ("markdown", "Done."),
        ("reasoning", "Again"),
    ]


async def test_a_tool_without_approval_runs_and_completes() -> None:
    step = Tool("search", input={"q": "${message}"}, result="found 3", intention="Look it up")
    chat = await chat_for(step)
    await chat.turn("cats")
    [call] = chat.tool_calls()
    assert call["status"] == "completed"
    assert call["confirmed"] == "not-needed"
    assert call["success"] is True
    assert json.loads(call["toolInput"]) == {"q": "cats"}
    assert call["content"] == [{"type": "text", "text": "found 3"}]
    assert call["intention"] == "Look it up"
    assert call["pastTenseMessage"] == "Ran `search`"
    # The input streamed before the call was ready.
    assert chat.of_type("chat/toolCallDelta")


async def test_a_failing_tool_completes_with_success_false() -> None:
    chat = await chat_for(Tool("rm", fail="permission denied"), Say("That failed: ${result}"))
    assert await chat.turn("go") == "complete"
    [call] = chat.tool_calls()
    assert call["status"] == "completed"
    assert call["success"] is False
    assert call["error"] == {"message": "permission denied"}
    assert chat.text() == "That failed: permission denied"


async def test_an_approved_tool_runs_with_the_edited_input() -> None:
    step = Tool("echo", input={"text": "hi"}, approval=True, title="Echo?", result="${input.text}")
    edited = json.dumps({"text": "bye"})
    chat = await chat_for(step, Say("${result}"), approvals=[Approval(True, edited_input=edited)])
    assert await chat.turn("go") == "complete"
    [ready] = chat.of_type("chat/toolCallReady")
    assert "confirmed" not in ready and ready["confirmationTitle"] == "Echo?"
    [call] = chat.tool_calls()
    assert call["status"] == "completed"
    assert call["confirmed"] == "user-action"
    assert call["toolInput"] == edited
    assert call["content"] == [{"type": "text", "text": "bye"}]
    assert chat.text() == "bye"


async def test_a_denied_tool_is_left_cancelled_and_the_turn_ends() -> None:
    step = Tool("echo", approval=True, on_deny=[Say("Okay, not doing that.")])
    chat = await chat_for(step, Say("never said"))
    turn = anyio.Event()

    async def run() -> None:
        await chat.turn("go")
        turn.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        question = await chat.question()
        assert question.kind == "approval"
        # While it waits, the chat needs input.
        assert chat.chat_state["status"] & ACTIVITY == INPUT_NEEDED
        chat.reply(Approval(False, reason="denied"))
    [call] = chat.tool_calls()
    assert call["status"] == "cancelled"
    assert call["reason"] == "denied"
    # The reducer cancelled it; a completion would be a report about nothing.
    assert chat.of_type("chat/toolCallComplete") == []
    assert chat.text() == "Okay, not doing that."
    assert chat.last_turn["state"] == "complete"


async def test_ask_puts_questions_and_says_the_answer() -> None:
    question = {
        "id": "color",
        "kind": "single-select",
        "message": "Pick one",
        "options": [{"id": "r", "label": "Red"}, {"id": "g", "label": "Green"}],
    }
    answer = InputAnswer(
        "accept", {"color": {"state": "submitted", "value": {"kind": "selected", "value": "g"}}}
    )
    chat = await chat_for(Ask([question], message="Quick one", say_answer=True), answers=[answer])
    await chat.turn("go")
    [request_part, said] = chat.parts()
    assert request_part["kind"] == "inputRequest"
    assert request_part["response"] == "accept"
    assert request_part["request"]["message"] == "Quick one"
    assert request_part["request"]["answers"]["color"]["value"]["value"] == "g"
    assert said["content"] == "You answered: Green"


async def test_a_declined_question_runs_on_decline_and_ends_the_turn() -> None:
    steps = (Ask("Name?", on_decline=[Say("Fine.")]), Say("Hello ${answer}"))
    chat = await chat_for(*steps, answers=[InputAnswer("decline")])
    await chat.turn("go")
    assert chat.text() == "Fine."
    assert chat.parts()[0]["response"] == "decline"


async def test_usage_title_and_activity() -> None:
    steps = (
        Activity("Busy"),
        Usage(input_tokens=10, output_tokens=4, model="scripted", cache_read_tokens=2),
        Title("  A chat about ${message}  "),
    )
    chat = await chat_for(*steps)
    seen: list[Any] = []
    chat_sink = chat.chat

    def spy(action: Any) -> None:
        chat_sink(action)
        if action["type"] == "chat/activityChanged":
            seen.append(chat.chat_state.get("activity"))

    chat.chat = spy  # type: ignore[method-assign]
    await chat.turn("cats")
    assert chat.last_turn["usage"] == {
        "inputTokens": 10,
        "outputTokens": 4,
        "model": "scripted",
        "cacheReadTokens": 2,
    }
    assert chat.session_state["title"] == "A chat about cats"
    # Set during the turn, cleared when the turn ended.
    assert seen == ["Busy", None]
    assert "activity" not in chat.chat_state


async def test_wait_for_seconds() -> None:
    chat = await chat_for(Say("a"), Wait(seconds=0.01), Say("b"))
    assert await chat.turn("go") == "complete"
    assert chat.text() == "ab"


async def test_a_gate_holds_the_turn_until_released() -> None:
    scripted = backend(None, Script(default=[Say("before"), Wait(gate="g"), Say(" after")]))
    chat = Chat(await scripted.start(chat_start()))
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "go")
        with anyio.fail_after(5):
            await scripted.reached("g")
        assert chat.chat_state["activeTurn"]["responseParts"][0]["content"] == "before"
        assert scripted.gates.waiting("g") == 1
        scripted.release("g")
    assert chat.text() == "before after"


async def test_a_release_before_the_wait_is_kept() -> None:
    scripted = backend(None, Script(default=[Wait(gate="early"), Say("through")]))
    chat = Chat(await scripted.start(chat_start()))
    scripted.release("early")
    assert await chat.turn("go") == "complete"
    assert chat.text() == "through"


async def test_fail_ends_the_turn_in_error() -> None:
    chat = await chat_for(Say("Trying"), Fail("the model refused: ${message}"))
    assert await chat.turn("x") == "error"
    assert isinstance(chat.error, ScriptedTurnFailed)
    turn = chat.last_turn
    assert turn["state"] == "error"
    assert turn["responseParts"][-1]["error"]["message"] == "the model refused: x"
    assert chat.chat_state["status"] & ACTIVITY == ERROR


async def test_crash_reads_like_a_crash() -> None:
    chat = await chat_for(Say("Hmm"), Crash("segmentation fault"), Say("unreachable"))
    assert await chat.turn("x") == "error"
    assert isinstance(chat.error, AgentCrashed)
    assert str(chat.error) == "the scripted agent crashed: segmentation fault"
    assert chat.text() == "Hmm"
    # The agent comes back for the next turn, as a supervised process would.
    chat.agent.backend.script = Script(default=[Say("back")])
    assert await chat.turn("again") == "complete"


async def test_a_cancelled_turn_ends_cancelled_and_says_so() -> None:
    scripted = backend(None, Script(default=[Activity("Waiting"), Wait(gate="never")]))
    chat = Chat(await scripted.start(chat_start()))
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "go")
        await scripted.reached("never")
        tg.cancel_scope.cancel()
    assert chat.last_turn["state"] == "cancelled"
    kept = scripted.conversation("conv-1")
    assert kept is not None and kept.turns[0].end == {"state": "cancelled", "durationMs": 0}
    assert "activity" not in chat.chat_state


async def test_a_client_tool_runs_through_the_client() -> None:
    tools = [{"name": "laptop__open_file", "title": "Open a file"}]
    step = Tool("open_file", input={"path": "a.txt"}, client=True)
    result = {
        "success": True,
        "pastTenseMessage": "Opened a.txt",
        "content": [{"type": "text", "text": "hello"}],
    }
    chat = await chat_for(step, Say("It says ${result}"), client_tools=tools)
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "go")
        question = await chat.question()
        assert (question.kind, question.detail) == ("client", "laptop")
        chat.reply(result)
    [call] = chat.tool_calls()
    assert call["toolName"] == "laptop__open_file"
    assert call["contributor"] == {"kind": "client", "clientId": "laptop"}
    assert call["status"] == "completed"
    assert call["pastTenseMessage"] == "Opened a.txt"
    assert chat.text() == "It says hello"


async def test_a_client_tool_nobody_provides_fails_the_turn_clearly() -> None:
    chat = await chat_for(Tool("missing", client=True))
    assert await chat.turn("go") == "error"
    assert "missing" in str(chat.error)


async def test_rules_pick_the_steps_first_match_wins() -> None:
    rules = (
        Rule(exact="hello", steps=[Say("exact")]),
        Rule(prefix="say ", ignore_case=True, steps=[Say("prefix:${rest}")]),
        Rule(regex=r"^(?P<a>\d+)\+(?P<b>\d+)$", steps=[Say("regex:${a},${b},${match}")]),
        Rule(regex="hello", steps=[Say("never: exact came first")]),
    )
    chat = await chat_for(Say("default:${message}"), rules=rules)
    for text, expected in [
        ("  hello ", "exact"),
        ("SAY  it twice", "prefix:it twice"),
        ("1+2", "regex:1,2,1+2"),
        ("other", "default:other"),
    ]:
        await chat.turn(text)
        assert chat.text() == expected


async def test_no_rule_and_no_default_is_a_clear_error() -> None:
    scripted = backend(None, Script(rules=[Rule(exact="a", steps=[Say("a")])], name="Tiny"))
    chat = Chat(await scripted.start(chat_start()))
    assert await chat.turn("b") == "error"
    assert str(chat.error) == "no rule of script 'Tiny' matches 'b', and it has no default"
    kept = scripted.conversation("conv-1")
    assert kept is not None and kept.turns[0].end is not None
    assert kept.turns[0].end["state"] == "error"


async def test_steering_redirects_the_running_turn() -> None:
    rules = (Rule(exact="stop", steps=[Say("Stopping, as you asked.")]),)
    script = Script(rules=rules, default=[Wait(gate="g"), Say("never said")])
    scripted = backend(None, script)
    agent = await scripted.start(chat_start())
    chat = Chat(agent)
    assert agent.steer(message("stop")) is False  # nothing runs yet
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "go")
        await scripted.reached("g")
        assert agent.steer(message("stop")) is True
        scripted.release("g")
    assert chat.text() == "Stopping, as you asked."


async def test_one_turn_at_a_time() -> None:
    scripted = backend(None, Script(default=[Wait(gate="g")]))
    agent = await scripted.start(chat_start())
    chat = Chat(agent)
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "go")
        await scripted.reached("g")
        with pytest.raises(RuntimeError, match="still running"):
            await agent.run_turn(TurnInput("t9", message("x")), chat.recorder("t9"))
        scripted.release("g")
    await agent.close()
    with pytest.raises(RuntimeError, match="closed"):
        await agent.run_turn(TurnInput("t9", message("x")), chat.recorder("t9"))
