"""Conversations written by one backend and rebuilt by another from the same directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from scripted_harness import STARTED, Chat, backend, chat_start, rebuilt

from ahp_scripted import (
    Activity,
    Ask,
    Fail,
    Rule,
    Say,
    Script,
    Think,
    Title,
    Tool,
    Usage,
    Wait,
)
from ahpcore.ports.backend import Approval, InputAnswer
from ahpcore.protocol.wire import validate_value

pytestmark = pytest.mark.anyio

SCRIPT = Script(
    rules=[
        Rule(
            exact="work",
            steps=[
                Activity("Working"),
                Think("First, a plan."),
                Say("Here is the plan, in a few words."),
                Tool("search", input={"q": "plan"}, result="3 hits", display_name="Search"),
                Tool("write", fail="disk full"),
                Usage(input_tokens=100, output_tokens=20, model="scripted"),
                Title("Planning"),
                Say("Done."),
            ],
        ),
        Rule(exact="fail", steps=[Say("Oh no"), Fail("it broke")]),
        Rule(exact="hold", steps=[Say("Holding"), Wait(gate="hold")]),
        Rule(
            exact="ask",
            steps=[
                Tool("echo", input={"text": "hi"}, approval=True, result="hi"),
                Tool("rm", approval=True, on_deny=[Say("Not removing.")]),
            ],
        ),
        Rule(exact="question", steps=[Ask("Name?", say_answer="Hi ${answer}")]),
        Rule(exact="client", steps=[Tool("open", client=True), Say("${result}")]),
    ],
    default=[Say("You said: ${message}. Before that I said: ${context}")],
)


async def test_a_new_backend_rebuilds_the_live_state(tmp_path: Path) -> None:
    first = backend(tmp_path, SCRIPT)
    chat = Chat(await first.start(chat_start()))
    assert await chat.turn("work") == "complete"
    assert await chat.turn("fail") == "error"
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "hold")
        await first.reached("hold")
        tg.cancel_scope.cancel()
    assert await chat.turn("hello") == "complete"
    assert [t["state"] for t in chat.chat_state["turns"]] == [
        "complete",
        "error",
        "cancelled",
        "complete",
    ]

    second = backend(tmp_path, SCRIPT)  # a restart: nothing shared but the directory
    reader = await rebuilt(second)
    assert reader.chat_state == chat.chat_state
    assert reader.session_state == chat.session_state
    assert validate_value("ChatState", reader.chat_state) == []
    # The same reports made the same actions, one for one.
    assert reader.actions == chat.actions


async def test_the_log_is_json_lines_appended_turn_by_turn(tmp_path: Path) -> None:
    scripted = backend(tmp_path, SCRIPT)
    chat = Chat(await scripted.start(chat_start("a/b:c")))
    await chat.turn("hello")
    files = list(tmp_path.iterdir())
    assert [f.name for f in files] == ["a%2Fb%3Ac.jsonl"]  # no temp file left behind
    header, *lines = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert header["kind"] == "conversation" and header["backendId"] == "a/b:c"
    assert header["workingDirectories"] == ["/work/project"]
    # The turn as it started, then as it ended: the last line for a turn id wins.
    assert [line["kind"] for line in lines] == ["turn", "turn"]
    assert lines[0]["turn"]["end"] is None
    turn = lines[-1]["turn"]
    assert turn["message"]["text"] == "hello"
    assert turn["startedAt"] == STARTED
    assert turn["reports"][0] == ["text", {"delta": "You said: hello. Before "}]
    assert turn["end"] == {"state": "complete", "durationMs": 0}
    before = files[0].read_text()
    await chat.turn("again", turn_id="t2")
    # A second turn appends its own lines and leaves the first turn's alone.
    assert files[0].read_text().startswith(before)
    assert len(files[0].read_text().splitlines()) == 5


async def test_a_truncation_is_a_line_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    scripted = backend(tmp_path, SCRIPT)
    chat = Chat(await scripted.start(chat_start()))
    await chat.turn("one")
    await chat.turn("two", turn_id="t2")
    await scripted.truncate("conv-1", "t1")
    log_file = tmp_path / "conv-1.jsonl"
    assert json.loads(log_file.read_text().splitlines()[-1])["kind"] == "truncate"
    with log_file.open("a") as handle:
        handle.write('{"kind":"turn","turn":{"id":"t9"')  # a crash mid-append
    reread = backend(tmp_path, SCRIPT).conversation("conv-1")
    assert reread is not None and [t.id for t in reread.turns] == ["t1"]


async def test_a_long_log_is_compacted_to_what_it_describes(tmp_path: Path) -> None:
    scripted = backend(tmp_path, SCRIPT)
    chat = Chat(await scripted.start(chat_start()))
    for n in range(12):
        await chat.turn("one", turn_id=f"t{n}")
        await scripted.truncate("conv-1", None)
    lines = (tmp_path / "conv-1.jsonl").read_text().splitlines()
    assert len(lines) <= scripted.store.COMPACT_FACTOR * 1 + scripted.store.COMPACT_SLACK + 3
    reread = backend(tmp_path, SCRIPT).conversation("conv-1")
    assert reread is not None and reread.turns == []


async def test_a_resumed_conversation_goes_on_where_it_was(tmp_path: Path) -> None:
    first = backend(tmp_path, SCRIPT)
    chat = Chat(await first.start(chat_start()))
    await chat.turn("one")
    second = backend(tmp_path, SCRIPT)
    resumed = Chat(await second.start(chat_start(resume=True)))
    await resumed.turn("two", turn_id="t2")
    assert (
        resumed.text() == "You said: two. Before that I said: You said: one. Before that I said: "
    )
    reader = await rebuilt(backend(tmp_path, SCRIPT))
    assert [t["id"] for t in reader.chat_state["turns"]] == ["t1", "t2"]


async def test_resuming_what_was_never_kept_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="nope"):
        await backend(tmp_path, SCRIPT).start(chat_start("nope", resume=True))
    assert await backend(tmp_path, SCRIPT).read_transcript("nope", object()) is False  # type: ignore[arg-type]


async def test_a_turn_cut_short_by_a_stopped_host_reads_back_cancelled(tmp_path: Path) -> None:
    scripted = backend(tmp_path, SCRIPT)
    chat = Chat(await scripted.start(chat_start()))
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "hold")
        await scripted.reached("hold")
        # The host dies here: what is on disk is the turn as it started.
        on_disk = (tmp_path / "conv-1.jsonl").read_text()
        tg.cancel_scope.cancel()
    (tmp_path / "conv-1.jsonl").write_text(on_disk)
    reader = await rebuilt(backend(tmp_path, SCRIPT))
    [turn] = reader.chat_state["turns"]
    assert turn["state"] == "cancelled"
    assert turn["message"]["text"] == "hold"


def _without(state: Any, *keys: str) -> Any:
    """The state with the named keys removed wherever they appear."""
    if isinstance(state, dict):
        return {k: _without(v, *keys) for k, v in state.items() if k not in keys}
    if isinstance(state, list):
        return [_without(v, *keys) for v in state]
    return state


async def test_approvals_questions_and_client_tools_rebuild_as_they_happened(
    tmp_path: Path,
) -> None:
    scripted = backend(tmp_path, SCRIPT)
    agent = await scripted.start(chat_start(client_tools=[{"name": "laptop__open"}]))
    chat = Chat(
        agent,
        approvals=[Approval(True), Approval(False, reason="denied")],
        answers=[
            InputAnswer(
                "accept",
                {"answer": {"state": "submitted", "value": {"kind": "text", "value": "Ada"}}},
            )
        ],
        client_results=[
            {
                "success": True,
                "pastTenseMessage": "Opened",
                "content": [{"type": "text", "text": "file text"}],
            }
        ],
    )
    await chat.turn("ask")
    await chat.turn("question")
    await chat.turn("client")
    live_calls = chat.tool_calls(chat.chat_state["turns"][0])
    assert [c["status"] for c in live_calls] == ["completed", "cancelled"]

    reader = await rebuilt(backend(tmp_path, SCRIPT))
    turns = reader.chat_state["turns"]
    live = chat.chat_state["turns"]
    # Approved and denied calls come back with the person's answers, as they were.
    assert turns[0] == live[0]
    assert [c.get("confirmed") for c in reader.tool_calls(turns[0])] == ["user-action", None]
    assert reader.tool_calls(turns[0])[1]["reason"] == "denied"
    # The question comes back asked and answered, and what the agent said after it.
    assert turns[1] == live[1]
    assert reader.text(turns[1]) == "Hi Ada"
    # The client tool ran and completed with the client's result; no client owns it now.
    [client_call] = reader.tool_calls(turns[2])
    [live_client] = chat.tool_calls(live[2])
    assert _without(client_call, "contributor") == _without(live_client, "contributor")
    assert reader.text(turns[2]) == "file text"


async def test_a_denied_approval_left_unanswered_rebuilds_like_the_live_cancel(
    tmp_path: Path,
) -> None:
    scripted = backend(tmp_path, SCRIPT)
    chat = Chat(await scripted.start(chat_start()))
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "ask")
        await chat.question()
        tg.cancel_scope.cancel()  # cancelled while the person was still deciding
    [call] = chat.tool_calls()
    assert (call["status"], call["reason"]) == ("cancelled", "skipped")
    reader = await rebuilt(backend(tmp_path, SCRIPT))
    assert reader.chat_state == chat.chat_state


async def test_a_rename_is_one_line_and_reads_back(tmp_path: Path) -> None:
    scripted = backend(tmp_path, SCRIPT)
    chat = Chat(await scripted.start(chat_start()))
    await chat.turn("one")
    log_file = tmp_path / "conv-1.jsonl"
    before = log_file.read_text()
    await scripted.rename("conv-1", "A new name")
    after = log_file.read_text()
    # The log grew by one line; nothing before it was rewritten.
    assert after.startswith(before) and len(after.splitlines()) == len(before.splitlines()) + 1
    assert json.loads(after.splitlines()[-1])["kind"] == "rename"
    reread = backend(tmp_path, SCRIPT).conversation("conv-1")
    assert reread is not None and reread.renamed == "A new name" and reread.title() == "A new name"


def test_a_turn_edited_in_place_is_written_on_the_next_save(tmp_path: Path) -> None:
    # Saves compare each turn with what the log last said of it instead of
    # encoding it; an ending edited in place must still be noticed.
    from ahp_scripted import Conversation, ConversationStore, TurnRecord

    store = ConversationStore(tmp_path)
    turns = [TurnRecord(f"t{n}", {"text": "hi"}, STARTED) for n in range(3)]
    for turn in turns:
        turn.end = {"state": "complete", "durationMs": 1}
    conversation = Conversation("c", "s", "chat:/c", STARTED, STARTED, turns=turns)
    store.save(conversation)
    log_file = tmp_path / "c.jsonl"
    assert len(log_file.read_text().splitlines()) == 4
    store.save(conversation)  # nothing changed: nothing written
    assert len(log_file.read_text().splitlines()) == 4
    assert turns[0].end is not None
    turns[0].end["durationMs"] = 7
    turns[2].reports.append(("text", {"delta": "more"}))
    store.save(conversation, changed=turns[2])  # promises t0 and t1 unchanged
    written = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [line["turn"]["id"] for line in written[4:]] == ["t2"]
    store.save(conversation)  # no promise: every turn is looked at
    written = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [line["turn"]["id"] for line in written[5:]] == ["t0"]
    reread = ConversationStore(tmp_path).get("c")
    assert reread is not None and reread.turns[0].end == {"state": "complete", "durationMs": 7}
    assert reread.turns[2].reports == [["text", {"delta": "more"}]]
