"""Drafts change with every keystroke: their saves coalesce, and a stopping host still
writes the last one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from ahpcore.sessions.live import LiveSession
from tests.sessions.conftest import message, open_session

pytestmark = pytest.mark.anyio


def saved_drafts(registry: Any) -> list[str | None]:
    """Record, through the registry's own hook, the default chat's draft of every save."""
    seen: list[str | None] = []
    indexed = registry.on_saved

    async def counted(session: LiveSession, record: dict[str, Any]) -> None:
        await indexed(session, record)
        draft = record["chats"][0].get("draft")
        seen.append(draft["text"] if draft else None)

    registry.on_saved = counted
    return seen


def stored_draft(state_dir: Path) -> str | None:
    with sqlite3.connect(state_dir / "sessions.sqlite3") as db:
        (text,) = db.execute("SELECT record FROM sessions").fetchone()
    draft = json.loads(text)["chats"][0].get("draft")
    return draft["text"] if draft else None


async def test_a_burst_of_drafts_is_one_write_and_a_stopping_host_writes_it(
    session_host, tmp_path: Path
):
    async with session_host() as (running, _):
        registry = running.host.sessions.registry
        registry.draft_save_delay = 60  # longer than the test: only the stop can write it
        saves = saved_drafts(registry)
        client = await running.connect("typist")
        await client.initialize()
        _, chat = await open_session(client)
        for typed in ("h", "he", "hel", "hello"):
            seq = await client.dispatch(
                chat, {"type": "chat/draftChanged", "draft": message(typed)}
            )
            await client.answer_to(seq)
        await client.sync()
        assert [s for s in saves if s] == []  # the session's creation saved no draft
        assert stored_draft(tmp_path / "state") is None
    assert [s for s in saves if s] == ["hello"]
    assert stored_draft(tmp_path / "state") == "hello"


async def test_a_prompt_save_takes_a_waiting_draft_with_it(session_host, tmp_path: Path):
    async with session_host() as (running, _):
        registry = running.host.sessions.registry
        registry.draft_save_delay = 60
        saves = saved_drafts(registry)
        client = await running.connect("typist")
        await client.initialize()
        session, chat = await open_session(client)
        seq = await client.dispatch(chat, {"type": "chat/draftChanged", "draft": message("wip")})
        await client.answer_to(seq)
        seq = await client.dispatch(session, {"type": "session/isReadChanged", "isRead": False})
        await client.answer_to(seq)
        with anyio.fail_after(10):
            while "wip" not in saves:
                await anyio.sleep(0.01)
        assert stored_draft(tmp_path / "state") == "wip"
