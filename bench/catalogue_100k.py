"""A year of use: listSessions over 100,000 past sessions, from outside, against bare.

The state folder is filled once the way the host keeps sessions, through the
stores' own code: each session's record through ``FileSessionStore.put``, its
host half through ``CatalogueIndex.saved``, and its scripted conversation log
(one turn) through the scripted backend's ``ConversationStore``. Titles, folders
and times vary (created over a year, one of 40 folders). One ``ahp serve`` then
lists it whole and stops, as a host that was used would have, so the index holds
the backend's rows and their summaries. The folder is kept for later runs
(``--state``; the marker ``done`` says it is complete).

Each round restarts ``ahp serve`` on that folder twice and ``bench/_bare.py``
(answering from the same rows) as often, in turns, and times from another
process, over real sockets:

* the first ``listSessions`` after a restart, a page of 50 (what a client asks
  first), and in the other restart the first whole listing;
* pages of 50 after it (the first page again, then the next by cursor);
* every ping of another client, in a process of its own, sent every 2 ms while
  the calls and the refresh behind them run, and in an idle second after;
* the host's RSS after ``initialize`` and after the listings: the growth is what
  the listing and its index hold.

    .venv/bin/python bench/catalogue_100k.py [--sessions 100000] [--repeat 2]

Prints figures and ratios; asserts nothing. Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import outside  # noqa: E402
from outside import PINGER, VERSIONS, Server, client, memory_kib, start_bare, start_host  # noqa: E402

FOLDERS = [f"file:///home/me/src/project-{n:02d}" for n in range(40)]
PROSE = (
    "fix the flaky test in the parser add a flag for verbose output explain why the build "
    "fails on arm refactor the session store rename the config keys write docs for the api "
    "speed up the listing review this change find the leak in the watcher"
)
WORDS = PROSE.split(" ")
YEAR = 365 * 24 * 3600


def _iso(seconds: float) -> str:
    moment = time.gmtime(seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%S", moment) + f".{int(seconds * 1000) % 1000:03d}Z"


# -- seeding ------------------------------------------------------------------------
async def seed(state: Path, sessions: int) -> None:
    """Write ``sessions`` past sessions through the stores' own code."""
    import anyio.to_thread

    from ahp_scripted.store import Conversation, ConversationStore, TurnRecord
    from ahpcore.protocol.uris import default_chat_uri, session_uri
    from ahpcore.sessions.catalogue import CatalogueIndex
    from ahpcore.store.file import FileSessionStore

    state.mkdir(mode=0o700, parents=True)
    database = state / "sessions.sqlite3"
    store = FileSessionStore(database)
    index = CatalogueIndex(database)
    conversations = ConversationStore(state / "scripted")
    chooser = random.Random(2026)
    now = time.time()
    anyio.to_thread.current_default_thread_limiter().total_tokens = 8
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as files:
        batch: list[Any] = []
        for n in range(sessions):
            session_id = str(uuid.UUID(int=chooser.getrandbits(128), version=4))
            uri = session_uri("scripted", session_id)
            chat = default_chat_uri(uri)
            created = now - YEAR + YEAR * n / sessions + chooser.random() * 60
            modified = created + chooser.random() * 3600
            title = " ".join(chooser.sample(WORDS, chooser.randint(3, 9)))
            folders = [chooser.choice(FOLDERS)]
            turn = TurnRecord(
                id=str(uuid.UUID(int=chooser.getrandbits(128), version=4)),
                message={"text": title, "origin": {"kind": "user"}},
                started_at=_iso(created),
                reports=[["text", {"delta": "Done: " + title}]],
                end={"state": "complete", "durationMs": 1200, "error": None},
            )
            conversation = Conversation(
                backend_id=session_id,
                session_id=session_id,
                chat_uri=chat,
                created_at=_iso(created),
                modified_at=_iso(modified),
                working_directories=folders,
                turns=[turn],
            )
            write = conversations.prepare(conversation)
            assert write is not None
            record = {
                "uri": uri,
                "owner": "me",
                "provider": "scripted",
                "title": title,
                "createdAt": _iso(created),
                "modifiedAt": _iso(modified),
                "workingDirectories": folders,
                "isRead": chooser.random() < 0.9,
                "isArchived": chooser.random() < 0.3,
                "defaultChat": chat,
                "config": {},
                "chats": [
                    {
                        "uri": chat,
                        "backendId": session_id,
                        "title": title,
                        "isRead": True,
                        "isArchived": False,
                    }
                ],
            }
            batch.append((files.submit(write), session_id, record))
            if len(batch) == 500 or n == sessions - 1:
                for written, _, _ in batch:
                    written.result()
                await asyncio.gather(*(store.put(i, r) for _, i, r in batch))
                await asyncio.gather(*(index.saved(i, "scripted", r) for _, i, r in batch))
                batch = []
                if (n + 1) % 10_000 == 0:
                    print(f"  seeded {n + 1}/{sessions} in {time.monotonic() - began:.0f} s")
    store.close()
    index.close()
    # A host that was used has listed them: the backend's rows and summaries indexed,
    # the scripted catalogue's cache written. One listing, then a clean stop.
    server = start_host(state)
    try:
        async with client(server, "seed") as peer:
            peer.defer_large = True
            await peer.request("listSessions", {})
            await asyncio.sleep(outside_refresh_wait(sessions))
            await peer.request("listSessions", {"limit": 1})
    finally:
        server.stop()
    (state / "done").write_text("")


