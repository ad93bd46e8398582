"""Markers of the automations tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # The real-clock test waits for the next minute: up to a minute of wall time.
    config.addinivalue_line("markers", "slow: waits on the real clock (deselect: -m 'not slow')")
