"""The scripted backend (its demo script) passes the backend conformance suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ahp_scripted.plugin
from ahpcore.host import HostSettings
from ahpcore.testing import BackendUnderTest, backend_checks, running_host

pytestmark = pytest.mark.anyio


def scripted_host(state_dir: Path) -> Any:
    settings = HostSettings(sessions="file", port=0, state_dir=state_dir)
    return running_host([("scripted", ahp_scripted.plugin)], settings=settings)


SCRIPTED = BackendUnderTest(
    provider="scripted", host=scripted_host, prompt="help", slow_prompt="slow"
)


@backend_checks()
async def test_scripted_conformance(check: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("AHP_SCRIPTED_SCRIPT", raising=False)
    await check(SCRIPTED, tmp_path)
