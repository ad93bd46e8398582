"""``ahp doctor``: what a host started here would find, one line a check, ✓ or ✗ and the fix."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ahpcore.defaults import DEFAULT_HOST, DEFAULT_PORT, default_state_dir
from ahpcore.operate.checks import (
    Check,
    git_check,
    plugin_checks,
    plugins_own_checks,
    port_check,
    python_check,
    shell_check,
    state_folder_checks,
    token_check,
)
from ahpcore.operate.options import FLAG, JsonOption


def run_checks(
    state_dir: Path, host: str, port: int, plugins: str | None, no_plugins: bool
) -> list[Check]:
    from ahpcore.plugins import PluginError, PluginManager, Selection
    from ahpcore.version import __version__

    found = [Check("ahp", True, f"ahp {__version__}"), python_check()]
    manager: PluginManager | None = None
    try:
        manager = PluginManager(selection=Selection.from_options(plugins, no_plugins)).load()
    except PluginError as exc:
        found.append(Check("plugins", False, str(exc), "fix AHP_PLUGINS / AHP_DISABLE_PLUGINS"))
    if manager is not None:
        found += plugin_checks(manager)
    found += state_folder_checks(state_dir)
    found.append(token_check(state_dir, os.environ))
    if manager is not None:
        found += plugins_own_checks(manager, state_dir)
    found.append(git_check(needed=manager is not None and "git" in manager.names()))
    found.append(shell_check(os.environ))
    found.append(port_check(host, port))
    return found


def _marks() -> tuple[str, str]:
    """✓ and ✗ where the terminal can show them; plain words where it cannot."""
    try:
        "✓✗".encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "ok", "FAIL"
    return "✓", "✗"


def report(found: list[Check]) -> str:
    good, bad = _marks()
    lines = []
    for check in found:
        lines.append(f"{good if check.ok else bad} {check.said}")
        if not check.ok and check.fix:
            lines.append(f"  fix: {check.fix}")
    failed = sum(not check.ok for check in found)
    lines.append(f"{failed} problem(s) found" if failed else "no problems found")
    return "\n".join(lines)


def doctor_command(
    as_json: JsonOption = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_STATE_DIR",
            help="The state folder to check.",
            show_default=str(default_state_dir()),
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(envvar="AHP_HOST", help="The address the host would listen on.")
    ] = DEFAULT_HOST,
    port: Annotated[
        int, typer.Option(envvar="AHP_PORT", help="The port the host would listen on.")
    ] = DEFAULT_PORT,
    plugins: Annotated[
        str | None,
        typer.Option(
            "--plugins",
            envvar="AHP_PLUGINS",
            metavar="<names>",
            show_default="every installed plugin",
            help="Check only these plugins (comma-separated names) besides the essential ones.",
        ),
    ] = None,
    no_plugins: Annotated[
        bool,
        typer.Option(
            "--no-plugins",
            envvar="AHP_NO_PLUGINS",
            help="Check the essential core plugins alone.",
            show_default="off",
            **FLAG,
        ),
    ] = False,
) -> None:
    """Check what the host needs: Python, plugins, state folder, token, sign-ins, tools, port.

    Exits 1 when any check fails.
    """
    found = run_checks(state_dir or default_state_dir(), host, port, plugins, no_plugins)
    if as_json:
        payload = {"ok": all(c.ok for c in found), "checks": [c.as_json() for c in found]}
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        typer.echo(report(found))
    if not all(check.ok for check in found):
        raise typer.Exit(1)
