"""``ahp check ws://HOST:PORT/``: run the conformance checks against a host and report them.

``register(app)`` adds the command to a typer app. Importing this module
costs typer alone; the checks (websockets, the protocol models) load when
the command runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ahpcore.operate.options import JsonOption


def check_command(
    url: Annotated[
        str,
        typer.Argument(
            metavar="ws://HOST:PORT/", help="The host's WebSocket address.", show_default=False
        ),
    ],
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="AHP_TOKEN",
            help="The host's connection token, sent as an Authorization: Bearer header.",
            show_default="none",
        ),
    ] = None,
    json_output: JsonOption = False,
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit",
            metavar="FILE",
            help="Also write the results as JUnit XML to FILE.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", min=0.1, help="Seconds to wait for any one answer from the host."
        ),
    ] = 10.0,
    turn_timeout: Annotated[
        float,
        typer.Option(
            "--turn-timeout",
            min=0.1,
            help="Seconds a session may take to get ready, and a turn to end.",
        ),
    ] = 60.0,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar="PROVIDER",
            help="The agent to run sessions with.",
            show_default="the first one offered that needs no sign-in",
        ),
    ] = None,
    prompt: Annotated[
        str, typer.Option("--prompt", help="What the turn checks say to the agent.")
    ] = "hello",
    cancel_prompt: Annotated[
        str,
        typer.Option(
            "--cancel-prompt",
            help="What the cancel check says before cancelling: best something slow to answer.",
        ),
    ] = "slow",
) -> None:
    """Check that a host speaks AHP as the protocol says: exit 1 when any check fails."""
    import anyio

    from ahpcore.check import results
    from ahpcore.check.runner import Options, run_checks

    if not url.startswith(("ws://", "wss://")):
        typer.echo(f"ahp check: {url!r} is not a ws:// or wss:// address", err=True)
        raise typer.Exit(2)
    options = Options(
        url=url,
        token=token,
        timeout=timeout,
        turn_timeout=turn_timeout,
        agent=agent,
        prompt=prompt,
        cancel_prompt=cancel_prompt,
    )
    found = anyio.run(run_checks, options)
    shown = _redacted(url)
    if junit is not None:
        junit.write_text(results.junit(found, shown), encoding="utf-8")
    if json_output:
        sys.stdout.write(results.as_json(found, shown) + "\n")
    else:
        typer.echo(results.table(found, shown))
    if results.failed(found):
        raise typer.Exit(1)


def _redacted(url: str) -> str:
    """The address without a ``token=`` query value, for reports that may be shared."""
    import re

    return re.sub(r"(?i)(token=)[^&#]*", r"\1…", url)


def register(app: typer.Typer) -> None:
    """Add ``check`` to ``app``."""
    app.command("check")(check_command)
