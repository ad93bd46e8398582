"""A real ``ahp serve`` keeps its log in the state folder with no ``--log-file``: the
window collects it, and ``ahp logs`` prints where it is and its last lines."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import zipfile
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from ahp_vscode.debuglogs import COLLECT, READ
from ahpcore.logs import REDACTED, tail

pytestmark = pytest.mark.anyio
SECRET = "leak-me-not-0123456789"


def ahp(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ahpcore.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
        **kwargs,
    )


class Rpc:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws, self.next_id = ws, 0

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        ask: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            ask["params"] = params
        await self.ws.send(json.dumps(ask))
        with anyio.fail_after(30):
            while True:
                frame = json.loads(await self.ws.recv())
                if frame.get("id") == self.next_id:
                    assert "error" not in frame, frame
                    return frame["result"]


async def test_the_state_folder_log_is_collected_redacted_and_tailed(tmp_path):
    state = tmp_path / "state"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "ahpcore.cli", "serve", "--port", "0", "--no-token"),
            *("--plugins", "vscode", "--state-dir", str(state), "--sessions", "memory"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "AHP_LOG_FILE"},
    )
    log_path = state / "logs" / "ahp.log"
    try:
        assert process.stdout is not None
        url = None
        with anyio.fail_after(60):
            while url is None:
                line = await anyio.to_thread.run_sync(process.stdout.readline)
                assert line, "ahp serve exited early"
                if match := re.search(r"listening on (ws://\S+)", line):
                    url = match.group(1)
        async with connect(url) as ws:
            rpc = Rpc(ws)
            # A channel that is not there is logged with its name, token and all.
            hello = {
                "channel": "ahp-root://",
                "protocolVersions": ["1.0.0"],
                "clientId": "window",
                "initialSubscriptions": [f"ahp-session:/nothing?token={SECRET}"],
            }
            await rpc.request("initialize", hello)
            on_disk = log_path.read_text("utf-8")
            assert "not subscribed" in on_disk and REDACTED in on_disk
            assert SECRET not in on_disk
            assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
            result = await rpc.request(COLLECT, {"kind": "archive"})
            data, position = b"", 0
            for _ in range(100):
                chunk = await rpc.request(
                    READ, {"resource": result["resource"], "position": position}
                )
                piece = base64.b64decode(chunk["data"])
                data, position = data + piece, position + len(piece)
                if chunk["eof"]:
                    break
            bundled = zipfile.ZipFile(io.BytesIO(data)).read("ahp.log").decode("utf-8")
            assert bundled.startswith(on_disk) and SECRET not in bundled
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.stderr is not None
    assert f"log in {log_path}" in process.stderr.read()
    shown = ahp("logs", "--state-dir", str(state), "-n", "3")
    assert shown.returncode == 0, shown.stderr
    assert f"log in {log_path}" in shown.stderr
    assert shown.stdout.splitlines() == log_path.read_text("utf-8").splitlines()[-3:]
    only = ahp("logs", "--path", "--state-dir", str(state))
    assert only.stdout.strip() == str(log_path)


def test_no_log_yet_is_said_plainly(tmp_path):
    shown = ahp("logs", "--state-dir", str(tmp_path / "empty"))
    assert shown.returncode == 1
    assert "no log file at" in shown.stderr and "Traceback" not in shown.stderr


def test_a_given_log_file_is_the_only_one(tmp_path):
    given = tmp_path / "elsewhere.log"
    shown = ahp("logs", "--path", "--log-file", str(given), "--state-dir", str(tmp_path))
    assert shown.stdout.strip() == str(given)


def test_tail_reads_the_end_of_a_large_file(tmp_path):
    path = tmp_path / "big.log"
    path.write_text("".join(f"line {n}\n" for n in range(200_000)))
    assert tail(path, 3) == ["line 199997", "line 199998", "line 199999"]
    assert tail(path, 0) == []
    short = tmp_path / "short.log"
    short.write_text("only\n")
    assert tail(short, 10) == ["only"]
