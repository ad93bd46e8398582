"""A refused handshake is logged: the address and the reason, never what was offered,
and at most one line per address a minute, counting the ones left out."""

from __future__ import annotations

import json
import logging
import signal
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from ahpcore.transports.refusals import RefusalLog
from tests.test_cli import start_serve
from tests.test_cli_errors import STRONG


@pytest.mark.anyio
async def test_refused_handshakes_are_logged_once_a_minute_per_address(tmp_path):
    served = start_serve(tmp_path, "--no-plugins", "--sessions", "memory")
    try:
        for offered in ("", "?token=" + STRONG, "?tok%65n=" + STRONG, "?token=" + STRONG):
            with pytest.raises(InvalidStatus) as refusal:
                await connect(served.url + offered)
            assert refusal.value.response.status_code == 401
        async with connect(f"{served.url}?token={served.token}") as ws:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            await ws.recv()
    finally:
        served.process.send_signal(signal.SIGTERM)
        served.process.wait(30)
    stderr = served.process.stderr.read() if served.process.stderr else ""
    lines = [line for line in stderr.splitlines() if "refused a connection" in line]
    assert len(lines) == 1, stderr
    assert lines[0].endswith("refused a connection from 127.0.0.1: no token")
    assert STRONG not in stderr and served.token not in stderr


def test_the_refusals_left_out_are_counted_in_the_next_line(caplog):
    refusals = RefusalLog(interval=0.2)
    with caplog.at_level(logging.WARNING, logger="ahpcore.transports.websocket"):
        for _ in range(3):
            refusals.refused("127.0.0.1", "wrong token", "loopback")
        refusals.refused("192.0.2.7", "no token")
        refusals.refused("127.0.0.2", "wrong token", "loopback")  # all of loopback is one
        time.sleep(0.25)
        refusals.refused("127.0.0.1", "no token", "loopback")
    assert [record.getMessage() for record in caplog.records] == [
        "refused a connection from 127.0.0.1: wrong token",
        "refused a connection from 192.0.2.7: no token",
        "refused a connection from 127.0.0.1: no token "
        "(3 more refused from this address since the last such line)",
    ]


def test_refusals_are_remembered_for_a_bounded_number_of_addresses():
    refusals = RefusalLog()
    for n in range(10_000):
        refusals.refused(f"10.0.{n // 256}.{n % 256}", "no token")
    assert len(refusals._seen) <= 4096
