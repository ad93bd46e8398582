"""``ahp claude status`` and ``ahp claude login``: the bundled CLI's own sign-in, run for real.

``pip install ahp-claude`` puts no ``claude`` on PATH, and the bundled CLI has no
``claude login``: these commands are how a user signs in the CLI the host runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

AHP = [sys.executable, "-m", "ahpcore.cli"]


def clean_env(tmp_path: Path, **variables: str) -> dict[str, str]:
    """No credentials anywhere: a fresh HOME, no key, no config folder of the user's."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "CLAUDE_", "AHP_")) and k != "BROWSER"
    }
    return {**env, "HOME": str(home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **variables}


def ahp(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AHP, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_status_without_credentials_says_to_run_ahp_claude_login(tmp_path):
    done = ahp("claude", "status", env=clean_env(tmp_path))
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("Claude Code is not signed in: run `ahp claude login`")
    assert "ANTHROPIC_API_KEY" in done.stdout


def test_status_with_a_key_says_where_the_sign_in_comes_from(tmp_path):
    done = ahp("claude", "status", env=clean_env(tmp_path, ANTHROPIC_API_KEY="sk-ant-dummy"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Claude Code is signed in (api_key from ANTHROPIC_API_KEY)")
    assert str(tmp_path / "home" / ".claude") in done.stdout
    assert "sk-ant-dummy" not in done.stdout


def test_the_claude_commands_come_from_the_plugin(tmp_path):
    listed = ahp("--help", env=clean_env(tmp_path))
    assert "claude" in listed.stdout
    done = ahp("claude", "status", env=clean_env(tmp_path, AHP_DISABLE_PLUGINS="claude"))
    assert done.returncode == 2
    assert "no command named 'claude'" in done.stderr


def test_login_runs_the_bundled_clis_sign_in(tmp_path):
    """The CLI's ``auth login`` runs and opens its sign-in page; nobody signs in, so the
    test stops it once the page was opened (no network: the "browser" only notes the
    address)."""
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$@" >> {opened}\n')
    browser.chmod(0o755)
    process = subprocess.Popen(
        [*AHP, "claude", "login", "--email", "someone@example.com"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(tmp_path, BROWSER=str(browser)),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not opened.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert opened.exists(), process.stderr.read() if process.poll() is not None else ""
        time.sleep(0.5)  # what the CLI prints beside opening the page
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    address = opened.read_text()
    assert "/oauth/authorize?" in address
    assert "login_hint=someone%40example.com" in address  # --email reached the CLI
    assert "Opening browser to sign in" in out, (out, err)
