"""What a client was told is on disk: a real ``ahp serve`` killed with SIGKILL right after
answering keeps the chat it created and the title it echoed."""

from __future__ import annotations

import itertools
import json
import signal
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.test_cli import start_serve

pytestmark = pytest.mark.anyio

SESSION = "scripted:/00000000-0000-4000-8000-0000000000aa"
CHAT = "ahp-chat:/kept-chat"


class Wire:
    """Just enough of a client to drive a host in another process."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        ident = next(self.ids)
        await self.ws.send(
            json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        )
        frame = await self.until(lambda f: f.get("id") == ident and "method" not in f)
        assert "error" not in frame, frame
        return frame["result"]

    async def until(self, match: Any) -> dict[str, Any]:
        with anyio.fail_after(20):
            while True:
                frame = json.loads(await self.ws.recv())
                if match(frame):
                    return frame

    async def initialize(self) -> None:
        await self.request(
            "initialize",
            {
                "channel": "ahp-root://",
                "protocolVersions": ["1.0.0"],
                "clientId": "durable",
                "initialSubscriptions": [],
            },
        )


def kill_hard(served: Any) -> None:
    served.process.send_signal(signal.SIGKILL)
    served.process.wait(timeout=10)


async def test_an_answered_create_chat_and_an_echoed_title_survive_kill_9(tmp_path: Path):
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            await client.request("createSession", {"channel": SESSION, "provider": "scripted"})
            await client.request("createChat", {"channel": SESSION, "chat": CHAT})
            kill_hard(served)  # at once: no chance to write anything after the answer
    finally:
        served.process.kill()
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            state = (await client.request("subscribe", {"channel": SESSION}))["snapshot"]["state"]
            assert CHAT in [chat["resource"] for chat in state["chats"]]
            await client.ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "dispatchAction",
                        "params": {
                            "channel": SESSION,
                            "clientSeq": 1,
                            "action": {"type": "session/titleChanged", "title": "Named at last"},
                        },
                    }
                )
            )
            echo = await client.until(
                lambda f: (
                    f.get("method") == "action"
                    and f["params"].get("origin", {}).get("clientSeq") == 1
                )
            )
            assert "rejectionReason" not in echo["params"]
            kill_hard(served)
    finally:
        served.process.kill()
    served = start_serve(tmp_path, "--no-token")
    try:
        async with connect(served.url) as ws:
            client = Wire(ws)
            await client.initialize()
            state = (await client.request("subscribe", {"channel": SESSION}))["snapshot"]["state"]
            assert state["title"] == "Named at last"
            assert CHAT in [chat["resource"] for chat in state["chats"]]
    finally:
        served.process.terminate()
        served.process.wait(timeout=10)
    # What it wrote is the user's alone.
    state_dir = tmp_path / "state"
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    for name in ("sessions.sqlite3",):
        assert stat.S_IMODE((state_dir / name).stat().st_mode) == 0o600
