"""Suite-wide reporting: the official reducer fixtures' score is printed on every run."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import pytest

_WAIVERS = Path(__file__).parent / "protocol" / "reducer_fixture_skips.toml"

_OFFICIAL = "tests/protocol/test_reducer_fixtures.py::test_official_reducer_fixture"
_outcomes: Counter[str] = Counter()
#: Fixture file names of the official cases that passed.
_passed_names: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.nodeid.startswith(_OFFICIAL):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[report.outcome] += 1
        if report.when == "call" and report.passed:
            _passed_names.add(report.nodeid.rsplit("[", 1)[-1].rstrip("]"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total = sum(_outcomes.values())
    if not total:
        return
    terminalreporter.write_line(summary_line(_outcomes, _passed_names))


def summary_line(outcomes: Counter[str], passed_names: set[str]) -> str:
    """The score line; counts only cases that ran, so none can come out negative."""
    total = sum(outcomes.values())
    passed = outcomes["passed"]
    waivers = tomllib.loads(_WAIVERS.read_text("utf-8")).get("fixtures", {})
    partial = sum(
        1
        for name, waiver in waivers.items()
        if waiver.get("mode") == "ignore-fields" and name in passed_names
    )
    if passed == 0 and outcomes["failed"] == 0:
        return f"official reducer fixtures: none ran ({outcomes['skipped']} skipped of {total})"
    return (
        f"official reducer fixtures: {passed} passed ({passed - partial} exactly, {partial} with "
        f"a field the 1.0 reducers changed left out), {outcomes['skipped']} skipped, "
        f"{outcomes['failed']} failed of {total} ({100 * passed / total:.1f}% pass without a skip)"
    )


@pytest.fixture(autouse=True)
def _no_claude_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts these tests start (in process or as ``ahp serve``) load every installed plugin;
    the Claude backend would start a CLI against the real home folder to learn its models.
    Its own tests, under plugins/claude, drive the probe and the watcher on purpose."""
    monkeypatch.setenv("AHP_CLAUDE_PROBE", "0")
    monkeypatch.setenv("AHP_CLAUDE_WATCH", "0")
