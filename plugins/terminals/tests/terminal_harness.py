"""Helpers for the terminal tests: sessions, terminals and reading their output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from ahpcore.hookspecs import hookimpl
from ahpcore.testing import AhpTestClient

SESSION = "scripted:/00000000-0000-4000-8000-000000000001"


class BackendPlugin:
    def __init__(self, backend: Any) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host, register):
        register(self.backend)


def file_uri(path: Path) -> str:
    return path.as_uri()


async def open_session(client: AhpTestClient, workdir: Path) -> tuple[str, str]:
    await client.request(
        "createSession",
        {"channel": SESSION, "provider": "scripted", "workingDirectories": [file_uri(workdir)]},
    )
    snapshot = await client.request("subscribe", {"channel": SESSION})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return SESSION, chat


async def open_terminal(
    client: AhpTestClient, workdir: Path, uri: str = "ahp-terminal:/t1", **extra: Any
) -> dict[str, Any]:
    """createTerminal claimed by ``client``, subscribed; returns the snapshot state."""
    await client.request(
        "createTerminal",
        {
            "channel": uri,
            "claim": {"kind": "client", "clientId": client.client_id},
            "cwd": file_uri(workdir),
            **extra,
        },
    )
    answer = await client.request("subscribe", {"channel": uri})
    return answer["snapshot"]["state"]


def output_of(client: AhpTestClient, uri: str) -> str:
    """Every byte of output the client was sent for ``uri`` (snapshot content plus data)."""
    state = client.snapshots.get(uri, (0, {}))[1]
    text = "".join(
        part.get("output", "") if part.get("type") == "command" else part.get("value", "")
        for part in state.get("content", [])
    )
    for envelope in client.actions_for(uri):
        if envelope["action"]["type"] == "terminal/data":
            text += envelope["action"]["data"]
    return text


def is_action(kind: str, channel: str | None = None) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        return (
            frame.get("method") == "action"
            and frame["params"]["action"]["type"] == kind
            and (channel is None or frame["params"]["channel"] == channel)
            and "rejectionReason" not in frame["params"]
        )

    return match


async def wait_for_output(
    client: AhpTestClient, uri: str, needle: str, timeout: float = 10.0
) -> None:
    """Read frames until ``needle`` has appeared in the terminal's output."""
    with anyio.fail_after(timeout):
        while needle not in output_of(client, uri):
            await client.recv_until(is_action("terminal/data", uri))
