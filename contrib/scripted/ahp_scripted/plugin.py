"""The ``scripted`` plugin: registers the scripted backend (the demo agent unless told otherwise).

``AHP_SCRIPTED_SCRIPT`` names a script file (or a directory of them) to run
instead of the demo. Conversations live under ``<state dir>/scripted``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ahp_scripted.backend import ScriptedBackend
from ahp_scripted.demo import host_variables
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from ahpcore.api import PluginHost
    from ahpcore.ports import Backend

SCRIPT_ENV = "AHP_SCRIPTED_SCRIPT"


@hookimpl
def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    path = os.environ.get(SCRIPT_ENV)
    script = None
    if path:
        from ahp_scripted.loader import load_script  # the demo needs no loader at start

        script = load_script(path)
    register(
        ScriptedBackend(
            host.settings.state_dir / "scripted",
            script,
            variables=host_variables(host),
        )
    )
