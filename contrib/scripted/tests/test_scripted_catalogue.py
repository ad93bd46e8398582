"""The catalogue's summary cache: a listing from it is the listing of reading every log."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scripted_harness import Chat, chat_start

from ahp_scripted import Say, Script, ScriptedBackend
from ahp_scripted.catalogue import CACHE_NAME
from ahpcore.ports.backend import CatalogueRow

pytestmark = pytest.mark.anyio

SCRIPT = Script(rules=[], default=[Say("Reply to ${message}")])


def ticking() -> Callable[[], datetime]:
    moments = (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n) for n in range(10_000))
    return lambda: next(moments)


def uncached(directory: Path) -> list[CatalogueRow]:
    """What reading every log says, with no cache to help."""
    (directory / CACHE_NAME).unlink(missing_ok=True)
    return list(ScriptedBackend(directory, SCRIPT).catalogue().rows)


def listed(directory: Path) -> list[CatalogueRow]:
    return list(ScriptedBackend(directory, SCRIPT).catalogue().rows)


async def test_a_restart_lists_what_reading_every_log_lists(tmp_path: Path) -> None:
    clock = ticking()
    live = ScriptedBackend(tmp_path, SCRIPT, clock=clock)
    for name in ("a", "b", "c"):
        await Chat(await live.start(chat_start(name, session_id=name))).turn(f"hello {name}")
    assert listed(tmp_path) == uncached(tmp_path)
    assert (tmp_path / CACHE_NAME).exists()
    first = listed(tmp_path)  # the cache written by the listing before

    # Changes after the cache was written: each is seen by the next listing.
    await live.rename("b", "Renamed b")
    await live.delete("c")
    await live.start(chat_start("b-side", session_id="b", side_of=("b", "t1")))
    await Chat(await live.start(chat_start("d", session_id="d"))).turn("hello d")
    await live.truncate("d", None)
    fork = await live.start(chat_start("a-fork", session_id="a", fork_from=("a", "t1")))
    await Chat(fork).turn("on the fork", turn_id="t2")

    after = listed(tmp_path)
    assert after != first
    assert after == uncached(tmp_path)
    rows = {row.session_id: row for row in after}
    assert set(rows) == {"a", "b", "d"}
    assert rows["b"].title == "Renamed b" and rows["d"].title == ""
    # The fork is the newest chat of session a: its time is the session's.
    assert rows["a"].modified_at == live.conversation("a-fork").modified_at  # type: ignore[union-attr]
    # One lookup per session agrees with the listing, in a new backend and in the live one.
    again = ScriptedBackend(tmp_path, SCRIPT)
    for row in after:
        assert again.lookup(row.session_id) == row
    for row in live.catalogue().rows:
        assert live.lookup(row.session_id) == row
    assert live.lookup("c") is None and again.lookup("c") is None


async def test_a_log_written_by_another_backend_is_read_again(tmp_path: Path) -> None:
    first = ScriptedBackend(tmp_path, SCRIPT, clock=ticking())
    await Chat(await first.start(chat_start("a", session_id="a"))).turn("one")
    reader = ScriptedBackend(tmp_path, SCRIPT)
    (before,) = reader.catalogue().rows
    assert reader.lookup("a") == before

    # Another instance goes on with the chat and starts a session the reader never saw.
    later = datetime(2027, 1, 1, tzinfo=UTC)
    other = ScriptedBackend(tmp_path, SCRIPT, clock=lambda: later)
    await Chat(await other.start(chat_start("a", session_id="a", resume=True))).turn(
        "two", turn_id="t2"
    )
    await other.start(chat_start("new", session_id="new"))
    (row,) = [r for r in reader.catalogue().rows if r.session_id == "a"]
    assert row.modified_at == "2027-01-01T00:00:00.000Z" != before.modified_at
    assert reader.lookup("a") == row
    assert reader.lookup("new") is not None


async def test_lookup_reads_only_the_sessions_own_logs(tmp_path: Path) -> None:
    live = ScriptedBackend(tmp_path, SCRIPT, clock=ticking())
    for name in ("a", "b", "c"):
        await Chat(await live.start(chat_start(name, session_id=name))).turn(name)
    await live.start(chat_start("a-side", session_id="a", side_of=("a", "t1")))
    listed(tmp_path)

    again = ScriptedBackend(tmp_path, SCRIPT)
    reads: list[str] = []
    read = again.store._read

    def counted(path: Path) -> Any:
        reads.append(path.name)
        return read(path)

    again.store._read = counted  # type: ignore[method-assign]
    assert again.lookup("a") is not None
    assert reads == []  # every log as the cache remembers it: nothing read
    await Chat(await live.start(chat_start("a-side", session_id="a", resume=True))).turn(
        "more", turn_id="t2"
    )
    assert again.lookup("a") == live.lookup("a")
    assert reads == ["a-side.jsonl"]


async def test_a_damaged_or_old_cache_is_rebuilt(tmp_path: Path) -> None:
    live = ScriptedBackend(tmp_path, SCRIPT, clock=ticking())
    await Chat(await live.start(chat_start("a", session_id="a"))).turn("one")
    expected = listed(tmp_path)
    for text in (
        "{not json",
        '{"format": 0}\n',
        '{"format": 2}\n["x", 1]\n',
        '{"format": 2}\n["a.jsonl", 1, 2, 3, ["a"]]\n',
        '["not a header"]\n',
    ):
        (tmp_path / CACHE_NAME).write_text(text)
        assert listed(tmp_path) == expected
    # Deleting the last conversation leaves no cache behind either.
    await live.delete("a")
    assert listed(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


async def test_one_backend_listing_again_sees_its_own_changes(tmp_path: Path) -> None:
    live = ScriptedBackend(tmp_path, SCRIPT, clock=ticking())
    chat = Chat(await live.start(chat_start("a", session_id="a")))
    await chat.turn("one")
    first = list(live.catalogue().rows)
    assert list(live.catalogue().rows) == first  # nothing changed: the same rows
    await chat.turn("two", turn_id="t2")
    await live.rename("a", "Named")
    (row,) = live.catalogue().rows
    assert row.title == "Named" and row.modified_at > first[0].modified_at
    assert [row] == uncached(tmp_path)


async def test_a_cache_of_the_earlier_format_is_replaced(tmp_path: Path) -> None:
    live = ScriptedBackend(tmp_path, SCRIPT, clock=ticking())
    await Chat(await live.start(chat_start("a", session_id="a"))).turn("one")
    expected = listed(tmp_path)
    (tmp_path / CACHE_NAME).unlink()
    old = tmp_path / ".catalogue.json"
    old.write_text('{"format": 1, "files": {}}')
    assert listed(tmp_path) == expected
    assert not old.exists() and (tmp_path / CACHE_NAME).exists()
