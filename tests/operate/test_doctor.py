"""``ahp doctor``: one line a check, ✓ or ✗ with the fix, and exit 1 when any fails."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ahpcore import __version__
from tests.operate.running import Serving, run_ahp, serve


def doctor_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with no sign-in, no token and a home of its own."""
    env = {**os.environ, "HOME": str(home), "SHELL": "/bin/sh", "PYTHONIOENCODING": "utf-8"}
    for name in (
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CONFIG_DIR",
        "AHP_TOKEN",
        "AHP_TOKEN_FILE",
        "AHP_NO_TOKEN",
        "AHP_PLUGINS",
        "AHP_DISABLE_PLUGINS",
        "AHP_STATE_DIR",
        "AHP_HOST",
        "AHP_PORT",
    ):
        env.pop(name, None)
    env.update(extra)
    return env


@pytest.fixture
def free_port() -> Iterator[int]:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    yield port


def doctor(state: Path, port: int, env: dict[str, str], *args: str) -> Any:
    return run_ahp(
        "doctor", "--state-dir", str(state), "--port", str(port), *args, env=env
    )  # fmt: skip


def checks(done: Any) -> dict[str, dict[str, Any]]:
    payload = json.loads(done.stdout)
    assert payload["ok"] == (done.returncode == 0)
    return {check["name"]: check for check in payload["checks"]}


def test_a_healthy_setup_passes_every_check(tmp_path: Path, free_port: int) -> None:
    state = tmp_path / "state"
    env = doctor_env(tmp_path, ANTHROPIC_API_KEY="sk-test-not-a-real-key")
    done = doctor(state, free_port, env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"✓ ahp {__version__}"
    assert lines[1].startswith("✓ Python 3.")
    assert "✓ plugin core" in done.stdout and "✓ plugin claude" in done.stdout
    assert f"✓ state folder {state} (made, owner-only, at first start)" in lines
    assert f"✓ a token is made at first start and kept in {state / 'connection-token'}" in lines
    assert "✓ Claude: signed in with ANTHROPIC_API_KEY from the environment" in lines
    assert "sk-test" not in done.stdout  # the key is named, never shown
    assert "✓ shell /bin/sh (SHELL): terminals and !commands run it" in lines
    assert f"✓ 127.0.0.1:{free_port} is free" in lines
    assert lines[-1] == "no problems found"
    assert not state.exists()  # looking made nothing


def test_each_failure_is_a_cross_with_its_fix_and_exit_1(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o755)
    token = state / "connection-token"
    token.write_text("a-stored-token-of-enough-length\n")
    token.chmod(0o644)
    env = doctor_env(tmp_path, SHELL="/nonexistent/shell")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        done = doctor(state, taken.getsockname()[1], env)
        as_json = checks(doctor(state, taken.getsockname()[1], env, "--json"))
    finally:
        taken.close()
    assert done.returncode == 1
    out = done.stdout
    assert (
        f"✗ state folder {state} is open to other users (mode 755); it holds conversations and "
        f"the connection token\n  fix: chmod 700 {state}\n"
    ) in out
    assert "✓ no host is running on the state folder\n" in out
    assert (
        f"✗ the stored token {token} is open to other users (mode 644), who may know it\n"
        "  fix: ahp token --rotate\n"
    ) in out
    assert (
        f"✗ Claude: not signed in (no ANTHROPIC_API_KEY, no {tmp_path / '.claude/.credentials.json'}"
        "); its turns will fail\n  fix: run `ahp claude login`"
    ) in out
    assert "✗ shell /nonexistent/shell (SHELL) is not a program that can be run\n" in out
    assert "is taken by another program\n  fix: stop it, or serve on another port" in out
    assert out.splitlines()[-1] == "5 problem(s) found"
    assert {name for name, check in as_json.items() if not check["ok"]} == {
        "state folder",
        "token",
        "claude sign-in",
        "shell",
        "port",
    }
    assert all(check["fix"] for check in as_json.values() if not check["ok"])


def test_the_claude_credentials_file_counts_as_a_sign_in(tmp_path: Path, free_port: int) -> None:
    config = tmp_path / "claude-config"
    config.mkdir()
    (config / ".credentials.json").write_text("{}")
    env = doctor_env(tmp_path, CLAUDE_CONFIG_DIR=str(config))
    found = checks(doctor(tmp_path / "state", free_port, env, "--json"))
    assert found["claude sign-in"] == {
        "name": "claude sign-in",
        "ok": True,
        "said": f"Claude: signed in (credentials in {config / '.credentials.json'})",
        "fix": None,
    }


def test_a_plugin_left_out_is_not_asked(tmp_path: Path, free_port: int) -> None:
    env = doctor_env(tmp_path, AHP_DISABLE_PLUGINS="claude")
    found = checks(doctor(tmp_path / "state", free_port, env, "--json"))
    assert "claude sign-in" not in found and "plugin claude" not in found


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Serving]:
    served = serve(tmp_path / "state", "--no-plugins")
    try:
        yield served
    finally:
        served.stop()


def test_a_running_host_holds_the_lock_and_its_port_is_not_a_problem(
    running: Serving, tmp_path: Path
) -> None:
    port = int(running.url.rsplit(":", 1)[1].strip("/"))
    env = doctor_env(tmp_path, ANTHROPIC_API_KEY="sk-test-not-a-real-key")
    found = checks(doctor(tmp_path / "state", port, env, "--json"))
    assert found["lock"]["said"] == (
        f"a host is running on the state folder (pid {running.process.pid}, "
        f"listening on {running.url})"
    )
    assert found["port"] == {
        "name": "port",
        "ok": True,
        "said": f"127.0.0.1:{port} is taken by a running ahp host ({__version__})",
        "fix": None,
    }
    assert found["token"]["said"] == (
        f"token kept in {tmp_path / 'state' / 'connection-token'} (ahp token prints it)"
    )
    mode = stat.S_IMODE((tmp_path / "state").stat().st_mode)
    assert found["state folder"]["ok"] is (mode & 0o077 == 0)
