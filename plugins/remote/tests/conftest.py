"""Fixtures: the inner host's script in the environment, a working folder, folders for state."""

from __future__ import annotations

from pathlib import Path

import pytest
from remote_support import script_file


@pytest.fixture(autouse=True)
def inner_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The scripted agent the inner host runs (its child process inherits the variable)."""
    path = script_file(tmp_path)
    monkeypatch.setenv("AHP_SCRIPTED_SCRIPT", str(path))
    for name in ("AHP_PLUGINS", "AHP_DISABLE_PLUGINS", "AHP_NO_PLUGINS", "AHP_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AHP_REMOTE_PROBE_SECONDS", "20")
    return path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def inner_state(tmp_path: Path) -> Path:
    return tmp_path / "inner-state"


@pytest.fixture
def outer_state(tmp_path: Path) -> Path:
    return tmp_path / "outer-state"
