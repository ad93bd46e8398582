"""A malformed ``AHP_ACP_AGENTS`` stops ``ahp serve`` with one line saying what is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = [
    ("{not json", "AHP_ACP_AGENTS is not JSON"),
    ('["gemini"]', "AHP_ACP_AGENTS must be a JSON object"),
    ('{"gemini": "gemini"}', "AHP_ACP_AGENTS['gemini'] must be an object"),
    ('{"gemini": {"args": []}}', "AHP_ACP_AGENTS['gemini'].command must name the program"),
    ('{"Gemini": {"command": "gemini"}}', "AHP_ACP_AGENTS['Gemini']: an agent's name"),
    ('{"gemini": {"command": "gemini", "args": "-x"}}', "['gemini'].args must be a list"),
    ('{"gemini": {"command": "gemini", "env": {"K": 1}}}', "['gemini'].env must be an object"),
    ('{"gemini": {"command": "gemini", "cmd": "x"}}', "keys this host does not know: cmd"),
]


@pytest.mark.parametrize(("value", "said"), BAD, ids=[said for _, said in BAD])
def test_a_malformed_agents_variable_stops_serve_with_one_line(
    value: str, said: str, tmp_path: Path
) -> None:
    env = {**os.environ, "AHP_ACP_AGENTS": value, "AHP_PLUGINS": "acp"}
    state = str(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-m", "ahpcore.cli", "serve", "--port", "0", "--state-dir", state],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("ahp: ")]
    assert said in line, line
    assert line.startswith("ahp: AHP_ACP_AGENTS"), line
