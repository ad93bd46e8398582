"""A scripted Anthropic API and a host whose Claude backend runs the real CLI against it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import AnthropicServer

from ahp_claude.backend import ClaudeBackend
from ahp_claude.plugin import backend_for
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.testing import AhpTestClient, RunningHost, running_host


@pytest.fixture
def anthropic() -> Iterator[AnthropicServer]:
    server = AnthropicServer().start()
    yield server
    server.close()


@pytest.fixture
def claude_env(tmp_path: Path, anthropic: AnthropicServer) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    return {
        "ANTHROPIC_BASE_URL": anthropic.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
    }


class ClaudePlugin:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.backend: ClaudeBackend | None = None

    @hookimpl
    def ahp_backends(self, host: Any, register: Callable[[Any], None]) -> None:
        self.backend = backend_for(host, self.env)
        register(self.backend)


@pytest.fixture
def claude_host(tmp_path: Path, claude_env: dict[str, str]) -> Callable[..., Any]:
    """``async with claude_host() as (running, backend)``; state and transcripts survive reuse."""

    @asynccontextmanager
    async def start(
        env: dict[str, str] | None = None,
    ) -> AsyncIterator[tuple[RunningHost, ClaudeBackend]]:
        plugin = ClaudePlugin({**claude_env, **(env or {})})
        settings = HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")
        async with running_host([("claude", plugin)], settings=settings) as running:
            assert plugin.backend is not None
            yield running, plugin.backend

    return start


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


SID = "00000000-0000-4000-8000-0000000000{:02d}"


async def open_session(
    client: AhpTestClient, workdir: Path, n: int = 1, **extra: Any
) -> tuple[str, str]:
    uri = f"claude:/{SID.format(n)}"
    await client.request(
        "createSession",
        {"channel": uri, "provider": "claude", "workingDirectories": [workdir.as_uri()], **extra},
    )
    snapshot = await client.request("subscribe", {"channel": uri})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return uri, chat
