"""Everything a real ``ahp serve`` and its plugins write under the state folder is the
user's alone (folders 0700, files 0600), even under the usual umask of 022."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from ahpcore.store.private import private_file, private_folder, private_sqlite, write_private
from tests.reliability.test_durability import Wire
from tests.test_cli import start_serve

pytestmark = pytest.mark.anyio

SESSION = "scripted:/00000000-0000-4000-8000-0000000000cc"


@contextmanager
def umask(mask: int) -> Iterator[None]:
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def wider_than_owner(root: Path) -> list[str]:
    """Each folder under ``root`` that is not 0700 and each file that is not 0600
    (0700 for a script the host runs)."""
    found = []
    for folder, folders, files in os.walk(root):
        for name in [*folders, *files]:
            path = Path(folder) / name
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode not in ((0o700,) if path.is_dir() else (0o600, 0o700)):
                found.append(f"{oct(mode)} {path.relative_to(root)}")
    return sorted(found)


async def test_a_host_under_umask_022_writes_nothing_others_can_read(tmp_path: Path):
    with umask(0o022):  # the child inherits it; set only for the spawn
        served = start_serve(tmp_path, "--no-token")
    state = tmp_path / "state"
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            await client.request(
                "createSession",
                {
                    "channel": SESSION,
                    "provider": "scripted",
                    "workingDirectories": [tmp_path.as_uri()],
                },
            )
            await client.request("createChat", {"channel": SESSION, "chat": "ahp-chat:/second"})
            listed = await client.request("listSessions", {})
            assert SESSION in [item["resource"] for item in listed["items"]]
            await client.request("disposeChat", {"channel": "ahp-chat:/second"})
    finally:
        served.process.terminate()
        served.process.wait(timeout=10)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    # The plugins that keep state (scripted's logs, claude's catalogue) did write.
    assert (state / "scripted").is_dir() and (state / "claude").is_dir()
    assert wider_than_owner(state) == []


def test_the_helpers_make_and_tighten_whatever_the_umask(tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    with umask(0o022):
        # A plugin's folder made by an older version, with a file in it.
        old = state / "plugin"
        old.mkdir()
        (old / "kept.json").write_text("{}")
        os.chmod(old / "kept.json", 0o644)
        private_folder(old / "deep" / "er")
        write_private(old / "kept.json", '{"a": 1}')
        private_file(old / "empty")
        private_sqlite(old / "index.sqlite")
    assert (old / "kept.json").read_text() == '{"a": 1}'
    assert wider_than_owner(state) == []
    # The state folder a user named is theirs to open: only what is made inside is tightened.
    private_sqlite(state / "db.sqlite", tighten_folder=False)
    assert stat.S_IMODE(state.stat().st_mode) == 0o755
    assert stat.S_IMODE((state / "db.sqlite").stat().st_mode) == 0o600
