"""The ``claude`` plugin: registers the Claude backend, its catalogue under the host's state.

Environment:

- ``AHP_CLAUDE_SANDBOX``: ``default`` (the CLI's own settings), ``on`` or ``off``.
- ``AHP_CLAUDE_PROBE=0``: do not start a CLI at startup to learn its models.
- ``AHP_CLAUDE_WATCH=0``: do not watch the transcripts folder (each listing looks instead).
- ``AHP_CLAUDE_IDLE_SECONDS``: how long a chat's CLI may sit idle before it is stopped
  (default 300; 0 never stops one). Its next turn starts one that resumes the transcript.
- ``AHP_CLAUDE_MAX_CLIS``: how many CLIs may run at once (default 8; 0 for no limit); one
  about to start stops the longest idle beyond that.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ahp_claude.backend import IDLE_SECONDS, MAX_CLIS, ClaudeBackend
from ahp_claude.doctor import ahp_doctor_checks as ahp_doctor_checks  # a hook of this plugin
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    import typer

    from ahpcore.api import PluginHost
    from ahpcore.ports import Backend


def backend_for(
    host: PluginHost, env: dict[str, str] | None = None, **options: Any
) -> ClaudeBackend:
    def spawn(function: Callable[..., Any], *args: Any, name: str | None = None) -> None:
        host.spawn(function, *args, name=name)

    async def kept_record(session_id: str) -> Mapping[str, Any] | None:
        return await host.session_record(session_id)

    return ClaudeBackend(
        host.settings.state_dir / "claude", spawn, env=env, kept_record=kept_record, **options
    )


def _number(name: str, default: float) -> float:
    said = os.environ.get(name, "").strip()
    if not said:
        return default
    try:
        value = float(said)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds or CLIs, not {said!r}") from None
    if value < 0 or value != value:
        raise ValueError(f"{name} must be 0 or more, not {said!r}")
    return value


def _on(name: str) -> bool:
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


@hookimpl
def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    register(
        backend_for(
            host,
            probe=_on("AHP_CLAUDE_PROBE"),
            watch=_on("AHP_CLAUDE_WATCH"),
            sandbox=os.environ.get("AHP_CLAUDE_SANDBOX", "default").strip() or "default",
            idle_seconds=_number("AHP_CLAUDE_IDLE_SECONDS", IDLE_SECONDS),
            max_clis=int(_number("AHP_CLAUDE_MAX_CLIS", MAX_CLIS)),
        )
    )


@hookimpl
def ahp_cli_commands(app: typer.Typer) -> None:
    from ahp_claude.signin import build_app  # typer is loaded by now; the host needs none of it

    app.add_typer(build_app(), name="claude")
