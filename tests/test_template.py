"""The backend template: rendered, installed into a fresh venv, and its own tests run there.

This is what a plugin author does: ``cookiecutter cookiecutter/backend``, install
the result next to ``ahpcore`` and see the backend in ``ahp plugins`` and
working in a session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

cookiecutter_main = pytest.importorskip("cookiecutter.main", reason="needs the dev tools")

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "cookiecutter" / "backend"
EXPECTED_TREE = {
    "README.md",
    "pyproject.toml",
    "ahp_weather_bot_2/__init__.py",
    "ahp_weather_bot_2/backend.py",
    "ahp_weather_bot_2/conversations.py",
    "ahp_weather_bot_2/plugin.py",
    "tests/test_backend.py",
}


def render(into: Path, name: str) -> Path:
    return Path(
        cookiecutter_main.cookiecutter(
            str(TEMPLATE), no_input=True, output_dir=str(into), extra_context={"plugin_name": name}
        )
    )


def clean_env() -> dict[str, str]:
    drop = {"VIRTUAL_ENV", "AHP_PLUGINS", "AHP_DISABLE_PLUGINS", "PYTHONPATH"}
    return {key: value for key, value in os.environ.items() if key not in drop}


def test_the_name_becomes_distribution_package_and_entry_point(tmp_path):
    project = render(tmp_path, "Weather bot_2")
    assert project.name == "ahp-weather-bot-2"
    files = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    assert files == EXPECTED_TREE
    meta = tomllib.loads((project / "pyproject.toml").read_text("utf-8"))
    assert meta["project"]["name"] == "ahp-weather-bot-2"
    assert meta["project"]["entry-points"]["ahp"] == {"weather-bot-2": "ahp_weather_bot_2.plugin"}
    assert any(dep.startswith("ahpcore") for dep in meta["project"]["dependencies"])
    backend = (project / "ahp_weather_bot_2" / "backend.py").read_text("utf-8")
    assert 'PROVIDER = "weather-bot-2"' in backend
    assert "{{" not in backend and "cookiecutter" not in backend
    # What the template renders is as clean as this project's own code.
    for check in (["check"], ["format", "--check"]):
        subprocess.run([sys.executable, "-m", "ruff", *check, str(project)], check=True)


def test_a_name_that_cannot_be_a_package_is_refused(tmp_path):
    from cookiecutter.exceptions import FailedHookException

    with pytest.raises(FailedHookException):
        render(tmp_path, "9 lives")
    assert not (tmp_path / "ahp-9-lives").exists()


def test_the_rendered_project_installs_and_passes_its_own_tests(tmp_path):
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is needed to build the test venv (pip install uv)")
    project = render(tmp_path / "out", "Weather bot_2")
    venv = tmp_path / "venv"
    env = clean_env()
    subprocess.run(
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        check=True,
        env=env,
        timeout=60,
    )
    python = venv / "bin" / "python"
    # ahpcore from this checkout, then the plugin the way its README says.
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(python), str(ROOT)],
        check=True,
        env=env,
        timeout=120,
    )
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(python), "-e", f"{project}[test]"],
        check=True,
        env=env,
        timeout=120,
    )
    ran = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "4 passed" in ran.stdout
    listed = subprocess.run(
        [str(venv / "bin" / "ahp"), "plugins", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    rows = {row["name"]: row for row in json.loads(listed.stdout)["plugins"]}
    assert rows["weather-bot-2"]["distribution"] == "ahp-weather-bot-2"
    assert rows["weather-bot-2"]["version"] == "0.1.0"
