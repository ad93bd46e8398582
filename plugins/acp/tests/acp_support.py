"""A host whose ``acp`` plugin runs the fake ACP agent (``acp_fake_agent.py``) as a real
subprocess, and what the tests do as a client."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import ahp_acp.plugin
from ahp_acp.agent import AcpChat
from ahp_acp.backend import AcpBackend
from ahpcore.testing import (
    AhpTestClient,
    RunningHost,
    host_factory,
)

# Shared with the other backends' tests; named here for this suite's test modules.
from ahpcore.testing import chat_state as chat_state
from ahpcore.testing import is_action as is_action
from ahpcore.testing import turn_end as turn_end

FAKE = Path(__file__).with_name("acp_fake_agent.py")
PROVIDER = "fake"
SID = "00000000-0000-4000-8000-0000000000{:02d}"


def agents_env(state: Path, **env: str) -> str:
    """``AHP_ACP_AGENTS`` naming the fake agent, keeping its histories in ``state``."""
    return json.dumps(
        {
            PROVIDER: {
                "command": sys.executable,
                "args": [str(FAKE)],
                "env": {"FAKE_ACP_STATE": str(state), **env},
                "displayName": "Fake",
            }
        }
    )


def acp_host(
    state_dir: Path, *, also: Sequence[tuple[str, object]] = ()
) -> AbstractAsyncContextManager[RunningHost]:
    """The acp plugin, and ``also`` (such as the terminals plugin)."""
    return host_factory([("acp", ahp_acp.plugin), *also])(state_dir)


def backend_of(running: RunningHost) -> AcpBackend:
    backend = running.host.backends[PROVIDER]
    assert isinstance(backend, AcpBackend)
    return backend


def chat_of(running: RunningHost, chat: str) -> AcpChat:
    for live in backend_of(running).live.values():
        if live.start.chat_uri == chat:
            return live
    raise LookupError(chat)


async def open_session(
    client: AhpTestClient, workdir: Path, n: int = 1, **extra: Any
) -> tuple[str, str]:
    uri = f"{PROVIDER}:/{SID.format(n)}"
    await client.request(
        "createSession",
        {"channel": uri, "provider": PROVIDER, "workingDirectories": [workdir.as_uri()], **extra},
    )
    snapshot = await client.request("subscribe", {"channel": uri})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return uri, chat


async def connect_and_open(
    running: RunningHost, workdir: Path, n: int = 1, **extra: Any
) -> tuple[AhpTestClient, str, str]:
    client = await running.connect("c1")
    await client.initialize()
    session, chat = await open_session(client, workdir, n, **extra)
    return client, session, chat


async def start_turn(
    client: AhpTestClient, chat: str, text: str, turn_id: str, **message: Any
) -> None:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-30T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}, **message},
        },
    )
    await client.answer_to(seq)


def parts(state: dict[str, Any], turn: int = -1) -> list[dict[str, Any]]:
    return list(state["turns"][turn]["responseParts"])
