"""The ``remote`` plugin: the providers of other machines' AHP hosts, offered on this one.

Environment:

- ``AHP_REMOTE_MACHINES``: a JSON object, machine name -> how to reach its host
  (``command``, ``url`` with ``token`` or ``tokenFile``, ``ssh``, ``docker``, or
  ``ssh`` with ``url``: a host listening there, reached through an SSH tunnel;
  see ``ahp_remote.config``).
- ``AHP_REMOTE_PROBE_SECONDS``: how long the host's start waits, at most, for a
  machine it knows no provider of yet (5 by default; 0 waits for none).

Each provider ``P`` of machine ``M`` is offered as ``remote-M-P`` ("<P> on M").
Which providers a machine has is learned when it is first reached and kept in
``<state dir>/remote/<M>.json`` with its session list, so a restarted host
offers them at once, reached or not. A machine never reached (and naming no
``providers``) is offered as ``remote-M``: listed with why it cannot be used.
A configuration that cannot be used stops ``ahp serve`` with one line naming
the key and why.

Config file: ``[remote.machines.NAME]`` tables with the keys the variable's
machines take; a machine the variable names replaces the file's of that name.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ahp_remote.config import (
    ENV,
    ConfigError,
    merge_machines,
    parse_machines,
    table_machines,
    table_model,
)
from ahpcore.api import Check, private_folder
from ahpcore.hookspecs import hookimpl
from ahpcore.lifecycle import TurnStart

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ahpcore.api import PluginHost
    from ahpcore.ports import Backend

log = logging.getLogger(__name__)

PROBE_ENV = "AHP_REMOTE_PROBE_SECONDS"
DEFAULT_PROBE_SECONDS = 5.0


def _probe_seconds() -> float:
    text = os.environ.get(PROBE_ENV, "").strip()
    try:
        return max(0.0, float(text)) if text else DEFAULT_PROBE_SECONDS
    except ValueError:
        log.warning(
            "%s=%r is not a number of seconds; waiting %s", PROBE_ENV, text, DEFAULT_PROBE_SECONDS
        )
        return DEFAULT_PROBE_SECONDS


@hookimpl
def ahp_config_tables() -> dict[str, type[BaseModel]]:
    return {"remote": table_model()}


@hookimpl
async def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    # A configuration that cannot be used stops the start, in one line (ConfigError).
    specs = merge_machines(
        table_machines(host.config_table("remote")), parse_machines(os.environ.get(ENV))
    )
    if not specs:
        return  # nothing configured: nothing registered, nothing started
    from ahp_remote.backend import MachineBackend, RemoteBackend
    from ahp_remote.machine import Machine

    folder = Path(host.settings.state_dir) / "remote"
    private_folder(folder)
    machines = [Machine(spec, folder / f"{spec.name}.json") for spec in specs]
    # Only a machine this host knows no provider of is waited for, and not for long.
    unknown = [m for m in machines if not m.agents and not m.spec.providers]
    for machine in machines:
        machine.start()
    probe = _probe_seconds()
    if unknown and probe > 0:
        await asyncio.gather(*(m.first_contact(probe) for m in unknown))
    for machine in machines:
        providers = list(machine.spec.providers)
        providers += [
            str(a["provider"]) for a in machine.agents if str(a["provider"]) not in providers
        ]
        if not providers:
            register(MachineBackend(machine))
            continue
        for provider in providers:
            register(RemoteBackend(machine, provider, host))

    async def stop_all() -> None:
        await asyncio.gather(*(m.stop() for m in machines))

    host.at_stop(stop_all)


@hookimpl(tryfirst=True)
async def ahp_turn_starting(start: TurnStart) -> bool:
    """A ``!command`` on a remote session goes to the remote host, which runs it there
    (or refuses it, saying why) rather than in a terminal of this machine."""
    agent = start.agent
    if agent is None or not getattr(agent, "runs_commands_remotely", False) or start.turn.resume:
        return False
    if not start.turn.text.strip().startswith("!"):
        return False
    await agent.run_turn(start.turn, start.report)
    return True


@hookimpl
def ahp_doctor_checks(state_dir: Path) -> list[Check] | None:
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        specs = parse_machines(text)
    except ConfigError as exc:
        return [Check("remote machines", False, str(exc), f"correct {ENV} (docs/remote.md)")]
    return [
        Check(f"remote machine {spec.name}", True, f"reached by {spec.reach}") for spec in specs
    ]
