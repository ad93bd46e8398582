"""Many connections sending requests, each within its own inbound budget, from a process
of its own (so the flood's sending does not count against the host's event loop).

    python -m tests.hardening.flooder URL CONNECTIONS FRAMES_PER_SECOND SECONDS

Prints ``ready`` once every connection is open and initialized, then waits for a
line on stdin before it floods; prints ``sent <frames> answered <answers>`` at the end.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from websockets.asyncio.client import ClientConnection, connect

PING = '{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"channel":"ahp-root://"}}'


async def _open(url: str, n: int) -> ClientConnection:
    ws = await connect(url, max_size=None, max_queue=None, compression=None)
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "channel": "ahp-root://",
            "protocolVersions": ["1.0.0"],
            "clientId": f"flooder-{n}",
            "initialSubscriptions": [],
        },
    }
    await ws.send(json.dumps(initialize))
    while json.loads(await ws.recv()).get("id") != 0:
        pass
    return ws


async def _flood(ws: ClientConnection, rate: float, until: float) -> int:
    started, sent = time.monotonic(), 0
    try:
        while (now := time.monotonic()) < until:
            due = int((now - started) * rate) + 1
            while sent < due:
                sent += 1
                await ws.send(PING % sent)
            await asyncio.sleep(0.01)
    except Exception:  # closed by the host: counted as far as it got
        pass
    return sent


async def _drain(ws: ClientConnection, answered: list[int]) -> None:
    try:
        async for _ in ws:
            answered[0] += 1
    except Exception:
        pass


async def main(url: str, connections: int, rate: float, seconds: float) -> None:
    sockets = [await _open(url, n) for n in range(connections)]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    answered = [0]
    drains = [asyncio.create_task(_drain(ws, answered)) for ws in sockets]
    until = time.monotonic() + seconds
    sent = await asyncio.gather(*(_flood(ws, rate, until) for ws in sockets))
    print(f"sent {sum(sent)} answered {answered[0]}", flush=True)
    for ws in sockets:  # what the host has not read yet is dropped with the connection
        ws.transport.abort()
    await asyncio.gather(*drains)


if __name__ == "__main__":
    url, connections, rate, seconds = sys.argv[1:5]
    asyncio.run(main(url, int(connections), float(rate), float(seconds)))
