"""A store that cannot write is reported to the client that asked, and the host goes on."""

from __future__ import annotations

import pytest

from ahp_scripted import ScriptedBackend
from ahpcore.host import HostSettings
from ahpcore.store import FileSessionStore
from ahpcore.testing import running_host
from tests.reliability.faults import FaultyBackend, FaultyConnection, Plan
from tests.reliability.test_fault_injection import FaultyPlugin
from tests.sessions.conftest import open_session, script

pytestmark = pytest.mark.anyio


async def test_a_failed_write_is_told_to_the_sender_and_the_next_one_goes_through(tmp_path):
    FaultyConnection.plan = Plan()
    backend = FaultyBackend(ScriptedBackend(tmp_path / "scripted", script()), Plan())
    store = FileSessionStore(
        tmp_path / "state" / "sessions.sqlite3", retry_delays=(), factory=FaultyConnection
    )
    settings = HostSettings(port=0, state_dir=tmp_path / "state")
    async with running_host(
        [("faulty", FaultyPlugin(backend, store))], settings=settings
    ) as running:
        client = await running.connect("c1")
        await client.initialize()
        session, _ = await open_session(client)
        await client.sync()

        FaultyConnection.plan = Plan(point="store")
        seq = await client.dispatch(session, {"type": "session/titleChanged", "title": "lost"})
        answer = await client.answer_to(seq)
        assert answer["rejectionReason"].startswith(
            "the title was not saved: the session store could not write"
        )
        assert "disk I/O error" in answer["rejectionReason"]

        FaultyConnection.plan = Plan(point="store")
        frame = await client.request_frame(
            "createChat", {"channel": session, "chat": "ahp-chat:/not-kept"}
        )
        assert frame["error"]["code"] == -32603
        assert (
            "chat ahp-chat:/not-kept not created: the session store could not write"
            in (frame["error"]["message"])
        )
        assert "ahp-chat:/not-kept" not in running.host.engine_or_fail.channels

        # The failed COMMITs were rolled back: the store writes again.
        seq = await client.dispatch(session, {"type": "session/titleChanged", "title": "kept"})
        assert "rejectionReason" not in await client.answer_to(seq)
        await client.request("createChat", {"channel": session, "chat": "ahp-chat:/kept"})
        record = await store.get(session.split("/")[-1])
        assert record["title"] == "kept"
        assert [chat["uri"] for chat in record["chats"]][-1] == "ahp-chat:/kept"
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state["title"] == "kept"
