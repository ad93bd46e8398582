"""A question left open by a turn that ended reaches the backend as ``TurnEnded``.

A real agent often waits for an approval in a task of its own (a permission
callback), not in ``run_turn``: cancelling the turn does not cancel that task,
so the host settles its question by raising the named exception there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.ports.backend import (
    Abilities,
    ChatStart,
    SessionReporter,
    TranscriptReader,
    TurnEnded,
    TurnInput,
    TurnReporter,
)
from ahpcore.testing import running_host
from tests.sessions.conftest import is_action, start_turn

pytestmark = pytest.mark.anyio


class Callbacks:
    """A backend whose approvals are asked from a task the agent runs itself."""

    provider = "callbacks"
    abilities = Abilities()

    def __init__(self) -> None:
        self.outcomes: list[str] = []
        self.settled = anyio.Event()

    def agents(self) -> Sequence[Mapping[str, Any]]:
        return [
            {"provider": "callbacks", "displayName": "Callbacks", "description": "", "models": []}
        ]

    async def start(self, start: ChatStart) -> Any:
        assert start.report is not None
        return CallbackAgent(self, start.report)

    def catalogue(self, **_: Any) -> list[Any]:
        return []

    def lookup(self, session_id: str) -> None:
        return None

    def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        return False

    def delete(self, backend_id: str) -> None:
        pass

    def truncate(self, backend_id: str, turn_id: str | None) -> None:
        pass


class CallbackAgent:
    def __init__(self, backend: Callbacks, session: SessionReporter) -> None:
        self.backend = backend
        self.session = session

    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        report.tool_start("call-1", "write")
        report.tool_ready("call-1", tool_input="{}", invocation_message="Write a file")

        async def permission_callback() -> None:
            try:
                await report.tool_approval("call-1", tool_input="{}", invocation_message="Write")
                self.backend.outcomes.append("answered")
            except TurnEnded as ended:
                self.backend.outcomes.append(f"ended {ended.turn_id}")
            finally:
                self.backend.settled.set()

        self.session.start_soon(permission_callback)
        await anyio.sleep_forever()

    async def close(self) -> None:
        pass


class Plugin:
    def __init__(self, backend: Callbacks) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host, register):
        register(self.backend)


async def test_an_approval_asked_outside_run_turn_ends_with_turn_ended(tmp_path: Path) -> None:
    backend = Callbacks()
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path)
    async with running_host([("callbacks", Plugin(backend))], settings=settings) as running:
        client = await running.connect("c1")
        await client.initialize()
        uri = "callbacks:/00000000-0000-4000-8000-000000000001"
        await client.request("createSession", {"channel": uri, "provider": "callbacks"})
        state = (await client.request("subscribe", {"channel": uri}))["snapshot"]["state"]
        chat = state["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        await start_turn(client, chat, "go", "t1")
        await client.recv_until(is_action("session/inputNeededSet", uri))
        await client.dispatch(chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 0})
        with anyio.fail_after(5):
            await backend.settled.wait()
        assert backend.outcomes == ["ended t1"]
        await client.recv_until(is_action("session/inputNeededRemoved", uri))
