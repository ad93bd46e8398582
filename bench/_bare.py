"""A bare websockets server doing the jobs bench/outside.py gives the host, and nothing else.

It answers what the benchmark sends with frames of the same shape the host
sends: ``initialize`` with an empty result, a dispatched action with its
envelope echoed to the sender and relayed to every other connection,
``listSessions`` with a list of the size the host would serve (read from the
file ``--list`` names), and a turn with the frames a scripted turn produces.
There is no state, no validation, no store: it is the floor the host is
measured against.

    python bench/_bare.py --port 0 [--list rows.json]

Prints ``listening <port>`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast, serve

CONNECTIONS: set[ServerConnection] = set()
STATE = {"seq": 0}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _envelope(params: dict[str, Any], client_id: str) -> str:
    STATE["seq"] += 1
    return _dumps(
        {
            "jsonrpc": "2.0",
            "method": "action",
            "params": {
                "channel": params["channel"],
                "action": params["action"],
                "serverSeq": STATE["seq"],
                "origin": {"clientId": client_id, "clientSeq": params.get("clientSeq", 0)},
            },
        }
    )


def _turn_frames(channel: str, turn_id: str, reply: str) -> list[str]:
    """What a scripted turn sends after its start: one text part, streamed, then complete."""
    frames = []
    actions: list[dict[str, Any]] = [
        {"type": "chat/responsePart", "turnId": turn_id, "part": {"kind": "markdown", "id": "p"}},
        *(
            {"type": "chat/delta", "turnId": turn_id, "partId": "p", "content": word}
            for word in reply.split(" ")
        ),
        {"type": "chat/turnComplete", "turnId": turn_id, "duration": 1},
    ]
    for action in actions:
        STATE["seq"] += 1
        frames.append(
            _dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "action",
                    "params": {"channel": channel, "action": action, "serverSeq": STATE["seq"]},
                }
            )
        )
    return frames


async def handle(connection: ServerConnection, rows: list[dict[str, Any]], reply: str) -> None:
    CONNECTIONS.add(connection)
    client_id = ""
    try:
        async for text in connection:
            message = json.loads(text)
            method = message.get("method")
            params = message.get("params") or {}
            if method == "initialize":
                client_id = params.get("clientId", "")
                result: Any = {
                    "protocolVersion": "1.0.0",
                    "serverSeq": STATE["seq"],
                    "snapshots": [],
                }
            elif method == "dispatchAction":
                frame = _envelope(params, client_id)
                broadcast(CONNECTIONS, frame)
                action = params["action"]
                if action.get("type") == "chat/turnStarted":
                    for frame in _turn_frames(params["channel"], action["turnId"], reply):
                        await connection.send(frame)
                continue
            elif method == "listSessions":
                limit = params.get("limit")
                result = {"items": rows[:limit] if limit else rows}
            else:
                result = None
            if "id" in message:
                await connection.send(
                    _dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
                )
    finally:
        CONNECTIONS.discard(connection)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--list", default=None, help="JSON file of the rows listSessions returns")
    parser.add_argument("--reply", default="one two three four five six seven eight nine ten")
    parser.add_argument("--no-compression", action="store_true")
    args = parser.parse_args()
    rows = json.loads(Path(args.list).read_text("utf-8")) if args.list else []
    compression = None if args.no_compression else "deflate"

    async def handler(connection: ServerConnection) -> None:
        await handle(connection, rows, args.reply)

    async with serve(
        handler, "127.0.0.1", args.port, max_size=None, compression=compression
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"listening {port}", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
