"""The README's quick start is what CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text("utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_quick_start_is_two_commands():
    commands = quick_start_commands()
    assert len(commands) == 2
    assert commands[0].endswith("ahp serve")
    assert "pytest" in commands[1]


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text("utf-8").splitlines()
    assert quick_start_commands()[1] in ci
