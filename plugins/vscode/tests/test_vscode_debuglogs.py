"""Collecting the host's log files for the window, and reading them back in chunks."""

from __future__ import annotations

import base64
import io
import logging
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ahp_vscode.debuglogs import CHUNK_BYTES, COLLECT, READ
from ahp_vscode.plugin import VSCodePlugin
from ahpcore.api import file_uri, path_of_file_uri
from ahpcore.logs import LogHygiene, PrivateRotatingFileHandler, RedactingFormatter
from ahpcore.protocol.errors import INVALID_PARAMS, NOT_FOUND
from ahpcore.testing import AhpTestClient, running_host

pytestmark = pytest.mark.anyio


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    """The handler ``ahp serve --log-file`` installs, on the root logger for one test."""
    path = tmp_path / "logs" / "ahp.log"
    path.parent.mkdir()
    handler = PrivateRotatingFileHandler(path, max_bytes=2_000_000, backups=2)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(LogHygiene())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


async def read_all(client: AhpTestClient, resource: str) -> bytes:
    data, position = b"", 0
    for _ in range(100):
        chunk = await client.request(READ, {"resource": resource, "position": position})
        piece = base64.b64decode(chunk["data"])
        assert len(piece) <= CHUNK_BYTES
        data += piece
        position += len(piece)
        if chunk["eof"]:
            return data
    raise AssertionError("never reached eof")


def check_shape(result: dict[str, Any], kind: str) -> None:
    assert result["kind"] == kind and result["resource"].startswith("file:")
    assert result["providerLogsIncluded"] is False
    paths = [entry["path"] for entry in result["entries"]]
    assert len(set(paths)) == len(paths) and all("/" not in p and p for p in paths)
    assert sum(entry["size"] for entry in result["entries"]) == result["uncompressedSize"]


async def test_an_archive_of_the_log_and_its_rotations_redacted(tmp_path, log_file):
    logger = logging.getLogger("test.vscode")
    # Enough to rotate once: the bundle holds the file and its rotation.
    for n in range(12000):
        logger.info("line %d ws://h/?token=sekrit-%d noise %s", n, n, os.urandom(128).hex())
    async with running_host([("vscode", VSCodePlugin())], state_dir=tmp_path / "s") as running:
        client = await running.connect()
        await client.initialize()
        result = await client.request(COLLECT, {"kind": "archive"})
        check_shape(result, "archive")
        assert [e["path"] for e in result["entries"]] == ["ahp.log", "ahp.log.1"]
        archive = Path(path_of_file_uri(result["resource"]) or "")
        assert stat.S_IMODE(archive.stat().st_mode) == 0o600
        data = await read_all(client, result["resource"])
        assert len(data) == result["size"] > CHUNK_BYTES  # read in more than one chunk
        with zipfile.ZipFile(io.BytesIO(data)) as bundle:
            text = bundle.read("ahp.log").decode() + bundle.read("ahp.log.1").decode()
        assert "line 11999 " in text and "sekrit" not in text and "token=[redacted]" in text

        # Only what the plugin made, and still holds, is read back.
        for resource in (file_uri(str(log_file)), result["resource"] + "/../ahp.log"):
            refused = await client.request_frame(READ, {"resource": resource, "position": 0})
            assert refused["error"]["code"] == NOT_FOUND
            assert refused["error"]["message"].startswith(READ)
            assert "Unknown or expired Agent Host debug-log artifact" in refused["error"]["message"]
        bad = await client.request_frame(READ, {"resource": result["resource"], "position": -1})
        assert bad["error"]["code"] == INVALID_PARAMS


async def test_a_directory_is_read_file_by_file(tmp_path, log_file):
    logging.getLogger("test.vscode").warning("one line")
    async with running_host([("vscode", VSCodePlugin())], state_dir=tmp_path / "s") as running:
        client = await running.connect()
        await client.initialize()
        result = await client.request(COLLECT, {"kind": "directory", "session": "x:/1"})
        check_shape(result, "directory")
        assert result["size"] == result["uncompressedSize"]
        data = await read_all(client, result["resource"] + "/ahp.log")
        assert b"one line" in data


async def test_a_host_with_no_log_file_says_so(tmp_path):
    async with running_host([("vscode", VSCodePlugin())], state_dir=tmp_path / "s") as running:
        client = await running.connect()
        await client.initialize()
        refused = await client.request_frame(COLLECT, {"kind": "archive"})
        assert refused["error"]["code"] == NOT_FOUND
        assert refused["error"]["message"].startswith(COLLECT)
        assert "--log-file" in refused["error"]["message"]
        bad = await client.request_frame(COLLECT, {"kind": "tarball"})
        assert bad["error"]["code"] == INVALID_PARAMS
