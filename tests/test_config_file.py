"""The config file: serve's options and plugins' tables, below the environment and the
flags, with a mistake named by file and line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from ahpcore import cli, hookimpl
from ahpcore.config import SERVE_PARAMS, ConfigError, line_of, read, serve_model
from ahpcore.host import Host, HostSettings
from ahpcore.plugins import PluginError, PluginManager

AHP = [sys.executable, "-m", "ahpcore.cli"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AHP_") and key != "XDG_CONFIG_HOME"
    }
    # No config file of this machine's user leaks into what is tested.
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env["AHP_PLUGINS"] = "scripted"
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _show(tmp_path: Path, *args: str, **env: str) -> dict[str, Any]:
    done = subprocess.run(
        [*AHP, "config", "show", "--json", *args],
        env=_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _row(shown: dict[str, Any], key: str) -> dict[str, Any]:
    return next(row for row in shown["serve"] if row["key"] == key)


def test_every_option_of_serve_has_a_key() -> None:
    params = {param for param, _, _ in cli.SERVE_OPTIONS.values()} - {"config"}
    keys = {SERVE_PARAMS.get(key, key) for key in serve_model().model_fields}
    assert keys == params


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    config = _write(
        tmp_path / "ahp.toml",
        'port = 9001\nhost = "::1"\nlog_level = "debug"\nstate_dir = "state"\n',
    )
    shown = _show(tmp_path, "--config", str(config), "--", "--host", "localhost", AHP_PORT="9100")
    assert shown["file"] == str(config)
    assert _row(shown, "host") == {
        "key": "host",
        "value": "localhost",
        "source": "flag",
        "where": "",
    }
    assert _row(shown, "port") == {
        "key": "port",
        "value": 9100,
        "source": "environment",
        "where": "AHP_PORT",
    }
    assert _row(shown, "log_level") == {
        "key": "log_level",
        "value": "debug",
        "source": "file",
        "where": f"{config}:3",
    }
    # A relative path in the file is read from the file's own folder.
    assert _row(shown, "state_dir")["value"] == str(tmp_path / "state")
    assert _row(shown, "stop_timeout") == {
        "key": "stop_timeout",
        "value": 30.0,
        "source": "default",
        "where": "",
    }


def test_the_default_file_and_ahp_config_are_read(tmp_path: Path) -> None:
    default = tmp_path / "xdg" / "ahp" / "config.toml"
    default.parent.mkdir(parents=True)
    _write(default, "port = 9002\n")
    assert _row(_show(tmp_path), "port")["value"] == 9002
    other = _write(tmp_path / "other.toml", "port = 9003\n")
    assert _row(_show(tmp_path, AHP_CONFIG=str(other)), "port")["value"] == 9003


def test_a_token_is_never_shown(tmp_path: Path) -> None:
    config = _write(tmp_path / "ahp.toml", 'token = "a-secret-token-of-some-length"\n')
    done = subprocess.run(
        [*AHP, "config", "show", "--config", str(config), "--no-tables"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "a-secret-token" not in done.stdout
    assert 'token = "<hidden>"  # file' in done.stdout


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("port = 9000\nprot = 9001\n", ":2: prot: unknown key"),
        ('port = "9000"\n', ":1: port: Input should be a valid integer"),
        ('sessions = "sqlite"\n', ":1: sessions: Input should be 'file' or 'memory'"),
        ("port = 9000\n[nobody]\nx = 1\n", ":2: no plugin has a table [nobody]"),
        ("port = = 1\n", "not valid TOML"),
    ],
)
@pytest.mark.parametrize("plain", [True, False], ids=["plain", "typer"])
def test_a_mistake_in_the_file_stops_serve_naming_file_and_line(
    tmp_path: Path, text: str, expected: str, plain: bool
) -> None:
    config = _write(tmp_path / "ahp.toml", text)
    # An option typer alone reads sends the command line down typer's path.
    extra = [] if plain else ["--max-frame-bytes", "016777216"]
    done = subprocess.run(
        [*AHP, "serve", "--config", str(config), "--no-token", "--port", "0", *extra],
        env=_env(tmp_path, AHP_STATE_DIR=str(tmp_path / "state")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"ahp: {config}"), done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_named_file_is_an_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [*AHP, "serve", "--no-token"],
        env=_env(tmp_path, AHP_CONFIG=str(tmp_path / "nope.toml")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"AHP_CONFIG names {tmp_path / 'nope.toml'}, which is not a file" in done.stderr


def test_a_token_in_a_file_others_may_read_is_refused(tmp_path: Path) -> None:
    config = _write(tmp_path / "ahp.toml", 'token = "a-secret-token-of-some-length"\n', 0o644)
    with pytest.raises(ConfigError, match="others may read it: chmod 600"):
        read(config)


@pytest.mark.anyio
@pytest.mark.parametrize("plain", [True, False], ids=["plain", "typer"])
async def test_a_host_serves_as_its_file_says(tmp_path: Path, plain: bool) -> None:
    port = _free_port()
    token = "a-token-from-a-file-0123456789"
    (tmp_path / "token").write_text(token)
    (tmp_path / "token").chmod(0o600)
    config = _write(
        tmp_path / "ahp.toml",
        f'port = {port}\ntoken_file = "token"\nstate_dir = "state"\nsessions = "memory"\n',
    )
    extra = [] if plain else ["--max-frame-bytes", "016777216"]
    process = subprocess.Popen(
        [*AHP, "serve", "--config", str(config), *extra],
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        answer = None
        with anyio.fail_after(30):
            while answer is None:
                try:
                    async with connect(f"ws://127.0.0.1:{port}/?token={token}") as ws:
                        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
                        answer = json.loads(await ws.recv())
                except OSError:
                    await anyio.sleep(0.1)
        assert answer["id"] == 1 and "result" in answer
        with pytest.raises(InvalidStatus):  # the token the file names is the one asked for
            async with connect(f"ws://127.0.0.1:{port}/?token=not-{token}"):
                pass
        assert (tmp_path / "state" / "logs" / "ahp.log").is_file()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_other_commands_take_the_state_folder_from_the_file(tmp_path: Path) -> None:
    state = tmp_path / "shared-state"
    config = _write(tmp_path / "ahp.toml", f'state_dir = "{state}"\n')
    done = subprocess.run(
        [*AHP, "--config", str(config), "users", "add", "ada"],
        env=_env(tmp_path, AHP_PLUGINS="users"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        [*AHP, "users", "list", "--json"],
        env=_env(tmp_path, AHP_PLUGINS="users", AHP_CONFIG=str(config)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert [person["name"] for person in json.loads(listed.stdout)] == ["ada"]
    assert any(state.iterdir())


class Agent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(description="The program.")
    args: list[str] = []


class DemoTable(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: int = 1
    agents: dict[str, Agent] = {}


class DemoPlugin:
    @hookimpl
    def ahp_config_tables(self) -> dict[str, type[BaseModel]]:
        return {"demo": DemoTable}


async def _start(tmp_path: Path, text: str) -> Host:
    config = _write(tmp_path / "ahp.toml", text)
    settings = HostSettings(sessions="memory", state_dir=tmp_path / "state", config=read(config))
    host = Host(PluginManager(plugins=[("demo", DemoPlugin())], entry_points=False), settings)
    return await host.start()


@pytest.mark.anyio
async def test_a_plugin_reads_its_own_table(tmp_path: Path) -> None:
    host = await _start(tmp_path, '[demo]\nlevel = 3\n\n[demo.agents.gemini]\ncommand = "gemini"\n')
    assert host.view is not None
    table = host.view.config_table("demo")
    assert isinstance(table, DemoTable)
    assert table.level == 3
    assert table.agents == {"gemini": Agent(command="gemini")}
    assert host.view.config_table("nobody") is None


@pytest.mark.anyio
async def test_a_table_the_file_lacks_is_none(tmp_path: Path) -> None:
    host = await _start(tmp_path, "port = 1\n")
    assert host.view is not None
    assert host.view.config_table("demo") is None


@pytest.mark.anyio
async def test_a_wrong_key_deep_in_a_table_names_its_line(tmp_path: Path) -> None:
    text = '[demo]\nlevel = 3\n\n[demo.agents.gemini]\ncommand = "gemini"\nargz = []\n'
    with pytest.raises(PluginError, match=r"ahp.toml:6: demo\.agents\.gemini\.argz: unknown key"):
        await _start(tmp_path, text)


def test_lines_are_found_for_dotted_and_inline_keys() -> None:
    text = 'a = 1\n[t]\nx.y = 2\n[t.agents]\ng = { command = "c" }\n"q r" = 1\n'
    assert line_of(text, ["a"]) == 1
    assert line_of(text, ["t", "x", "y"]) == 3
    assert line_of(text, ["t", "agents", "g", "command"]) == 5
    assert line_of(text, ["t", "agents", "q r"]) == 6
    assert line_of(text, ["t", "nothing"]) == 2
    assert line_of(text, ["zzz"]) is None


class Remote(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: SecretStr | None = None


class SecretPlugin:
    @hookimpl
    def ahp_config_tables(self) -> dict[str, type[BaseModel]]:
        return {"far": Remote}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [0o600, 0o644])
async def test_a_table_holding_a_secret_needs_a_private_file(tmp_path: Path, mode: int) -> None:
    config = _write(tmp_path / "ahp.toml", '[far]\ntoken = "remote-secret-value"\n', mode)
    settings = HostSettings(sessions="memory", state_dir=tmp_path / "state", config=read(config))
    host = Host(PluginManager(plugins=[("far", SecretPlugin())], entry_points=False), settings)
    if mode == 0o600:
        await host.start()
        assert host.view is not None
        assert host.view.config_table("far").token.get_secret_value() == "remote-secret-value"
    else:
        with pytest.raises(PluginError, match=r"\[far\] holds a secret and others may read"):
            await host.start()
