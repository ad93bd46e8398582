"""listSessions over a large catalogue: the first page, a later page, and a reopen.

A backend lists N past sessions (plain ``def`` catalogue calls, as a backend
reading files writes them); the host indexes them once and answers pages from
its SQLite index. Prints milliseconds per call; asserts nothing.

    uv run python bench/catalogue.py --sessions 10000 --limit 50
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.ports.backend import Abilities, CataloguePage, CatalogueRow
from ahpcore.testing import running_host


class Listed:
    provider = "bench"
    abilities = Abilities(resume=True, list_sessions=True)

    def __init__(self, count: int) -> None:
        self.rows = [
            CatalogueRow(
                f"s{n:06d}", f"Session {n}", f"2026-01-01T{n:012d}", f"2026-01-01T{n:012d}"
            )
            for n in range(count, 0, -1)
        ]

    def agents(self) -> list[dict[str, Any]]:
        return [{"provider": "bench", "displayName": "Bench", "description": "", "models": []}]

    def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: Any = None
    ) -> CataloguePage:
        start = int(cursor or 0)
        end = len(self.rows) if limit is None else start + limit
        return CataloguePage(self.rows[start:end], str(end) if end < len(self.rows) else None)

    def lookup(self, session_id: str) -> CatalogueRow | None:
        return next((r for r in self.rows if r.session_id == session_id), None)

    async def start(self, start: Any) -> Any:
        raise NotImplementedError

    def read_transcript(self, backend_id: str, reader: Any) -> bool:
        return True

    def delete(self, backend_id: str) -> None: ...

    def truncate(self, backend_id: str, turn_id: str | None) -> None: ...


class Plugin:
    def __init__(self, backend: Listed) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(self.backend)


async def main(sessions: int, limit: int) -> None:
    backend = Listed(sessions)
    with tempfile.TemporaryDirectory() as tmp:
        settings = HostSettings(sessions="file", port=0, state_dir=Path(tmp))
        async with running_host([("bench", Plugin(backend))], settings=settings) as running:
            client = await running.connect("bench")
            await client.initialize()
            began = time.perf_counter()
            first = await client.request("listSessions", {"limit": limit})
            print(
                f"first page (indexes {sessions} sessions): {1000 * (time.perf_counter() - began):.1f} ms"
            )
            for label, params in (
                ("first page again", {"limit": limit}),
                ("second page", {"limit": limit, "cursor": first["nextCursor"]}),
            ):
                began = time.perf_counter()
                await client.request("listSessions", params)
                print(f"{label}: {1000 * (time.perf_counter() - began):.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--limit", type=int, default=50)
    args = parser.parse_args()
    anyio.run(main, args.sessions, args.limit)
