"""Fixtures: the scripted model API, pi pointed at it, and a working folder."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from pi_support import MODEL, AnthropicServer, find_pi, write_models


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def api() -> Iterator[AnthropicServer]:
    server = AnthropicServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pi(tmp_path: Path, api: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pi configured for the plugin, on the scripted API; returns pi's own folder."""
    command, why = find_pi()
    if command is None:
        pytest.skip(why)
    agent_dir = tmp_path / "pi-agent"
    write_models(agent_dir, api.url)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent_dir))
    monkeypatch.delenv("PI_CODING_AGENT_SESSION_DIR", raising=False)
    monkeypatch.setenv("PI_OFFLINE", "1")  # no update check, no telemetry: 127.0.0.1 only
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-scripted")
    monkeypatch.setenv(
        "AHP_PI_COMMAND", shlex.join([*command, "--provider", "anthropic", "--model", MODEL])
    )
    return agent_dir
