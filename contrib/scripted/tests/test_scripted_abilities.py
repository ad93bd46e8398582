"""The optional abilities, each implemented for real: fork, side chat, truncate, delete, ..."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from scripted_harness import Chat, backend, chat_start, message, rebuilt

from ahp_scripted import AgentCrashed, Crash, Rule, Say, Script, ScriptedBackend
from ahpcore.ports.backend import Agent, Backend, TurnInput
from ahpcore.protocol.wire import validate_value

pytestmark = pytest.mark.anyio

SCRIPT = Script(
    rules=[
        Rule(exact="crash", steps=[Say("Part one."), Crash(), Say(" Part two.")]),
        Rule(exact="recap", steps=[Say("Earlier: ${context}")]),
    ],
    default=[Say("Reply to ${message}")],
)


async def conversation(tmp_path: Path, *texts: str, backend_id: str = "conv-1") -> Chat:
    scripted = backend(tmp_path, SCRIPT)
    chat = Chat(await scripted.start(chat_start(backend_id)))
    for text in texts:
        await chat.turn(text)
    return chat


def test_it_is_a_backend_with_every_ability() -> None:
    scripted = ScriptedBackend(None, SCRIPT)
    assert isinstance(scripted, Backend)
    assert scripted.provider == "scripted"
    implemented = ("resume", "fork", "side_chat", "truncate", "delete", "list_sessions")
    implemented += ("turn_resume", "steering", "multiple_chats")
    assert all(getattr(scripted.abilities, name) for name in implemented)
    [info] = scripted.agents()
    assert validate_value("AgentInfo", info) == []
    assert info["models"] == [{"id": "scripted", "provider": "scripted", "name": "Scripted"}]
    assert info["displayName"] == SCRIPT.name


async def test_start_gives_an_agent() -> None:
    agent = await ScriptedBackend(None, SCRIPT).start(chat_start())
    assert isinstance(agent, Agent)


async def test_fork_copies_up_to_and_including_the_named_turn(tmp_path: Path) -> None:
    chat = await conversation(tmp_path, "a", "b", "c")
    scripted = backend(tmp_path, SCRIPT)
    fork = Chat(await scripted.start(chat_start("fork-1", fork_from=("conv-1", "t2"))))
    reader = await rebuilt(scripted, "fork-1")
    assert reader.chat_state["turns"] == chat.chat_state["turns"][:2]
    # The fork goes on from there; the original is untouched.
    await fork.turn("recap", turn_id="t3")
    assert fork.text() == "Earlier: Reply to b"
    original = await rebuilt(backend(tmp_path, SCRIPT), "conv-1")
    assert [t["id"] for t in original.chat_state["turns"]] == ["t1", "t2", "t3"]


async def test_fork_of_an_unknown_turn_or_conversation_is_refused(tmp_path: Path) -> None:
    await conversation(tmp_path, "a")
    scripted = backend(tmp_path, SCRIPT)
    with pytest.raises(LookupError, match="no turn 't9'"):
        await scripted.start(chat_start("fork-1", fork_from=("conv-1", "t9")))
    with pytest.raises(LookupError, match="ghost"):
        await scripted.start(chat_start("fork-2", fork_from=("ghost", "t1")))


async def test_a_side_chat_starts_empty_and_its_first_turn_sees_the_named_turn(
    tmp_path: Path,
) -> None:
    await conversation(tmp_path, "a", "b")
    scripted = backend(tmp_path, SCRIPT)
    side = Chat(await scripted.start(chat_start("side-1", side_of=("conv-1", "t1"))))
    assert (await rebuilt(scripted, "side-1")).chat_state["turns"] == []
    await side.turn("recap")
    assert side.text() == "Earlier: Reply to a"
    await side.turn("recap")
    assert side.text() == "Earlier: Earlier: Reply to a"


async def test_truncate_drops_the_later_turns(tmp_path: Path) -> None:
    chat = await conversation(tmp_path, "a", "b", "c")
    scripted = chat.agent.backend
    await scripted.truncate("conv-1", "t1")
    reader = await rebuilt(backend(tmp_path, SCRIPT))
    assert [t["id"] for t in reader.chat_state["turns"]] == ["t1"]
    # The live agent sees the shorter conversation too.
    await chat.turn("recap", turn_id="t2")
    assert chat.text() == "Earlier: Reply to a"
    await scripted.truncate("conv-1", None)
    assert (await rebuilt(backend(tmp_path, SCRIPT))).chat_state["turns"] == []
    with pytest.raises(LookupError, match="no turn 'zz'"):
        await scripted.truncate("conv-1", "zz")
    with pytest.raises(LookupError, match="ghost"):
        await scripted.truncate("ghost", None)


async def test_delete_removes_the_file(tmp_path: Path) -> None:
    chat = await conversation(tmp_path, "a")
    scripted = chat.agent.backend
    await scripted.delete("conv-1")
    assert list(tmp_path.iterdir()) == []
    assert await scripted.read_transcript("conv-1", object()) is False  # type: ignore[arg-type]
    assert backend(tmp_path, SCRIPT).catalogue().rows == []
    await scripted.delete("conv-1")  # twice is fine


async def test_the_catalogue_lists_kept_sessions_newest_first(tmp_path: Path) -> None:
    moments = iter(datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=n) for n in range(100))
    scripted = ScriptedBackend(tmp_path, SCRIPT, clock=lambda: next(moments))
    long_text = "  Tell me   about " + "x" * 80
    for session_id, text in [("old", "first one"), ("new", long_text)]:
        start = chat_start(session_id, session_id=session_id)
        await Chat(await scripted.start(start)).turn(text)
    await scripted.start(chat_start("empty", session_id="empty"))
    # More chats of the session "old": they belong to it, not to the catalogue.
    await scripted.start(chat_start("old-side", session_id="old", side_of=("old", "t1")))
    fork = chat_start("old-fork", session_id="old", fork_from=("old", "t1"))
    await Chat(await scripted.start(fork)).turn("later", turn_id="t2")

    again = ScriptedBackend(tmp_path, SCRIPT)  # read back after a restart
    rows = again.catalogue().rows
    assert [row.session_id for row in rows] == ["old", "empty", "new"]
    first = again.catalogue(limit=2)
    assert [row.session_id for row in first.rows] == ["old", "empty"]
    rest = again.catalogue(limit=2, cursor=first.next_cursor)
    assert [row.session_id for row in rest.rows] == ["new"] and rest.next_cursor is None
    assert again.lookup("old") == rows[0] and again.lookup("ghost") is None
    assert again.catalogue(directory="/elsewhere").rows == []
    # Paging reads the conversations once, for the first page, not once per page.
    reads = []
    read_all = again.store.summaries
    again.store.summaries = lambda: reads.append(1) or read_all()  # type: ignore[method-assign]
    page = again.catalogue(limit=1)
    listed = [row.session_id for row in page.rows]
    while page.next_cursor is not None:
        page = again.catalogue(limit=1, cursor=page.next_cursor)
        listed += [row.session_id for row in page.rows]
    assert listed == ["old", "empty", "new"] and len(reads) == 1
    old, empty, new = rows
    assert empty.title == ""
    assert new.title == ("Tell me about " + "x" * 80)[:60]
    assert old.title == "first one"
    assert old.created_at == "2026-01-01T00:00:00.000Z"
    assert old.modified_at > empty.modified_at  # its fork's turn is the newest change
    assert old.working_directories == ("/work/project",)


async def test_an_errored_turn_resumes_after_the_step_that_failed(tmp_path: Path) -> None:
    scripted = backend(tmp_path, SCRIPT)
    chat = Chat(await scripted.start(chat_start()))
    chat.turn_id = "t1"
    chat.begin("t1", message("crash"))
    with pytest.raises(AgentCrashed) as crashed:
        await chat.agent.run_turn(TurnInput("t1", message("crash")), chat.recorder("t1"))
    error = {"errorType": "AgentCrashed", "message": str(crashed.value)}
    part = {"kind": "error", "error": error, "resumable": True}
    chat.chat({"type": "chat/error", "turnId": "t1", "duration": 0, "part": part})
    kept = scripted.conversation("conv-1")
    assert kept is not None and kept.turns[0].resume is not None
    assert kept.turns[0].resume["step"] == 1  # the crash step

    # chat/turnResume reopens the turn; the core runs the same turn id again.
    chat.chat({"type": "chat/turnResume", "turnId": "t1"})
    await chat.agent.run_turn(TurnInput("t1", message("crash")), chat.recorder("t1"))
    chat.end("t1", "complete")
    assert chat.text() == "Part one. Part two."
    kept = backend(tmp_path, SCRIPT).conversation("conv-1")
    assert kept is not None
    [turn] = kept.turns
    assert turn.said() == "Part one. Part two."
    assert turn.end == {"state": "complete", "durationMs": 0}
