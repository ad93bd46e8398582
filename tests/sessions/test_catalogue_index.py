"""listSessions from the catalogue index: pages at 10,000 sessions, a blocking backend
catalogue kept off the event loop, and one session looked up rather than listed."""

from __future__ import annotations

import gc
import json
import logging
import shutil
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, closing
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.ports.backend import (
    Abilities,
    CataloguePage,
    CatalogueRow,
    ChatStart,
    TranscriptReader,
)
from ahpcore.rpc.framing import dumps_answer_in_slices
from ahpcore.sessions import catalogue
from ahpcore.sessions.catalogue import REFRESH_SECONDS, REFRESH_SHARE, CatalogueIndex
from ahpcore.testing import running_host
from ahpcore.transports.websocket import PART_CHARS
from tests.sessions.conftest import SID, open_session

pytestmark = pytest.mark.anyio

SESSIONS = 10_000


def row(n: int) -> CatalogueRow:
    stamp = f"2026-01-01T00:{n // 3600 % 60:02d}:{n // 60 % 60:02d}.{n % 60:03d}Z"
    return CatalogueRow(f"s{n:05d}", f"Session {n}", stamp, stamp, ("file:///w",))


class ManyPast:
    """A backend with many past conversations whose catalogue calls block, as file reads do."""

    provider = "many"
    abilities = Abilities(resume=True, list_sessions=True)

    def __init__(self, count: int) -> None:
        self.rows = sorted((row(n) for n in range(count)), key=lambda r: r.modified_at)[::-1]
        self.pages_asked = 0
        self.lookups: list[str] = []
        #: Set by a test to let a blocked catalogue call go on.
        self.gate: threading.Event | None = None
        self.blocked = threading.Event()

    def agents(self) -> Sequence[Mapping[str, Any]]:
        return [
            {"provider": "many", "displayName": "Many", "description": "Many past", "models": []}
        ]

    def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: str | None = None
    ) -> CataloguePage:
        # A plain def: the host must call it in a worker thread.
        self.pages_asked += 1
        if self.gate is not None:
            self.blocked.set()
            assert self.gate.wait(10)
        start = int(cursor or 0)
        end = len(self.rows) if limit is None else start + limit
        return CataloguePage(self.rows[start:end], str(end) if end < len(self.rows) else None)

    def lookup(self, session_id: str) -> CatalogueRow | None:
        self.lookups.append(session_id)
        return next((r for r in self.rows if r.session_id == session_id), None)

    async def start(self, start: ChatStart) -> Any:
        return Idle()

    def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        return True

    def delete(self, backend_id: str) -> None:
        pass

    def truncate(self, backend_id: str, turn_id: str | None) -> None:
        pass


class Idle:
    async def run_turn(self, turn: Any, report: Any) -> None:
        report.text("ok")

    async def close(self) -> None:
        pass


class Plugin:
    def __init__(self, backend: ManyPast) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host, register):
        register(self.backend)


def settings(tmp_path: Path) -> HostSettings:
    return HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")


