"""The ``automations`` plugin: the automations port, kept in ``<state dir>/automations``."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from ahp_automations.port import SqliteAutomations
from ahpcore.api import PluginHost
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

log = logging.getLogger(__name__)

#: The closest two runs of one schedule may come, in whole minutes (1 when unset).
ENV_MIN_INTERVAL = "AHP_AUTOMATIONS_MIN_INTERVAL"
TABLE = "automations"


def min_interval(host: PluginHost | None = None) -> int:
    """The closest two runs of one schedule may come, in whole minutes (1 or more):
    ``AHP_AUTOMATIONS_MIN_INTERVAL``, else ``[automations] min_interval_minutes`` of the
    config file, else 1."""
    text = os.environ.get(ENV_MIN_INTERVAL, "").strip()
    if not text:
        table: Any = host.config_table(TABLE) if host is not None else None
        return int(table.min_interval_minutes) if table is not None else 1
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
def ahp_config_tables() -> dict[str, type[BaseModel]]:
    # pydantic loads only for a host whose config file has tables.
    from pydantic import BaseModel, ConfigDict, Field

    class AutomationsTable(BaseModel):
        """``[automations]``: how this host holds automations."""

        model_config = ConfigDict(extra="forbid")
        min_interval_minutes: int = Field(
            1,
            ge=1,
            description="The closest two runs of one schedule may come, in whole minutes, "
            "advertised as minIntervalMinutes; a schedule that would run closer is refused. "
            f"Environment: `{ENV_MIN_INTERVAL}`, which wins over the file.",
        )

    return {TABLE: AutomationsTable}


@hookimpl
def ahp_automations(host: PluginHost) -> SqliteAutomations:
    return SqliteAutomations(
        host.settings.state_dir / "automations", min_interval=min_interval(host)
    )
