"""The config file's ``[pi]`` table: the command and pi's folders as it says, below the
environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pi_support import backend_of

import ahp_pi.plugin
from ahpcore.config import read
from ahpcore.host import HostSettings
from ahpcore.testing import running_host

pytestmark = pytest.mark.anyio

VARIABLES = ("AHP_PI_COMMAND", "AHP_PI_PROBE", "PI_CODING_AGENT_DIR", "PI_CODING_AGENT_SESSION_DIR")


async def test_the_files_pi_table_takes_effect_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in VARIABLES:
        monkeypatch.setenv(name, "")  # set, so what the plugin sets is taken back too
    agent = tmp_path / "pi-agent"
    config = tmp_path / "ahp.toml"
    config.write_text(
        "[pi]\n"
        f'command = [{json.dumps(str(tmp_path / "my-pi"))}, "--model", "m"]\n'
        "probe = false\n"
        f"agent_dir = {json.dumps(str(agent))}\n"
    )
    settings = HostSettings(
        sessions="memory", port=0, state_dir=tmp_path / "state", config=read(config)
    )
    async with running_host([("pi", ahp_pi.plugin)], settings=settings) as running:
        backend = backend_of(running)
        assert backend.command == [str(tmp_path / "my-pi"), "--model", "m"]
        assert backend._probe is False
        # pi is told its folder as it would be by its own variable, and sessions are read there.
        assert os.environ["PI_CODING_AGENT_DIR"] == str(agent)
        assert backend.sessions.root == agent / "sessions"

    monkeypatch.setenv("AHP_PI_COMMAND", "other-pi --x")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "theirs"))
    async with running_host([("pi", ahp_pi.plugin)], settings=settings) as running:
        backend = backend_of(running)
        assert backend.command == ["other-pi", "--x"]
        assert backend.sessions.root == tmp_path / "theirs" / "sessions"
