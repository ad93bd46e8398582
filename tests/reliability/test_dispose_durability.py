"""An answered disposal is on disk: a real ``ahp serve`` killed with SIGKILL right after
answering ``disposeChat`` or ``disposeSession`` does not bring back what it disposed."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from ahp_scripted import ScriptedBackend
from ahpcore.host import HostSettings
from ahpcore.store import FileSessionStore
from ahpcore.testing import running_host
from tests.reliability.faults import FaultyBackend, Plan
from tests.reliability.test_durability import Wire, kill_hard
from tests.reliability.test_fault_injection import FaultyPlugin
from tests.sessions.conftest import open_session, script
from tests.test_cli import start_serve

pytestmark = pytest.mark.anyio

SESSION = "scripted:/00000000-0000-4000-8000-0000000000bb"
SESSION_ID = SESSION.split("/")[-1]
CHAT = "ahp-chat:/disposed-chat"


def stored_chats(state_dir: Path, session_id: str) -> list[str] | None:
    """The chats the record on disk lists (None: no record), read past the host."""
    with sqlite3.connect(state_dir / "sessions.sqlite3") as db:
        row = db.execute("SELECT record FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        return None
    return [chat["uri"] for chat in json.loads(row[0])["chats"]]


async def test_an_answered_dispose_chat_survives_kill_9(tmp_path: Path):
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            await client.request("createSession", {"channel": SESSION, "provider": "scripted"})
            await client.request("createChat", {"channel": SESSION, "chat": CHAT})
            await client.request("disposeChat", {"channel": CHAT})
            kill_hard(served)  # at once: no chance to write anything after the answer
    finally:
        served.process.kill()
    assert CHAT not in (stored_chats(tmp_path / "state", SESSION_ID) or [])
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            state = (await client.request("subscribe", {"channel": SESSION}))["snapshot"]["state"]
            assert CHAT not in [chat["resource"] for chat in state["chats"]]
            assert len(state["chats"]) == 1
    finally:
        served.process.terminate()
        served.process.wait(timeout=10)


async def test_an_answered_dispose_session_survives_kill_9(tmp_path: Path):
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            await client.request("createSession", {"channel": SESSION, "provider": "scripted"})
            await client.request("createChat", {"channel": SESSION, "chat": CHAT})
            await client.request("disposeSession", {"channel": SESSION})
            kill_hard(served)
    finally:
        served.process.kill()
    assert stored_chats(tmp_path / "state", SESSION_ID) is None
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            listed = await client.request("listSessions", {})
            assert SESSION not in [item["resource"] for item in listed["items"]]
            ident = 99
            await ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": ident,
                        "method": "subscribe",
                        "params": {"channel": SESSION},
                    }
                )
            )
            frame: dict[str, Any] = await client.until(lambda f: f.get("id") == ident)
            assert "error" in frame, frame
    finally:
        served.process.terminate()
        served.process.wait(timeout=10)


class SlowCommits(sqlite3.Connection):
    """A real SQLite connection whose COMMIT takes a while, as on a busy disk."""

    delay = 0.0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        if sql == "COMMIT" and SlowCommits.delay:
            time.sleep(SlowCommits.delay)
        return super().execute(sql, *args)


async def test_dispose_chat_is_answered_only_once_the_store_holds_it(tmp_path: Path):
    """However slow the disk, the answer comes after the commit, never before."""
    SlowCommits.delay = 0.0
    backend = FaultyBackend(ScriptedBackend(tmp_path / "scripted", script()), Plan())
    state_dir = tmp_path / "state"
    store = FileSessionStore(state_dir / "sessions.sqlite3", factory=SlowCommits)
    settings = HostSettings(port=0, state_dir=state_dir)
    async with running_host(
        [("faulty", FaultyPlugin(backend, store))], settings=settings
    ) as running:
        client = await running.connect("c1")
        await client.initialize()
        session, _ = await open_session(client)
        await client.request("createChat", {"channel": session, "chat": CHAT})
        session_id = session.split("/")[-1]
        assert CHAT in (stored_chats(state_dir, session_id) or [])
        SlowCommits.delay = 0.3
        try:
            await client.request("disposeChat", {"channel": CHAT})
            on_disk = await anyio.to_thread.run_sync(stored_chats, state_dir, session_id)
        finally:
            SlowCommits.delay = 0.0
        assert on_disk is not None and CHAT not in on_disk


async def test_a_save_caught_behind_a_dispose_does_not_bring_the_session_back(tmp_path: Path):
    """A background save that began before disposeSession and writes after it writes nothing."""
    backend = FaultyBackend(ScriptedBackend(tmp_path / "scripted", script()), Plan())
    state_dir = tmp_path / "state"
    store = FileSessionStore(state_dir / "sessions.sqlite3")
    settings = HostSettings(port=0, state_dir=state_dir)
    async with running_host(
        [("faulty", FaultyPlugin(backend, store))], settings=settings
    ) as running:
        client = await running.connect("c1")
        await client.initialize()
        session_uri, _ = await open_session(client)
        session_id = session_uri.split("/")[-1]
        registry = running.host.sessions.registry
        marking = registry.on_saving
        assert marking is not None
        reached, release = anyio.Event(), anyio.Event()

        async def held(session: Any) -> None:
            # The save has its record in hand and waits here, as on a slow index.
            reached.set()
            await release.wait()
            await marking(session)

        registry.on_saving = held
        registry.save_soon(registry.sessions[session_id])
        with anyio.fail_after(5):
            await reached.wait()
        registry.on_saving = marking
        await client.request("disposeSession", {"channel": session_uri})
        assert stored_chats(state_dir, session_id) is None
        release.set()
        await client.sync()
        with anyio.fail_after(5):
            while registry.unindexed_ids or store.dirty:
                await anyio.sleep(0.01)
        assert stored_chats(state_dir, session_id) is None
        listed = await client.request("listSessions", {})
        assert session_uri not in [item["resource"] for item in listed["items"]]
