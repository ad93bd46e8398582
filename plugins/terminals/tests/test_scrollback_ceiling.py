"""terminalScrollbackBytes has a ceiling: a client cannot make a terminal keep its output
without end (1e15 once kept 300 MB of one terminal's output in the host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from terminal_harness import is_action, open_session

from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.services.terminals.output import MAX_SCROLLBACK_BYTES

pytestmark = pytest.mark.anyio
T = "ahp-terminal:/hoard"
MIB = 1 << 20


def held_bytes(running: Any) -> int:
    content = running.host.engine_or_fail.channels[T].state["content"]
    return sum(len(part.get("value", part.get("output", "")).encode()) for part in content)


async def push(client: Any, value: float) -> dict[str, Any]:
    seq = await client.dispatch(
        ROOT_CHANNEL, {"type": "root/configChanged", "config": {"terminalScrollbackBytes": value}}
    )
    return await client.answer_to(seq)


async def test_a_huge_scrollback_is_refused_and_output_stays_within_the_ceiling(
    terminal_host, workdir: Path
) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        refusal = await push(client, 1e15)
        assert refusal["rejectionReason"] == (
            f"terminalScrollbackBytes may not exceed {MAX_SCROLLBACK_BYTES} "
            f"({MAX_SCROLLBACK_BYTES // MIB} MiB), this host's ceiling"
        )
        assert "rejectionReason" in await push(client, 1024)  # below the floor
        # The most a client may ask for, and more output than that.
        assert "rejectionReason" not in await push(client, MAX_SCROLLBACK_BYTES)
        await client.request(
            "createTerminal",
            {
                "channel": T,
                "claim": {"kind": "client", "clientId": client.client_id},
                "cwd": workdir.as_uri(),
            },
        )
        produced = MAX_SCROLLBACK_BYTES + 4 * MIB
        # No newlines: the pty would turn each into two bytes.
        await client.dispatch(
            T,
            {
                "type": "terminal/input",
                "data": f"head -c {produced} /dev/zero | tr '\\0' y; exit\r",
            },
        )
        await client.recv_until(
            lambda f: (
                is_action("root/terminalsChanged")(f)
                and f["params"]["action"]["terminals"][0]["lifecycle"]["status"] == "exited"
            ),
            timeout=60,
        )
        held = held_bytes(running)
        assert MAX_SCROLLBACK_BYTES - MIB < held <= MAX_SCROLLBACK_BYTES


async def test_a_scrollback_past_the_ceiling_in_state_is_read_as_the_ceiling(
    terminal_host, workdir: Path
) -> None:
    # A value that reached the state some other way than a client's dispatch (a
    # plugin applying it directly) still cannot lift the ceiling.
    async with terminal_host() as running:
        engine = running.host.engine_or_fail
        engine.apply(
            ROOT_CHANNEL,
            {"type": "root/configChanged", "config": {"terminalScrollbackBytes": 1e15}},
        )
        service = running.host.terminals
        assert service.scrollback_cap() == MAX_SCROLLBACK_BYTES
