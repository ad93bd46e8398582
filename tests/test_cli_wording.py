"""Mistakes the command used to take in silence: each is one line naming what is wrong
and what there is instead."""

from __future__ import annotations

import os

import pytest

from tests.test_cli import run_ahp


def without_plugin_variables(**variables: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AHP_PLUGINS", "AHP_DISABLE_PLUGINS", "AHP_NO_PLUGINS", "AHP_PORT")
    }
    return {**env, **variables}


def one_line(done, code: int, *words: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and lines[0].startswith("ahp: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", ["serve", "plugins", "compat"])
def test_no_plugins_with_plugins_named_is_a_contradiction(tmp_path, command):
    args = ["--no-plugins", "--plugins", "scripted"]
    extra = ["--state-dir", str(tmp_path)] if command == "serve" else []
    done = run_ahp(command, *args, *extra, env=without_plugin_variables())
    one_line(done, 2, "--no-plugins contradicts --plugins scripted")
    assert "listening" not in done.stdout


@pytest.mark.parametrize("command", ["serve", "plugins"])
def test_disabling_a_plugin_that_is_not_installed_is_refused(tmp_path, command):
    extra = ["--state-dir", str(tmp_path)] if command == "serve" else []
    env = without_plugin_variables(AHP_DISABLE_PLUGINS="scripted,nosuch")
    done = run_ahp(command, *extra, env=env)
    line = one_line(done, 2, "AHP_DISABLE_PLUGINS", "nosuch", "installed: ", "core", "scripted")
    assert "names nosuch," in line  # the installed one is not blamed


def test_a_hook_that_does_not_exist_is_refused_with_the_hooks_there_are():
    done = run_ahp("plugins", "--hook", "nosuch", env=without_plugin_variables())
    one_line(done, 2, "no hook named 'nosuch'", "ahp_backends", "ahp_session_store")
    assert not done.stdout
