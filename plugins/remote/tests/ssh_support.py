"""An SSH server on 127.0.0.1 (asyncssh) that the real ``ssh`` program reaches: it runs the
commands a client asks for, and forwards ports (``ssh -L``) to 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

LOOPBACK = ("127.0.0.1", "localhost")


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


@dataclass
class SshServer:
    port: int
    #: The private key the server takes.
    identity: Path
    #: While set, a forward is refused as if the far side's network were away.
    refusing: bool = False
    forwarded: list[tuple[str, int]] = field(default_factory=list)

    def options(self, identity: Path | None = None) -> list[str]:
        """``ssh`` options that reach this server and nothing of the user's own config."""
        return [
            "-p", str(self.port), "-i", str(identity or self.identity), "-F", "/dev/null",
            "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
        ]  # fmt: skip


def _server_class(state: list[SshServer]) -> type[asyncssh.SSHServer]:
    class Server(asyncssh.SSHServer):
        def connection_requested(
            self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
        ) -> bool:
            # Port forwarding, to this machine's loopback only (nothing else is reachable).
            if state[0].refusing or dest_host not in LOOPBACK:
                return False
            state[0].forwarded.append((dest_host, dest_port))
            return True

    return Server


@asynccontextmanager
async def ssh_server(folder: Path) -> AsyncIterator[SshServer]:
    """An SSH server on 127.0.0.1 taking one key."""
    folder.mkdir()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    identity = folder / "id_ed25519"
    client_key.write_private_key(str(identity))
    identity.chmod(0o600)
    authorized = folder / "authorized_keys"
    client_key.write_public_key(str(authorized))
    state: list[SshServer] = []
    server = await asyncssh.create_server(
        _server_class(state),
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=str(authorized),
        process_factory=_run,
        encoding=None,
    )
    state.append(SshServer(next(iter(server.sockets)).getsockname()[1], identity))
    try:
        yield state[0]
    finally:
        server.close()
        await server.wait_closed()


def stranger_key(path: Path) -> Path:
    """A key the server does not take."""
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
    path.chmod(0o600)
    return path
