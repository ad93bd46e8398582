"""Every number a client can push through root config has a ceiling it cannot lift.

Any client may change root config, and several keys size what the host keeps in
memory (queues, the replay buffer, each terminal's scrollback). The keys are
read from the host's own declaration at runtime, with every plugin this
repository installs, so a plugin that adds an unbounded number fails here.
"""

from __future__ import annotations

import importlib.metadata
import math
from typing import Any

import pytest

from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.testing import running_host

pytestmark = pytest.mark.anyio

#: Far past any ceiling: what a hostile client pushed in the report.
HUGE = 1e15


def installed_plugins() -> list[tuple[str, object]]:
    """Every plugin installed under the ``ahp`` entry point group (this repository's)."""
    found = importlib.metadata.entry_points(group="ahp")
    return [(entry.name, entry.load()) for entry in sorted(found, key=lambda e: e.name)]


async def test_the_host_lists_the_plugins_of_this_repository() -> None:
    # Guards the next test: it proves nothing if the plugins are not installed.
    names = {name for name, _ in installed_plugins()}
    assert {"terminals", "files", "git", "scripted", "claude"} <= names


async def test_every_numeric_root_config_key_has_a_ceiling_a_client_cannot_lift(
    tmp_path,
) -> None:
    async with running_host(installed_plugins(), state_dir=tmp_path / "state") as running:
        client = await running.connect("pusher")
        init = await client.initialize()
        root = next(s["state"] for s in init["snapshots"] if s["resource"] == ROOT_CHANNEL)
        properties: dict[str, Any] = root["config"]["schema"]["properties"]
        bounds = getattr(running.host.protocol, "config_bounds", {})
        numbers = sorted(key for key, schema in properties.items() if schema["type"] == "number")
        assert {"clientQueueBytes", "replayBytes", "terminalScrollbackBytes"} <= set(numbers)

        unbounded = [
            key
            for key in numbers
            if key not in bounds
            or bounds[key].maximum is None
            or not math.isfinite(bounds[key].maximum)
        ]
        assert not unbounded, f"root config numbers with no declared ceiling: {unbounded}"
        counted = [key for key, schema in properties.items() if schema["type"] == "array"]
        assert all("maxItems" in properties[key] for key in counted), counted

        values = running.host.engine_or_fail.root.state["config"]["values"]
        for key in numbers:
            ceiling = bounds[key].maximum
            seq = await client.dispatch(
                ROOT_CHANNEL, {"type": "root/configChanged", "config": {key: HUGE}}
            )
            refusal = (await client.answer_to(seq)).get("rejectionReason", "")
            assert f"{key} may not exceed {int(ceiling)}" in refusal, (key, refusal)
            assert key not in values
            seq = await client.dispatch(
                ROOT_CHANNEL, {"type": "root/configChanged", "config": {key: ceiling}}
            )
            assert "rejectionReason" not in await client.answer_to(seq), key
            values = running.host.engine_or_fail.root.state["config"]["values"]
            assert values[key] == ceiling


async def test_a_ceiling_is_kept_from_the_schema_clients_see(tmp_path) -> None:
    # The protocol's ConfigPropertySchema has no minimum or maximum: the strict
    # validator every test client runs would refuse a snapshot carrying them.
    async with running_host(installed_plugins(), state_dir=tmp_path / "state") as running:
        client = await running.connect()
        init = await client.initialize()
        root = next(s["state"] for s in init["snapshots"] if s["resource"] == ROOT_CHANNEL)
        for schema in root["config"]["schema"]["properties"].values():
            assert "maximum" not in schema and "minimum" not in schema
