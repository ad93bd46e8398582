"""A machine reached with the ``ssh`` program, through an SSH server on 127.0.0.1 (asyncssh)."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

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

asyncssh = pytest.importorskip("asyncssh", reason="asyncssh runs the SSH server these tests reach")
if shutil.which("ssh") is None:
    pytest.skip("no ssh program on PATH", allow_module_level=True)

pytestmark = pytest.mark.anyio


async def _run(process: Any) -> None:
    """Run the command a client asked for, its pipes joined to the SSH channel."""
    child = subprocess.Popen(  # the server's side: the machine's own shell
        process.command,
        shell=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    await process.redirect(stdin=child.stdin, stdout=child.stdout, stderr=child.stderr)
    process.exit(await asyncio.to_thread(child.wait))


@asynccontextmanager
async def ssh_server(folder: Path) -> AsyncIterator[tuple[int, Path]]:
    """An SSH server on 127.0.0.1 taking one key; yields its port and the key's file."""
    folder.mkdir()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    identity = folder / "id_ed25519"
    client_key.write_private_key(str(identity))
    identity.chmod(0o600)
    authorized = folder / "authorized_keys"
    client_key.write_public_key(str(authorized))
    server = await asyncssh.create_server(
        asyncssh.SSHServer,
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=str(authorized),
        process_factory=_run,
        encoding=None,
    )
    port = next(iter(server.sockets)).getsockname()[1]
    try:
        yield port, identity
    finally:
        server.close()
        await server.wait_closed()


async def test_a_machine_over_ssh(
    tmp_path: Path,
    inner_state: Path,
    outer_state: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with ssh_server(tmp_path / "ssh") as (port, identity):
        options = [
            "-p", str(port), "-i", str(identity), "-F", "/dev/null",
            "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
        ]  # fmt: skip
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
    async with ssh_server(tmp_path / "ssh") as (port, _):
        stranger = tmp_path / "stranger"
        asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))
        stranger.chmod(0o600)
        options = [
            "-p", str(port), "-i", str(stranger), "-F", "/dev/null",
            "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
        ]  # fmt: skip
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
