"""Real repositories in temporary folders, and a host serving them with the scripted agent."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from ahp_git import plugin as git_plugin
from ahp_git.uris import file_uri
from ahp_scripted import Script, ScriptedBackend
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.testing import AhpTestClient, RunningHost, running_host

SESSION = "scripted:/00000000-0000-4000-8000-000000000001"


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bytes = os.fsencode(root)

    def git(self, *args: str | bytes) -> bytes:
        return subprocess.run(["git", *args], cwd=self.root, check=True, capture_output=True).stdout

    def write(self, name: str | bytes, data: str | bytes) -> None:
        path = os.path.join(self.bytes, os.fsencode(name))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)

    def read(self, name: str | bytes) -> bytes:
        with open(os.path.join(self.bytes, os.fsencode(name)), "rb") as handle:
            return handle.read()

    def exists(self, name: str | bytes) -> bool:
        return os.path.lexists(os.path.join(self.bytes, os.fsencode(name)))

    def uri(self, name: str | bytes = b"") -> str:
        path = os.path.join(self.bytes, os.fsencode(name)) if name else self.bytes
        return file_uri(path)

    def commit(self, message: str = "commit") -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)


def init_repo(root: Path) -> Repo:
    root.mkdir(parents=True, exist_ok=True)
    repo = Repo(root)
    repo.git("init", "-q", "-b", "main")
    repo.git("config", "user.name", "Test")
    repo.git("config", "user.email", "test@example.com")
    repo.git("config", "commit.gpgsign", "false")
    return repo


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return init_repo(tmp_path / "my repo")


class ScriptedPlugin:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(self.backend)


@pytest.fixture
def git_host(tmp_path: Path) -> Callable[..., Any]:
    """``async with git_host(script) as (running, backend)``: the scripted agent and git."""

    @asynccontextmanager
    async def start(
        the_script: Script | None = None,
    ) -> AsyncIterator[tuple[RunningHost, ScriptedBackend]]:
        backend = ScriptedBackend(
            tmp_path / "scripted", the_script or Script(default=[{"say": "ok"}])
        )
        settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
        async with running_host(
            [("scripted", ScriptedPlugin(backend)), ("git", git_plugin)], settings=settings
        ) as running:
            yield running, backend

    return start


async def open_session(client: AhpTestClient, repo: Repo, folder: str = "") -> tuple[str, str]:
    await client.request(
        "createSession",
        {"channel": SESSION, "provider": "scripted", "workingDirectories": [repo.uri(folder)]},
    )
    snapshot = await client.request("subscribe", {"channel": SESSION})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return SESSION, chat


async def subscribe(client: AhpTestClient, scope: str) -> dict[str, Any]:
    answer = await client.request("subscribe", {"channel": f"{SESSION}/changeset/{scope}"})
    return dict(answer["snapshot"]["state"])


def by_id(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in state["files"]}
