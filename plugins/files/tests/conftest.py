"""A host with the scripted backend and ahp-files, and a session whose folder is a temp tree."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from files_support import Tree

import ahp_files.plugin
import ahp_scripted.plugin
from ahpcore.testing import AhpTestClient, RunningHost


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "a.txt").write_text("hello")
    (work / "bin.dat").write_bytes(bytes(range(256)))
    (work / "sub" / "b.txt").write_text("inner")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")
    os.symlink(outside / "secret.txt", work / "link")
    os.symlink(outside, work / "escape")
    return Tree(work, outside)


@pytest.fixture
def files_host(ahp_host: Callable[..., Any], tree: Tree) -> Callable[..., Any]:
    """``async with files_host() as (running, client)``: a session works in ``tree.work``."""

    @asynccontextmanager
    async def start(session: bool = True) -> AsyncIterator[tuple[RunningHost, AhpTestClient]]:
        plugins = [("scripted", ahp_scripted.plugin), ("files", ahp_files.plugin)]
        async with ahp_host(plugins=plugins) as running:
            client = await running.connect("c1")
            await client.initialize()
            if session:
                await client.request(
                    "createSession",
                    {
                        "channel": "scripted:/00000000-0000-4000-8000-000000000001",
                        "provider": "scripted",
                        "workingDirectories": [tree.uri()],
                    },
                )
            yield running, client

    return start
