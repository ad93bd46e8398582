"""The Claude backend, running the real Claude Code CLI on the scripted API, passes the
backend conformance suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from anthropic_server import AnthropicServer, Hold, Text, reply

from ahpcore.testing import BackendUnderTest, HostFactory, backend_checks

pytestmark = pytest.mark.anyio


@backend_checks()
async def test_claude_conformance(
    check: Any, claude_hosts: HostFactory, anthropic: AnthropicServer, tmp_path: Path
) -> None:
    # Anything else is answered with text; "slow" streams until the turn is cancelled.
    anthropic.script(reply(Text("Working on it, slowly", hold=Hold()), match="slow"))
    claude = BackendUnderTest(
        provider="claude", host=claude_hosts, prompt="hello", slow_prompt="slow"
    )
    await check(claude, tmp_path)
