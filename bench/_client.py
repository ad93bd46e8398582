"""A benchmark client process for bench/fanout.py: holds several WebSocket connections.

Commands arrive one JSON object per line on stdin; answers go to stdout, one word a
line: "ready" once every connection is open and subscribed, "warm" once every
connection has had the warm-up frames, "done" once every connection has its
measured frames. Results go to the file the command names, so the
server's CPU window never includes parsing them.

Receive times are CLOCK_MONOTONIC, which on Linux is one clock for every process on
the machine: the server stamps each frame with the same clock.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

ROOT = "ahp-root://"


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _stamp(message: Any) -> dict[str, Any] | None:
    """The bench stamp an action frame carries, or None for any other frame.

    In a root config change (frames the in-process engine applies) or in a chat
    draft's text (frames a client dispatched, with ``--outside``).
    """
    try:
        action = message["params"]["action"]
        if action.get("type") == "chat/draftChanged":
            stamp: dict[str, Any] = json.loads(action["draft"]["text"])
            return stamp
        return action["config"]["bench"]
    except (KeyError, TypeError, ValueError):
        return None


class Phases:
    """Barriers the connections of one process pass together."""

    def __init__(self, connections: int) -> None:
        self.left = {"ready": connections, "warm": connections}
        self.events = {name: asyncio.Event() for name in self.left}

    def reached(self, name: str) -> None:
        self.left[name] -= 1
        if self.left[name] == 0:
            print(name, flush=True)
            self.events[name].set()


async def _connection(command: dict[str, Any], index: int, phases: Phases) -> dict[str, Any]:
    compression = "deflate" if command["compression"] else None
    latencies: list[float] = []
    first = last = None
    closed = None
    async with connect(command["url"], max_size=None, compression=compression) as ws:
        if command["mode"] == "engine":
            params = {
                "channel": ROOT,
                "protocolVersions": ["1.0.0"],
                "clientId": f"bench-{command['proc']}-{index}",
                "initialSubscriptions": [command.get("channel", ROOT)],
            }
            request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
            await ws.send(json.dumps(request))
            while json.loads(await ws.recv()).get("id") != 1:
                pass
        phases.reached("ready")
        warm = 0
        try:
            while len(latencies) < command["count"]:
                text = await ws.recv()
                received = now()
                stamp = _stamp(json.loads(text))
                if stamp is None:
                    continue
                if stamp.get("warm"):
                    warm += 1
                    if warm == command["warmup"]:
                        phases.reached("warm")
                    continue
                latencies.append(received - stamp["t"])
                first = first if first is not None else received
                last = received
        except ConnectionClosed as exc:
            closed = str(exc)
    return {"latencies": latencies, "first": first, "last": last, "closed": closed}


async def _run(command: dict[str, Any]) -> None:
    phases = Phases(command["connections"])
    tasks = [_connection(command, index, phases) for index in range(command["connections"])]
    results = await asyncio.gather(*tasks)
    with open(command["out"], "w") as out:
        json.dump(results, out)
    print("done", flush=True)


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        command = json.loads(line)
        if command.get("quit"):
            return
        await _run(command)


if __name__ == "__main__":
    asyncio.run(main())
