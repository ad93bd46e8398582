"""Suite-wide reporting: the official reducer fixtures' score is printed on every run."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import pytest

_WAIVERS = Path(__file__).parent / "protocol" / "reducer_fixture_skips.toml"

_OFFICIAL = "tests/protocol/test_reducer_fixtures.py::test_official_reducer_fixture"
_outcomes: Counter[str] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.nodeid.startswith(_OFFICIAL):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[report.outcome] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total = sum(_outcomes.values())
    if not total:
        return
    passed = _outcomes["passed"]
    waivers = tomllib.loads(_WAIVERS.read_text("utf-8")).get("fixtures", {}).values()
    partial = sum(1 for waiver in waivers if waiver.get("mode") == "ignore-fields")
    terminalreporter.write_line(
        f"official reducer fixtures: {passed} passed ({passed - partial} exactly, {partial} with "
        f"a field the 1.0 reducers changed left out), {_outcomes['skipped']} skipped, "
        f"{_outcomes['failed']} failed of {total} ({100 * passed / total:.1f}% pass without a skip)"
    )
