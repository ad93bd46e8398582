"""A host running the scripted backend, for the session tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from ahp_scripted import Rule, Script, ScriptedBackend
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.testing import AhpTestClient, RunningHost, running_host

# Shared with the other backends' tests; named here for this suite's test modules.
from ahpcore.testing import is_action as is_action

SID = "00000000-0000-4000-8000-0000000000{:02d}"


class ScriptedPlugin:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host, register):
        register(self.backend)


def script(*rules: Rule, default: list[Any] | None = None) -> Script:
    return Script(rules=list(rules), default=default or [{"say": "ok"}])


@pytest.fixture
def session_host(tmp_path: Path) -> Callable[..., Any]:
    """``async with session_host(script) as (running, backend)``; state survives across uses."""

    @asynccontextmanager
    async def start(
        the_script: Script | None = None,
        *,
        sessions: str = "file",
        grace: float = 0.2,
        **backend_options: Any,
    ) -> AsyncIterator[tuple[RunningHost, ScriptedBackend]]:
        backend = ScriptedBackend(tmp_path / "scripted", the_script or script(), **backend_options)
        settings = HostSettings(
            sessions=sessions, port=0, state_dir=tmp_path / "state", reconnect_grace=grace
        )
        async with running_host(
            [("scripted", ScriptedPlugin(backend))], settings=settings
        ) as running:
            yield running, backend

    return start


def session_uri(n: int = 1) -> str:
    return f"scripted:/{SID.format(n)}"


async def open_session(client: AhpTestClient, n: int = 1, **extra: Any) -> tuple[str, str]:
    """Create a session and subscribe to it and its default chat; returns (session, chat)."""
    uri = session_uri(n)
    await client.request("createSession", {"channel": uri, "provider": "scripted", **extra})
    snapshot = await client.request("subscribe", {"channel": uri})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return uri, chat


def message(text: str) -> dict[str, Any]:
    return {"text": text, "origin": {"kind": "user"}}


async def start_turn(client: AhpTestClient, chat: str, text: str, turn_id: str) -> dict[str, Any]:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-29T00:00:00.000Z",
            "message": message(text),
        },
    )
    return await client.answer_to(seq)


async def turn_end(client: AhpTestClient, chat: str) -> dict[str, Any]:
    """The action that ended the running turn of ``chat``."""
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"]["type"]
            in ("chat/turnComplete", "chat/turnCancelled", "chat/error")
        )
    )
    return dict(frame["params"]["action"])
