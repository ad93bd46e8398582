"""A host with the Claude plugin in a Python of its own, which has not loaded
claude-agent-sdk: run by test_claude_startup.py to see whether opening sessions loads it.

Reads ``{"state", "env", "workdir"}`` as JSON on stdin, opens session 1 from its
transcript and creates session 2, and prints as JSON whether the SDK was loaded
after each, with the turns the reopened chat holds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from ahp_claude import backend
from ahp_claude.plugin import backend_for
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.testing import running_host

REOPENED = "claude:/00000000-0000-4000-8000-000000000001"
CREATED = "claude:/00000000-0000-4000-8000-000000000002"


class Plugin:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    @hookimpl
    def ahp_backends(self, host: Any, register: Callable[[Any], None]) -> None:
        register(backend_for(host, self.env, probe=False, watch=False))


def sdk_loaded() -> bool:
    return "claude_agent_sdk" in sys.modules


async def main(asked: dict[str, Any]) -> dict[str, Any]:
    # The SDK is loaded a moment after the first chat opens; not within this run.
    backend.SDK_WARM_DELAY_SECONDS = 600
    said: dict[str, Any] = {"sdk at start": sdk_loaded()}
    settings = HostSettings(sessions="file", port=0, state_dir=Path(asked["state"]))
    async with running_host([("claude", Plugin(asked["env"]))], settings=settings) as running:
        client = await running.connect("c1")
        await client.initialize()
        session = await client.request("subscribe", {"channel": REOPENED})
        chat = session["snapshot"]["state"]["defaultChat"]
        opened = await client.request("subscribe", {"channel": chat})
        said["sdk once reopened"] = sdk_loaded()
        said["turns"] = [t["message"]["text"] for t in opened["snapshot"]["state"]["turns"]]
        folder = Path(asked["workdir"]).as_uri()
        params = {"channel": CREATED, "provider": "claude", "workingDirectories": [folder]}
        await client.request("createSession", params)
        said["sdk once created"] = sdk_loaded()
    return said


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, json.load(sys.stdin))))
