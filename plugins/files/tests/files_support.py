"""Helpers the ahp-files tests share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ahpcore.testing import AhpTestClient


@dataclass
class Tree:
    work: Path
    outside: Path

    def uri(self, relative: str = "") -> str:
        return (self.work / relative).as_uri() if relative else self.work.as_uri()


async def error_of(client: AhpTestClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    frame = await client.request_frame(method, {"channel": "ahp-root://", **params})
    assert "error" in frame, f"{method} was expected to fail: {frame}"
    return dict(frame["error"])


async def call(client: AhpTestClient, method: str, params: dict[str, Any]) -> Any:
    return await client.request(method, {"channel": "ahp-root://", **params})
