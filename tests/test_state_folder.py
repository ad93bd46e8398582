"""What ``ahp serve`` keeps in its state folder across starts: the connection token, and
the lock that lets one host at a time use the folder. Real processes, real files."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.test_cli import Served, run_ahp, start_serve
from tests.test_cli_errors import STRONG, refused

PING = json.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"channel": "ahp-root://"}}
)


def stop(served: Served) -> str:
    """SIGTERM, wait, and the host's stderr."""
    if served.process.poll() is None:
        served.process.send_signal(signal.SIGTERM)
    served.process.wait(30)
    return served.process.stderr.read() if served.process.stderr else ""


def ahp_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AHP_TOKEN", "AHP_TOKEN_FILE")}
    return {**env, **variables}


async def pinged(url: str) -> bool:
    """Whether a WebSocket handshake at ``url`` is let in (False on 401)."""
    try:
        async with connect(url) as ws:
            await ws.send(PING)
            return json.loads(await ws.recv())["id"] == 1
    except InvalidStatus as refusal:
        assert refusal.response.status_code == 401
        return False


# -- the stored token -------------------------------------------------------------------


def test_two_starts_on_one_state_folder_print_the_same_token(tmp_path):
    first = start_serve(tmp_path, "--no-plugins")
    stop(first)
    second = start_serve(tmp_path, "--no-plugins")
    stop(second)
    assert first.token and first.token == second.token
    path = tmp_path / "state" / "connection-token"
    assert path.read_text().strip() == first.token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    shown = run_ahp("token", "--state-dir", str(tmp_path / "state"), env=ahp_env())
    assert shown.returncode == 0 and shown.stdout == f"{first.token}\n", shown.stderr


def test_ahp_token_makes_the_token_a_later_start_uses(tmp_path):
    state = tmp_path / "state"
    made = run_ahp("token", env=ahp_env(AHP_STATE_DIR=str(state)))
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE((state / "connection-token").stat().st_mode) == 0o600
    served = start_serve(tmp_path, "--no-plugins", "--sessions", "memory")
    stop(served)
    assert served.token == made.stdout.strip()


@pytest.mark.anyio
async def test_rotate_replaces_the_token_and_a_running_host_takes_it(tmp_path):
    served = start_serve(tmp_path, "--no-plugins")
    try:
        old = served.token
        assert await pinged(f"{served.url}?token={old}")
        rotated = await anyio.to_thread.run_sync(
            lambda: run_ahp("token", "--rotate", "--state-dir", str(tmp_path / "state"))
        )
        new = rotated.stdout.strip()
        assert rotated.returncode == 0 and new and new != old, rotated.stderr
        assert "new connections" in rotated.stderr
        path = tmp_path / "state" / "connection-token"
        assert path.read_text().strip() == new and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert not await pinged(f"{served.url}?token={old}")
        assert await pinged(f"{served.url}?token={new}")
    finally:
        stderr = stop(served)
    assert "the connection token changed" in stderr
    assert old not in stderr and new not in stderr
    again = start_serve(tmp_path, "--no-plugins")
    stop(again)
    assert again.token == new


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["AHP_TOKEN", "--token-file", "--token"])
async def test_a_chosen_token_wins_over_the_stored_one(tmp_path, monkeypatch, how):
    stored = run_ahp("token", "--state-dir", str(tmp_path / "state"), env=ahp_env()).stdout.strip()
    token_file = tmp_path / "chosen"
    token_file.write_text(STRONG)
    token_file.chmod(0o600)
    extra = {"--token-file": [how, str(token_file)], "--token": [how, STRONG]}.get(how, [])
    if how == "AHP_TOKEN":
        monkeypatch.setenv("AHP_TOKEN", STRONG)  # start_serve passes this environment on
    served = start_serve(tmp_path, "--no-plugins", *extra)
    try:
        assert served.token == STRONG
        assert await pinged(f"{served.url}?token={STRONG}")
        assert not await pinged(f"{served.url}?token={stored}")
    finally:
        stderr = stop(served)
    assert "token kept in" not in stderr
    assert (tmp_path / "state" / "connection-token").read_text().strip() == stored


def test_no_token_stores_none(tmp_path):
    stop(start_serve(tmp_path, "--no-plugins", "--no-token"))
    assert not (tmp_path / "state" / "connection-token").exists()


def test_a_stored_token_open_to_others_is_refused(tmp_path):
    state = tmp_path / "state"
    assert run_ahp("token", "--state-dir", str(state), env=ahp_env()).returncode == 0
    (state / "connection-token").chmod(0o644)
    done = run_ahp("serve", "--port", "0", "--state-dir", str(state), env=ahp_env())
    refused(done, 1, "open to other users", "ahp token --rotate")
    shown = run_ahp("token", "--state-dir", str(state), env=ahp_env())
    assert shown.returncode == 1 and "open to other users" in shown.stderr and not shown.stdout
    assert run_ahp("token", "--rotate", "--state-dir", str(state), env=ahp_env()).returncode == 0
    assert stat.S_IMODE((state / "connection-token").stat().st_mode) == 0o600


def test_ahp_token_says_when_the_environment_chooses_another(tmp_path):
    done = run_ahp("token", "--state-dir", str(tmp_path), env=ahp_env(AHP_TOKEN=STRONG))
    assert done.returncode == 0 and STRONG not in done.stdout
    assert "AHP_TOKEN" in done.stderr


# -- one host per state folder ----------------------------------------------------------


def serve_beside(state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_ahp("serve", "--port", "0", "--state-dir", str(state), *extra)


@pytest.mark.anyio
async def test_a_second_host_on_a_state_folder_is_refused_naming_the_first(tmp_path):
    first = start_serve(tmp_path, "--no-plugins")
    try:
        done = await anyio.to_thread.run_sync(lambda: serve_beside(tmp_path / "state"))
        refused(done, 1, "in use by another host", f"pid {first.process.pid}", first.url)
        assert "unclean stop" not in done.stderr
        assert await pinged(f"{first.url}?token={first.token}")  # the first is untouched
    finally:
        stop(first)


@pytest.mark.anyio
async def test_the_lock_of_a_killed_host_is_free(tmp_path):
    first = start_serve(tmp_path, "--no-plugins")
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)
    second = start_serve(tmp_path, "--no-plugins")
    try:
        assert await pinged(f"{second.url}?token={second.token}")
        record = json.loads((tmp_path / "state" / "host.lock").read_text())
        assert record == {"pid": second.process.pid, "address": second.url}
    finally:
        stop(second)
    assert second.token == first.token


def test_hosts_without_the_file_store_run_side_by_side(tmp_path):
    first = start_serve(tmp_path, "--no-plugins", "--sessions", "memory")
    try:
        second = start_serve(tmp_path, "--no-plugins", "--sessions", "memory")
        stop(second)
        assert second.token == first.token
    finally:
        stop(first)
