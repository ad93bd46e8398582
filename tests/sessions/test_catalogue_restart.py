"""After a restart, listSessions answers from the index the last run left, then catches up."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ahp_scripted import ScriptedBackend
from ahp_scripted.catalogue import CACHE_NAME
from ahpcore.ports.backend import ChatStart
from tests.sessions.conftest import open_session, script, start_turn, turn_end

pytestmark = pytest.mark.anyio


async def listing(running: Any) -> list[dict[str, Any]]:
    client = await running.connect()
    await client.initialize()
    items = (await client.request("listSessions"))["items"]
    await client.close()
    return list(items)


async def caught_up(running: Any) -> None:
    """Wait for the refresh a listing started behind its answer."""
    index = running.host.sessions.index
    with anyio.fail_after(10):
        while index.stale("scripted"):
            await anyio.sleep(0.01)


async def test_a_restart_lists_exactly_the_rows_listed_before(session_host, tmp_path) -> None:
    async with session_host() as (running, _):
        client = await running.connect("maker")
        await client.initialize()
        for n in (1, 2, 3, 4):
            _, chat = await open_session(client, n)
            await start_turn(client, chat, f"hello {n}", "t1")
            await turn_end(client, chat)
        renamed, _ = await open_session(client, 5)
        await client.dispatch(renamed, {"type": "session/titleChanged", "title": "Renamed"})
        await client.request("disposeSession", {"channel": "scripted:/" + _sid(4)})
        await client.sync()
        before = await listing(running)
    assert {row["title"] for row in before} == {"hello 1", "hello 2", "hello 3", "Renamed"}

    async with session_host() as (running, _):
        first = await listing(running)  # from the index the last run left
        await caught_up(running)
        second = await listing(running)  # after the backend's own listing
    # Live rows answer for themselves (their chats, their state): compare what both have.
    assert _common(first) == _common(before)
    assert second == first

    # With neither the backend's rows in the index nor its cache, every log is read: the same.
    (tmp_path / "scripted" / CACHE_NAME).unlink()
    async with session_host() as (running, _):
        index = running.host.sessions.index
        await index._do(lambda db: db.execute("UPDATE catalogue SET backend_row = NULL"))
        await index._do(lambda db: db.execute("DELETE FROM catalogue_listed"))
        index._kept = None
        again = await listing(running)
    assert again == first


async def test_a_session_gone_behind_the_host_leaves_the_list_on_the_next_call(
    session_host, tmp_path
) -> None:
    # Two conversations only the backend knows (no host kept a record of them).
    outside = ScriptedBackend(tmp_path / "scripted", script())
    for name in ("one", "two"):
        await outside.start(
            ChatStart(name, f"ahp-chat://default/{name}", name, working_directories=(), config={})
        )
    async with session_host() as (running, _):
        assert {row["resource"] for row in await listing(running)} == {
            "scripted:/one",
            "scripted:/two",
        }
    await ScriptedBackend(tmp_path / "scripted", script()).delete("two")  # while no host runs
    async with session_host() as (running, _):
        first = await listing(running)
        await caught_up(running)
        second = await listing(running)
    assert len(first) == 2  # answered from the index before the backend was asked
    assert [row["resource"] for row in second] == ["scripted:/one"]


def _sid(n: int) -> str:
    from tests.sessions.conftest import SID

    return SID.format(n)


def _common(rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(row["resource"], row["title"]) for row in rows}
