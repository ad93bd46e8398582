"""The backend conformance suite, run against the real pi CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pi_support import PROVIDER, AnthropicServer, Hold, Text, pi_host, reply

from ahpcore.testing import BackendUnderTest, backend_checks

pytestmark = pytest.mark.anyio

PI = BackendUnderTest(provider=PROVIDER, host=pi_host, prompt="hello", slow_prompt="slow")


@backend_checks()
async def test_pi_conformance(check: Any, pi: Path, api: AnthropicServer, tmp_path: Path) -> None:
    # Anything else is answered with text; "slow" streams until the turn is cancelled.
    api.script(reply(Text("Working on it, slowly", hold=Hold()), match="slow"))
    await check(PI, tmp_path)
