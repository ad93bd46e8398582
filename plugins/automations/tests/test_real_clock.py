"""One schedule on the system clock: ``* * * * *`` fires within a minute, nobody connected."""

from __future__ import annotations

from pathlib import Path

import pytest
from automations_harness import (
    ANSWER,
    CATALOGUE,
    agent_text,
    create,
    definition,
    entry_of,
    host,
    run_ends,
    schedule,
    until,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_every_minute_on_the_real_clock(tmp_path: Path) -> None:
    async with host(tmp_path / "state") as (running, _, _):
        client = await running.connect()
        await client.initialize(subscriptions=[CATALOGUE])
        answer = await create(
            client, definition(triggers=[schedule("* * * * *")]), "ahp-automation:/m"
        )
        assert "rejectionReason" not in answer
        await client.close()
        engine = running.host.engine_or_fail

        def ran() -> str | None:
            runs = engine.channels[CATALOGUE].state["entries"][0]["runs"]
            return runs[0]["resource"] if runs else None

        # The next minute comes within 60 s; its run takes a moment more.
        uri = await until(ran, timeout=65)
        later = await running.connect()
        await later.initialize()
        run = await run_ends(later, uri, timeout=5)
        assert run["lifecycle"]["status"] == "completed"
        assert run["origin"]["kind"] == "trigger"
        assert "catchUp" not in run["origin"]
        assert await agent_text(later, run["primarySession"]) == ANSWER
        entry = await entry_of(later, "ahp-automation:/m")
        assert entry["nextRunAt"] > run["origin"]["scheduledFor"]
