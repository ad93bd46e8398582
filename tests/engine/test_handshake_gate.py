"""Who may open a connection: browser pages by origin, names by Host on a loopback bind,
and a peer guessing tokens slowed down. Real handshakes over TCP, headers as sent."""

from __future__ import annotations

import base64
import os
import time

import anyio
import pytest

from ahpcore.host import HostSettings
from ahpcore.transports.websocket import FailureThrottle, start_websocket_server

pytestmark = pytest.mark.anyio


async def handshake(
    url: str, headers: dict[str, str], *, upgrade: bool = True
) -> tuple[int, dict[str, str]]:
    """Send one HTTP request exactly as given; the status and headers of the answer."""
    rest = url.removeprefix("ws://")
    address, _, path = rest.partition("/")
    host, _, port = address.rpartition(":")
    lines = [f"GET /{path} HTTP/1.1"]
    sent = {"Host": address}
    if upgrade:
        sent |= {
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
            "Sec-WebSocket-Version": "13",
        }
    sent |= headers
    lines += [f"{key}: {value}" for key, value in sent.items() if value]
    async with await anyio.connect_tcp(host, int(port)) as stream:
        await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())
        received = b""
        with anyio.fail_after(20):
            while b"\r\n\r\n" not in received:
                received += await stream.receive()
    head = received.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    answer = {}
    for line in head[1:]:
        key, _, value = line.partition(":")
        answer[key.strip().lower()] = value.strip()
    return status, answer


EVIL = "https://evil.example"


async def test_a_foreign_page_cannot_open_a_connection_without_a_token(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        status, headers = await handshake(running.url, {"Origin": EVIL})
        assert status == 403
        assert "access-control-allow-origin" not in headers
        # A client that is no browser page sends no Origin and is let in.
        status, _ = await handshake(running.url, {})
        assert status == 101


async def test_loopback_pages_and_the_hosts_own_origin_are_let_in(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        port = running.url.rsplit(":", 1)[1].strip("/")
        for origin in (
            "http://localhost:3000",
            "http://127.0.0.1:5173",
            "http://[::1]",
            f"http://127.0.0.1:{port}",
        ):
            status, _ = await handshake(running.url, {"Origin": origin})
            assert status == 101, origin
        for origin in ("null", "http://localhost.evil.example", "http://127.0.0.1.evil.example"):
            status, _ = await handshake(running.url, {"Origin": origin})
            assert status == 403, origin


async def test_a_rebound_host_name_is_refused_on_a_loopback_bind(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        port = running.url.rsplit(":", 1)[1].strip("/")
        status, headers = await handshake(running.url, {"Host": f"attacker.example:{port}"})
        assert status == 403
        assert "access-control-allow-origin" not in headers
        # Same page, same name: the origin matches the Host, and the Host still decides.
        status, _ = await handshake(
            running.url,
            {"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"},
        )
        assert status == 403
        for name in (f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
            status, _ = await handshake(running.url, {"Host": name})
            assert status == 101, name


async def test_listed_origins_are_let_in_and_the_rest_learn_nothing_of_the_token(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        server = await start_websocket_server(
            running.host.serve_connection,
            host="127.0.0.1",
            port=0,
            token="a-long-enough-token-1234",
            max_frame_bytes=1 << 20,
            compression=False,
            allow_origins=["https://App.Example/"],
        )
        try:
            url = f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}/"
            ok = "?token=a-long-enough-token-1234"
            status, _ = await handshake(url + ok, {"Origin": "https://app.example"})
            assert status == 101
            # A listed page testing a token hears 401 or 426, and may read it.
            status, headers = await handshake(url, {"Origin": "https://app.example"}, upgrade=False)
            assert status == 401 and headers["access-control-allow-origin"] == "*"
            status, headers = await handshake(
                url + ok, {"Origin": "https://app.example"}, upgrade=False
            )
            assert status == 426 and headers["access-control-allow-origin"] == "*"
            # A page not listed hears the same 403 whether its guess was right or not.
            for query in ("", "?token=wrong", ok):
                status, headers = await handshake(url + query, {"Origin": EVIL}, upgrade=False)
                assert status == 403 and "access-control-allow-origin" not in headers
        finally:
            server.close()
            await server.wait_closed()


async def test_repeated_wrong_tokens_are_answered_ever_more_slowly(ahp_host):
    throttle = FailureThrottle(free=3, base=0.1, cap=0.4)
    settings = HostSettings(sessions="memory", port=0)
    async with ahp_host(no_plugins=True, settings=settings) as running:
        server = await start_websocket_server(
            running.host.serve_connection,
            host="127.0.0.1",
            port=0,
            token="the-right-token-for-this-test",
            max_frame_bytes=1 << 20,
            compression=False,
            throttle=throttle,
        )
        try:
            url = f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}/"
            timings = []
            for _ in range(5):
                started = time.monotonic()
                status, _ = await handshake(url + "?token=guess", {})
                timings.append(time.monotonic() - started)
                assert status == 401
            assert timings[3] >= 0.1 and timings[4] >= 0.2, timings
            # Guessing in parallel does not beat it: refusals to one address queue up.
            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(handshake, url + "?token=guess", {})
            assert time.monotonic() - started >= 3 * 0.4 - 0.05
            # The right token is never held up, and clears the record.
            started = time.monotonic()
            status, _ = await handshake(url + "?token=the-right-token-for-this-test", {})
            assert status == 101 and time.monotonic() - started < 0.4
            assert throttle.delay_for("127.0.0.1") == 0.0
        finally:
            server.close()
            await server.wait_closed()
