"""The config file's ``[files]`` table: reach, watchers and copies as it says, below the
environment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from files_support import Tree, call, error_of

import ahp_files.plugin
import ahp_scripted.plugin
from ahpcore.config import read
from ahpcore.host import HostSettings
from ahpcore.testing import AhpTestClient, RunningHost, running_host

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # Set (empty) rather than deleted: what the plugin sets from the file is taken back too.
    for name in ("AHP_FILES_REACH", "AHP_FILES_MAX_WATCHERS", "AHP_FILES_MAX_COPY_BYTES"):
        monkeypatch.setenv(name, "")


@asynccontextmanager
async def _host(
    tmp_path: Path, tree: Tree, text: str
) -> AsyncIterator[tuple[RunningHost, AhpTestClient]]:
    config = tmp_path / "ahp.toml"
    config.write_text(text)
    settings = HostSettings(
        sessions="memory", port=0, state_dir=tmp_path / "state", config=read(config)
    )
    plugins = [("scripted", ahp_scripted.plugin), ("files", ahp_files.plugin)]
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect("c1")
        await client.initialize()
        await client.request(
            "createSession",
            {
                "channel": "scripted:/00000000-0000-4000-8000-000000000001",
                "provider": "scripted",
                "workingDirectories": [tree.uri()],
            },
        )
        yield running, client


async def test_the_files_reach_opens_the_machine_unless_the_variable_says_otherwise(
    tmp_path: Path, tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = (tree.outside / "secret.txt").as_uri()
    async with _host(tmp_path, tree, '[files]\nreach = "machine"\n') as (_, client):
        assert (await call(client, "resourceRead", {"uri": secret}))["data"] == "not yours"
    monkeypatch.setenv("AHP_FILES_REACH", "sessions")
    async with _host(tmp_path, tree, '[files]\nreach = "machine"\n') as (_, client):
        assert (await error_of(client, "resourceRead", {"uri": secret}))["code"] == -32009


async def test_the_files_ceilings_hold_and_the_variables_win(
    tmp_path: Path, tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "[files]\nmax_watchers = 0\nmax_copy_bytes = 3\n"
    async with _host(tmp_path, tree, text) as (_, client):
        refused = await error_of(client, "createResourceWatch", {"uri": tree.uri("sub")})
        assert refused["code"] == -32602
        assert "(0; AHP_FILES_MAX_WATCHERS or [files] max_watchers sets it)" in refused["message"]
        copy = {"source": tree.uri("a.txt"), "destination": tree.uri("copy.txt")}
        refused = await error_of(client, "resourceCopy", copy)
        assert "3" in refused["message"] and not (tree.work / "copy.txt").exists()

    monkeypatch.setenv("AHP_FILES_MAX_WATCHERS", "64")
    monkeypatch.setenv("AHP_FILES_MAX_COPY_BYTES", "1000")
    async with _host(tmp_path, tree, text) as (_, client):
        await call(client, "createResourceWatch", {"uri": tree.uri("sub")})
        copy = {"source": tree.uri("a.txt"), "destination": tree.uri("copy.txt")}
        await call(client, "resourceCopy", copy)
        assert (tree.work / "copy.txt").read_text() == "hello"
