"""What the agent keeps about the turn running now, and small helpers of its translation."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from ahp_claude import tools
from ahpcore.ports.backend import TurnReporter


@dataclass
class Stream:
    """Where one agent's messages go: the chat's turn, or a subagent's child chat."""

    report: TurnReporter
    blocks: dict[int, str] = field(default_factory=dict)
    #: True once partial messages arrived for it (a subagent's may come whole only).
    partial: bool = False
    #: When it opened (the host's clock): a subagent's chat lasts from then to its end.
    began: float = field(default_factory=time.monotonic)


@dataclass
class Call:
    name: str
    stream: Stream
    input: dict[str, Any] = field(default_factory=dict)
    started: bool = False
    settled: bool = False  # ready was reported (asked, or ran without asking)
    denied: bool = False


@dataclass
class Turn:
    report: TurnReporter
    done: anyio.Event = field(default_factory=anyio.Event)
    error: str | None = None
    live: bool = True  # False once cancelled: what the CLI says while draining is dropped
    calls: dict[str, Call] = field(default_factory=dict)
    #: Subagents running for a call of this turn, by that call's id.
    children: dict[str, Stream] = field(default_factory=dict)
    questions: set[str] = field(default_factory=set)
    #: Steering messages sent into this turn that no result has taken in yet.
    steering: set[str] = field(default_factory=set)
    #: Tokens in the context after the main agent's latest model call (its prompt and answer).
    context_used: int | None = None
    context_prompt: int = 0
    #: The transcript uuid of the message that began the turn.
    entry: str | None = None

    def __post_init__(self) -> None:
        self.main = Stream(self.report)


def is_client_tool(name: str) -> bool:
    mcp = tools.mcp_parts(name)
    return mcp is not None and mcp[0] == tools.CLIENT_SERVER


def parsed_input(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def about_sign_in(said: str) -> bool:
    lowered = said.lower()
    return any(
        word in lowered
        for word in ("api key", "/login", "authentication", "401", "not logged in", "unauthorized")
    )


async def one_message(message: dict[str, Any]) -> Any:
    yield message
