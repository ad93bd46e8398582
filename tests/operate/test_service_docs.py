"""docs/service.md: the systemd unit and the launchd plist it shows are valid, and the
``ahp serve`` command lines in them start a host that answers ``/healthz``."""

from __future__ import annotations

import http.client
import json
import plistlib
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.operate.running import Serving, serve

PAGE = Path(__file__).resolve().parents[2] / "docs" / "service.md"
#: The ``ahp`` command of this environment, put where the page says ``~/ahp/.venv/bin/ahp``.
AHP = Path(sys.executable).with_name("ahp")


def block(language: str, holding: str) -> str:
    found = [
        text
        for lang, text in re.findall(r"```(\w+)\n(.*?)```", PAGE.read_text("utf-8"), re.S)
        if lang == language and holding in text
    ]
    assert len(found) == 1, f"docs/service.md should show one {language} block with {holding!r}"
    return found[0]


def unit_section(text: str, section: str) -> dict[str, str]:
    values: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current == section and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def healthz(served: Serving) -> dict[str, str]:
    address = urlsplit(served.url)
    assert address.hostname is not None and address.port is not None
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        assert response.status == 200
        answer: dict[str, str] = json.loads(response.read())
        return answer
    finally:
        connection.close()


def test_the_systemd_unit_runs_ahp_serve_with_a_stop_systemd_waits_for() -> None:
    service = unit_section(block("ini", "[Service]"), "Service")
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == "%h/ahp/.venv/bin/ahp" and argv[1] == "serve"
    assert float(option(argv, "--stop-timeout")) < float(service["TimeoutStopSec"])
    assert service["Restart"] == "on-failure"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    unit = tmp_path / "ahp.service"
    # verify checks that ExecStart's program exists: this environment's ahp stands in.
    unit.write_text(block("ini", "[Service]").replace("%h/ahp/.venv/bin/ahp", str(AHP)))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # Unknown keys and bad values are warnings only: none may name this unit.
    assert str(unit) not in done.stderr and "ahp.service" not in done.stderr, done.stderr


def test_the_systemd_command_line_starts_a_host(tmp_path: Path) -> None:
    service = unit_section(block("ini", "[Service]"), "Service")
    argv = shlex.split(service["ExecStart"].replace("%h", str(tmp_path)))
    served = serve(tmp_path / "state", "--no-plugins", *argv[2:])
    try:
        assert healthz(served)["status"] == "ok"
    finally:
        served.stop()


def test_the_launchd_plist_runs_ahp_serve_with_a_private_log_file(tmp_path: Path) -> None:
    agent = plistlib.loads(block("xml", "<plist").encode())
    argv = agent["ProgramArguments"]
    assert agent["Label"] == "local.ahp.serve"
    assert argv[0] == "/Users/you/ahp/.venv/bin/ahp" and argv[1] == "serve"
    assert option(argv, "--log-file") == "/Users/you/Library/Logs/ahp/ahp.log"
    assert float(option(argv, "--stop-timeout")) < agent["ExitTimeOut"]
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}

    mine = [arg.replace("/Users/you", str(tmp_path)) for arg in argv[2:]]
    served = serve(tmp_path / "state", "--no-plugins", *mine)
    try:
        log_file = Path(option(mine, "--log-file"))
        assert f"log in {log_file}\n" in served.banner
        assert healthz(served)["status"] == "ok"
    finally:
        served.stop()
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    assert "received SIGTERM; stopping" in log_file.read_text("utf-8")
