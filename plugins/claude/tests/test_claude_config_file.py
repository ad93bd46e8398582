"""The config file's ``[claude]`` table: the backend runs as it says, below the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from ahp_claude import plugin
from ahpcore.config import read
from ahpcore.host import HostSettings
from ahpcore.testing import running_host

pytestmark = pytest.mark.anyio

VARIABLES = (
    "AHP_CLAUDE_SANDBOX",
    "AHP_CLAUDE_PROBE",
    "AHP_CLAUDE_WATCH",
    "AHP_CLAUDE_IDLE_SECONDS",
    "AHP_CLAUDE_MAX_CLIS",
)


async def test_the_files_claude_table_takes_effect_and_the_environment_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    config = tmp_path / "ahp.toml"
    config.write_text(
        '[claude]\nsandbox = "off"\nprobe = false\nwatch = false\nidle_seconds = 90\nmax_clis = 3\n'
    )
    settings = HostSettings(
        sessions="memory", port=0, state_dir=tmp_path / "state", config=read(config)
    )
    async with running_host([("claude", plugin)], settings=settings) as running:
        backend = running.host.backends["claude"]
        assert (backend.sandbox, backend.idle_seconds, backend.max_clis) == ("off", 90.0, 3)
        assert (backend._probe, backend._watch) == (False, False)

    monkeypatch.setenv("AHP_CLAUDE_SANDBOX", "on")
    monkeypatch.setenv("AHP_CLAUDE_MAX_CLIS", "5")
    async with running_host([("claude", plugin)], settings=settings) as running:
        backend = running.host.backends["claude"]
        assert (backend.sandbox, backend.idle_seconds, backend.max_clis) == ("on", 90.0, 5)
