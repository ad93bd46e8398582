"""The backend template renders what its name promises, as clean as this project's code.

Installing it, running its own tests, listing and serving it are what
docs/write-a-backend.md says to do; tests/test_doc_commands.py runs those commands.
"""

from __future__ import annotations

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
