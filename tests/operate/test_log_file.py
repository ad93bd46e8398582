"""``--log-file``: the host's log in a rotated, owner-only file, tokens blanked as on stderr."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from ahpcore.logs import REDACTED
from tests.operate.running import run_ahp, serve


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def wide_umask():
    """A umask that would leave new files world-readable: the log file must not be."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.anyio
@pytest.mark.usefixtures("wide_umask")
async def test_the_log_goes_to_a_private_file_named_in_the_banner_with_tokens_blanked(
    tmp_path: Path,
) -> None:
    log_file = tmp_path / "logs" / "ahp.log"  # its folder is made too
    served = serve(
        tmp_path / "state", "--no-plugins", "--log-file", str(log_file), "--log-level", "debug"
    )
    try:
        assert f"log in {log_file}\n" in served.banner
        assert served.token is not None
        # At debug, websockets logs each request line, the token in its query included.
        async with connect(f"{served.url}?token={served.token}") as ws:
            await ws.send(
                '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"channel":"ahp-root://"}}'
            )
            await ws.recv()
    finally:
        rest = served.stop()
    text = log_file.read_text("utf-8")
    assert "GET /?token=" + REDACTED in text
    assert served.token not in text
    assert _mode(log_file) == 0o600
    assert _mode(log_file.parent) == 0o700
    # The records went to the file, not to stderr as well.
    assert "DEBUG" not in rest


@pytest.mark.usefixtures("wide_umask")
def test_the_environment_names_the_log_file_and_an_older_wide_file_is_tightened(
    tmp_path: Path,
) -> None:
    log_file = tmp_path / "ahp.log"
    log_file.write_text("an older line\n")
    log_file.chmod(0o644)
    served = serve(
        tmp_path / "state",
        "--no-plugins",
        env={**os.environ, "AHP_LOG_FILE": str(log_file), "AHP_LOG_LEVEL": "info"},
    )
    try:
        assert f"log in {log_file}\n" in served.banner
        assert _mode(log_file) == 0o600
    finally:
        served.stop()
    text = log_file.read_text("utf-8")
    assert text.startswith("an older line\n")  # appended to, not replaced
    assert "received SIGTERM; stopping" in text


def test_a_log_file_that_cannot_be_written_stops_the_start_with_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    done = run_ahp(
        "serve", "--no-plugins", "--port", "0", "--state-dir", str(tmp_path / "state"),
        "--log-file", str(blocker / "ahp.log"),
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"ahp: cannot write log file {blocker / 'ahp.log'} (not a directory)"
    ]
