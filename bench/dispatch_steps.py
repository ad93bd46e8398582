"""What one dispatched chat/draftChanged costs each step of the engine, in-process.

No sockets and no other process: the steps ``outside.py dispatch`` measures
from outside, timed one by one with CPU time (best of five passes over
20,000 drafts), so a change to one step shows in its own figure rather than
in the noise of a whole run. The watcher's wire takes frames and drops them.

    .venv/bin/python bench/dispatch_steps.py

This is a benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from ahpcore import reducers
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.engine.params import check_action, load_models
from ahpcore.engine.router import Router
from ahpcore.engine.service import ProtocolService, root_config_value
from ahpcore.rpc.framing import dumps, parse
from ahpcore.rpc.peer import Peer

COUNT = 20_000
CHAT = "ahp-chat:/bench"


class DroppingWire:
    """A wire that is never behind and takes every frame."""

    label = "bench"

    def write_now(self, text: str) -> None:
        pass

    @staticmethod
    def write_many(wires: list[Any], text: str) -> list[Any]:
        return []

    def buffered_bytes(self) -> int:
        return 0

    async def send(self, text: str) -> None:
        pass

    async def close(self, code: int = 1000, reason: str = "") -> None:
        pass


def _draft(i: int) -> dict[str, Any]:
    return {
        "type": "chat/draftChanged",
        "draft": {"text": f"draft {i}", "origin": {"kind": "user"}},
    }


def _report(name: str, seconds: float) -> None:
    print(f"{name:<44}{seconds / COUNT * 1e6:>8.2f} us")


def best(step: Callable[[Any], Any], items: list[Any]) -> float:
    times = []
    for _ in range(5):
        start = time.process_time()
        for item in items:
            step(item)
        times.append(time.process_time() - start)
    return min(times)


async def best_async(step: Callable[[Any], Awaitable[Any]], items: list[Any]) -> float:
    times = []
    for _ in range(5):
        start = time.process_time()
        for item in items:
            await step(item)
        times.append(time.process_time() - start)
    return min(times)


async def main() -> None:
    await load_models("DispatchActionParams")
    engine = Engine(
        {"config": {"schema": {}, "values": {}}},
        replay_bytes=lambda: root_config_value(engine, "replayBytes", 32 << 20),
    )
    router = Router()
    ProtocolService(engine, router)
    state = {"resource": CHAT, "title": "t", "status": 1, "modifiedAt": "x", "turns": []}
    engine.add_channel(CHAT, "chat", state)
    peer = Peer(
        DroppingWire(),
        on_request=None,  # type: ignore[arg-type]
        on_notification=None,  # type: ignore[arg-type]
        queue_limit=lambda: 1 << 30,
    )
    client = Client(peer, client_id="sender")
    engine.connect(client)
    await engine.subscribe(client, CHAT)

    actions = [_draft(i) for i in range(COUNT)]
    params = [{"channel": CHAT, "clientSeq": i, "action": a} for i, a in enumerate(actions)]
    frames = [
        json.dumps({"jsonrpc": "2.0", "method": "dispatchAction", "params": p}) for p in params
    ]
    envelopes = [
        {
            "jsonrpc": "2.0",
            "method": "action",
            "params": {
                "channel": CHAT,
                "action": a,
                "serverSeq": 1_764_556_000_000 + i,
                "origin": {"clientId": "sender", "clientSeq": i},
            },
        }
        for i, a in enumerate(actions)
    ]
    origin = {"clientId": "sender", "clientSeq": 1}
    print(f"## one chat/draftChanged, CPU per action, best of 5 x {COUNT}")
    _report("json.loads of the frame (bare's parse)", best(json.loads, frames))
    _report("framing.parse (bounds, json, JSON-RPC shape)", best(parse, frames))
    _report("check_action (pydantic validate and dump)", best(check_action, actions))
    _report(
        "reduce",
        best(lambda a: reducers.reduce("chat", engine.channels[CHAT].state, a), actions),
    )
    _report(
        "json dumps of the envelope + UTF-8 size",
        best(lambda e: len(dumps(e).encode("utf-8")), envelopes),
    )
    try:
        from ahpcore.rpc.framing import dumps_weighed
    except ImportError:  # an older checkout, measured for comparison
        pass
    else:
        _report("dumps_weighed of the envelope", best(dumps_weighed, envelopes))
    _report(
        "Engine.apply (reduce, number, buffer, write)",
        best(lambda a: engine.apply(CHAT, a, origin), actions),
    )

    async def dispatch(p: dict[str, Any]) -> None:
        await engine.dispatch_from_client(client, p)

    _report("Engine.dispatch_from_client", await best_async(dispatch, params))

    async def whole(frame: str) -> None:
        message = parse(frame)
        await router.notification(client, message.method, message.params)

    _report("parse + Router.notification + the engine", await best_async(whole, frames))


if __name__ == "__main__":
    anyio.run(main)
