"""A run's session as the session list shows it: listed with its origin, across restarts."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from automations_harness import CATALOGUE, create, definition, host, run_ends

from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio


async def connected(running: Any) -> AhpTestClient:
    client: AhpTestClient = await running.connect()
    await client.initialize(subscriptions=["ahp-root://", CATALOGUE])
    return client


async def run_now(client: AhpTestClient, automation: str) -> str:
    result = await client.request(
        "runAutomation", {"automation": automation, "requestId": str(uuid.uuid4())}
    )
    uri: str = result["resource"]
    return uri


async def row_of(client: AhpTestClient, session: str) -> dict[str, Any] | None:
    listed = await client.request("listSessions", {})
    return next((row for row in listed["items"] if row["resource"] == session), None)


async def test_a_past_run_session_keeps_its_origin_on_its_row(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with host(state) as (running, _, _):
        client = await connected(running)
        await create(client, definition(), "ahp-automation:/listed")
        uri = await run_now(client, "ahp-automation:/listed")
        run = await run_ends(client, uri)
        session = run["primarySession"]
    origin = {"kind": "automation", "automation": "ahp-automation:/listed", "run": uri}
    async with host(state) as (running, _, _):
        client = await connected(running)
        # Nobody opened it since the restart: the row comes from the session list's index.
        row = await row_of(client, session)
        assert row is not None
        assert row["origin"] == origin


async def test_a_session_a_run_could_not_make_is_kept_listed_and_disposable(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with host(state) as (running, _, _):
        client = await connected(running)
        await create(client, definition(), "ahp-automation:/gone")
    # The provider the template names is not served any more: the session cannot be made.
    async with host(state, provider="other") as (running, _, _):
        client = await connected(running)
        uri = await run_now(client, "ahp-automation:/gone")
        run = await run_ends(client, uri)
        assert run["lifecycle"]["status"] == "failed"
        session = run["primarySession"]
        error = run["lifecycle"]["error"]
        added = await client.recv_until(
            lambda f: (
                f.get("method") == "root/sessionAdded"
                and f["params"]["summary"]["resource"] == session
            )
        )
        assert added["params"]["summary"]["origin"]["run"] == uri
    async with host(state, provider="other") as (running, _, _):
        client = await connected(running)
        row = await row_of(client, session)
        assert row is not None, "a failed session is listed after a restart"
        assert row["provider"] == "scripted"
        assert row["status"] & 2, "its row shows the Error status bit"
        assert row["origin"] == {
            "kind": "automation",
            "automation": "ahp-automation:/gone",
            "run": uri,
        }
        opened = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert opened["lifecycle"] == "failed"
        assert opened["creationError"] == error
        run_now_state = (await client.request("subscribe", {"channel": uri}))["snapshot"]["state"]
        assert run_now_state["primarySession"] == session

        await client.request("disposeSession", {"channel": session})
        assert await row_of(client, session) is None
        frame = await client.request_frame("subscribe", {"channel": session})
        assert "error" in frame, frame
        after = (await client.request("subscribe", {"channel": uri}))["snapshot"]["state"]
        assert session not in after["sessions"]
    async with host(state, provider="other") as (running, _, _):
        client = await connected(running)
        assert await row_of(client, session) is None
