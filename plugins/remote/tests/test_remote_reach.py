"""How machines are configured and reached (Docker, a misbehaving remote, tokens kept secret)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from remote_support import (
    MACHINE,
    PROVIDER,
    TOKEN,
    approve,
    chat_state,
    client_of,
    free_port,
    inner_command,
    inner_host,
    machine_of,
    machines_env,
    open_session,
    outer_host,
    root_agents,
    said,
    start_turn,
    turn_end,
)

import ahp_remote.plugin
from ahp_remote.config import ConfigError, parse_machines, table_machines, table_model
from ahpcore.config import read
from ahpcore.hookspecs import PluginError
from ahpcore.testing import host_factory

pytestmark = pytest.mark.anyio

FAKE_REMOTE = Path(__file__).with_name("fake_remote.py")


# -- configuration ------------------------------------------------------------------------------
def test_each_way_of_reaching_a_machine() -> None:
    specs = parse_machines(
        json.dumps(
            {
                "a": {"command": ["ahp", "serve", "--stdio"]},
                "b": {"url": "wss://b.example/", "token": "sekrit-token"},
                "c": {"ssh": "me@c", "sshOptions": ["-p", "2222"]},
                "d": {"docker": "box", "command": "/opt/ahp serve --stdio"},
            }
        )
    )
    a, b, c, d = specs
    assert a.argv == ("ahp", "serve", "--stdio")
    assert (b.url, b.token) == ("wss://b.example/", "sekrit-token")
    assert "sekrit" not in repr(b) and "sekrit" not in b.reach
    assert c.argv == (
        "ssh", "-T", "-o", "BatchMode=yes", "-p", "2222", "--", "me@c", "ahp serve --stdio"
    )  # fmt: skip
    assert d.argv == ("docker", "exec", "-i", "box", "/opt/ahp", "serve", "--stdio")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": ', "AHP_REMOTE_MACHINES is not JSON"),
        ("[]", "must be a JSON object"),
        ('{"Bad": {"docker": "x"}}', "a machine's name goes into provider names"),
        ('{"a": {"ssh": "x", "docker": "y"}}', "exactly one way to reach it"),
        ('{"a": {}}', "exactly one way to reach it"),
        ('{"a": {"url": "http://x/"}}', "ws:// or wss://"),
        ('{"a": {"url": "ws://x/?token=abc"}}', "not in the URL"),
        ('{"a": {"ssh": "-oProxyCommand=x"}}', "destination"),
        ('{"a": {"ssh": "x", "url": "wss://127.0.0.1:1/"}}', "ssh encrypts the way"),
        ('{"a": {"ssh": "x", "url": "ws://127.0.0.1/"}}', "must name a host and a port"),
        ('{"a": {"ssh": "x", "url": "ws://h:1/", "command": "c"}}', "tunnel (ssh with url)"),
        ('{"a": {"ssh": "x", "url": "ws://h:1/", "docker": "c"}}', "exactly one way"),
        ('{"a": {"docker": "x", "tokn": "y"}}', "does not take: tokn"),
        ('{"a": {"command": "ahp serve"}}', "list of non-empty strings"),
        ('{"a": {"url": "ws://x/", "tokenFile": "/nonexistent/t"}}', "cannot read"),
    ],
)
def test_a_configuration_that_cannot_be_used_says_why(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_machines(text)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


# -- Docker -------------------------------------------------------------------------------------
async def test_a_docker_machine_runs_docker_exec(
    tmp_path: Path,
    inner_state: Path,
    outer_state: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``docker`` on PATH that notes its arguments and runs the command it was given here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "docker-calls"
    fake = bin_dir / "docker"
    fake.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> "{calls}"\n'
        '[ "$1" = exec ] && [ "$2" = -i ] || exit 64\n'
        "shift 3\n"
        f'PATH="{Path(sys.executable).parent}:$PATH" exec "$@"\n',
        encoding="utf-8",
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # What the container would run, with this interpreter standing in for its ahp.
    command = shlex.join(["python", "-m", "ahpcore.cli", *inner_command(inner_state)[3:]])
    monkeypatch.setenv(
        "AHP_REMOTE_MACHINES",
        machines_env(**{MACHINE: {"docker": "agents-box", "command": command}}),
    )
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        assert PROVIDER in await root_agents(client)
        _, chat = await open_session(client, workdir)
        await start_turn(client, chat, "echo in a box")
        await approve(client, chat)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert said(await chat_state(client, chat)) == "I will echo it. echo: in a box"
    (line,) = calls.read_text(encoding="utf-8").splitlines()
    assert line.startswith("exec -i agents-box python -m ahpcore.cli serve --stdio")


# -- a remote that cannot be trusted ---------------------------------------------------------------
async def test_a_remote_cannot_ask_this_host_for_anything(
    tmp_path: Path, outer_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "remote-heard"
    monkeypatch.setenv(
        "AHP_REMOTE_MACHINES",
        machines_env(evil={"command": [sys.executable, str(FAKE_REMOTE), str(record)]}),
    )
    async with outer_host(outer_state) as running:
        client = await client_of(running)
        machine = machine_of(running, "remote-evil-fake")
        with anyio.fail_after(10):
            while len(machine.agents) < 2:
                await anyio.sleep(0.05)
        # Frames that broke the protocol were dropped; the one that kept to it was taken.
        assert [a["provider"] for a in machine.agents] == ["fake", "second"]
        with anyio.fail_after(10):
            while "evil-1" not in record.read_text(encoding="utf-8"):
                await anyio.sleep(0.05)
        heard = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
        (answer,) = [frame for frame in heard if frame.get("id") == "evil-1"]
        assert answer["error"]["code"] == -32601
        assert "result" not in answer
        assert "remote-evil-fake" in await root_agents(client)


async def test_the_token_is_never_shown(
    inner_state: Path,
    outer_state: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    wrong = "wrong-token-" + "Zq8Wm3Kd" * 3
    monkeypatch.setenv(
        "AHP_REMOTE_MACHINES",
        machines_env(
            **{
                MACHINE: {
                    "url": f"ws://127.0.0.1:{port}/",
                    "token": wrong,
                    "providers": ["scripted"],
                }
            }
        ),
    )
    async with inner_host(inner_state, port), outer_host(outer_state) as running:
        client = await client_of(running)
        machine = machine_of(running)
        with anyio.fail_after(10):
            while machine.reason == "not reached yet":
                await anyio.sleep(0.05)
        description = (await root_agents(client))[PROVIDER]["description"]
        assert "Not available" in description and "401" in description
        assert wrong not in description
        assert TOKEN not in description
    assert wrong not in caplog.text


# -- refusals as the host starts, and the config file ---------------------------------------------
def test_ahp_serve_refuses_machines_it_cannot_read_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "AHP_REMOTE_MACHINES": '{"buildbox": {"ssh": "me@buildbox"'}
    done = subprocess.run(
        [sys.executable, "-m", "ahpcore.cli", "serve", "--stdio", "--plugins", "remote",
         "--sessions", "memory", "--state-dir", str(tmp_path / "state")],
        env=env, input=b"", capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("ahp: AHP_REMOTE_MACHINES is not JSON")


async def test_machines_in_the_config_file(
    tmp_path: Path,
    inner_state: Path,
    outer_state: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``[remote.machines.NAME]`` tables, the token kept as a secret the host never prints."""
    monkeypatch.delenv("AHP_REMOTE_MACHINES", raising=False)
    port = free_port()
    config = tmp_path / "ahp.toml"
    config.write_text(
        f'[remote.machines.{MACHINE}]\nurl = "ws://127.0.0.1:{port}/"\ntoken = "{TOKEN}"\n'
        'displayName = "the inner box"\n',
        encoding="utf-8",
    )
    config.chmod(0o644)
    # The token is a secret: a file others may read is refused before anything starts.
    with pytest.raises(PluginError, match="chmod 600"):
        async with host_factory([("remote", ahp_remote.plugin)], config=read(config))(outer_state):
            pass
    config.chmod(0o600)
    host = host_factory([("remote", ahp_remote.plugin)], config=read(config))
    async with inner_host(inner_state, port), host(outer_state) as running:
        client = await client_of(running)
        agent = (await root_agents(client))[PROVIDER]
        assert agent["displayName"] == "Inner agent on the inner box"
        assert TOKEN not in json.dumps(agent)
        _, chat = await open_session(client, workdir)
        await start_turn(client, chat, "hello")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"


