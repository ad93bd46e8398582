"""The ``claude`` plugin: registers the Claude backend, its catalogue under the host's state.

Environment:

- ``AHP_CLAUDE_SANDBOX``: ``default`` (the CLI's own settings), ``on`` or ``off``.
- ``AHP_CLAUDE_PROBE=0``: do not start a CLI at startup to learn its models.
- ``AHP_CLAUDE_WATCH=0``: do not watch the transcripts folder (each listing looks instead).
- ``AHP_CLAUDE_IDLE_SECONDS``: how long a chat's CLI may sit idle before it is stopped
  (default 300; 0 never stops one). Its next turn starts one that resumes the transcript.
- ``AHP_CLAUDE_MAX_CLIS``: how many CLIs may run at once (default 8; 0 for no limit); one
  about to start stops the longest idle beyond that.

The config file's ``[claude]`` table holds the same settings (``sandbox``, ``probe``,
``watch``, ``idle_seconds``, ``max_clis``); a variable that is set wins over it.
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
    from pydantic import BaseModel

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


TABLE = "claude"


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


def _on(name: str, default: bool = True) -> bool:
    said = os.environ.get(name, "").strip().lower()
    if not said:
        return default
    return said not in ("0", "false", "no", "off")


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


@hookimpl
def ahp_config_tables() -> dict[str, type[BaseModel]]:
    # pydantic loads only for a host whose config file has tables.
    from typing import Literal

    from pydantic import BaseModel, ConfigDict, Field

    class ClaudeTable(BaseModel):
        """``[claude]``: how this host runs Claude Code."""

        model_config = ConfigDict(extra="forbid")

        sandbox: Literal["default", "on", "off"] | None = Field(
            None,
            description="The CLI's sandbox for shell commands: `default` (the CLI's own "
            "settings), `on` or `off`. Environment: `AHP_CLAUDE_SANDBOX`, which wins.",
        )
        probe: bool | None = Field(
            None,
            description="Start a CLI at startup to learn its models (on when unset). "
            "Environment: `AHP_CLAUDE_PROBE`, which wins.",
        )
        watch: bool | None = Field(
            None,
            description="Watch the transcripts folder rather than look at each listing (on "
            "when unset). Environment: `AHP_CLAUDE_WATCH`, which wins.",
        )
        idle_seconds: float | None = Field(
            None,
            ge=0,
            allow_inf_nan=False,
            description=f"How long a chat's CLI may sit idle before it is stopped ({IDLE_SECONDS:g} "
            "when unset; 0 never stops one). Environment: `AHP_CLAUDE_IDLE_SECONDS`, which wins.",
        )
        max_clis: int | None = Field(
            None,
            ge=0,
            description=f"How many CLIs may run at once ({MAX_CLIS} when unset; 0 for no limit). "
            "Environment: `AHP_CLAUDE_MAX_CLIS`, which wins.",
        )

    return {TABLE: ClaudeTable}


@hookimpl
def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    table: Any = host.config_table(TABLE)
    said: dict[str, Any] = table.model_dump() if table is not None else {}
    register(
        backend_for(
            host,
            probe=_on("AHP_CLAUDE_PROBE", _or(said.get("probe"), True)),
            watch=_on("AHP_CLAUDE_WATCH", _or(said.get("watch"), True)),
            sandbox=os.environ.get("AHP_CLAUDE_SANDBOX", "").strip()
            or _or(said.get("sandbox"), "default"),
            idle_seconds=_number(
                "AHP_CLAUDE_IDLE_SECONDS", _or(said.get("idle_seconds"), IDLE_SECONDS)
            ),
            max_clis=int(_number("AHP_CLAUDE_MAX_CLIS", _or(said.get("max_clis"), MAX_CLIS))),
        )
    )


@hookimpl
def ahp_cli_commands(app: typer.Typer) -> None:
    from ahp_claude.signin import build_app  # typer is loaded by now; the host needs none of it

    app.add_typer(build_app(), name="claude")
