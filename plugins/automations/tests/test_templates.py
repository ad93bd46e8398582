"""What a definition's session template may hold on this host."""

from __future__ import annotations

from pathlib import Path

import pytest
from automations_harness import CATALOGUE, create, definition, host

pytestmark = pytest.mark.anyio

PLUGIN = {
    "type": "plugin",
    "id": "p1",
    "uri": "file:///tmp/plugin",
    "name": "A plugin",
    "nonce": "1",
}


async def test_client_plugins_in_a_template_are_refused_saying_why(tmp_path: Path) -> None:
    async with host(tmp_path / "state") as (running, _, _):
        client = await running.connect()
        result = await client.initialize(subscriptions=[CATALOGUE])
        assert "customizations" not in result["automations"]
        body = definition(session={"provider": "scripted", "customizations": [PLUGIN]})
        refused = await create(client, body)
        reason = refused.get("rejectionReason", "")
        assert reason.startswith("definition.session.customizations:"), refused
        assert "automations.customizations" in reason and "leave customizations out" in reason

        await create(client, definition(), "ahp-automation:/plain")
        seq = await client.dispatch(
            CATALOGUE,
            {
                "type": "automation/updateRequested",
                "resource": "ahp-automation:/plain",
                "changes": {"session": {"provider": "scripted", "customizations": [PLUGIN]}},
            },
        )
        reason = (await client.answer_to(seq)).get("rejectionReason", "")
        assert reason.startswith("changes.session.customizations:"), reason
        entries = (await client.request("subscribe", {"channel": CATALOGUE}))["snapshot"]["state"]
        assert [e["definition"]["session"] for e in entries["entries"]] == [
            {"provider": "scripted"}
        ]
