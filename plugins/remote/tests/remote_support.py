"""Two real hosts: an inner one running the scripted agent, and an outer one whose ``remote``
plugin reaches it (a child ``ahp serve --stdio``, or a WebSocket on 127.0.0.1)."""

from __future__ import annotations

import json
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

import ahp_remote.plugin
import ahp_scripted.plugin
import ahp_terminals.plugin
from ahp_remote.backend import RemoteBackend
from ahp_remote.machine import Machine
from ahpcore.host import HostSettings
from ahpcore.testing import (
    AhpTestClient,
    RunningHost,
    running_host,
)

# Shared with the other backends' tests; named here for this suite's test modules.
from ahpcore.testing import chat_state as chat_state
from ahpcore.testing import is_action as is_action
from ahpcore.testing import turn_end as turn_end

#: The scripted agent the inner host runs.
SCRIPT = """
name: Inner agent
description: The scripted agent of the inner host.
rules:
  - prefix: "echo "
    steps:
      - say: "I will echo it."
      - tool: echo
        input: {text: "${rest}"}
        approval: true
        title: Echo this?
        result: "${input.text}"
        on_deny:
          - say: "Not echoing."
      - say: " echo: ${result}"
      - usage: {input_tokens: 7, output_tokens: 3, model: scripted}
  - exact: gap
    steps:
      - say: "before the gap."
      - wait: 1.5
      - say: " after the gap."
  - exact: drop
    steps:
      - say: "before the drop."
      - wait: 1.0
      - tool: ls
        input: {path: "."}
        result: "a b c"
      - say: " during the drop."
      - wait: 1.5
      - say: " after the drop."
  - exact: long
    steps:
      - say: "working"
      - wait: 60
  - exact: edit
    steps:
      - tool: write
        input: {path: notes.txt}
        approval: true
        edits:
          - {path: "file:///srv/project/notes.txt", before: "old line", after: "new line"}
        result: written
      - say: "edited."
  - exact: delegate
    steps:
      - subagent: helper
        description: Look around
        steps:
          - say: "child says hi"
          - tool: ls
            input: {path: "."}
            approval: true
            result: "a b c"
        result: "found a b c"
      - say: "helper said: ${result}"
default:
  - say: "hello from the inner host"
"""

TOKEN = "inner-host-token-" + "x7Qp2Lr9" * 3
MACHINE = "inner"
PROVIDER = f"remote-{MACHINE}-scripted"


def script_file(folder: Path) -> Path:
    path = folder / "inner-script.yaml"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


