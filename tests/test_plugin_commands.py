"""``ahp_cli_commands``: a plugin adds its own commands to ``ahp``; a broken one costs only
its own commands, and a plugin left out by the environment adds none."""

from __future__ import annotations

import os

from tests.test_cli import run_ahp
from tests.test_plugins import BROKEN, make_distribution

GREETER = """
    import typer

    from ahpcore.hookspecs import hookimpl

    def hello(name: str = "world") -> None:
        \"\"\"Say hello.\"\"\"
        typer.echo(f"hello, {name}")

    @hookimpl
    def ahp_cli_commands(app):
        group = typer.Typer(help="The greeter's commands.", no_args_is_help=True)
        group.command("hello")(hello)
        app.add_typer(group, name="greeter")
"""
FAILING = """
    from ahpcore.hookspecs import hookimpl

    @hookimpl
    def ahp_cli_commands(app):
        raise RuntimeError("no commands today")
"""


def _env(tmp_path, **variables: str) -> dict[str, str]:
    site = tmp_path / "site"
    make_distribution(
        site, "ahp-greeter", "1.0.0", {"greeter": "ahp_greeter"}, {"ahp_greeter": GREETER}
    )
    make_distribution(
        site, "ahp-failing", "1.0.0", {"failing": "ahp_failing"}, {"ahp_failing": FAILING}
    )
    make_distribution(
        site, "ahp-broken", "0.0.1", {"broken": "ahp_broken_cli"}, {"ahp_broken_cli": BROKEN}
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AHP_PLUGINS", "AHP_DISABLE_PLUGINS", "AHP_NO_PLUGINS")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return {**env, **variables}


def test_a_plugin_adds_a_command_group_that_runs(tmp_path):
    env = _env(tmp_path)
    listed = run_ahp("--help", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "greeter" in listed.stdout and "The greeter's commands." in listed.stdout
    done = run_ahp("greeter", "hello", "--name", "ahp", env=env)
    assert (done.returncode, done.stdout) == (0, "hello, ahp\n"), done.stderr
    # The plugin that raised is named once; the one that does not import is left to
    # the commands that load plugins to report.
    assert "plugin failing added no commands" in done.stderr
    assert "broken" not in done.stderr


def test_a_plugin_the_environment_leaves_out_adds_no_command(tmp_path):
    for n, variables in enumerate(({"AHP_DISABLE_PLUGINS": "greeter"}, {"AHP_NO_PLUGINS": "1"})):
        done = run_ahp("greeter", "hello", env=_env(tmp_path / str(n), **variables))
        assert done.returncode == 2
        assert "no command named 'greeter'" in done.stderr, done.stderr
