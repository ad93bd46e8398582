"""The ``pi`` plugin: one backend, the pi coding agent, when pi can be found.

Environment:

- ``AHP_PI_COMMAND``: the command line that starts pi (``pi`` on ``PATH`` when unset),
  e.g. ``pi --provider anthropic --model claude-sonnet-4-5``; ``--mode rpc`` is added.
- ``AHP_PI_PROBE=0``: do not start pi at startup to ask for its models.

Config file: ``[pi]`` with ``command``, ``probe``, ``agent_dir`` and ``session_dir``;
a variable that is set wins (``agent_dir`` and ``session_dir`` stand for pi's own
``PI_CODING_AGENT_DIR`` and ``PI_CODING_AGENT_SESSION_DIR``).

Without pi the plugin registers nothing and loads nothing more. Conversations are
pi's own session files; what this host adds (which chat is which file, the turn
ids clients knew) is kept in ``<state dir>/pi/links.json``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ahp_pi.command import AGENT_DIR_ENV, ENV, SESSION_DIR_ENV, pi_command
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ahpcore.api import PluginHost
    from ahpcore.ports import Backend

PROBE_ENV = "AHP_PI_PROBE"
TABLE = "pi"


@hookimpl
def ahp_config_tables() -> dict[str, type[BaseModel]]:
    # pydantic loads only for a host whose config file has tables.
    from pydantic import BaseModel, ConfigDict, Field

    class PiTable(BaseModel):
        """``[pi]``: how this host starts pi and where pi keeps its sessions."""

        model_config = ConfigDict(extra="forbid")

        command: str | list[str] | None = Field(
            None,
            description="The command line that starts pi, a string split as a shell would or "
            f"a list (`pi` on PATH when unset); `--mode rpc` is added. Environment: `{ENV}`, "
            "which wins.",
        )
        probe: bool | None = Field(
            None,
            description="Start pi at startup to ask for its models (on when unset). "
            f"Environment: `{PROBE_ENV}`, which wins.",
        )
        agent_dir: str | None = Field(
            None,
            min_length=1,
            description=f"pi's own folder (`~/.pi/agent` when unset). Environment: "
            f"`{AGENT_DIR_ENV}`, which wins.",
        )
        session_dir: str | None = Field(
            None,
            min_length=1,
            description="Where pi keeps its session files (`sessions` in its own folder "
            f"when unset). Environment: `{SESSION_DIR_ENV}`, which wins.",
        )

    return {TABLE: PiTable}


def _probe(table: Any) -> bool:
    said = os.environ.get(PROBE_ENV, "").strip().lower()
    if said:
        return said not in ("0", "false", "no", "off")
    return table is None or table.probe is None or bool(table.probe)


@hookimpl
def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    table: Any = host.config_table(TABLE)
    if table is not None:
        for variable, value in (
            (AGENT_DIR_ENV, table.agent_dir),
            (SESSION_DIR_ENV, table.session_dir),
        ):
            if value and not os.environ.get(variable, "").strip():
                # pi reads its own variables, and so does the catalogue here: both agree.
                os.environ[variable] = str(Path(value).expanduser())
    command = pi_command(configured=table.command if table is not None else None)
    if command is None:
        return  # no pi here: nothing registered, nothing more imported
    from ahp_pi.backend import PiBackend

    register(PiBackend(command, host.settings.state_dir / "pi", probe=_probe(table)))
