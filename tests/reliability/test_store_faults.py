"""The file store under faults: another process holding the write lock, a failed COMMIT,
a full disk; concurrent writes of one session coalesce; files are the owner's alone."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from ahpcore.store import FileSessionStore, StoreError

pytestmark = pytest.mark.anyio

#: A second process that takes the database's write lock and holds it until told.
LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


class LockHolder:
    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "locked"

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        self.process.wait(timeout=5)


async def wait_for(condition: Any, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.01)


def on_disk(path: Path, session_id: str) -> Any:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT record FROM sessions WHERE id = ?", (session_id,)).fetchall()
    finally:
        db.close()
    return json.loads(rows[0][0]) if rows else None


async def test_a_write_lock_held_elsewhere_is_a_named_error_and_the_write_is_retried(tmp_path):
    path = tmp_path / "state" / "sessions.sqlite3"
    store = FileSessionStore(path, busy_timeout=0.05, retry_delays=(0.01,))
    await store.put("s1", {"title": "before"})
    holder = LockHolder(path)
    try:
        with pytest.raises(StoreError) as caught:
            await store.put("s1", {"title": "during"})
        assert "could not write" in str(caught.value)
        assert "database is locked" in str(caught.value)
        assert store.dirty == ["s1"]  # kept, not lost
        assert (await store.get("s1")) == {"title": "during"}
    finally:
        holder.release()
    await store.flush()  # tried again once the lock is free
    assert store.dirty == []
    assert on_disk(path, "s1") == {"title": "during"}
    store.close()


async def test_a_write_that_fails_at_first_succeeds_when_the_lock_frees_in_time(tmp_path):
    path = tmp_path / "sessions.sqlite3"
    store = FileSessionStore(path, busy_timeout=0.05, retry_delays=(0.05,) * 100)
    await store.put("s1", {"title": "before"})
    holder = LockHolder(path)
    done = anyio.Event()

    async def save() -> None:
        await store.put("s1", {"title": "after"})
        done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(save)
        await wait_for(lambda: store.failed_attempts >= 1)
        assert not done.is_set()  # not acknowledged while it is not on disk
        holder.release()
        with anyio.fail_after(5):
            await done.wait()
    assert on_disk(path, "s1") == {"title": "after"}
    store.close()


class FailingCommit(sqlite3.Connection):
    """A real SQLite connection whose next COMMITs fail as a failing disk makes them fail."""

    failures = 0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        if sql == "COMMIT" and FailingCommit.failures > 0:
            FailingCommit.failures -= 1
            raise sqlite3.OperationalError("disk I/O error")
        return super().execute(sql, *args)


async def test_a_failed_commit_is_rolled_back_so_the_next_write_goes_through(tmp_path):
    path = tmp_path / "sessions.sqlite3"
    store = FileSessionStore(path, retry_delays=(), factory=FailingCommit)
    await store.put("s1", {"title": "one"})
    FailingCommit.failures = 1
    with pytest.raises(StoreError, match=r"could not write .*disk I/O error"):
        await store.put("s1", {"title": "two"})
    # Without the rollback this BEGIN fails: "cannot start a transaction within a transaction".
    await store.put("s2", {"title": "other"})
    await store.put("s1", {"title": "three"})
    assert on_disk(path, "s1") == {"title": "three"}
    assert on_disk(path, "s2") == {"title": "other"}
    store.close()


async def test_a_full_disk_is_reported_and_the_store_goes_on(tmp_path):
    path = tmp_path / "sessions.sqlite3"
    store = FileSessionStore(path, retry_delays=())
    await store.put("small", {"title": "fits"})
    db = store._connect()
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + 1}")  # a disk with one page left
    with pytest.raises(StoreError, match=r"could not write .*full"):
        await store.put("big", {"title": "x" * 200_000})
    await store.put("small", {"title": "still fits"})
    assert on_disk(path, "small") == {"title": "still fits"}
    store.close()


class CountingCommits(sqlite3.Connection):
    commits = 0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        if sql == "COMMIT":
            CountingCommits.commits += 1
        return super().execute(sql, *args)


async def test_concurrent_puts_of_one_session_coalesce_and_each_returns_once_durable(tmp_path):
    path = tmp_path / "sessions.sqlite3"
    store = FileSessionStore(path, factory=CountingCommits)
    await store.put("s1", {"n": -1})
    CountingCommits.commits = 0
    returned: list[int] = []

    async def save(n: int) -> None:
        await store.put("s1", {"n": n})
        # Acknowledged means on disk: what is there is this record or a newer one.
        assert on_disk(path, "s1")["n"] >= n
        returned.append(n)

    async with anyio.create_task_group() as tasks:
        for n in range(200):
            tasks.start_soon(save, n)
    assert sorted(returned) == list(range(200))
    assert on_disk(path, "s1") == {"n": 199}
    assert CountingCommits.commits <= 3  # the first, then one for all that queued behind it
    store.close()


async def test_the_state_folder_and_database_files_are_the_owners_alone(tmp_path):
    folder = tmp_path / "fresh" / "state"
    path = folder / "sessions.sqlite3"
    store = FileSessionStore(path)
    await store.put("s1", {"title": "private"})
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        assert file.exists(), file
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    store.close()


async def test_an_existing_database_is_made_private_when_opened(tmp_path):
    path = tmp_path / "sessions.sqlite3"
    sqlite3.connect(path).close()
    path.chmod(0o644)
    store = FileSessionStore(path)
    await store.put("s1", {"title": "private"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    store.close()
