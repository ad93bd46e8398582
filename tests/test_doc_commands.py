"""The shell commands of docs/getting-started.md and docs/write-a-backend.md, run as written.

Each page's ``sh`` block runs in bash exactly as a reader pastes it, with two
stand-ins so it needs no network: ``pip`` is ``uv pip --offline`` into the
active environment (``pip install uv`` installs a small ``uv`` distribution
whose script runs the real one), and ``cookiecutter`` takes its defaults
instead of asking. The ``ahp serve`` a block ends with is served on a free
port and a real client connects to it.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TOKEN = "doc-commands-token-0123456789abcdef"
#: Left out of the copy of the checkout: environments, caches, built things.
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "site", "dist", "build", "__pycache__", "*_cache", "*.egg-info"
)


def section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text("utf-8")
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def blocks(page: str, heading: str, language: str = "sh") -> list[str]:
    return re.findall(rf"```{language}\n(.+?)\n```", section(page, heading), re.DOTALL)


def real_uv() -> str:
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("uv is needed to run the docs' commands offline (pip install uv)")
    return found


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a reader's fresh shell: no active venv, no uv on PATH, no AHP_*."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"} and not key.startswith("AHP_")
    }
    # python3 is the interpreter running the tests; uv comes only from what the page installs.
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "python3").symlink_to(Path(sys.executable).resolve())
    path = [
        entry
        for entry in env.get("PATH", "").split(os.pathsep)
        if entry
        and shutil.which("uv", path=entry) is None
        and shutil.which("ahp", path=entry) is None
    ]
    env.update(
        PATH=os.pathsep.join([str(tools), *path]),
        REAL_UV=real_uv(),
        UV_OFFLINE="1",
        UV_NO_PROGRESS="1",
        AHP_PORT="0",
        AHP_TOKEN=TOKEN,
        AHP_STATE_DIR=str(tmp_path / "state"),
    )
    return env


def stand_in(tmp_path: Path, name: str) -> Path:
    """A distribution ``name`` whose ``name`` script runs the real uv."""
    package = name.replace("-", "_") + "_stand_in"
    project = tmp_path / f"{name}-stand-in"
    (project / package).mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.0.1"\n'
        f'[project.scripts]\n{name} = "{package}:main"\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["{package}"]\n',
        "utf-8",
    )
    (project / package / "__init__.py").write_text(
        "import os, sys\n\n\ndef main():\n"
        '    os.execv(os.environ["REAL_UV"], [os.environ["REAL_UV"], *sys.argv[1:]])\n',
        "utf-8",
    )
    return project


#: What runs before a page's block: the stand-ins, and stop at the first failure.
PRELUDE = """\
set -euo pipefail
pip() {
    local args=()
    for arg in "$@"; do
        if [ "$arg" = uv ]; then args+=("$UV_STAND_IN"); else args+=("$arg"); fi
    done
    "$REAL_UV" pip "${args[@]}" --quiet --python "$VIRTUAL_ENV/bin/python"
}
cookiecutter() { command cookiecutter --no-input "$@"; }
"""


@contextmanager
def served(script: str, cwd: Path, env: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """Run ``script`` in bash until the ``ahp serve`` it ends with listens.

    Yields the address it listens on and every line printed before; stops the
    whole process group (the shell, uv, the host) afterwards.
    """
    process = subprocess.Popen(
        ["bash", "-c", PRELUDE + script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 300
        url = None
        while url is None:
            left = deadline - time.monotonic()
            assert left > 0, "no 'listening on' within 300 s:\n" + "\n".join(seen)
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                process.wait(timeout=10)
                raise AssertionError(
                    f"the commands stopped (exit {process.returncode}) before ahp serve "
                    "listened:\n" + "\n".join(seen)
                )
            seen.append(line)
            if match := re.search(r"listening on (ws://\S+)", line):
                url = match.group(1)
        yield url, seen
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def with_token(url: str) -> str:
    return f"{url.rstrip('/')}/?token={TOKEN}"


def test_getting_started_installs_as_the_readme_does():
    """The two pages give one install command, so they cannot disagree on its flags."""
    readme = (ROOT / "README.md").read_text("utf-8")
    quick = re.findall(r"uv sync [^&\n]*--no-dev", readme)
    page = re.findall(r"uv sync [^&\n]*", blocks("getting-started.md", "Install and run")[0])
    assert quick and page
    assert page[0].strip() == quick[0].strip()


def test_getting_started_install_and_run_then_connect_from_python(tmp_path):
    checkout = tmp_path / "ahp"
    shutil.copytree(ROOT, checkout, ignore=NOT_COPIED, symlinks=True)
    env = clean_env(tmp_path)
    env["UV_STAND_IN"] = str(stand_in(tmp_path, "uv"))
    [install] = blocks("getting-started.md", "Install and run")
    [hello] = blocks("getting-started.md", "Connect from Python", "python")
    (tmp_path / "hello.py").write_text(hello + "\n", "utf-8")
    with served(install, checkout, env) as (url, _):
        said = subprocess.run(
            [
                str(checkout / ".venv" / "bin" / "python"),
                str(tmp_path / "hello.py"),
                with_token(url),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    assert said.returncode == 0, said.stderr
    # The page says the host offers both agents the checkout installs.
    assert said.stdout.strip() == "['Claude', 'Demo agent']"
    # ... and that, with --inexact, running the install again keeps what else is in .venv.
    sync = re.search(r"uv sync [^&\n]*", install)
    assert sync is not None and "--inexact" in sync.group(0)
    extra = stand_in(tmp_path, "my-extra")
    again = f". .venv/bin/activate && pip install {extra} && {sync.group(0)} && my-extra --version"
    rerun = subprocess.run(
        ["bash", "-c", PRELUDE + again],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr


def test_write_a_backend_make_one(tmp_path):
    """Made next to the checkout, installed, tested, listed and served, as the page says."""
    uv = real_uv()
    env = clean_env(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run(
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        check=True,
        env=env,
        timeout=60,
    )
    python = str(venv / "bin" / "python")
    # The page starts in an environment with ahpcore installed ("pip install ." from a checkout).
    # With no registry to reach, the tools it installs (cookiecutter, pytest) come first, from
    # the lock file and uv's cache; its "pip install" then finds them there.
    tools = tmp_path / "pylock.dev.toml"
    export = [uv, "export", "--frozen", "--format", "pylock.toml", "--only-group", "dev"]
    subprocess.run(
        [*export, "--no-emit-project", "--quiet", "-o", str(tools)],
        cwd=ROOT,
        check=True,
        env=env,
        timeout=60,
    )
    for what in (["-r", str(tools)], [str(ROOT)]):
        subprocess.run(
            [uv, "pip", "install", "--quiet", "--python", python, *what],
            check=True,
            env=env,
            timeout=180,
        )
    # The checkout, reached through a link, so that its ".." is this test's folder.
    (tmp_path / "work").mkdir()
    checkout = tmp_path / "work" / "ahp"
    checkout.symlink_to(ROOT, target_is_directory=True)
    env["PWD"] = str(checkout)
    [make_one] = blocks("write-a-backend.md", "Make one")
    script = f'. "{venv}/bin/activate"\n' + make_one
    with (
        served(script, checkout, env) as (url, printed),
        connect(with_token(url), open_timeout=10) as ws,
    ):
        ws.send(
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://",'
            '"protocolVersions":["1.0.0"],"clientId":"docs","initialSubscriptions":["ahp-root://"]}}'
        )
        answer = json.loads(ws.recv(timeout=10))
    agents = answer["result"]["snapshots"][0]["state"]["agents"]
    assert [agent["provider"] for agent in agents] == ["my-agent"]
    assert (tmp_path / "work" / "ahp-my-agent" / "pyproject.toml").exists()
    assert not (ROOT / "ahp-my-agent").exists(), "the plugin was made inside the checkout"
    output = "\n".join(printed)
    # The template's own tests, the backend conformance suite and ahp check among them.
    assert re.search(r"\b1\d passed\b", output) and " failed" not in output, output
    # What the page says `ahp plugins` prints, it prints.
    listed = re.search(r"ahp plugins +# (.+)", make_one)
    assert listed is not None
    assert listed.group(1).strip() in output, output
