"""The ``acp`` plugin: one backend per agent the config file or ``AHP_ACP_AGENTS``
configures.

Config file: ``[acp.agents.NAME]`` tables with the keys the variable's agents take,
and ``[acp] probe``. An agent the variable names replaces the file's of that name.

Environment:

- ``AHP_ACP_AGENTS``: a JSON object, agent name -> ``{"command", "args", "env",
  "displayName", "description"}`` (see ``ahp_acp.config``). Each agent is a
  provider of its own, named as the key.
- ``AHP_ACP_PROBE=0``: do not start each agent at startup to ask what it can do
  (it is then learned when its first session starts).

Each agent keeps what this host recorded of its sessions under
``<state dir>/acp/<name>/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ahp_acp.config import ENV, merge_agents, parse_agents, table_agents, table_model
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ahpcore.api import PluginHost
    from ahpcore.ports import Backend

PROBE_ENV = "AHP_ACP_PROBE"


@hookimpl
def ahp_config_tables() -> dict[str, type[BaseModel]]:
    return {"acp": table_model()}


def _probe(table: Any) -> bool:
    said = os.environ.get(PROBE_ENV, "").strip().lower()
    if said:
        return said not in ("0", "false", "no", "off")
    return table is None or table.probe is None or bool(table.probe)


@hookimpl
def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    table = host.config_table("acp")
    agents = merge_agents(table_agents(table), parse_agents(os.environ.get(ENV)))
    if not agents:
        return  # nothing configured: the ACP SDK (and pydantic under it) stays unloaded
    from ahp_acp.backend import AcpBackend

    probe = _probe(table)
    for spec in agents:
        state = host.settings.state_dir / "acp" / spec.name
        register(AcpBackend(spec, state, probe=probe, host=host))
