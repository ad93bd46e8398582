"""``ahp claude login`` and ``ahp claude status``: the sign-in of the CLI the host runs.

``pip install ahp-claude`` puts no ``claude`` command on PATH: the CLI the host runs
ships inside claude-agent-sdk (``claude_agent_sdk/_bundled/claude``), and it has no
``claude login`` either (its sign-in is ``claude auth login``). These commands run that
CLI's own ``auth login`` and ``auth status``, so the credentials land where the host's
CLIs look for them (``~/.claude``, or ``$CLAUDE_CONFIG_DIR``).

Imported only when ``ahp`` builds its command line (``ahp_cli_commands``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

#: How long ``auth status`` may take: it only reads files and the environment.
STATUS_SECONDS = 60.0

NOT_SIGNED_IN = (
    "Claude Code is not signed in: run `ahp claude login` as the user who runs the host, "
    "or set ANTHROPIC_API_KEY in its environment"
)


def cli_path() -> str | None:
    """The Claude Code CLI the host's Claude backend runs, or None where there is none.

    The SDK's bundled CLI first, found without importing the SDK (a second or two);
    else whichever the SDK would run (an installed Claude Code on PATH).
    """
    name = "claude.exe" if sys.platform == "win32" else "claude"
    try:
        spec = importlib.util.find_spec("claude_agent_sdk")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        bundled = Path(folder) / "_bundled" / name
        if bundled.is_file():
            return str(bundled)
    try:
        from claude_agent_sdk import ClaudeAgentOptions
        from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

        return str(SubprocessCLITransport("", ClaudeAgentOptions())._find_cli())
    except Exception:  # no SDK, no CLI, or an SDK that moved on
        return None


def _cli() -> str:
    found = cli_path()
    if found is None:
        typer.echo(
            "ahp: no Claude Code CLI found (claude-agent-sdk ships one in its _bundled folder; "
            "reinstall it with `pip install --force-reinstall claude-agent-sdk`)",
            err=True,
        )
        raise typer.Exit(1)
    return found


def describe(status: dict[str, Any]) -> str:
    """One line from ``claude auth status --json``."""
    if not status.get("loggedIn"):
        return NOT_SIGNED_IN
    how = str(status.get("authMethod") or "signed in")
    if status.get("apiKeySource"):
        how += f" from {status['apiKeySource']}"
    for key, word in (("email", "as"), ("orgName", "of")):
        if status.get(key):
            how += f" {word} {status[key]}"
    where = f"; its folder is {status['configDirectory']}" if status.get("configDirectory") else ""
    return f"Claude Code is signed in ({how}){where}"


def read_status(cli: str) -> dict[str, Any]:
    """What ``claude auth status --json`` says; exits with one line when it says nothing readable."""
    try:
        done = subprocess.run(
            [cli, "auth", "status", "--json"],
            capture_output=True,
            text=True,
            timeout=STATUS_SECONDS,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        said = json.loads(done.stdout)
        if not isinstance(said, dict):
            raise ValueError(f"not an object: {done.stdout[:200]!r}")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        typer.echo(f"ahp: {cli} auth status did not say whether it is signed in ({exc})", err=True)
        raise typer.Exit(1) from None
    return said


def status() -> None:
    """Say whether Claude Code is signed in (exit status 1 if not).

    Run it as the user, and in the environment, that runs the host: an
    ANTHROPIC_API_KEY there counts too.
    """
    said = read_status(_cli())
    typer.echo(describe(said))
    if not said.get("loggedIn"):
        raise typer.Exit(1)


def login(
    console: Annotated[
        bool,
        typer.Option(
            "--console",
            help="Sign in to the Anthropic Console (API usage billing) instead of a Claude "
            "subscription.",
            show_default="off",
            metavar="",
        ),
    ] = False,
    sso: Annotated[
        bool, typer.Option("--sso", help="Sign in with SSO.", show_default="off", metavar="")
    ] = False,
    email: Annotated[
        str | None,
        typer.Option(
            "--email", help="Fill in this email address on the sign-in page.", metavar="<address>"
        ),
    ] = None,
) -> None:
    """Sign Claude Code in, for the host's Claude sessions (the CLI's `auth login`).

    It opens the sign-in page in a browser, or prints its address and asks for
    the code the page shows. Run it as the user who runs the host.
    """
    cli = _cli()
    argv = [cli, "auth", "login"]
    argv += ["--console"] if console else []
    argv += ["--sso"] if sso else []
    argv += ["--email", email] if email else []
    # The CLI talks to the user itself (a browser, a pasted code): it gets the terminal.
    try:
        code = subprocess.call(argv, env=os.environ.copy())
    except OSError as exc:
        typer.echo(f"ahp: cannot run {cli} ({exc.strerror or exc})", err=True)
        raise typer.Exit(1) from None
    if code != 0:
        typer.echo(
            f"ahp: the sign-in did not finish ({cli} auth login: exit status {code})", err=True
        )
        raise typer.Exit(code if code > 0 else 1)
    typer.echo(describe(read_status(cli)))


def build_app() -> typer.Typer:
    group = typer.Typer(
        name="claude",
        help="Sign in the Claude Code CLI that the claude backend runs.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
    )
    group.command("login")(login)
    group.command("status")(status)
    return group
