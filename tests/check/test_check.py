"""``ahp check`` against this host (it passes) and against fake hosts with one fault each
(the family that judges the fault fails, and says what it found)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree

import anyio
import pytest
import typer
from typer.testing import CliRunner

from ahpcore.check.cli import register
from ahpcore.check.results import CheckResult
from ahpcore.check.runner import CHECK_NAMES, Options, run_checks
from ahpcore.host import HostSettings
from ahpcore.testing import running_host
from tests.check.fakehost import fake_host

pytestmark = pytest.mark.anyio

#: Short bounds: every host here answers at once, or (on purpose) never.
QUICK = {"timeout": 3.0, "turn_timeout": 10.0}


def by_name(results: Sequence[CheckResult]) -> dict[str, CheckResult]:
    return {result.name: result for result in results}


def failures(results: Sequence[CheckResult]) -> dict[str, str]:
    return {r.name: r.detail for r in results if r.status == "fail"}


async def check(url: str, token: str | None = None, **options: float | str) -> list[CheckResult]:
    merged = {**QUICK, **options}
    return await run_checks(Options(url=url, token=token, **merged))  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# this host


async def test_this_host_with_the_demo_agent_passes_every_check(tmp_path: Path):
    from ahp_scripted import plugin as scripted_plugin

    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path)
    async with running_host(
        [("scripted", scripted_plugin)], settings=settings, token="check-token-5f0c2a9e"
    ) as running:
        results = await check(running.url, token="check-token-5f0c2a9e")
    assert [r.name for r in results] == list(CHECK_NAMES)
    assert failures(results) == {}
    skipped = {r.name: r.detail for r in results if r.status == "skip"}
    assert skipped == {}, skipped
    found = by_name(results)
    assert "cancelled" in found["agent.cancel"].detail
    assert "replayed 2 missed action(s)" in found["reconnect.replay"].detail


async def test_this_host_without_agents_skips_what_needs_one_and_fails_nothing(tmp_path: Path):
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path)
    async with running_host((), settings=settings) as running:
        results = await check(running.url)
    assert failures(results) == {}
    found = by_name(results)
    assert found["agent.offered"].status == "skip"
    assert found["agent.offered"].detail == "the host offers no agent"
    for name in ("agent.turn", "agent.cancel", "subscribe.unsubscribe-isolation"):
        assert found[name].status == "skip"
        assert "the host offers no agent" in found[name].detail
    assert found["reconnect.replay"].status == "pass"
    assert found["frames.strict"].status == "pass"


async def test_a_wrong_token_fails_the_connection_and_skips_the_rest(tmp_path: Path):
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path)
    async with running_host((), settings=settings, token="right-token-8e1d77b3") as running:
        results = await check(running.url, token="wrong-token-00000000")
    found = by_name(results)
    assert found["handshake.connect"].status == "fail"
    assert "HTTP 401" in found["handshake.connect"].detail
    assert "--token" in found["handshake.connect"].detail
    assert found["frames.strict"].status == "skip"


# --------------------------------------------------------------------------
# the fake host, sound and broken


async def test_the_sound_fake_host_passes_every_check():
    """The baseline the fault tests stand on: without a fault, the fake passes."""
    async with fake_host() as host:
        results = await check(host.url)
    assert failures(results) == {}
    assert [r.name for r in results if r.status == "skip"] == []


@pytest.mark.parametrize(
    ("fault", "family", "failing", "named"),
    [
        (
            "unsupported-version-accepted",
            "handshake",
            "handshake.unsupported-version",
            "expected error -32005",
        ),
        ("unknown-method-code", "errors", "errors.unknown-method", "answered error -32600"),
        ("extra-field", "frames", "frames.strict", "$.result.bogus: unknown_key"),
        ("seq-backwards", "subscribe", "subscribe.server-seq", "serverSeq went back from"),
        (
            "replay-disagrees",
            "replay",
            "replay.agrees",
            '.responseParts[0].content: "Other words." after the replay',
        ),
        ("replay-stale", "reconnect", "reconnect.replay", "is not after lastSeenServerSeq"),
        (
            "leaky-unsubscribe",
            "subscribe",
            "subscribe.unsubscribe-isolation",
            "unsubscribed from ahp-session:/",
        ),
        ("turn-never-ends", "agent", "agent.turn", "the turn did not end within 2s"),
    ],
)
async def test_a_broken_host_fails_the_check_that_judges_its_fault(
    fault: str, family: str, failing: str, named: str
):
    async with fake_host(fault) as host:
        results = await check(host.url, turn_timeout=2.0)
    failed = failures(results)
    assert failing in failed, f"{failing} did not fail: {by_name(results)[failing]}"
    assert named in failed[failing]
    # Only that family fails: the fault is named where it belongs, nowhere else.
    assert {name.partition(".")[0] for name in failed} == {family}, failed


async def test_a_host_that_never_answers_fails_quickly_instead_of_hanging():
    async with fake_host("silent") as host:
        started = time.monotonic()
        results = await check(host.url, timeout=0.5, turn_timeout=0.5)
        took = time.monotonic() - started
    found = by_name(results)
    assert found["handshake.connect"].status == "pass"
    assert found["handshake.initialize"].status == "fail"
    assert "waited 0.5s for an answer to initialize" in found["handshake.initialize"].detail
    assert found["agent.turn"].status == "skip"
    assert took < 15


async def test_a_host_that_is_not_there_fails_the_connection():
    with anyio.fail_after(20):
        results = await check("ws://127.0.0.1:9/", timeout=1.0)
    found = by_name(results)
    assert found["handshake.connect"].status == "fail"
    assert "cannot connect" in found["handshake.connect"].detail


# --------------------------------------------------------------------------
# the command


def command_app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)  # a group, so the command is called by its name
    register(app)
    return app


async def invoke(*args: str) -> tuple[int, str]:
    def run() -> tuple[int, str]:
        outcome = CliRunner().invoke(command_app(), list(args))
        return outcome.exit_code, outcome.output

    return await anyio.to_thread.run_sync(run)


async def test_the_command_prints_a_table_and_exits_0_when_nothing_fails():
    async with fake_host() as host:
        code, output = await invoke("check", host.url, "--timeout", "3", "--turn-timeout", "10")
    assert code == 0, output
    assert f"ahp check {host.url}" in output
    assert "pass  handshake.initialize" in output
    assert output.rstrip().endswith(f"{len(CHECK_NAMES)} passed, 0 failed, 0 skipped")


async def test_the_command_writes_json_and_junit_and_exits_1_on_a_failure(tmp_path: Path):
    report = tmp_path / "report.xml"
    async with fake_host("unknown-method-code") as host:
        code, output = await invoke(
            "check", host.url, "--json", "--junit", str(report), "--timeout", "3"
        )
    assert code == 1
    document = json.loads(output)
    assert document["ok"] is False
    assert [entry["name"] for entry in document["checks"]] == list(CHECK_NAMES)
    assert all(set(entry) >= {"name", "status", "detail"} for entry in document["checks"])
    failed = [entry for entry in document["checks"] if entry["status"] == "fail"]
    assert [entry["name"] for entry in failed] == ["errors.unknown-method"]
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == str(len(CHECK_NAMES))
    assert suite.get("failures") == "1"
    (case,) = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert case.get("name") == "errors.unknown-method"
    assert case.get("classname") == "ahp.check.errors"


async def test_the_command_refuses_an_address_that_is_not_a_websocket():
    code, output = await invoke("check", "http://127.0.0.1:1/")
    assert code == 2
    assert "is not a ws:// or wss:// address" in output
