"""A write killed half-way leaves the old file whole."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ahp_files.atomic import atomic_write, is_temp

WRITER = """
import sys
from pathlib import Path
from ahp_files.atomic import atomic_write

def chunks():
    yield b"NEW" * 100000
    print("half-way", flush=True)
    sys.stdin.readline()  # held here until killed
    yield b"never"

atomic_write(Path(sys.argv[1]), chunks())
"""


def test_a_crash_mid_write_leaves_the_old_file(tmp_path: Path):
    target = tmp_path / "keep.txt"
    target.write_text("old and whole")
    os.chmod(target, 0o600)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "half-way"
        # Some of the new bytes are on disk, in a file beside the target.
        [temp] = [p for p in tmp_path.iterdir() if p != target]
        assert is_temp(temp.name) and temp.stat().st_size >= 300000
        assert target.read_text() == "old and whole"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
    assert writer.returncode == -signal.SIGKILL
    assert target.read_text() == "old and whole"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_finished_write_replaces_in_one_step_and_keeps_the_mode(tmp_path: Path):
    target = tmp_path / "f.sh"
    target.write_text("#!/bin/sh\n")
    os.chmod(target, 0o750)
    before = target.stat().st_ino
    atomic_write(target, [b"#!/bin/sh\n", b"echo hi\n"])
    assert target.read_text() == "#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert target.stat().st_ino != before  # a new file renamed over, not rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == ["f.sh"]


def test_a_failed_write_cleans_up_after_itself(tmp_path: Path):
    target = tmp_path / "t.txt"
    target.write_text("old")

    def chunks():
        yield b"partial"
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        atomic_write(target, chunks())
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.txt"]
