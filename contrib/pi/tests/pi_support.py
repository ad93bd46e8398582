"""The real pi CLI against a scripted Anthropic Messages API, and a host whose ``pi``
plugin runs it; what the tests do as a client.

pi is found as the plugin finds it (``AHP_PI_COMMAND``, then ``pi`` on ``PATH``), or
in ``.venv/node``, where ``.ci/run`` installs it. The scripted API is the one the
Claude backend's tests drive Claude Code with (``plugins/claude/tests``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import ahp_pi.plugin
from ahp_pi.backend import PiBackend
from ahp_pi.command import pi_command
from ahpcore.testing import AhpTestClient, RunningHost, host_factory

# Shared with the other backends' tests; named here for this suite's test modules.
from ahpcore.testing import chat_state as chat_state
from ahpcore.testing import is_action as is_action

ROOT = Path(__file__).resolve().parents[3]
CLAUDE_TESTS = ROOT / "plugins" / "claude" / "tests"
if str(CLAUDE_TESTS) not in sys.path:
    sys.path.append(str(CLAUDE_TESTS))

from anthropic_server import MODEL, AnthropicServer, Hold, Text, ToolUse, reply  # noqa: E402

__all__ = ["MODEL", "AnthropicServer", "Hold", "Text", "ToolUse", "reply"]

PROVIDER = "pi"
SID = "00000000-0000-4000-8000-0000000000{:02d}"
INSTALLED = ROOT / ".venv" / "node" / "node_modules" / ".bin" / "pi"


def find_pi() -> tuple[list[str] | None, str]:
    """pi's command line, or None and why it is not here."""
    if shutil.which("node") is None:
        return None, "node is not installed (pi runs on Node.js)"
    found = pi_command()
    if found is not None:
        return found, ""
    if INSTALLED.exists():
        return [str(INSTALLED)], ""
    return None, (
        "pi is not installed: `npm install --prefix .venv/node "
        "@mariozechner/pi-coding-agent` (as .ci/run does), or set AHP_PI_COMMAND"
    )


def write_models(agent_dir: Path, url: str) -> None:
    """pi's models file sending its Anthropic provider to the scripted API."""
    agent_dir.mkdir(parents=True, exist_ok=True)
    (agent_dir / "models.json").write_text(
        json.dumps({"providers": {"anthropic": {"baseUrl": url}}}), encoding="utf-8"
    )


pi_host = host_factory([("pi", ahp_pi.plugin)])


def backend_of(running: RunningHost) -> PiBackend:
    backend = running.host.backends[PROVIDER]
    assert isinstance(backend, PiBackend)
    return backend


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
    running: RunningHost, workdir: Path, n: int = 1
) -> tuple[AhpTestClient, str, str]:
    client = await running.connect("c1")
    await client.initialize()
    session, chat = await open_session(client, workdir, n)
    return client, session, chat


async def start_turn(client: AhpTestClient, chat: str, text: str, turn_id: str) -> None:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-30T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    await client.answer_to(seq)


async def turn_end(client: AhpTestClient, chat: str, timeout: float = 60) -> dict[str, Any]:
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and "rejectionReason" not in f["params"]
            and f["params"]["action"]["type"]
            in ("chat/turnComplete", "chat/turnCancelled", "chat/error")
        ),
        timeout=timeout,
    )
    return dict(frame["params"]["action"])


def parts(state: dict[str, Any], turn: int = -1) -> list[dict[str, Any]]:
    return list(state["turns"][turn]["responseParts"])
