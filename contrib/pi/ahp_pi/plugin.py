"""The ``pi`` plugin: one backend, the pi coding agent, when pi can be found.

Environment:

- ``AHP_PI_COMMAND``: the command line that starts pi (``pi`` on ``PATH`` when unset),
  e.g. ``pi --provider anthropic --model claude-sonnet-4-5``; ``--mode rpc`` is added.
- ``AHP_PI_PROBE=0``: do not start pi at startup to ask for its models.

Without pi the plugin registers nothing and loads nothing more. Conversations are
pi's own session files; what this host adds (which chat is which file, the turn
ids clients knew) is kept in ``<state dir>/pi/links.json``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ahp_pi.command import pi_command
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from ahpcore.api import PluginHost
    from ahpcore.ports import Backend

PROBE_ENV = "AHP_PI_PROBE"


@hookimpl
def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    command = pi_command()
    if command is None:
        return  # no pi here: nothing registered, nothing more imported
    from ahp_pi.backend import PiBackend

    probe = os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    register(PiBackend(command, host.settings.state_dir / "pi", probe=probe))
