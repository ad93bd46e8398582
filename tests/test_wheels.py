"""Every distribution builds to a wheel and an sdist with complete metadata, and the
core with the scripted backend installs from those wheels into a fresh venv and runs.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from ahpcore.testing import AhpTestClient

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "wheel-test-token"


def distributions() -> dict[str, Path]:
    """name -> project dir, for the root and every workspace member."""
    found = {"ahpcore": ROOT}
    for pattern in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"][
        "members"
    ]:
        for project in sorted(ROOT.glob(pattern)):
            if (project / "pyproject.toml").exists():
                name = tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]
                found[name] = project
    return found


def uv() -> str:
    found = shutil.which("uv")
    if found is None:
        pytest.fail("uv is needed to build the wheels (pip install uv)")
    return found


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv(), "build", "--all-packages", "--quiet", "--out-dir", str(out)],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    return out


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_of(dist: Path, name: str) -> Path:
    [wheel] = dist.glob(f"{_normalized(name)}-*-py3-none-any.whl")
    return wheel


def metadata(wheel: Path) -> tuple[Any, str]:
    with zipfile.ZipFile(wheel) as archive:
        info = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        points = next(
            (n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")), None
        )
        meta = email.parser.Parser().parsestr(archive.read(info).decode())
        return meta, archive.read(points).decode() if points else ""


def test_every_distribution_has_a_wheel_and_an_sdist_with_full_metadata(dist):
    for name, project in distributions().items():
        wheel = wheel_of(dist, name)
        [sdist] = dist.glob(f"{_normalized(name)}-*.tar.gz")
        meta, points = metadata(wheel)
        assert meta["Name"] == name
        assert meta["Summary"], name
        assert meta["License-Expression"] == "MIT", name
        assert meta["Requires-Python"] == ">=3.11", name
        assert meta.get_all("Classifier"), name
        assert meta.get_all("Project-URL"), name
        assert meta["Description-Content-Type"] == "text/markdown", name
        for requirement in meta.get_all("Requires-Dist") or []:
            if "extra ==" in requirement:
                continue
            # A range: a floor it was tested at and a ceiling before the next major.
            assert ">=" in requirement and "<" in requirement.replace("<=", ""), (
                f"{name}: {requirement} has no version range"
            )
        if name == "ahpcore":
            assert "ahp = ahpcore.cli:main" in points
        else:
            assert "[ahp]" in points, f"{name} has no ahp entry point"
        with tarfile.open(sdist) as archive:
            members = archive.getnames()
        assert any(m.endswith("/pyproject.toml") for m in members)
        if project == ROOT:
            # The workspace root's sdist is the core alone.
            assert not any("/contrib/" in m or "/tests/" in m for m in members)


def _serve(ahp: Path, state: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            str(ahp),
            "serve",
            "--port",
            "0",
            "--sessions",
            "memory",
            "--token",
            TOKEN,
            "--state-dir",
            str(state),
        ],
        stdout=subprocess.PIPE,
        # The address is looked for wherever the banner prints it.
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if match := re.search(r"(ws://[^\s?]+)", line):
            # Keep reading what it prints, so a full pipe never blocks the host.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, match.group(1)
    process.kill()
    raise AssertionError("ahp serve did not print where it listens")


def _action_type(frame: dict[str, Any]) -> str | None:
    params = frame.get("params")
    if frame.get("method") != "action" or not isinstance(params, dict):
        return None
    return None if "rejectionReason" in params else params["action"].get("type")


async def _one_turn(url: str) -> dict[str, Any]:
    uri = "scripted:/00000000-0000-4000-8000-00000000a11e"
    async with connect(f"{url}?token={TOKEN}") as connection:
        client = AhpTestClient(connection, "wheel-client")
        await client.initialize()
        await client.request("createSession", {"channel": uri, "provider": "scripted"})
        session = await client.request("subscribe", {"channel": uri})
        chat = session["snapshot"]["state"]["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        started = {
            "type": "chat/turnStarted",
            "turnId": "t1",
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": "echo from a wheel", "origin": {"kind": "user"}},
        }
        await client.answer_to(await client.dispatch(chat, started))
        ready = await client.recv_until(lambda f: _action_type(f) == "chat/toolCallReady")
        confirm = {
            "type": "chat/toolCallConfirmed",
            "turnId": "t1",
            "toolCallId": ready["params"]["action"]["toolCallId"],
            "approved": True,
            "confirmed": "user-action",
        }
        await client.answer_to(await client.dispatch(chat, confirm))
        await client.recv_until(lambda f: _action_type(f) == "chat/turnComplete")
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        return dict(state["turns"][0])


@pytest.mark.anyio
async def test_core_and_scripted_install_from_the_wheels_and_run_a_turn(dist, tmp_path):
    import anyio

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "AHP_PLUGINS", "AHP_DISABLE_PLUGINS")
    }
    venv = tmp_path / "venv"
    subprocess.run(
        [uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, env=env
    )
    # The two wheels by path: only their dependencies come from the index.
    wheels = [str(wheel_of(dist, "ahpcore")), str(wheel_of(dist, "ahp-scripted"))]
    subprocess.run(
        [uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), *wheels],
        check=True,
        env=env,
        timeout=180,
    )
    ahp = venv / "bin" / "ahp"
    listed = subprocess.run(
        [str(ahp), "plugins", "--json"], capture_output=True, text=True, env=env, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["plugins"]}
    assert rows["scripted"]["distribution"] == "ahp-scripted"
    assert rows["scripted"]["version"] == "0.1.0"
    assert set(rows) == {"core", "scripted"}, "only what the wheels brought"

    process, url = _serve(ahp, tmp_path / "state", env)
    try:
        with anyio.fail_after(60):
            turn = await _one_turn(url)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert turn["state"] == "complete"
    assert turn["responseParts"][-1]["content"] == "from a wheel"
