"""``ahp serve --tls-cert/--tls-key``: wss:// over a real socket, and the warning without it."""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect

pytestmark = pytest.mark.anyio

AHP = [sys.executable, "-m", "ahpcore.cli"]
TOKEN = "tls-deployment-token-0123456789abcdef"


def make_certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    key.chmod(0o600)
    return cert, key


def environment(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "AHP_TOKEN": TOKEN, "AHP_STATE_DIR": str(tmp_path / "state")}


async def test_serve_speaks_wss_with_a_certificate(tmp_path):
    cert, key = make_certificate(tmp_path)
    process = subprocess.Popen(
        [*AHP, "serve", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(tmp_path),
    )
    assert process.stdout is not None
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "ahp serve exited early"
            if match := re.search(r"listening on (\S+)", line):
                url = match.group(1)
        assert url is not None and url.startswith("wss://127.0.0.1:"), url
        trusted = ssl.create_default_context(cafile=str(cert))
        with anyio.fail_after(20):
            async with connect(f"{url}?token={TOKEN}", ssl=trusted) as ws:
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
                assert json.loads(await ws.recv())["id"] == 1
            # the same port does not speak plain ws://
            with pytest.raises(Exception):  # noqa: B017 - a reset or a bad handshake, either
                async with connect(f"ws://{url.removeprefix('wss://')}?token={TOKEN}"):
                    pass
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
    assert key.read_text() not in out + err


def test_a_certificate_without_its_key_is_refused(tmp_path):
    cert, _ = make_certificate(tmp_path)
    done = subprocess.run(
        [*AHP, "serve", "--port", "0", "--tls-cert", str(cert)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(tmp_path),
    )
    assert done.returncode != 0
    assert "give both --tls-cert and --tls-key" in done.stderr


def test_binding_off_loopback_without_tls_warns_once(tmp_path):
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails after the
    # warning, so nothing listens beyond loopback.
    done = subprocess.run(
        [*AHP, "serve", "--port", "0", "--host", "192.0.2.1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(tmp_path),
    )
    warned = [line for line in done.stderr.splitlines() if "travel in clear" in line]
    assert len(warned) == 1, done.stderr
    assert done.returncode != 0