def test_a_tunnel_in_the_file(tmp_path: Path) -> None:
    """``ssh`` with ``url``: a host listening there, reached through an SSH port forward."""
    token = tmp_path / "buildbox.token"
    token.write_text("tunnel-token-Zq81\n", encoding="utf-8")
    config = tmp_path / "ahp.toml"
    config.write_text(
        '[remote.machines.buildbox]\nssh = "me@buildbox"\nurl = "ws://127.0.0.1:8765/"\n'
        f'tokenFile = "{token}"\nsshOptions = ["-p", "2222"]\n',
        encoding="utf-8",
    )
    table = table_model()(**read(config).tables["remote"])
    (spec,) = table_machines(table)
    assert (spec.kind, spec.url, spec.destination) == (
        "tunnel",
        "ws://127.0.0.1:8765/",
        "me@buildbox",
    )
    assert spec.token == "tunnel-token-Zq81"
    assert spec.reach == "ws://127.0.0.1:8765/ through ssh me@buildbox"
    assert "Zq81" not in repr(spec) and "Zq81" not in " ".join(spec.argv)
    assert spec.argv[:3] == ("ssh", "-N", "-T")
    assert "ExitOnForwardFailure=yes" in spec.argv and "BatchMode=yes" in spec.argv
    assert spec.argv[spec.argv.index("-p") + 1] == "2222"


def test_a_machine_in_the_file_that_cannot_be_used_is_named(tmp_path: Path) -> None:
    config = tmp_path / "ahp.toml"
    config.write_text('[remote.machines.box]\nssh = "me@box"\ndocker = "c"\n', encoding="utf-8")
    table = table_model()(**read(config).tables["remote"])
    with pytest.raises(ConfigError, match=r"\[remote.machines.box\] must name exactly one way"):
        table_machines(table)
