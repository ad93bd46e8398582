"""Wrong tokens are slowed per address, with all of loopback one address, and host-wide:
rotating 127.x.y.z source addresses (all routed to loopback on Linux) does not reset it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from ahpcore.host import HostSettings
from ahpcore.transports.websocket import FailureThrottle, address_key, start_websocket_server
from tests.hardening.handshakes import handshake

pytestmark = pytest.mark.anyio
TOKEN = "the-right-token-for-this-test"


@asynccontextmanager
async def guarded(ahp_host, throttle: FailureThrottle) -> AsyncIterator[str]:
    """The URL of a server with ``throttle`` in front of a running host."""
    async with ahp_host(no_plugins=True, settings=HostSettings(sessions="memory", port=0)) as run:
        server = await start_websocket_server(
            run.host.serve_connection,
            host="127.0.0.1",
            port=0,
            token=TOKEN,
            max_frame_bytes=1 << 20,
            compression=False,
            throttle=throttle,
        )
        try:
            yield f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}/"
        finally:
            server.close()
            await server.wait_closed()


async def timed_guess(url: str, source: str) -> float:
    started = time.monotonic()
    status, _, _ = await handshake(url + "?token=guess", source=source)
    assert status == 401
    return time.monotonic() - started


def test_all_of_loopback_is_one_address():
    loopback = address_key("127.0.0.1")
    for other in ("127.0.0.2", "127.255.1.9", "::1", "::ffff:127.0.0.5", "[::1]"):
        assert address_key(other) == loopback, other
    assert address_key("192.0.2.1") != loopback
    assert address_key("192.0.2.1") != address_key("192.0.2.2")
    # An IPv6 host is its /64: rotating the low bits is one address too.
    assert address_key("2001:db8:1:2::5") == address_key("2001:db8:1:2:ffff::9")
    assert address_key("2001:db8:1:2::5") != address_key("2001:db8:1:3::5")


async def test_rotating_loopback_source_addresses_is_slowed_like_one(ahp_host):
    throttle = FailureThrottle(free=3, base=0.1, cap=0.4)
    async with guarded(ahp_host, throttle) as url:
        timings = [await timed_guess(url, f"127.0.0.{n}") for n in range(2, 8)]
        assert timings[3] >= 0.1 and timings[4] >= 0.2 and timings[5] >= 0.4, timings
        # Guessing in parallel from several of them queues up as from one.
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for n in range(10, 13):
                tg.start_soon(timed_guess, url, f"127.0.{n}.1")
        assert time.monotonic() - started >= 3 * 0.4 - 0.05
        # The right token is never held up.
        started = time.monotonic()
        status, _, _ = await handshake(url + f"?token={TOKEN}", source="127.0.0.9")
        assert status == 101 and time.monotonic() - started < 0.4


async def test_wrong_tokens_from_everywhere_are_slowed_together(ahp_host):
    # Generous per address, strict host-wide: the host-wide count is what slows these.
    throttle = FailureThrottle(free=100, base=0.1, cap=0.4, host_free=3)
    async with guarded(ahp_host, throttle) as url:
        timings = [await timed_guess(url, "127.0.0.1") for _ in range(5)]
        assert timings[3] >= 0.1 and timings[4] >= 0.2, timings
        started = time.monotonic()
        status, _, _ = await handshake(url + f"?token={TOKEN}")
        assert status == 101 and time.monotonic() - started < 0.1
        # A right token clears its own address, not the host-wide record.
        assert throttle.delay_for("127.0.0.1") >= 0.4
        assert throttle.delay_for("192.0.2.7") >= 0.4
