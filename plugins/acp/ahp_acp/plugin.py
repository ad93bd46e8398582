"""The ``acp`` plugin: one backend per agent ``AHP_ACP_AGENTS`` configures.

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
from typing import TYPE_CHECKING

from ahp_acp.config import ENV, parse_agents
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from ahpcore.api import PluginHost
    from ahpcore.ports import Backend

PROBE_ENV = "AHP_ACP_PROBE"


@hookimpl
def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    agents = parse_agents(os.environ.get(ENV))
    if not agents:
        return  # nothing configured: the ACP SDK (and pydantic under it) stays unloaded
    from ahp_acp.backend import AcpBackend

    probe = os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    for spec in agents:
        state = host.settings.state_dir / "acp" / spec.name
        register(AcpBackend(spec, state, probe=probe, host=host))
