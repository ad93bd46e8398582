"""``ahp serve`` reads plain options without typer, exactly as typer would read them."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import typer.main

from ahpcore import cli

ENVVARS = sorted({envvar for _, _, envvar in cli.SERVE_OPTIONS.values()})


def _serve_command() -> Any:
    group: Any = typer.main.get_command(cli.app)
    return group.get_command(group.context_class(group, info_name="ahp"), "serve")


def _typer_reads(args: list[str]) -> dict[str, Any]:
    params = dict(_serve_command().make_context("serve", list(args)).params)
    if params.get("allow_origin") is not None:
        params["allow_origin"] = list(params["allow_origin"])
    return params


def _plain_reads(args: list[str]) -> dict[str, Any] | None:
    given = cli._plain_serve_options(args)
    if given is None:
        return None
    defaults = {k: v for k, v in _typer_reads([]).items() if k not in given}
    return {**defaults, **given}


@pytest.fixture(autouse=True)
def _no_serve_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENVVARS:
        monkeypatch.delenv(name, raising=False)


def test_the_plain_table_names_every_option_of_serve_and_its_variable() -> None:
    seen = {}
    for param in _serve_command().params:
        if param.param_type_name != "option" or param.name == "help":
            continue
        for name in param.opts:
            seen[name] = (param.name, param.envvar)
        for name in param.secondary_opts:
            seen[name] = (param.name, param.envvar)
    assert {name: (p, env) for name, (p, _, env) in cli.SERVE_OPTIONS.items()} == seen


PLAIN = [
    [],
    ["--no-token", "--port", "0", "--state-dir", "/tmp/x", "--log-level", "warning"],
    ["--host=::1", "--port=8080", "--sessions", "memory", "--no-plugins"],
    ["--plugins", "core,git", "--token", "abcdefghijklmnop", "--stdio"],
    ["--token-file", "t.txt", "--socket", "s.sock", "--worktrees-root", "w"],
    ["--allow-origin", "https://a.example", "--allow-origin=https://b.example,https://c"],
    ["--max-frame-bytes", "4096", "--inbound-frames", "2.5", "--no-compression"],
    ["--stop-timeout", "0", "--stop-timeout=7.5"],
    ["--no-compression", "--compression", "--inbound-frames", "0", "--port", "1", "--port", "2"],
]


@pytest.mark.parametrize("args", PLAIN)
def test_plain_options_read_as_typer_reads_them(args: list[str]) -> None:
    assert _plain_reads(args) == _typer_reads(args)


@pytest.mark.parametrize(
    ("envvar", "value"),
    [
        ("AHP_PORT", "0"),
        ("AHP_PORT", "9000"),
        ("AHP_HOST", "localhost"),
        ("AHP_NO_TOKEN", "1"),
        ("AHP_NO_TOKEN", "true"),
        ("AHP_STDIO", "0"),
        ("AHP_COMPRESSION", "false"),
        ("AHP_INBOUND_FRAMES", "12.5"),
        ("AHP_STATE_DIR", "/tmp/state"),
        ("AHP_LOG_LEVEL", "debug"),
        ("AHP_PLUGINS", "git"),
    ],
)
def test_variables_read_as_typer_reads_them(
    monkeypatch: pytest.MonkeyPatch, envvar: str, value: str
) -> None:
    monkeypatch.setenv(envvar, value)
    assert _plain_reads(["--log-level", "info"]) == _typer_reads(["--log-level", "info"])
    assert _plain_reads([]) == _typer_reads([])


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--port", "x"],
        ["--port", "-1"],
        ["--port", "010"],
        ["--bogus"],
        ["--port"],
        ["--stdio=1"],
        ["--host", ""],
        ["--inbound-frames", "1e3"],
        ["extra"],
    ],
)
def test_anything_else_is_left_to_typer(args: list[str]) -> None:
    assert cli._plain_serve_options(args) is None


def test_unusual_variables_are_left_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    for envvar, value in [("AHP_ALLOW_ORIGINS", "https://a"), ("AHP_NO_TOKEN", "yes")]:
        monkeypatch.setenv(envvar, value)
        assert cli._plain_serve_options([]) is None
        monkeypatch.delenv(envvar)


TYPER_LOADED = (
    "import atexit, sys; atexit.register(lambda: print('typer' in sys.modules)); "
    "from ahpcore.cli import main; main()"
)


@pytest.mark.parametrize(
    ("port", "typer_loaded", "message"),
    [
        ("70000", "False", "ahp: --port 70000 is out of range"),
        ("x", "True", "ahp: Invalid value for '--port'"),
    ],
)
def test_serve_loads_typer_only_for_what_only_typer_reads(
    port: str, typer_loaded: str, message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", TYPER_LOADED, "serve", "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k not in ENVVARS},
    )
    assert done.returncode == 2
    assert done.stdout.strip() == typer_loaded
    assert done.stderr.startswith(message)
