"""A terminal printing as fast as it can: framed, capped, and not in anybody's way."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from terminal_harness import is_action, open_session

pytestmark = pytest.mark.anyio
T = "ahp-terminal:/flood"
CAP = 64 << 10
FLOOD = 50_000_000


async def test_yes_flood_keeps_the_cap_and_other_clients_moving(
    terminal_host, workdir: Path
) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        seq = await client.dispatch(
            "ahp-root://",
            {"type": "root/configChanged", "config": {"terminalScrollbackBytes": CAP}},
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        await client.request(
            "createTerminal",
            {
                "channel": T,
                "claim": {"kind": "client", "clientId": client.client_id},
                "cwd": workdir.as_uri(),
            },
        )
        bystander = await running.connect()
        await bystander.initialize(subscriptions=())
        engine = running.host.engine_or_fail
        first_seq = engine.server_seq
        await client.dispatch(
            T, {"type": "terminal/input", "data": f"yes | head -c {FLOOD}; exit\r"}
        )
        slowest = 0.0
        finished = anyio.Event()

        async def wait_for_exit() -> None:
            await client.recv_until(
                lambda f: (
                    is_action("root/terminalsChanged")(f)
                    and f["params"]["action"]["terminals"][0]["lifecycle"]["status"] == "exited"
                ),
                timeout=120,
            )
            finished.set()

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_exit)
            while not finished.is_set():
                began = time.monotonic()
                with anyio.fail_after(5):
                    await bystander.request("ping", {"channel": "ahp-root://"})
                slowest = max(slowest, time.monotonic() - began)
                await anyio.sleep(0.05)

        frames = engine.server_seq - first_seq
        # The pty hands over about 4 KiB a read (~18,000 reads for the 75 MB that
        # come out, each \n as \r\n); coalesced, a frame carries many reads.
        assert frames < (FLOOD * 3 // 2) // (16 << 10), frames
        assert slowest < 3.0, slowest  # a starved loop would answer after the whole flood
        channel = engine.channels[T]
        held = sum(len(part.get("value", "").encode()) for part in channel.state["content"])
        held += sum(len(part.get("output", "").encode()) for part in channel.state["content"])
        assert held <= CAP

        late = await running.connect()
        await late.initialize(subscriptions=())
        state = (await late.request("subscribe", {"channel": T}))["snapshot"]["state"]
        text = "".join(part.get("value", part.get("output", "")) for part in state["content"])
        assert CAP // 2 < len(text.encode()) <= CAP
        assert "y\r\ny\r\n" in text
        assert state["lifecycle"] == {"status": "exited", "exitCode": 0}
