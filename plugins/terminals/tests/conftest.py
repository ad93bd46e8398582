"""A host with the pty terminals plugin and the scripted backend, and terminal helpers."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from terminal_harness import BackendPlugin

from ahp_scripted import Script, ScriptedBackend
from ahp_terminals import plugin as terminals_plugin
from ahpcore.host import HostSettings
from ahpcore.testing import RunningHost, running_host


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path.resolve()


@pytest.fixture(autouse=True)
def plain_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bash without the tester's own rc files, so prompts and timings are ours."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SHELL", "/bin/bash")
    monkeypatch.setenv("PS1", "$ ")
    monkeypatch.delenv("PROMPT_COMMAND", raising=False)
    monkeypatch.setenv("HISTFILE", os.devnull)


@pytest.fixture
def terminal_host(tmp_path: Path) -> Callable[..., Any]:
    """``async with terminal_host(backend=None) as running`` with ahp-terminals loaded."""

    @asynccontextmanager
    async def start(backend: Any = None) -> AsyncIterator[RunningHost]:
        chosen = backend or ScriptedBackend(
            tmp_path / "scripted", Script(rules=[], default=[{"say": "ok"}])
        )
        settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
        async with running_host(
            [("terminals", terminals_plugin), ("scripted", BackendPlugin(chosen))],
            settings=settings,
        ) as running:
            yield running

    return start