def outside_refresh_wait(sessions: int) -> float:
    """Long enough for the refresh behind a listing to scan every log once."""
    return 2.0 + sessions / 20_000


# -- measuring ------------------------------------------------------------------------
async def _pinger(server: Server) -> asyncio.subprocess.Process:
    pinger = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PINGER,
        server.url,
        json.dumps(VERSIONS),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert pinger.stdout is not None
    await asyncio.wait_for(pinger.stdout.readline(), 60)  # "ready"
    return pinger


async def _pings(pinger: asyncio.subprocess.Process) -> list[tuple[float, float]]:
    assert pinger.stdin is not None and pinger.stdout is not None
    pinger.stdin.close()
    words = (await asyncio.wait_for(pinger.stdout.read(), 60)).decode().split()
    await pinger.wait()
    return [(float(s), float(t)) for s, t in zip(words[::2], words[1::2], strict=False)]


async def one_start(server: Server, first: str) -> dict[str, Any]:
    """The calls of one start: ``first`` is "page" or "all"; returns figures per call."""
    calls: list[tuple[str, float, float, int]] = []  # name, start, wall, rows
    async with client(server, "lister") as lister:
        rss_before = memory_kib(server.pid) / 1024
        pinger = await _pinger(server)
        try:
            await asyncio.sleep(0.2)
            lister.defer_large = True

            async def call(name: str, params: dict[str, Any]) -> dict[str, Any]:
                start = time.monotonic()
                result = await lister.request("listSessions", params)
                wall = time.monotonic() - start
                if "unparsed" in result:
                    result = json.loads(result["unparsed"])["result"]
                calls.append((name, start, wall, len(result.get("items", []))))
                await asyncio.sleep(0.05)
                return result

            if first == "page":
                page = await call("first page 50 after restart", {"limit": 50})
                for _ in range(3):
                    await call("page 50 again", {"limit": 50})
                cursor = page.get("nextCursor")
                if cursor:
                    await call("next page 50", {"limit": 50, "cursor": cursor})
            else:
                await call("first all after restart", {})
                await call("page 50", {"limit": 50})
                await call("all again", {})
                await call("page 50", {"limit": 50})
            start = time.monotonic()
            await asyncio.sleep(1.0)
            calls.append((f"idle 1 s after ({first})", start, time.monotonic() - start, 0))
        finally:
            pings = await _pings(pinger)
        rss_after = memory_kib(server.pid) / 1024
    rows = []
    for name, start, wall, count in calls:
        during = sorted(took for sent, took in pings if start <= sent <= start + wall)
        rows.append((name, wall, count, during))
    return {"rss": (rss_before, rss_after), "calls": rows}


