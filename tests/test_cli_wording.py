"""Mistakes the command used to take in silence or answer in garbled words: each is one
line naming what is wrong and what there is instead. And the connection addresses a
host on every address prints."""

from __future__ import annotations

import os

import pytest

from ahpcore.addresses import connect_urls
from tests.test_cli import run_ahp
from tests.test_cli_errors import refused


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


def test_a_state_folder_that_is_a_file_says_so(tmp_path):
    occupied = tmp_path / "state"
    occupied.write_text("")
    refused(run_ahp("serve", "--state-dir", str(occupied)), 1, "is a file, not a folder")
    done = run_ahp("token", "--state-dir", str(occupied))
    one_line(done, 2, "is a file, not a folder")


def test_a_bad_port_names_where_it_came_from(tmp_path):
    state = ["--state-dir", str(tmp_path)]
    given = one_line(run_ahp("serve", "--port", "abc", *state, env=without_plugin_variables()), 2)
    assert "--port" in given and "AHP_PORT" not in given
    from_env = one_line(run_ahp("serve", *state, env=without_plugin_variables(AHP_PORT="abc")), 2)
    assert "AHP_PORT" in from_env and "--port" not in from_env


def test_an_unknown_command_is_one_clear_line_listing_the_commands():
    line = one_line(run_ahp("nosuch"), 2, "no command named 'nosuch'", "serve", "plugins", "token")
    assert ".;" not in line and "'." not in line


def test_a_host_on_every_address_names_addresses_to_connect_to():
    urls = connect_urls("0.0.0.0", 8765)
    assert urls[0] == "ws://127.0.0.1:8765/"
    assert all("0.0.0.0" not in url and url.endswith(":8765/") for url in urls)
    assert len(urls) == len(set(urls))
    urls6 = connect_urls("::", 8765)
    assert urls6[0] == "ws://[::1]:8765/"
    assert all("[::]" not in url for url in urls6)
    assert connect_urls("127.0.0.1", 8765) == ["ws://127.0.0.1:8765/"]
    assert connect_urls("::1", 1) == ["ws://[::1]:1/"]
