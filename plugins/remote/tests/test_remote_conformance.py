"""The remote backend, relaying a child host's scripted agent, passes the backend conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from remote_support import MACHINE, PROVIDER, inner_command, machines_env, outer_host

from ahpcore.testing import BackendUnderTest, RunningHost, backend_checks

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def remote_host(state_dir: Path) -> AsyncIterator[RunningHost]:
    # The machine's state sits beside this host's, so a restart here finds it there again.
    async with outer_host(state_dir) as running:
        yield running


SUBJECT = BackendUnderTest(provider=PROVIDER, host=remote_host, prompt="hello", slow_prompt="long")


@backend_checks()
async def test_remote_conformance(
    check: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = inner_command(tmp_path / "machine-state")
    monkeypatch.setenv("AHP_REMOTE_MACHINES", machines_env(**{MACHINE: {"command": inner}}))
    await check(SUBJECT, tmp_path)
