"""``ahp serve`` refusing what it cannot do: one line, the right exit code, before any
token is printed; and what it prints and logs when it can."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

import anyio
import pytest
from websockets.asyncio.client import connect, unix_connect
from websockets.exceptions import InvalidStatus

from tests.test_cli import AHP, run_ahp, start_serve

STRONG = "k3y-for-tests-9f8e7d6c5b4a"


def refused(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and lines[0].startswith("ahp: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "token" not in done.stdout and "listening" not in done.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--port", "70000"], ["--port 70000", "65535"]),
        (["--port", "many"], ["--port"]),
        (["--log-level", "loud"], ["--log-level", "debug, info"]),
        (["--host", "no-such-host.invalid"], ["cannot resolve --host no-such-host.invalid"]),
        (["--token", "ab"], ["too weak", "16 characters"]),
        (["--token", "aaaaaaaaaaaaaaaaaaaaaaaa"], ["too weak"]),
        (["--plugins", "scriptd"], ["no plugin named scriptd", "installed: ", "scripted"]),
        (["--no-token", "--host", "0.0.0.0"], ["without a connection token"]),
        (["--bogus"], ["--bogus"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_usage_is_one_line_and_exit_2(tmp_path, args, words):
    refused(run_ahp("serve", "--state-dir", str(tmp_path / "s"), *args), 2, *words)


def test_a_weak_token_from_the_environment_is_refused(tmp_path):
    env = {**os.environ, "AHP_TOKEN": "short"}
    done = run_ahp("serve", "--state-dir", str(tmp_path), env=env)
    refused(done, 2, "AHP_TOKEN", "too weak")


def test_stdio_with_a_regular_file_on_stdin(tmp_path):
    stdin = tmp_path / "frames.txt"
    stdin.write_text('{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    with stdin.open() as handle:
        done = subprocess.run(
            [*AHP, "serve", "--stdio", "--state-dir", str(tmp_path / "s")],
            stdin=handle,
            capture_output=True,
            text=True,
            timeout=60,
        )
    refused(done, 2, "--stdio", "regular file")


def test_a_token_file_open_to_others_is_refused(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(STRONG)
    token_file.chmod(0o644)
    done = run_ahp("serve", "--state-dir", str(tmp_path / "s"), "--token-file", str(token_file))
    refused(done, 2, "open to other users", "chmod 600")


def test_a_port_in_use_is_a_runtime_failure(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_ahp("serve", "--port", str(port), "--state-dir", str(tmp_path / "s"))
    refused(done, 1, f"cannot listen on 127.0.0.1:{port}", "address already in use")
    assert "Traceback" not in done.stderr and "ExceptionGroup" not in done.stderr


def test_a_state_dir_that_cannot_be_made_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_ahp("serve", "--state-dir", str(blocker / "state"))
    refused(done, 1, "cannot use state folder", str(blocker / "state"))


def test_a_non_socket_file_at_socket_is_left_alone(tmp_path):
    occupied = tmp_path / "ahp.sock"
    occupied.write_text("mine")
    done = run_ahp("serve", "--state-dir", str(tmp_path / "s"), "--socket", str(occupied))
    refused(done, 2, "not a socket")
    assert occupied.read_text() == "mine"


def _ping(ident: int) -> str:
    return json.dumps(
        {"jsonrpc": "2.0", "id": ident, "method": "ping", "params": {"channel": "ahp-root://"}}
    )


@pytest.mark.anyio
async def test_a_second_instance_does_not_take_a_live_socket(tmp_path):
    path = tmp_path / "ahp.sock"
    first = start_serve(tmp_path, "--socket", str(path), "--sessions", "memory")
    try:
        done = await anyio.to_thread.run_sync(
            lambda: run_ahp(
                "serve", "--port", "0", "--state-dir", str(tmp_path / "s2"), "--socket", str(path)
            )
        )
        refused(done, 1, f"unix socket {path}", "another running host")
        async with unix_connect(str(path)) as ws:  # the first instance still has it
            await ws.send(_ping(1))
            assert json.loads(await ws.recv())["id"] == 1
    finally:
        first.process.send_signal(signal.SIGTERM)
        first.process.wait(30)


@pytest.mark.anyio
async def test_banner_token_file_and_log_hygiene(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(STRONG + "\n")
    token_file.chmod(0o600)
    served = start_serve(
        tmp_path, "--token-file", str(token_file), "--log-level", "debug", "--sessions", "memory"
    )
    try:
        assert served.token == STRONG
        async with connect(f"{served.url}?token={STRONG}") as ws:
            forged = "innocent\n2026-01-01 00:00:00,000 INFO ahp: FORGED admin logged in"
            await ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "channel": "ahp-root://",
                            "protocolVersions": ["1.0.0"],
                            "clientId": forged,
                        },
                    }
                )
            )
            assert "result" in json.loads(await ws.recv())
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "no\nsuch"}))
            assert json.loads(await ws.recv())["id"] == 2
    finally:
        served.process.send_signal(signal.SIGTERM)
        served.process.wait(30)
    stderr = served.process.stderr.read() if served.process.stderr else ""
    assert f"state in {tmp_path / 'state'}" in stderr
    assert "plugins: core " in stderr  # with its version
    assert "GET /?token=[redacted]" in stderr  # websockets' own debug line, redacted
    assert STRONG not in stderr
    assert not any(line.startswith("2026-01-01") for line in stderr.splitlines())
    assert "innocent\\n2026-01-01" in stderr


def test_origins_over_the_command_line_and_one_log_line_per_connection(tmp_path):
    served = start_serve(
        tmp_path, "--sessions", "memory", "--no-token", "--allow-origin", "https://app.example"
    )

    async def visit() -> None:
        for origin in (None, "https://app.example"):
            headers = {"Origin": origin} if origin else {}
            async with connect(served.url, additional_headers=headers) as ws:
                await ws.send(_ping(1))
                await ws.recv()
        with pytest.raises(InvalidStatus) as refused_page:
            await connect(served.url, additional_headers={"Origin": "https://evil.example"})
        assert refused_page.value.response.status_code == 403

    try:
        anyio.run(visit)
    finally:
        served.process.send_signal(signal.SIGTERM)
        served.process.wait(30)
    stderr = served.process.stderr.read() if served.process.stderr else ""
    assert "page https://evil.example (origin not allowed" in stderr
    # websockets' own "connection open" lines would repeat what the host logs per client.
    assert stderr.count("connected over ws") == 2
    assert "connection open" not in stderr and "connection closed" not in stderr


def test_version_flag_and_help():
    done = run_ahp("--version")
    assert done.returncode == 0 and done.stdout.startswith("ahp ")
    help_text = run_ahp("serve", "--help").stdout
    assert "<bool>" not in help_text
    assert "visible to" in help_text and "ps" in help_text and "--token-file" in help_text
    # Every option but --help names its environment variable and its default.
    blocks = help_text.split("\n  --")[1:]
    for block in blocks:
        block = " ".join(block.split())  # undo the wrapping
        name = block.split()[0]
        if name == "help":
            continue
        assert "env var: AHP_" in block, name
        assert "default:" in block, name


def test_the_store_kinds_the_command_offers_are_the_stores_there_are():
    from ahpcore import cli, store

    assert cli.STORE_KINDS == store.STORE_KINDS
