"""AHP_AUTOMATIONS_MIN_INTERVAL: advertised on initialize, and a schedule closer than it refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from automations_harness import CATALOGUE, ScriptedPlugin, create, definition, schedule

import ahp_automations.plugin as automations_plugin
from ahpcore.api import HostSettings
from ahpcore.config import read
from ahpcore.testing import running_host

pytestmark = pytest.mark.anyio


async def test_the_minimum_interval_is_advertised_and_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AHP_AUTOMATIONS_MIN_INTERVAL", "15")
    plugins = [("automations", automations_plugin), ("scripted", ScriptedPlugin())]
    settings = HostSettings(sessions="memory", port=0)
    async with running_host(plugins, settings=settings, state_dir=tmp_path) as running:
        client = await running.connect()
        result = await client.initialize(subscriptions=[CATALOGUE])
        assert result["automations"]["schedules"] == {"minIntervalMinutes": 15}

        refused = await create(
            client,
            definition(triggers=[schedule("0 9 * * *"), schedule("*/10 * * * *", ident="t")]),
        )
        reason = refused.get("rejectionReason", "")
        assert reason.startswith("definition.triggers[1].schedule.expression:"), refused
        assert "10 minute" in reason and "15" in reason
        # 23:55 and then 00:00 the next day: the night between two days counts.
        night = await create(client, definition(triggers=[schedule("0,55 0,23 * * *")]))
        assert "runs 5 minute(s)" in night.get("rejectionReason", ""), night
        kept = await create(
            client, definition(triggers=[schedule("*/15 * * * *")]), "ahp-automation:/ok"
        )
        assert "rejectionReason" not in kept, kept

        # A patch is held to it too.
        seq = await client.dispatch(
            CATALOGUE,
            {
                "type": "automation/updateRequested",
                "resource": "ahp-automation:/ok",
                "changes": {"triggers": [schedule("* * * * *")]},
            },
        )
        answer = await client.answer_to(seq)
        assert answer["rejectionReason"].startswith("changes.triggers[0].schedule.expression:")


async def test_without_the_variable_every_minute_is_allowed(tmp_path: Path) -> None:
    plugins = [("automations", automations_plugin), ("scripted", ScriptedPlugin())]
    settings = HostSettings(sessions="memory", port=0)
    async with running_host(plugins, settings=settings, state_dir=tmp_path) as running:
        client = await running.connect()
        result = await client.initialize(subscriptions=[CATALOGUE])
        assert result["automations"]["schedules"] == {"minIntervalMinutes": 1}
        kept = await create(client, definition(triggers=[schedule("* * * * *")]))
        assert "rejectionReason" not in kept, kept


async def test_the_config_file_sets_it_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ahp.toml"
    path.write_text("[automations]\nmin_interval_minutes = 30\n")
    path.chmod(0o600)
    plugins = [("automations", automations_plugin), ("scripted", ScriptedPlugin())]
    settings = HostSettings(sessions="memory", port=0, config=read(path))
    monkeypatch.delenv("AHP_AUTOMATIONS_MIN_INTERVAL", raising=False)
    async with running_host(plugins, settings=settings, state_dir=tmp_path / "a") as running:
        client = await running.connect()
        result = await client.initialize(subscriptions=[CATALOGUE])
        assert result["automations"]["schedules"] == {"minIntervalMinutes": 30}
        refused = await create(client, definition(triggers=[schedule("*/20 * * * *")]))
        assert "30 minutes" in refused.get("rejectionReason", ""), refused
    monkeypatch.setenv("AHP_AUTOMATIONS_MIN_INTERVAL", "5")
    settings = HostSettings(sessions="memory", port=0, config=read(path))
    async with running_host(plugins, settings=settings, state_dir=tmp_path / "b") as running:
        client = await running.connect()
        result = await client.initialize(subscriptions=[CATALOGUE])
        assert result["automations"]["schedules"] == {"minIntervalMinutes": 5}