def _show(kind: str, figures: dict[str, Any]) -> None:
    for name, wall, count, during in figures["calls"]:
        worst = during[-1] if during else 0.0
        p99 = during[min(len(during) - 1, int(0.99 * len(during)))] if during else 0.0
        outside.line(
            kind,
            name[:28].ljust(28),
            count,
            round(wall * 1000, 1),
            round(p99 * 1000, 1),
            round(worst * 1000, 1),
            len(during),
        )
    before, after = figures["rss"]
    print(f"  {kind} RSS after initialize {before:.1f} MB, after the listings {after:.1f} MB")


async def measure(state: Path, repeat: int) -> None:
    rows_file = state.parent / f"{state.name}-rows.json"
    if not rows_file.exists():
        server = start_host(state)
        try:
            async with client(server, "rows") as peer:
                peer.defer_large = True
                result = await peer.request("listSessions", {})
                rows_file.write_text(json.dumps(json.loads(result["unparsed"])["result"]["items"]))
        finally:
            server.stop()
    outside.line("server", "call".ljust(28), "rows", "ms", "ping p99 ms", "ping max ms", "pings")
    summary: dict[tuple[str, str], list[float]] = {}
    for round_ in range(repeat):
        order = ("host", "bare") if round_ % 2 == 0 else ("bare", "host")
        for kind in order:
            for first in ("page", "all"):
                server = (
                    start_host(state) if kind == "host" else start_bare("--list", str(rows_file))
                )
                try:
                    figures = await one_start(server, first)
                finally:
                    server.stop()
                _show(kind, figures)
                for name, wall, _, during in figures["calls"]:
                    summary.setdefault((kind, name), []).append(wall)
                    summary.setdefault((kind, name + " ping max"), []).append(
                        during[-1] if during else 0.0
                    )
                before, after = figures["rss"]
                summary.setdefault((kind, f"RSS growth ({first})"), []).append(after - before)
    print("\nmedians over rounds (ms; RSS in MB)   host        bare        host/bare")
    for (kind, name), values in summary.items():
        if kind != "host":
            continue
        host = statistics.median(values)
        bare = statistics.median(summary.get(("bare", name), [float("nan")]))
        scale = 1 if name.startswith("RSS") else 1000
        ratio = host / bare if bare else float("nan")
        print(f"  {name:<40} {host * scale:10.1f}  {bare * scale:10.1f}   x{ratio:.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2, help="rounds of host and bare")
    parser.add_argument(
        "--state",
        type=Path,
        default=None,
        help="the seeded state folder (default: ahp-bench-catalogue100k-N in the temp folder)",
    )
    parser.add_argument("--seed-only", action="store_true")
    args = parser.parse_args()
    state = args.state or Path(tempfile.gettempdir()) / f"ahp-bench-catalogue100k-{args.sessions}"
    if not (state / "done").exists():
        shutil.rmtree(state, ignore_errors=True)
        print(f"seeding {args.sessions} sessions into {state} (kept for later runs)")
        began = time.monotonic()
        await seed(state, args.sessions)
        print(f"seeded in {time.monotonic() - began:.0f} s")
    if args.seed_only:
        return
    # Servers write and reuse compiled modules in a folder of the run's own, as an
    # installed package does, whatever the caller's PYTHONDONTWRITEBYTECODE says.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(state.parent / f"{state.name}-pyc")
    load = os.getloadavg()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {args.sessions} sessions"
    )
    with contextlib.suppress(KeyboardInterrupt):
        await measure(state, args.repeat)
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
