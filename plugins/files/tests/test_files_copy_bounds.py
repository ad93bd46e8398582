"""resourceCopy is bounded: a limit on the bytes one copy may write, holes kept as
holes, and nothing half-copied left behind when a copy fails or is stopped."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from files_support import Tree, call, error_of

from ahp_files.fence import Fence
from ahp_files.port import FilesPort

pytestmark = pytest.mark.anyio

GIB = 1 << 30
#: Where the sparse file holds data: its start, a block in the middle, its last bytes.
SEGMENTS = ((0, b"head"), (GIB + 12345, b"middle"), (3 * GIB - 4, b"tail"))


def make_sparse(path: Path) -> None:
    """A 3 GiB file that holds a few bytes (truncate costs no disk)."""
    with open(path, "wb") as out:
        out.truncate(3 * GIB)
        for offset, data in SEGMENTS:
            out.seek(offset)
            out.write(data)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith(".ahp-tmp"))


async def test_a_copy_past_the_limit_is_refused_before_anything_is_written(
    files_host, tree: Tree, monkeypatch
):
    monkeypatch.setenv("AHP_FILES_MAX_COPY_BYTES", str(1 << 20))
    make_sparse(tree.work / "sparse")
    (tree.work / "big").mkdir()
    (tree.work / "big" / "part1").write_bytes(b"x" * 600_000)
    (tree.work / "big" / "part2").write_bytes(b"y" * 600_000)
    before = sorted(p.name for p in tree.work.iterdir())
    async with files_host() as (_, client):
        with anyio.fail_after(10):
            file = await error_of(
                client,
                "resourceCopy",
                {"source": tree.uri("sparse"), "destination": tree.uri("copy")},
            )
        assert file["code"] == -32602
        assert str(3 * GIB) in file["message"] and str(1 << 20) in file["message"], file
        assert "AHP_FILES_MAX_COPY_BYTES" in file["message"]
        folder = await error_of(
            client, "resourceCopy", {"source": tree.uri("big"), "destination": tree.uri("copy")}
        )
        assert folder["code"] == -32602 and str(1_200_000) in folder["message"], folder
        # Under the limit is fine.
        await call(
            client,
            "resourceCopy",
            {"source": tree.uri("big/part1"), "destination": tree.uri("part1")},
        )
    assert sorted(p.name for p in tree.work.iterdir()) == sorted([*before, "part1"])
    assert leftovers(tree.work) == []


async def test_a_sparse_file_is_copied_with_its_holes(files_host, tree: Tree, monkeypatch):
    monkeypatch.setenv("AHP_FILES_MAX_COPY_BYTES", str(4 * GIB))
    make_sparse(tree.work / "sparse")
    (tree.work / "folder").mkdir()
    make_sparse(tree.work / "folder" / "inner")
    async with files_host() as (_, client):
        with anyio.fail_after(20):
            await call(
                client,
                "resourceCopy",
                {"source": tree.uri("sparse"), "destination": tree.uri("copy")},
            )
            await call(
                client,
                "resourceCopy",
                {"source": tree.uri("folder"), "destination": tree.uri("folder2")},
            )
    for copy in (tree.work / "copy", tree.work / "folder2" / "inner"):
        info = copy.stat()
        assert info.st_size == 3 * GIB
        assert info.st_blocks * 512 < 16 << 20, f"{copy} takes {info.st_blocks * 512} bytes"
        with open(copy, "rb") as copied:
            for offset, data in SEGMENTS:
                copied.seek(offset)
                assert copied.read(len(data)) == data
            copied.seek(GIB)
            assert copied.read(4096) == bytes(4096)  # a hole reads as zeros
    assert leftovers(tree.work) == []


async def test_a_stopped_copy_leaves_no_temporary_file(tmp_path: Path):
    work = tmp_path / "work"
    (work / "folder").mkdir(parents=True)
    block = os.urandom(1 << 20)
    with open(work / "folder" / "big", "wb") as out:
        for _ in range(96):
            out.write(block)
    port = FilesPort(Fence(lambda: [work.as_uri()]))
    stopped = 0
    for attempt in range(5):
        for source in ("folder/big", "folder"):
            destination = f"copy{attempt}-{source.replace('/', '-')}"
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(
                        port.copy,
                        {
                            "source": f"{work.as_uri()}/{source}",
                            "destination": f"{work.as_uri()}/{destination}",
                        },
                    )
                    with anyio.fail_after(10):
                        while not leftovers(work) and not (work / destination).exists():
                            await anyio.sleep(0.0005)
                    scope.cancel()
            if not (work / destination).exists():
                stopped += 1
            assert leftovers(work) == [], (attempt, source)
    assert stopped >= 2, "no copy was stopped half-way"


async def test_a_host_that_stops_mid_copy_leaves_no_temporary_file(files_host, tree: Tree):
    block = os.urandom(1 << 20)
    with open(tree.work / "big", "wb") as out:
        for _ in range(128):
            out.write(block)
    async with files_host() as (_, client):
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "resourceCopy",
                "params": {
                    "channel": "ahp-root://",
                    "source": tree.uri("big"),
                    "destination": tree.uri("copy"),
                },
            }
        )
        with anyio.fail_after(10):
            while not leftovers(tree.work) and not (tree.work / "copy").exists():
                await anyio.sleep(0.0005)
        copying = bool(leftovers(tree.work))
    # The host has stopped: the copy was cancelled with it, or had finished.
    assert leftovers(tree.work) == []
    assert copying, "the copy finished before the host stopped"
    assert not (tree.work / "copy").exists()