def inner_command(state_dir: Path, sessions: str = "file") -> list[str]:
    """``ahp serve --stdio`` of the inner host, as a child of the outer one."""
    return [
        sys.executable,
        "-m",
        "ahpcore.cli",
        "serve",
        "--stdio",
        "--plugins",
        "scripted",
        "--sessions",
        sessions,
        "--state-dir",
        str(state_dir),
        "--log-level",
        "warning",
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def inner_host(
    state_dir: Path, port: int, *, terminals: bool = False
) -> AsyncIterator[RunningHost]:
    """The inner host on 127.0.0.1:``port``, with a token (and terminals when asked)."""
    settings = HostSettings(sessions="file", port=port, state_dir=state_dir)
    plugins: list[tuple[str, object]] = [("scripted", ahp_scripted.plugin)]
    if terminals:
        plugins.append(("terminals", ahp_terminals.plugin))
    async with running_host(plugins, token=TOKEN, settings=settings) as running:
        yield running


class InnerRunner:
    """The inner host run in a task of its own, so it can stop and start again while the
    outer host runs (a host's scopes cannot close out of order in one task)."""

    def __init__(self, state_dir: Path, port: int) -> None:
        self.state_dir = state_dir
        self.port = port
        self.running: RunningHost | None = None
        self._stop = anyio.Event()
        self._stopped = anyio.Event()

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            async with inner_host(self.state_dir, self.port) as running:
                self.running = running
                task_status.started()
                await self._stop.wait()
        finally:
            self._stopped.set()

    async def stop(self) -> None:
        self._stop.set()
        await self._stopped.wait()


@asynccontextmanager
async def outer_host(
    state_dir: Path, *, terminals: bool = False, files: bool = False
) -> AsyncIterator[RunningHost]:
    """The outer host: the remote plugin (and terminals, files when asked), reaching what
    ``AHP_REMOTE_MACHINES`` names."""
    chosen = HostSettings(sessions="file", port=0, state_dir=state_dir)
    plugins: list[tuple[str, object]] = [("remote", ahp_remote.plugin)]
    if terminals:
        plugins.append(("terminals", ahp_terminals.plugin))
    if files:
        import ahp_files.plugin

        plugins.append(("files", ahp_files.plugin))
    async with running_host(plugins, settings=chosen) as running:
        yield running


def machines_env(**machines: dict[str, Any]) -> str:
    return json.dumps(machines)


def backend_of(running: RunningHost, provider: str = PROVIDER) -> RemoteBackend:
    backend = running.host.backends[provider]
    assert isinstance(backend, RemoteBackend)
    return backend


def machine_of(running: RunningHost, provider: str = PROVIDER) -> Machine:
    return backend_of(running, provider).machine


async def client_of(running: RunningHost, name: str = "c1") -> AhpTestClient:
    client = await running.connect(name)
    await client.initialize()
    return client


async def open_session(
    client: AhpTestClient, workdir: Path, provider: str = PROVIDER
) -> tuple[str, str]:
    uri = f"{provider}:/{uuid.uuid4()}"
    await client.request(
        "createSession",
        {"channel": uri, "provider": provider, "workingDirectories": [workdir.as_uri()]},
    )
    return uri, await subscribe(client, uri)


async def subscribe(client: AhpTestClient, session: str) -> str:
    snapshot = await client.request("subscribe", {"channel": session})
    chat = str(snapshot["snapshot"]["state"]["defaultChat"])
    await client.request("subscribe", {"channel": chat})
    return chat


async def start_turn(
    client: AhpTestClient, chat: str, text: str, turn_id: str | None = None
) -> str:
    turn_id = turn_id or str(uuid.uuid4())
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-12-01T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    await client.answer_to(seq)
    return turn_id


async def approve(client: AhpTestClient, chat: str, *, approved: bool = True) -> dict[str, Any]:
    """Wait for the question a tool call asks, and answer it."""
    ready = await client.recv_until(
        lambda f: (
            is_action("chat/toolCallReady", chat)(f) and "confirmed" not in f["params"]["action"]
        ),
        timeout=30,
    )
    action = ready["params"]["action"]
    answer: dict[str, Any] = {
        "type": "chat/toolCallConfirmed",
        "turnId": action["turnId"],
        "toolCallId": action["toolCallId"],
        "approved": approved,
    }
    if approved:
        answer["confirmed"] = "user-action"
    else:
        answer["reason"] = "denied"
    await client.dispatch(chat, answer)
    return dict(action)


def said(state: dict[str, Any], turn: int = -1) -> str:
    """The text of a turn, its markdown parts joined."""
    return "".join(
        str(p.get("content", ""))
        for p in state["turns"][turn]["responseParts"]
        if p.get("kind") == "markdown"
    )


def tools(state: dict[str, Any], turn: int = -1) -> list[dict[str, Any]]:
    return [
        dict(p["toolCall"])
        for p in state["turns"][turn]["responseParts"]
        if p.get("kind") == "toolCall"
    ]


def agents_of(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["provider"]: a for a in snapshot["agents"]}


async def root_agents(client: AhpTestClient) -> dict[str, dict[str, Any]]:
    await client.sync()
    state = (await client.request("subscribe", {"channel": "ahp-root://"}))["snapshot"]["state"]
    return agents_of(state)


__all__: Sequence[str] = ()
