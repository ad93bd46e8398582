"""``_meta.git`` on a 10,000-row listSessions: what the git plugin adds to a listing.

A backend lists N past sessions spread over R real repositories (F folders in
each, some of them subfolders) and a few folders outside any repository. The
same whole listing (no limit) is timed on a host without the git plugin and on
one with it: the first listing (nothing known yet; the reading starts behind
it), the time until every repository row was told its facts by
``root/sessionSummaryChanged``, and a listing once the facts are known. Prints
figures; asserts nothing.

    uv run python bench/listed_git.py --sessions 10000 --repos 20 --folders 5
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from catalogue import Listed, Plugin  # beside this script

from ahp_git import plugin as git_plugin
from ahpcore.host import HostSettings
from ahpcore.ports.backend import CatalogueRow
from ahpcore.sessions import manager
from ahpcore.testing import running_host


class InFolders(Listed):
    """The catalogue bench's backend, its rows spread over ``folders``."""

    def __init__(self, count: int, folders: list[str]) -> None:
        self.rows = [
            CatalogueRow(
                f"s{n:06d}",
                f"Session {n}",
                f"2026-01-01T{n:012d}",
                f"2026-01-01T{n:012d}",
                (folders[n % len(folders)],),
            )
            for n in range(count, 0, -1)
        ]


def make_folders(root: Path, repos: int, folders: int) -> tuple[list[str], set[str]]:
    """Every folder's URI, and those inside a repository."""
    inside: list[str] = []
    for r in range(repos):
        top = root / f"repo{r}"
        top.mkdir()
        for f in range(1, folders):
            (top / f"part{f}").mkdir()
            (top / f"part{f}" / "file.txt").write_text(f"{f}\n")
        (top / "changed.txt").write_text("x\n")
        for args in (["init", "-q", "-b", "main"], ["add", "-A"]):
            subprocess.run(["git", *args], cwd=top, check=True)
        subprocess.run(
            ["git", "-c", "user.name=B", "-c", "user.email=b@example.com", "commit", "-qm", "c"],
            cwd=top,
            check=True,
        )
        (top / "changed.txt").write_text("y\n")
        inside.append(top.as_uri())
        inside += [(top / f"part{f}").as_uri() for f in range(1, folders)]
    outside = []
    for n in range(3):
        (root / f"plain{n}").mkdir()
        outside.append((root / f"plain{n}").as_uri())
    return inside + outside, set(inside)


class Timed:
    """The server's own time in ``ahp_session_rows`` per listing, client parsing aside."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.inner = manager.decorate_rows

    async def __call__(self, host: Any, rows: list[dict[str, Any]]) -> None:
        began = time.perf_counter()
        await self.inner(host, rows)
        self.seconds.append(time.perf_counter() - began)

    def last(self) -> str:
        return f"{1000 * self.seconds[-1]:.1f} ms"


async def run(sessions: int, folders: list[str], inside: set[str], with_git: bool) -> None:
    backend = InFolders(sessions, folders)
    plugins: list[Any] = [("bench", Plugin(backend))]  # type: ignore[arg-type]
    if with_git:
        plugins.append(("git", git_plugin))
    expected = {row.session_id for row in backend.rows if row.working_directories[0] in inside}
    label = "with git   " if with_git else "without git"
    timed = Timed()
    manager.decorate_rows = timed  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = HostSettings(sessions="file", port=0, state_dir=Path(tmp))
            async with running_host(plugins, settings=settings) as running:
                client = await running.connect("bench")
                await client.initialize()
                await client.request("listSessions", {"limit": 1})  # the index is built here
                began = time.perf_counter()
                answer = (await client.request_frame("listSessions", {}, timeout=120))["result"]
                print(
                    f"{label}: first whole listing {1000 * (time.perf_counter() - began):.0f} ms"
                    f" (rows hook {timed.last()})"
                )
                if with_git:
                    # Rows answered with their facts already are not told again.
                    told = {
                        row["resource"].rsplit("/", 1)[-1]
                        for row in answer["items"]
                        if "git" in (row.get("_meta") or {})
                    }
                    with anyio.fail_after(600):
                        while len(told) < len(expected):
                            frame = await client.recv_until(
                                lambda f: f.get("method") == "root/sessionSummaryChanged",
                                timeout=600,
                            )
                            told.add(frame["params"]["session"].rsplit("/", 1)[-1])
                    print(
                        f"{label}: every repository row has its facts after "
                        f"{1000 * (time.perf_counter() - began):.0f} ms ({len(told)} rows)"
                    )
                began = time.perf_counter()
                answer = (await client.request_frame("listSessions", {}, timeout=120))["result"]
                carrying = sum(1 for row in answer["items"] if "git" in (row.get("_meta") or {}))
                print(
                    f"{label}: whole listing again {1000 * (time.perf_counter() - began):.0f} ms"
                    f" (rows hook {timed.last()}; {carrying} rows carry _meta.git)"
                )
    finally:
        manager.decorate_rows = timed.inner  # type: ignore[assignment]


async def main(sessions: int, repos: int, per_repo: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folders, inside = make_folders(Path(tmp), repos, per_repo)
        print(
            f"{sessions} sessions over {len(folders)} folders "
            f"({repos} repositories x {per_repo} folders, {len(folders) - len(inside)} outside)"
        )
        await run(sessions, folders, inside, with_git=False)
        await run(sessions, folders, inside, with_git=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--repos", type=int, default=20)
    parser.add_argument("--folders", type=int, default=5)
    args = parser.parse_args()
    anyio.run(main, args.sessions, args.repos, args.folders)
