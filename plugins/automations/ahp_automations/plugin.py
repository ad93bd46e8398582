"""The ``automations`` plugin: the automations port, kept in ``<state dir>/automations``."""

from __future__ import annotations

from ahp_automations.port import SqliteAutomations
from ahpcore.api import PluginHost
from ahpcore.hookspecs import hookimpl


@hookimpl
def ahp_automations(host: PluginHost) -> SqliteAutomations:
    return SqliteAutomations(host.settings.state_dir / "automations")
