"""The session stores: what survives, where, and how it is written."""

from __future__ import annotations

import sqlite3

import pytest

from ahpcore.store import FileSessionStore, MemorySessionStore, open_store

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    made = open_store(request.param, tmp_path)
    yield made
    made.close()


async def test_put_get_delete_and_ids(store):
    assert await store.get("a") is None
    await store.put("a", {"title": "one", "isRead": False})
    await store.put("b", {"title": "two"})
    assert await store.get("a") == {"title": "one", "isRead": False}
    record = await store.get("a")
    record["title"] = "changed outside"
    assert (await store.get("a"))["title"] == "one"  # a copy, not the store's own
    await store.put("a", {"title": "replaced"})
    assert await store.get("a") == {"title": "replaced"}
    assert sorted(await store.ids()) == ["a", "b"]
    await store.delete("a")
    await store.delete("a")  # twice is fine
    assert await store.ids() == ["b"]


async def test_the_file_store_survives_a_new_process_and_uses_wal(tmp_path):
    path = tmp_path / "state" / "sessions.sqlite3"
    first = FileSessionStore(path)
    await first.put("s1", {"title": "kept"})
    first.close()
    second = FileSessionStore(path)
    assert await second.get("s1") == {"title": "kept"}
    second.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_unknown_store_kind_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="'cloud'"):
        open_store("cloud", tmp_path)
    assert isinstance(open_store("memory", tmp_path), MemorySessionStore)
