"""The ``automations`` plugin: the automations port, kept in ``<state dir>/automations``."""

from __future__ import annotations

import logging
import os

from ahp_automations.port import SqliteAutomations
from ahpcore.api import PluginHost
from ahpcore.hookspecs import hookimpl

log = logging.getLogger(__name__)

#: The closest two runs of one schedule may come, in whole minutes (1 when unset).
ENV_MIN_INTERVAL = "AHP_AUTOMATIONS_MIN_INTERVAL"


def min_interval() -> int:
    """``AHP_AUTOMATIONS_MIN_INTERVAL`` as a whole number of minutes, 1 or more."""
    text = os.environ.get(ENV_MIN_INTERVAL, "").strip()
    if not text:
        return 1
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        # A typo must not stop the host, nor quietly allow what was meant to be refused
        # without a word: said once, and the protocol's own floor holds.
        log.warning(
            "%s=%r is not a whole number of minutes (1 or more): schedules may run every minute",
            ENV_MIN_INTERVAL,
            text,
        )
        return 1
    return int(text)


@hookimpl
def ahp_automations(host: PluginHost) -> SqliteAutomations:
    return SqliteAutomations(host.settings.state_dir / "automations", min_interval=min_interval())
