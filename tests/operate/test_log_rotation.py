"""The rotating log file: owner-only, each rotated file too, bounded in size and number."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ahpcore.logs import REDACTED, LogHygiene, PrivateRotatingFileHandler, RedactingFormatter


@pytest.fixture
def wide_umask() -> Iterator[None]:
    """A umask that would leave new files world-readable: no log file may be."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("wide_umask")
def test_rotated_files_are_private_and_bounded_in_number(tmp_path: Path) -> None:
    path = tmp_path / "ahp.log"
    handler = PrivateRotatingFileHandler(path, max_bytes=300, backups=2)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    handler.addFilter(LogHygiene())
    logger = logging.getLogger("ahp.test.rotation")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for index in range(40):
            logger.warning("line %d from ws://127.0.0.1/?token=secret-%d-abcdefghij", index, index)
    finally:
        logger.removeHandler(handler)
        handler.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["ahp.log", "ahp.log.1", "ahp.log.2"]
    for name in files:
        assert _mode(tmp_path / name) == 0o600, name
        text = (tmp_path / name).read_text("utf-8")
        assert "secret-" not in text and REDACTED in text
        assert (tmp_path / name).stat().st_size <= 300
    assert "line 39 " in path.read_text("utf-8")
