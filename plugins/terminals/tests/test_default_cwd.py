"""createTerminal without a cwd: where a client's terminal starts, always inside the fence."""

from __future__ import annotations

from pathlib import Path

import pytest
from terminal_harness import SESSION, open_session, wait_for_output

from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio
T = "ahp-terminal:/t1"


async def create_without_cwd(client: AhpTestClient) -> dict:
    return await client.request_frame(
        "createTerminal",
        {"channel": T, "claim": {"kind": "client", "clientId": client.client_id}},
    )


async def started_in(client: AhpTestClient) -> str:
    state = (await client.request("subscribe", {"channel": T}))["snapshot"]["state"]
    await client.dispatch(T, {"type": "terminal/input", "data": "echo at-$PWD-$((1+1))\r"})
    return state["cwd"]


async def test_a_client_terminal_starts_in_the_home_when_a_session_works_there(
    terminal_host,
) -> None:
    home = Path.home().resolve()
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, home)
        frame = await create_without_cwd(client)
        assert "error" not in frame, frame
        assert await started_in(client) == home.as_uri()
        await wait_for_output(client, T, f"at-{home}-2")


async def test_with_the_home_outside_it_starts_in_the_session_its_client_watches(
    terminal_host, workdir: Path
) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        frame = await create_without_cwd(client)
        assert "error" not in frame, frame
        assert await started_in(client) == workdir.as_uri()
        await wait_for_output(client, T, f"at-{workdir}-2")


async def test_with_nowhere_inside_the_fence_to_start_the_refusal_says_so(
    terminal_host, workdir: Path
) -> None:
    async with terminal_host() as running:
        owner = await running.connect()
        await owner.initialize()
        await open_session(owner, workdir)
        stranger = await running.connect()
        await stranger.initialize()
        frame = await create_without_cwd(stranger)
        assert frame["error"]["code"] == -32009
        message = frame["error"]["message"]
        assert str(Path.home().resolve()) in message and "params.cwd" in message
        # Watching the session is enough to be given its folder.
        await stranger.request("subscribe", {"channel": SESSION})
        frame = await create_without_cwd(stranger)
        assert "error" not in frame, frame
        assert await started_in(stranger) == workdir.as_uri()
