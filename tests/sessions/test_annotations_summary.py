"""SessionState.annotations moves by no action the protocol defines: the host sends the new
counts on rows and in snapshots only, says so in its compatibility notes, and a client that
replays the session's actions holds what its snapshot said."""

from __future__ import annotations

import pytest

from ahpcore import compat
from tests.sessions.conftest import open_session
from tests.sessions.test_annotations import accepted, annotation, entry, session_replay_agrees

pytestmark = pytest.mark.anyio


async def test_the_counts_move_on_rows_and_snapshots_and_no_session_action_carries_them(
    session_host,
):
    async with session_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, _ = await open_session(client)
        await client.sync()
        seen = len(client.actions_for(session))
        await accepted(
            client,
            f"{session}/annotations",
            {"type": "annotations/set", "annotation": annotation(session, "a1", entry("e1"))},
        )
        changed = await client.recv_until(
            lambda f: (
                f.get("method") == "root/sessionSummaryChanged"
                and f["params"]["session"] == session
            )
        )
        assert changed["params"]["changes"]["annotations"]["annotationCount"] == 1
        await client.sync()
        # nothing went out on the session's own channel for the counts
        assert len(client.actions_for(session)) == seen
        fresh = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert fresh["annotations"]["annotationCount"] == 1
        [row] = [r for r in compat.rows_of(running.host) if r.name == "root/sessionSummaryChanged"]
        assert any("no session action for SessionState.annotations" in n for n in row.notes)
        # replayed onto its snapshot, the session agrees with the host but for the counts
        replayed = await session_replay_agrees(client, session)
        assert replayed["annotations"]["annotationCount"] == 1
