"""A machine reached with the ``ssh`` program, through an SSH server on 127.0.0.1 (asyncssh)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from remote_support import (
    MACHINE,
    PROVIDER,
    approve,
    chat_state,
    client_of,
    inner_command,
    machine_of,
    machines_env,
    open_session,
    outer_host,
    root_agents,
    said,
    start_turn,
    turn_end,
)

pytest.importorskip("asyncssh", reason="asyncssh runs the SSH server these tests reach")
if shutil.which("ssh") is None:
    pytest.skip("no ssh program on PATH", allow_module_level=True)

from ssh_support import ssh_server, stranger_key  # after the skips: asyncssh is there

pytestmark = pytest.mark.anyio


async def test_a_machine_over_ssh(
    tmp_path: Path,
    inner_state: Path,
    outer_state: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with ssh_server(tmp_path / "ssh") as server:
        options = server.options()
        monkeypatch.setenv(
            "AHP_REMOTE_MACHINES",
            machines_env(
                **{
                    MACHINE: {
                        "ssh": "builder@127.0.0.1",
                        "command": shlex.join(inner_command(inner_state)),
                        "sshOptions": options,
                    }
                }
            ),
        )
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            agent = (await root_agents(client))[PROVIDER]
            assert "Not available" not in agent["description"], agent
            assert "ssh" in agent["description"]
            _, chat = await open_session(client, workdir)
            await start_turn(client, chat, "echo through ssh")
            await approve(client, chat)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
            assert said(await chat_state(client, chat)) == "I will echo it. echo: through ssh"
            assert machine_of(running).spec.argv[0] == "ssh"


async def test_an_ssh_machine_that_refuses_says_why(
    tmp_path: Path, outer_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ssh_server(tmp_path / "ssh") as server:
        options = server.options(stranger_key(tmp_path / "stranger"))
        monkeypatch.setenv(
            "AHP_REMOTE_MACHINES",
            machines_env(**{MACHINE: {"ssh": "builder@127.0.0.1", "sshOptions": options}}),
        )
        monkeypatch.setenv("AHP_REMOTE_PROBE_SECONDS", "5")
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            agent = (await root_agents(client))[f"remote-{MACHINE}"]
            assert "Not available" in agent["description"]
            assert "Permission denied" in agent["description"], agent
