"""The fence's check and the operation's use are one: a folder swapped for a link to
outside between them is refused, never followed."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ahp_files.fence import Fence
from ahp_files.port import FilesPort
from ahpcore.protocol.errors import ProtocolError

pytestmark = pytest.mark.anyio

#: How long the swapping runs: long enough for thousands of interleavings.
RACE_SECONDS = 1.5


def snapshot(top: Path) -> dict[str, str]:
    seen: dict[str, str] = {}
    for folder, folders, files in os.walk(top):
        for name in folders:
            seen[os.path.join(folder, name)] = "folder"
        for name in files:
            path = os.path.join(folder, name)
            seen[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return seen


class Swapper:
    """Turns ``work/d`` into a link to ``outside`` and back, as fast as it can.

    The operations under test may move or recreate ``d`` meanwhile, so a step that
    fails is skipped rather than ending the swapping."""

    def __init__(self, work: Path, outside: Path) -> None:
        self.work, self.outside = work, outside
        (work / "d").mkdir()
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        d = self.work / "d"
        while not self.stop.is_set():
            held = self.work / f"held{self.swaps}"
            with contextlib.suppress(OSError):
                os.rename(d, held)
            with contextlib.suppress(OSError):
                os.symlink(self.outside, d)  # d is now a link to outside
            with contextlib.suppress(OSError):
                if os.path.islink(d):
                    os.unlink(d)
            with contextlib.suppress(OSError):
                os.rename(held, d)  # d is a folder again
            self.swaps += 1


async def test_a_folder_swapped_for_a_link_mid_operation_never_reaches_outside(tmp_path: Path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")
    (outside / "victim").mkdir()
    (outside / "victim" / "keep.txt").write_text("keep")
    (work / "a.txt").write_text("hello")
    before = snapshot(outside)
    port = FilesPort(Fence(lambda: [work.as_uri()]))
    swapper = Swapper(work, outside)

    def uri(relative: str) -> str:
        return f"{work.as_uri()}/{relative}"

    n = 0

    def operations() -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
        text = {"data": "planted", "encoding": "utf-8"}
        (work / f"m{n}").write_text("moved")
        return [
            ("write", lambda: port.write({"uri": uri(f"d/w{n}.txt"), **text})),
            ("append", lambda: port.write({"uri": uri("d/secret.txt"), **text, "mode": "append"})),
            ("mkdir", lambda: port.mkdir({"uri": uri(f"d/made{n}/deeper")})),
            ("copy", lambda: port.copy({"source": uri("a.txt"), "destination": uri(f"d/c{n}")})),
            ("move", lambda: port.move({"source": uri(f"m{n}"), "destination": uri(f"d/m{n}")})),
            ("delete", lambda: port.delete({"uri": uri("d/victim"), "recursive": True})),
            ("delete file", lambda: port.delete({"uri": uri("d/secret.txt")})),
            ("move out", lambda: port.move({"source": uri("d/secret.txt"), "destination": uri("got")})),
            ("read", lambda: port.read({"uri": uri("d/secret.txt")})),
            ("list", lambda: port.list({"uri": uri("d/victim")})),
        ]  # fmt: skip

    leaked: list[str] = []
    refused = 0
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave the threads finely, as separate processes would
    swapper.thread.start()
    try:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            for name, operation in operations():
                try:
                    result = await operation()
                except ProtocolError as error:
                    assert error.code in (-32009, -32008, -32602), (name, error.message)
                    refused += 1
                else:
                    if "not yours" in str(result) or "keep.txt" in str(result):
                        leaked.append(name)
            n += 1
    finally:
        swapper.stop.set()
        swapper.thread.join(timeout=5)
        sys.setswitchinterval(interval)
    assert swapper.swaps > 100 and refused > 0
    assert snapshot(outside) == before
    assert leaked == []
    # Nothing half-done was left behind inside either.
    assert not [p for p in work.rglob("*.ahp-tmp")]


async def test_a_link_that_appears_mid_walk_is_named_as_such(tmp_path: Path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "d").mkdir(parents=True)
    outside.mkdir()
    port = FilesPort(Fence(lambda: [work.as_uri()]))
    # The fence resolves the path while d is a folder...
    target = port.fence.target(f"{work.as_uri()}/d/x.txt", change=True)
    # ...and d becomes a link before the write uses it.
    (work / "d").rmdir()
    os.symlink(outside, work / "d")

    async def use() -> Any:
        return await port._write_target(
            target, {"uri": target.uri, "data": "x", "encoding": "utf-8"}
        )

    with pytest.raises(ProtocolError) as refused:
        await use()
    assert refused.value.code == -32009 and "became a link" in refused.value.message
    assert list(outside.iterdir()) == []
