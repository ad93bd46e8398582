"""A scripted Anthropic API and a host whose Claude backend runs the real CLI against it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic_server import AnthropicServer, Hold

from ahp_claude import ClaudeAgent
from ahp_claude.backend import ClaudeBackend
from ahp_claude.plugin import backend_for
from ahpcore.hookspecs import hookimpl
from ahpcore.testing import AhpTestClient, HostFactory, RunningHost, host_factory

# Shared with the other backends' tests; named here for this suite's test modules.
from ahpcore.testing import is_action as is_action


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
        # No boot probe: it would start a second CLI in every test.
        self.backend = backend_for(host, self.env, probe=False, watch=False)
        register(self.backend)


@pytest.fixture
def claude_hosts(claude_env: dict[str, str]) -> HostFactory:
    """``host(state_dir)``: a host whose Claude backend runs the CLI on the scripted API,
    a plugin of its own at each start (``BackendUnderTest.host``)."""
    return host_factory(lambda: [("claude", ClaudePlugin(claude_env))])


@pytest.fixture
def claude_host(tmp_path: Path, claude_env: dict[str, str]) -> Callable[..., Any]:
    """``async with claude_host() as (running, backend)``; state and transcripts survive reuse."""

    @asynccontextmanager
    async def start(
        env: dict[str, str] | None = None, state: str = "state"
    ) -> AsyncIterator[tuple[RunningHost, ClaudeBackend]]:
        plugin = ClaudePlugin({**claude_env, **(env or {})})
        async with host_factory([("claude", plugin)])(tmp_path / state) as running:
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


async def connect_and_open(
    running: RunningHost, workdir: Path, n: int = 1, **extra: Any
) -> tuple[AhpTestClient, str, str]:
    """Client ``c1``, initialized, with session ``n`` created and its default chat open."""
    client = await running.connect("c1")
    await client.initialize()
    session, chat = await open_session(client, workdir, n, **extra)
    return client, session, chat


def message(text: str) -> dict[str, Any]:
    return {"text": text, "origin": {"kind": "user"}}


async def start_turn(client: Any, chat: str, text: str, turn_id: str) -> None:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-30T00:00:00.000Z",
            "message": message(text),
        },
    )
    await client.answer_to(seq)


async def turn_end(client: Any, chat: str, timeout: float = 30) -> dict[str, Any]:
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"]["type"]
            in ("chat/turnComplete", "chat/turnCancelled", "chat/error")
        ),
        timeout=timeout,
    )
    return dict(frame["params"]["action"])


async def chat_state(client: Any, chat: str) -> dict[str, Any]:
    await client.sync()
    return (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]


async def confirm(client: Any, chat: str, turn: str, call: str, approved: bool) -> None:
    action: dict[str, Any] = {
        "type": "chat/toolCallConfirmed",
        "turnId": turn,
        "toolCallId": call,
        "approved": approved,
    }
    action.update({"confirmed": "user-action"} if approved else {"reason": "denied"})
    await client.dispatch(chat, action)


async def reached(hold: Hold) -> None:
    assert await anyio.to_thread.run_sync(hold.reached.wait, 30)


def agent_of(running: Any, chat: str) -> ClaudeAgent:
    backend = running.host.backends["claude"]
    for agent in backend.live.values():
        if agent.start.chat_uri == chat:
            return agent
    raise LookupError(chat)
