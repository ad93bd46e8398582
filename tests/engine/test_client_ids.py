"""A clientId is one live connection's: the same client coming back on a new link
takes it over; the old link is closed rather than left sharing its echoes."""

from __future__ import annotations

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"


async def test_a_second_connection_with_the_same_client_id_takes_it_over(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        first = await running.connect("window-1", conformance=False)
        await first.initialize(subscriptions=[ROOT])
        second = await running.connect("window-1")
        await second.initialize(subscriptions=[ROOT])
        # The old link is closed: it can no longer be handed the client's echoes.
        with anyio.fail_after(10), pytest.raises(ConnectionClosed):
            while True:
                await first.connection.recv()
        engine = running.host.engine_or_fail
        live = [c for c in engine.clients if c.client_id == "window-1" and not c.peer.closed]
        assert len(live) == 1
        # The new one is the client now: its own dispatches come back as its echoes.
        seq = await second.dispatch(
            ROOT, {"type": "root/configChanged", "config": {"replayBytes": 2 << 20}}
        )
        echo = await second.answer_to(seq)
        assert echo["origin"] == {"clientId": "window-1", "clientSeq": seq}
        assert "rejectionReason" not in echo


async def test_different_client_ids_live_side_by_side(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        first = await running.connect("a")
        await first.initialize(subscriptions=[ROOT])
        second = await running.connect("b")
        await second.initialize(subscriptions=[ROOT])
        assert await first.request("ping") is None
        assert await second.request("ping") is None
