"""Fixtures: a working folder, and the fake agent configured for the ``acp`` plugin."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp_support import agents_env


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def fake_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake agent configured in ``AHP_ACP_AGENTS``; returns where it keeps histories."""
    state = tmp_path / "fake-state"
    state.mkdir()
    monkeypatch.setenv("AHP_ACP_AGENTS", agents_env(state))
    return state
