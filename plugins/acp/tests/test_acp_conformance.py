"""The acp backend, running the fake ACP agent, passes the backend conformance suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acp_support import PROVIDER, acp_host

from ahpcore.testing import BackendUnderTest, backend_checks

pytestmark = pytest.mark.anyio

FAKE = BackendUnderTest(provider=PROVIDER, host=acp_host, prompt="hello", slow_prompt="slow")


@backend_checks()
async def test_acp_conformance(check: Any, fake_agent: Path, tmp_path: Path) -> None:
    await check(FAKE, tmp_path)
