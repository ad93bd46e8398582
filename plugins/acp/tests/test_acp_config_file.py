"""Agents configured in the config file's ``[acp.agents.NAME]`` tables, below
``AHP_ACP_AGENTS``: listed and run like the variable's, a wrong key named by line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from acp_support import FAKE, PROVIDER, agents_env, chat_state, open_session, start_turn, turn_end

import ahp_acp.plugin
from ahpcore.config import read
from ahpcore.testing import AhpTestClient, host_factory

AHP = [sys.executable, "-m", "ahpcore.cli"]


def _file(tmp_path: Path, state: Path, display: str = "From the file", extra: str = "") -> Path:
    path = tmp_path / "ahp.toml"
    path.write_text(
        f"[acp]\nprobe = false\n\n[acp.agents.{PROVIDER}]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(FAKE))}]\n"
        f'displayName = "{display}"\n'
        f"{extra}"
        f"\n[acp.agents.{PROVIDER}.env]\nFAKE_ACP_STATE = {json.dumps(str(state))}\n"
    )
    return path


def _host(config: Path) -> Any:
    return host_factory([("acp", ahp_acp.plugin)], config=read(config))


async def _agents(client: AhpTestClient) -> dict[str, dict[str, Any]]:
    await client.sync()
    root = (await client.request("subscribe", {"channel": "ahp-root://"}))["snapshot"]["state"]
    return {agent["provider"]: agent for agent in root["agents"]}


@pytest.mark.anyio
async def test_an_agent_only_in_the_file_is_listed_and_runs_a_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AHP_ACP_AGENTS", raising=False)
    monkeypatch.delenv("AHP_ACP_PROBE", raising=False)
    fake_state = tmp_path / "fake-state"
    fake_state.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    async with _host(_file(tmp_path, fake_state))(tmp_path / "state") as running:
        client = await running.connect("c1")
        await client.initialize()
        agents = await _agents(client)
        assert agents[PROVIDER]["displayName"] == "From the file"
        _, chat = await open_session(client, work)
        await start_turn(client, chat, "hello", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        assert "Hello there" in [
            part.get("content") for part in state["turns"][-1]["responseParts"]
        ]


@pytest.mark.anyio
async def test_the_variable_replaces_the_files_agent_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_state = tmp_path / "fake-state"
    fake_state.mkdir()
    other = (
        "\n[acp.agents.other]\n"
        f"command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(FAKE))}]\n"
    )
    config = _file(tmp_path, fake_state)
    config.write_text(config.read_text() + other)
    monkeypatch.setenv("AHP_ACP_AGENTS", agents_env(fake_state))  # displayName "Fake"
    monkeypatch.setenv("AHP_ACP_PROBE", "0")
    async with _host(config)(tmp_path / "state") as running:
        client = await running.connect("c1")
        await client.initialize()
        agents = await _agents(client)
        assert agents[PROVIDER]["displayName"] == "Fake"
        assert "other" in agents  # the file's other agent stays


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AHP_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env["AHP_PLUGINS"] = "acp"
    env.update(extra)
    return env


def test_config_show_lists_the_acp_table(tmp_path: Path) -> None:
    config = _file(tmp_path, tmp_path / "fake-state")
    done = subprocess.run(
        [*AHP, "config", "show", "--json", "--config", str(config)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = {row["key"]: row for row in json.loads(done.stdout)["tables"]["acp"]}
    assert rows[f"agents.{PROVIDER}.displayName"]["value"] == "From the file"
    assert rows[f"agents.{PROVIDER}.displayName"]["where"] == f"{config}:7"
    assert rows[f"agents.{PROVIDER}.command"]["value"] == sys.executable
    assert rows["probe"]["value"] is False


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ('cmd = "x"\n', ":8: acp.agents.fake.cmd: unknown key"),
        ("description = 1\n", ":8: acp.agents.fake.description: Input should be a valid string"),
    ],
)
def test_a_wrong_key_stops_serve_naming_its_line(tmp_path: Path, extra: str, said: str) -> None:
    config = _file(tmp_path, tmp_path / "fake-state", extra=extra)
    done = subprocess.run(
        [*AHP, "serve", "--config", str(config), "--no-token", "--port", "0"],
        env=_env(tmp_path, AHP_STATE_DIR=str(tmp_path / "state")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"ahp: {config}" in done.stderr and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_an_agent_name_that_is_no_uri_scheme_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "ahp.toml"
    config.write_text('[acp.agents.Gemini]\ncommand = "gemini"\n')
    done = subprocess.run(
        [*AHP, "serve", "--config", str(config), "--no-token", "--port", "0"],
        env=_env(tmp_path, AHP_STATE_DIR=str(tmp_path / "state")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"ahp: {config}:1: acp.agents.Gemini" in done.stderr, done.stderr
    assert "a URI scheme" in done.stderr
