"""A real ``ahp serve`` for the operating tests: its banner read from both streams."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

AHP = [sys.executable, "-m", "ahpcore.cli"]


def run_ahp(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AHP, *args], capture_output=True, text=True, timeout=timeout, env=env or os.environ.copy()
    )


@dataclass
class Serving:
    process: subprocess.Popen[str]
    url: str
    token: str | None
    #: The lines the host wrote on stderr up to "press Ctrl-C to stop".
    banner: list[str] = field(default_factory=list)

    def stop(self) -> str:
        """SIGTERM, then the rest of stderr; kills it past 30 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            _, rest = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, rest = self.process.communicate()
        return rest or ""


def serve(state_dir: Path, *args: str, env: dict[str, str] | None = None) -> Serving:
    """``ahp serve --port 0 --state-dir state_dir *args``, once its banner is out."""
    process = subprocess.Popen(
        [*AHP, "serve", "--port", "0", "--state-dir", str(state_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or os.environ.copy(),
    )
    assert process.stdout is not None and process.stderr is not None
    url = token = None
    banner: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                raise AssertionError(f"ahp serve exited early: {''.join(banner)}")
            banner.append(line)
            if "press Ctrl-C to stop" in line:
                break
        # stdout's banner is complete by now: it is written and flushed before stderr's.
        while time.monotonic() < deadline and url is None:
            line = process.stdout.readline()
            if match := re.search(r"listening on (ws://\S+)", line):
                url = match.group(1)
            if match := re.search(r"connection token: (\S+)", line):
                token = match.group(1)
        if token is None and "--no-token" not in args:
            line = process.stdout.readline()
            if match := re.search(r"connection token: (\S+)", line):
                token = match.group(1)
    except BaseException:
        process.kill()
        process.communicate()
        raise
    assert url is not None, banner
    return Serving(process, url, token, banner)