async def test_ten_thousand_sessions_page_from_the_index(tmp_path: Path) -> None:
    backend = ManyPast(SESSIONS)
    async with running_host([("many", Plugin(backend))], settings=settings(tmp_path)) as running:
        client = await running.connect("c1")
        await client.initialize()
        seen: list[str] = []
        cursor = None
        for _ in range(SESSIONS // 1000 + 2):
            params: dict[str, Any] = {"limit": 1000}
            if cursor is not None:
                params["cursor"] = cursor
            answer = await client.request("listSessions", params)
            if not seen:
                # The first listing read the whole catalogue, in pages of the backend's.
                assert backend.pages_asked == SESSIONS // 500
            seen += [item["resource"] for item in answer["items"]]
            cursor = answer.get("nextCursor")
            if cursor is None:
                break
        assert seen == [f"many:/{r.session_id}" for r in backend.rows]
        # All of them in one answer: encoded in slices off the event loop, the same rows.
        everything = await client.request("listSessions", {})
        assert [item["resource"] for item in everything["items"]] == seen
        frame = await client.request_frame("listSessions", {"limit": 5, "cursor": "0.forged"})
        assert "not issued by this host" in frame["error"]["message"]


async def test_a_blocking_catalogue_leaves_the_host_answering(tmp_path: Path) -> None:
    backend = ManyPast(3)
    backend.gate = threading.Event()
    async with running_host([("many", Plugin(backend))], settings=settings(tmp_path)) as running:
        lister = await running.connect("lister")
        other = await running.connect("other")
        await lister.initialize()
        await other.initialize()
        listed: dict[str, Any] = {}

        async def list_all() -> None:
            listed.update(await lister.request("listSessions", {}))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(list_all)
            await anyio.to_thread.run_sync(backend.blocked.wait, 10)
            with anyio.fail_after(5):
                # The catalogue call is still blocked in its thread; the host answers anyway.
                await other.request("ping", {})
            backend.gate.set()
        assert len(listed["items"]) == 3


async def test_reopening_one_session_looks_it_up_instead_of_listing(tmp_path: Path) -> None:
    backend = ManyPast(50)
    async with running_host([("many", Plugin(backend))], settings=settings(tmp_path)) as running:
        client = await running.connect("c1")
        await client.initialize()
        state = (await client.request("subscribe", {"channel": "many:/s00007"}))["snapshot"]
        assert state["state"]["provider"] == "many"
        assert backend.lookups == ["s00007"] and backend.pages_asked == 0
        frame = await client.request_frame("subscribe", {"channel": "many:/nope"})
        assert "error" in frame


def test_an_answer_encoded_in_slices_is_the_answer() -> None:
    items = [{"resource": f"many:/s{n}", "title": 'é"\n' * (n % 3)} for n in range(1001)]
    # A slice holding a null is written by the standard encoder, and weighed with it.
    nulls = [{**item, "title": None} if n == 250 else item for n, item in enumerate(items)]
    cases = ({"nextCursor": "c", "items": items}, {"items": items[:1]}, {"items": []})
    for result in (*cases, {"items": nulls}):
        text, weight = dumps_answer_in_slices(7, result)
        assert json.loads(text) == {"jsonrpc": "2.0", "id": 7, "result": result}
        assert weight == len(text.encode("utf-8"))


async def test_refreshes_write_what_changed_and_a_restart_lists_the_same(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    backend = ManyPast(4)

    async def titles(index: CatalogueIndex) -> dict[str, str]:
        items, _ = await index.page(["many"], None, None)
        return {item["resource"]: item["title"] for item in items}

    index = CatalogueIndex(path)
    await index.refresh(backend)
    assert await titles(index) == {f"many:/s{n:05d}": f"Session {n}" for n in range(4)}
    first, second, third, _ = sorted(backend.rows, key=lambda r: r.session_id)
    backend.rows = [r for r in backend.rows if r is not third]
    backend.rows[backend.rows.index(second)] = replace(second, title="Renamed")
    await index.refresh(backend)
    assert await titles(index) == {
        "many:/s00000": "Session 0",
        "many:/s00001": "Renamed",
        "many:/s00003": "Session 3",
    }
    backend.rows.append(third)  # back again, as it was before it went
    await index.forget(first.session_id)  # still listed by its backend: listed again
    await index.refresh(backend)
    expected = await titles(index)
    assert expected == {
        "many:/s00000": "Session 0",
        "many:/s00001": "Renamed",
        "many:/s00002": "Session 2",
        "many:/s00003": "Session 3",
    }
    index.close()

    again = CatalogueIndex(path)  # a restart: answers from what the last run left
    assert await again.kept("many") and not again.known("many")
    assert await titles(again) == expected
    await again.refresh(backend)
    assert await titles(again) == expected
    again.close()


async def test_a_listed_summary_follows_a_rename_by_the_host_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index.sqlite3"
    backend = ManyPast(2)

    def record(title: str) -> dict[str, Any]:
        stamp = "2026-02-01T00:00:00.000Z"
        return {"uri": "many:/s00001", "title": title, "createdAt": stamp, "modifiedAt": stamp}

    async def titles(index: CatalogueIndex) -> dict[str, str]:
        items, _ = await index.page(["many"], None, None)
        return {item["resource"]: item["title"] for item in items}

    index = CatalogueIndex(path)
    await index.refresh(backend)
    assert await titles(index) == {"many:/s00000": "Session 0", "many:/s00001": "Session 1"}
    # Listed once, each row's summary is kept encoded in the index.
    kept = await index._do(lambda db: db.execute("SELECT summary FROM catalogue").fetchall())
    assert all(json.loads(text)["resource"].startswith("many:/") for (text,) in kept)
    await index.saved("s00001", "many", record("Renamed"))
    assert (await titles(index))["many:/s00001"] == "Renamed"
    index.close()

    again = CatalogueIndex(path)
    assert (await titles(again))["many:/s00001"] == "Renamed"
    await again.saved("s00001", "many", record("Renamed twice"))
    assert (await titles(again))["many:/s00001"] == "Renamed twice"
    again.close()


async def test_an_index_left_by_an_older_host_gains_its_summaries(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "index.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE catalogue (id TEXT PRIMARY KEY, provider TEXT NOT NULL, "
        "modified_at TEXT NOT NULL, listed INTEGER NOT NULL DEFAULT 0, backend_row TEXT, "
        "host_row TEXT);"
    )
    listed = {"title": "Old", "createdAt": "2026-01-01T00:00:00.000Z"}
    db.execute(
        "INSERT INTO catalogue (id, provider, modified_at, backend_row) VALUES (?, ?, ?, ?)",
        ("old", "many", "2026-01-01T00:00:00.000Z", json.dumps(listed)),
    )
    db.commit()
    db.close()

    index = CatalogueIndex(path)
    items, _ = await index.page(["many"], None, None)
    assert [(item["resource"], item["title"]) for item in items] == [("many:/old", "Old")]
    index.close()


def test_a_kept_summary_reads_back_as_it_was_written() -> None:
    plain = {"resource": "many:/s", "title": "é \u2028 fix the null check", "status": 1}
    for summary in (
        plain,
        {**plain, "_meta": {"big": 2**70, "small": -(2**63)}},  # past orjson's 64 bits
        {**plain, "_meta": {"gone": None}},
        {**plain, "_meta": {"n": float("nan")}},  # orjson would write it as null
    ):
        text = catalogue.summary_text(summary)
        back = catalogue.read_summary(text)
        assert json.dumps(back, sort_keys=True) == json.dumps(summary, sort_keys=True)
    # The common case is orjson's (read four times faster); the others are marked.
    assert not catalogue.summary_text(plain).startswith(" ")
    assert catalogue.summary_text({**plain, "_meta": {"big": 2**70}}).startswith(" ")


async def test_summaries_an_older_host_kept_are_made_again_in_the_current_format(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index.sqlite3"
    index = CatalogueIndex(path)
    backend = ManyPast(3)
    await index.refresh(backend)
    listed, _ = await index.page(["many"], None, None)
    index.close()
    # As an older host left it: its own encoding of the summaries (an integer past 64
    # bits would be misread as a float by the faster decoder), no format recorded.
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE catalogue_format")
        old = {**listed[0], "_meta": {"big": 2**70}}
        db.execute(
            "UPDATE catalogue SET summary = ? WHERE id = ?",
            (json.dumps(old, separators=(",", ":")), "s00002"),
        )
    again = CatalogueIndex(path)
    try:
        items, _ = await again.page(["many"], None, None)
        assert items == listed  # made again from the halves, not read from the old text
        with closing(sqlite3.connect(path)) as db:
            kept = [text for (text,) in db.execute("SELECT summary FROM catalogue")]
        assert len(kept) == 3 and all(catalogue.read_summary(t) in listed for t in kept)
    finally:
        again.close()


async def test_a_large_answer_goes_out_in_parts_with_frames_sent_meanwhile_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = ManyPast(SESSIONS)
    async with running_host([("many", Plugin(backend))], settings=settings(tmp_path)) as running:
        # The client logs each frame it reads at debug level (fragments say CONT).
        caplog.set_level(logging.DEBUG, logger="websockets.client")
        client = await running.connect("lister")
        await client.initialize()
        await client.request("listSessions", {"limit": 5})
        caplog.clear()
        listed = anyio.Event()
        pings = 0

        async def ping_meanwhile() -> None:
            # A pong answered while the listing's parts are on their way must wait for
            # the last of them: written between two, it would break the message.
            nonlocal pings
            while not listed.is_set() and pings < 2000:
                pings += 1
                await client.send({"jsonrpc": "2.0", "id": f"p{pings}", "method": "ping"})
                await anyio.sleep(0.001)

        async with anyio.create_task_group() as tasks:
            await client.send({"jsonrpc": "2.0", "id": "all", "method": "listSessions"})
            tasks.start_soon(ping_meanwhile)
            everything = (await client.recv_until(lambda f: f.get("id") == "all"))["result"]
            listed.set()
        pongs = []
        while len(pongs) < pings:
            frame = await client.recv()
            if str(frame.get("id")).startswith("p"):
                pongs.append(frame["id"])
        # Each ping answered once (answers to separate requests may pass each other).
        assert sorted(pongs) == sorted(f"p{n}" for n in range(1, pings + 1))
        assert [item["resource"] for item in everything["items"]] == [
            f"many:/{r.session_id}" for r in backend.rows
        ]
        size = len(json.dumps(everything, separators=(",", ":")))
        parts = [r for r in caplog.records if r.getMessage().startswith("< CONT")]
        assert len(parts) >= size // PART_CHARS, (size, len(parts))
        await client.request("ping", {})  # the connection is whole


async def test_a_stale_listing_is_refreshed_after_its_answer_and_costly_ones_less_often(
    tmp_path: Path,
) -> None:
    backend = ManyPast(20)
    async with running_host([("many", Plugin(backend))], settings=settings(tmp_path)) as running:
        client = await running.connect("c1")
        await client.initialize()
        await client.request("listSessions", {})
        index = running.host.sessions.index
        asked = backend.pages_asked
        index._refreshed["many"] -= REFRESH_SECONDS + 1  # as if listed a while ago
        assert index.stale("many")
        await client.request("listSessions", {})
        # Answered first; the backend is asked again only once the answer is out.
        assert backend.pages_asked == asked
        with anyio.fail_after(10):
            while backend.pages_asked == asked:
                await anyio.sleep(0.02)
        assert not index.stale("many")

        # A backend whose catalogue took a second to read is read at most every ten.
        index._refresh_cost["many"] = 1.0
        index._refreshed["many"] -= REFRESH_SECONDS + 1
        assert not index.stale("many")
        index._refreshed["many"] -= 1 / REFRESH_SHARE
        assert index.stale("many")


async def test_plugins_passing_over_a_long_listing_let_other_work_run_between(
    tmp_path: Path,
) -> None:
    ran_between: list[bool] = []
    others_ran: list[bool] = []

    class First:
        @hookimpl
        def ahp_session_rows(self, host, rows):
            # Work another client's request would start now, on the same loop.
            host.spawn(lambda: _note(others_ran), name="another client's work")

    class Second:
        @hookimpl
        def ahp_session_rows(self, host, rows):
            ran_between.append(bool(others_ran))

    async def _note(seen: list[bool]) -> None:
        seen.append(True)

    backend = ManyPast(1500)
    plugins = [("many", Plugin(backend)), ("first", First()), ("second", Second())]
    async with running_host(plugins, settings=settings(tmp_path)) as running:
        client = await running.connect("c1")
        await client.initialize()
        assert len((await client.request("listSessions", {}))["items"]) == 1500
    assert ran_between == [True]  # the loop ran between the two plugins' passes


async def test_a_long_page_reaches_each_plugin_in_parts_with_other_work_between(
    tmp_path: Path,
) -> None:
    parts: list[tuple[int, bool]] = []
    others: list[int] = []

    class Counting:
        @hookimpl
        def ahp_session_rows(self, host, rows):
            # Work another client's request would start now, on the same loop.
            host.spawn(lambda: _note(len(parts)), name="another client's work")
            parts.append((len(rows), bool(others)))
            for row in rows:
                row["_meta"] = {**row.get("_meta", {}), "seen": True}

    async def _note(part: int) -> None:
        others.append(part)

    count = 2 * catalogue.ROWS_PER_TURN + 7
    backend = ManyPast(count)
    plugins = [("many", Plugin(backend)), ("counting", Counting())]
    async with running_host(plugins, settings=settings(tmp_path)) as running:
        client = await running.connect("c1")
        await client.initialize()
        items = (await client.request("listSessions", {}))["items"]
    # Every row once, in parts no longer than ROWS_PER_TURN, the loop turning between.
    assert len(items) == count and all(item["_meta"]["seen"] for item in items)
    assert [size for size, _ in parts] == [catalogue.ROWS_PER_TURN] * 2 + [7]
    assert [between for _, between in parts] == [False, True, True]


async def test_a_client_gone_while_its_large_answer_goes_out_leaves_the_others_served(
    tmp_path: Path,
) -> None:
    backend = ManyPast(SESSIONS)
    async with running_host([("many", Plugin(backend))], settings=settings(tmp_path)) as running:
        other = await running.connect("other")
        await other.initialize()
        for _ in range(3):
            leaver = await running.connect("leaver")
            leaver.conformance = False  # it leaves mid-answer on purpose
            await leaver.initialize()
            await leaver.send({"jsonrpc": "2.0", "id": "all", "method": "listSessions"})
            # Gone once the answer has started to arrive: its parts meet a closed socket.
            await anext(aiter(leaver.connection.recv_streaming()))
            leaver.connection.transport.abort()
        with anyio.fail_after(10):
            await other.request("ping", {})
            everything = await other.request("listSessions", {})
        assert len(everything["items"]) == SESSIONS


async def host_row(index: CatalogueIndex, session_id: str) -> dict[str, Any] | None:
    rows = await index._do(
        lambda db: db.execute(
            "SELECT host_row FROM catalogue WHERE id = ?", (session_id,)
        ).fetchall()
    )
    return json.loads(rows[0][0]) if rows and rows[0][0] else None


async def test_saves_of_one_session_in_flight_together_leave_the_newest(tmp_path: Path) -> None:
    # Each save runs in a worker thread; threads may take the index's lock in any
    # order, so without care an older record lands after a newer one.
    index = CatalogueIndex(tmp_path / "index.sqlite")
    try:
        for attempt in range(5):
            async with anyio.create_task_group() as tg:
                for n in range(30):
                    record = {"uri": "t:/s", "title": f"{attempt}-{n}", "modifiedAt": "x"}
                    tg.start_soon(index.saved, "s", "t", record)
            assert (await host_row(index, "s"))["title"] == f"{attempt}-29"
        async with anyio.create_task_group() as tg:
            tg.start_soon(index.saved, "s", "t", {"uri": "t:/s", "title": "late"})
            tg.start_soon(index.forget, "s")
        assert await host_row(index, "s") is None
    finally:
        index.close()


async def one_session(running: Any) -> tuple[Any, CatalogueIndex, Any]:
    """The host's registry, its catalogue index and one live session in it."""
    client = await running.connect()
    await client.initialize()
    await open_session(client)
    registry = running.host.sessions.registry
    return registry, running.host.sessions.index, registry.sessions[SID.format(1)]


async def test_the_index_keeps_the_newest_save_whichever_finishes_first(
    session_host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with session_host() as (running, _):
        registry, index, live = await one_session(running)
        store, put, release = (
            running.host.session_store,
            running.host.session_store.put,
            anyio.Event(),
        )
        held: list[str | None] = []

        async def first_put_held(session_id: str, record: dict[str, Any]) -> None:
            if not held:
                held.append(record.get("title"))
                await release.wait()
            await put(session_id, record)

        monkeypatch.setattr(store, "put", first_put_held)
        async with anyio.create_task_group() as tg:
            tg.start_soon(registry.save, live)
            with anyio.fail_after(5):
                while not held:
                    await anyio.sleep(0.01)
            await registry.save(live, title="Newer")
            release.set()
        assert held == [""]  # the older record finished last
        assert (await host_row(index, SID.format(1)))["title"] == "Newer"


async def test_a_save_cut_off_while_indexing_still_reaches_the_index(
    session_host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with session_host() as (running, _):
        registry, index, live = await one_session(running)
        saved, indexing = index.saved, anyio.Event()

        async def slow_saved(*args: Any) -> None:
            indexing.set()
            await anyio.sleep(0.2)
            await saved(*args)

        monkeypatch.setattr(index, "saved", slow_saved)
        with anyio.move_on_after(5) as waited:
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(registry.save, live, title="Stopping"))
                await indexing.wait()
                tg.cancel_scope.cancel()  # as a stopping host cancels its saves
        assert not waited.cancelled_caught
        assert (await host_row(index, SID.format(1)))["title"] == "Stopping"


def stored_title(state: Path, session_id: str) -> str | None:
    with closing(sqlite3.connect(state / "sessions.sqlite3")) as db:
        found = db.execute("SELECT record FROM sessions WHERE id = ?", (session_id,)).fetchall()
    return json.loads(found[0][0])["title"] if found else None


@asynccontextmanager
async def crash_image_between_store_and_index(
    running: Any, state: Path, stored: Callable[[], bool]
) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Hold the catalogue index's lock; the body starts a save and is handed ``image()``,
    which waits until ``stored()`` (the store committed) and copies the state folder's
    SQLite files as a host killed at that instant leaves them. Once the block ends
    the index is let go and the host goes on as usual."""
    index = running.host.sessions.index
    await anyio.to_thread.run_sync(index._lock.acquire)
    image = state.parent / "crash-image"

    async def take() -> None:
        with anyio.fail_after(10):
            while not stored():
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)  # the index write is queued behind the lock meanwhile
        image.mkdir()
        for file in state.glob("sessions.sqlite3*"):
            shutil.copy2(file, image / file.name)

    try:
        yield take
    finally:
        index._lock.release()


def restore_image(state: Path) -> None:
    for file in state.glob("sessions.sqlite3*"):
        file.unlink()
    for file in (state.parent / "crash-image").iterdir():
        shutil.copy2(file, state / file.name)


async def test_a_host_killed_between_the_store_and_the_index_lists_what_the_store_kept(
    session_host: Any, tmp_path: Path
) -> None:
    state, sid = tmp_path / "state", SID.format(1)
    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, _ = await open_session(client)
        await client.dispatch(session, {"type": "session/titleChanged", "title": "Before"})
        await client.sync()
        async with crash_image_between_store_and_index(
            running, state, lambda: stored_title(state, sid) == "After"
        ) as image:
            await client.dispatch(session, {"type": "session/titleChanged", "title": "After"})
            await image()
    restore_image(state)
    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        (row,) = (await client.request("listSessions"))["items"]
        assert row["resource"] == session and row["title"] == "After"
    async with session_host() as (running, _):  # mended once; a clean stop leaves no mark
        assert await running.host.sessions.index.recover(running.host.session_store.get) == []


async def test_a_session_disposed_just_before_a_kill_is_not_listed_again(
    session_host: Any, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        kept, _ = await open_session(client, 1)
        gone, _ = await open_session(client, 2)
        async with (
            anyio.create_task_group() as tg,
            crash_image_between_store_and_index(
                running, state, lambda: stored_title(state, SID.format(2)) is None
            ) as image,
        ):
            tg.start_soon(partial(client.request, "disposeSession", {"channel": gone}))
            await image()
    restore_image(state)
    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        listed = [row["resource"] for row in (await client.request("listSessions"))["items"]]
        assert listed == [kept]


async def test_an_index_write_that_failed_is_mended_at_the_next_start(
    session_host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with session_host() as (running, _):
        registry, index, live = await one_session(running)

        async def failing(*args: Any) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        with monkeypatch.context() as patched:
            patched.setattr(index, "saved", failing)
            await registry.save(live, title="Kept anyway")  # the store has it: no error
        assert await running.host.session_store.get(live.id) is not None
        assert (await host_row(index, live.id))["title"] == ""
    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        (row,) = (await client.request("listSessions"))["items"]
        assert row["title"] == "Kept anyway"


async def test_a_save_costs_the_same_however_many_sessions_the_index_holds(
    tmp_path: Path,
) -> None:
    # Each save replaces its session's chats; found by a scan of every chat, a save
    # at 100,000 sessions did that much more work, four times a turn.
    index = CatalogueIndex(tmp_path / "index.sqlite")

    def record(n: int) -> dict[str, Any]:
        return {"uri": f"t:/s{n}", "modifiedAt": "x", "chats": [{"uri": f"ahp-chat://c{n}"}]}

    async def steps_of_one_save(n: int) -> int:
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        await index._do(lambda db: db.set_progress_handler(count, 10))
        await index.saved(f"s{n}", "t", record(n))
        await index._do(lambda db: db.set_progress_handler(None, 10))
        return steps[0]

    try:
        few = await steps_of_one_save(0)
        await index._do(
            lambda db: db.executemany(
                "INSERT INTO catalogue_chats (chat, session) VALUES (?, ?)",
                [(f"ahp-chat://c{n}", f"s{n}") for n in range(1, 5000)],
            )
        )
        many = await steps_of_one_save(1)
        assert many < 3 * few + 10, (few, many)
        assert await index.session_holding("ahp-chat://c1") == "s1"
        await index.forget("s1")
        assert await index.session_holding("ahp-chat://c1") is None
    finally:
        index.close()


async def test_failed_sessions_are_found_without_reading_every_listed_row(
    tmp_path: Path,
) -> None:
    index = CatalogueIndex(tmp_path / "index.sqlite")
    listed = json.dumps({"title": "t", "createdAt": "x", "modifiedAt": "x"})
    try:
        await index._do(
            lambda db: db.executemany(
                "INSERT INTO catalogue (id, provider, modified_at, backend_row) "
                "VALUES (?, 't', 'x', ?)",
                [(f"s{n}", listed) for n in range(5000)],
            )
        )
        await index.saved("gone", "t", {"uri": "t:/gone", "lifecycle": "failed"})
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        await index._do(lambda db: db.set_progress_handler(count, 10))
        assert await index.failed() == {"gone": "t"}
        assert steps[0] < 50, steps[0]
    finally:
        index.close()


class Held:
    """A backend whose catalogue waits for ``gate`` (a catalogue read of many files)."""

    provider = "held"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.asked = threading.Event()

    def catalogue(self, *, limit: Any = None, cursor: Any = None) -> CataloguePage:
        self.asked.set()
        self.gate.wait(10)
        return CataloguePage([row(n) for n in range(200)], None)


async def test_a_first_catalogue_is_built_without_collections_and_then_frozen(
    tmp_path: Path,
) -> None:
    # Full collections while 100,000 rows were built held every client for up to half
    # a second each; the rows, which live as long as the host, are frozen once built.
    index = CatalogueIndex(tmp_path / "index.sqlite")
    backend = Held()
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(index.refresh, backend)
            await anyio.to_thread.run_sync(backend.asked.wait, 10)
            assert not gc.isenabled()
            backend.gate.set()
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen
        # Moved out of the collector's generations: no pass walks them again.
        assert not [o for o in gc.get_objects() if isinstance(o, CatalogueRow)]
    finally:
        gc.enable()
        index.close()


async def test_a_catalogue_that_hangs_does_not_keep_the_collector_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalogue, "LONG_LIVED_SECONDS", 0.2)
    index = CatalogueIndex(tmp_path / "index.sqlite")
    backend = Held()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(index.refresh, backend)
            await anyio.to_thread.run_sync(backend.asked.wait, 10)
            assert not gc.isenabled()
            with anyio.fail_after(5):
                while not gc.isenabled():
                    await anyio.sleep(0.05)
            backend.gate.set()
        assert gc.isenabled()
    finally:
        backend.gate.set()
        gc.enable()
        index.close()


async def test_the_first_whole_listing_is_built_without_collections_and_then_frozen(
    tmp_path: Path,
) -> None:
    # Its summaries are kept for the next whole listing: at 100,000 sessions full
    # collections walking them held every client for 40-240 ms each.
    index = CatalogueIndex(tmp_path / "index.sqlite")
    backend = ManyPast(300)
    try:
        await index.refresh(backend)
        seen: list[bool] = []
        real_run = index._run

        def run(work: Any) -> Any:
            seen.append(gc.isenabled())
            return real_run(work)

        index._run = run  # type: ignore[method-assign]
        frozen = gc.get_freeze_count()
        items, _ = await index.page([backend.provider], None, None)
        assert len(items) == 300 and seen == [False]
        assert gc.isenabled() and gc.get_freeze_count() > frozen
        assert index._full is not None
        tracked = {id(o) for o in gc.get_objects()}
        assert not [s for s in index._full[2] if id(s) in tracked]
        # Once a run: the next whole listing reuses those summaries, collections on.
        seen.clear()
        await index.page([backend.provider], None, None)
        await index.page([backend.provider], 50, None)
        assert seen == [True, True]
    finally:
        gc.enable()
        index.close()


def test_a_row_costs_its_fields_and_no_more():
    """A catalogue holds a row per past session (100,000 after a year): a row with no
    meta of its own adds no dict of attributes and no empty meta dict to its fields."""
    import tracemalloc

    strings = [(f"s{n}", f"title {n}", "2026-01-01", f"2026-02-{n % 28:02d}") for n in range(5000)]
    folders = ("file:///w",)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rows = [CatalogueRow(*fields, folders) for fields in strings]
        per_row = (tracemalloc.get_traced_memory()[0] - before) / len(rows)
    finally:
        tracemalloc.stop()
    # Six slots and the object's header come to 80 bytes (with the list's pointer, 88);
    # a __dict__ and an empty meta dict per row made it over 200.
    assert per_row < 120, per_row
    assert rows[0].meta == {} and rows[0].meta is rows[1].meta
    assert replace(rows[0], meta={"k": 1}).meta == {"k": 1}


async def test_every_page_reaches_every_plugin_an_empty_one_too() -> None:
    calls: list[int] = []

    def impl(host: Any, rows: list[dict[str, Any]]) -> None:
        calls.append(len(rows))

    impl.plugin = "counting"  # type: ignore[attr-defined]
    await catalogue.decorate_rows([impl], None, [])
    await catalogue.decorate_rows([impl], None, [{}] * (catalogue.ROWS_PER_TURN + 1))
    assert calls == [0, catalogue.ROWS_PER_TURN, 1]
