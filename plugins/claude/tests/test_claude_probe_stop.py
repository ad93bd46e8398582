"""A host stopped while its boot probe asks the CLI: the probe ends with the host, quietly,
before the host says it stopped, and its child prints no warning of its own start."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ahp_claude.probe import run_probe

AHP = [sys.executable, "-m", "ahpcore.cli"]


def _children(pid: int) -> list[tuple[int, str]]:
    """The ids and command lines of ``pid``'s children (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append((int(entry.name), cmdline))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _with_home(home: str) -> list[int]:
    """Processes whose environment has this HOME: the probe's child, its guard, its CLI."""
    marker = f"HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@pytest.mark.parametrize(
    ("signum", "whole_group"),
    [
        (signal.SIGINT, False),  # ahp serve's own stop
        (signal.SIGINT, True),  # Ctrl-C in a terminal: the whole foreground group
        (signal.SIGTERM, True),  # a service manager stopping the group
    ],
    ids=["sigint", "ctrl-c", "group-sigterm"],
)
def test_a_host_stopped_while_its_boot_probe_asks_says_nothing_after_ahp_stopped(
    tmp_path: Path, claude_env: dict[str, str], signum: int, whole_group: bool
):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AHP_", "ANTHROPIC_"))}
    env.update(claude_env, AHP_CLAUDE_WATCH="0", AHP_LOG_LEVEL="debug")
    process = subprocess.Popen(
        [*AHP, "serve", "--port", "0", "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "AHP_PLUGINS": "claude"},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any("ahp_claude.probe" in cmd for _, cmd in _children(process.pid)):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the boot probe never started"
            time.sleep(0.05)
        time.sleep(0.5)  # the probe's child is under way, its CLI not yet asked
        if whole_group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, err
    assert "RuntimeWarning" not in err
    assert "ahp stopped\n" in err, err
    before, after = err.split("ahp stopped\n", 1)
    assert after == "", err
    # The probe ended before the host said it stopped: stopped by it, or by the signal
    # that reached the whole group. Either way it did not fail.
    if whole_group:
        assert "boot probe stopped with its backend" in before or "ended on signal" in before
    else:
        assert "the Claude boot probe stopped with its backend" in before, err
    assert "could not be asked" not in err
    # Nothing the probe started outlives the host (its CLI's guard stops it).
    deadline = time.monotonic() + 10
    while (left := _with_home(claude_env["HOME"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left


def test_a_probe_whose_child_is_killed_neither_warns_nor_calls_it_a_failure(
    tmp_path: Path, claude_env: dict[str, str], caplog: pytest.LogCaptureFixture
):
    """The same, without a host: the child's stderr once held only Python's RuntimeWarning
    about how it was started, which the probe then logged as why it failed."""
    caplog.set_level(logging.DEBUG, logger="ahp_claude.probe")
    answers: list[dict[str, Any]] = []
    thread = run_probe(claude_env, str(tmp_path), answers.append, delay=0)
    deadline = time.monotonic() + 30
    while not (probes := [p for p in _children(os.getpid()) if "ahp_claude.probe" in p[1]]):
        assert time.monotonic() < deadline, "the probe's child never started"
        time.sleep(0.05)
    time.sleep(0.5)  # past its start, where the warning was printed
    os.kill(probes[0][0], signal.SIGTERM)
    thread.join(30)
    assert not thread.is_alive() and answers == []
    said = "\n".join(record.getMessage() for record in caplog.records)
    assert "RuntimeWarning" not in said
    assert "could not be asked" not in said
    assert "ended on signal 15" in said
