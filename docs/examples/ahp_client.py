#!/usr/bin/env python3
"""A small Agent Host Protocol client: one session with the demo agent, start to end.

    python ahp_client.py 'ws://127.0.0.1:8765/?token=…'

It needs Python 3.11 or newer, the ``websockets`` package, and a host that
serves the scripted demo agent (``ahp-scripted``). It creates a session, asks
the agent to echo a word and approves the tool call, answers the agent's
question, starts a slow turn, loses its connection and reconnects, cancels the
turn, and lists the host's sessions a page at a time. docs/clients.md explains
each step; ``--record FILE`` writes every frame sent and received to FILE, one
JSON object a line.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, TextIO

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

ROOT = "ahp-root://"
#: Every wait for the host is bounded: a host that stops answering is an error, not a hang.
TIMEOUT = 30.0


class HostError(Exception):
    """The host answered a request with an error, or refused an action."""


def now() -> str:
    """The time as the protocol writes it (ISO 8601, UTC, milliseconds)."""
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


class Client:
    """One client of one host: its id, what it watches, and the last serverSeq it saw.

    The id, the subscriptions and ``last_seen`` outlive a connection: they are
    what ``reconnect`` presents on the next one.
    """

    def __init__(self, url: str, client_id: str, record: TextIO | None = None) -> None:
        self.url = url
        self.client_id = client_id
        self.record = record
        self.subscriptions: list[str] = [ROOT]
        self.last_seen = 0
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._client_seqs = itertools.count(1)
        self._asked: dict[int, str] = {}
        #: Frames that arrived while waiting for something else, oldest first.
        self._backlog: list[dict[str, Any]] = []

    # -- the wire -------------------------------------------------------------------
    async def open(self) -> None:
        self._ws = await connect(self.url, open_timeout=TIMEOUT, max_size=None)
        self._backlog.clear()

    async def drop(self) -> None:
        """Close the connection, as a network failure would."""
        if self._ws is not None:
            await self._ws.close()
        self._ws = None

    def _log(self, sender: str, frame: dict[str, Any], answers: str | None = None) -> None:
        if self.record is not None:
            line = {"from": sender, "answers": answers, "frame": frame}
            self.record.write(json.dumps(line, ensure_ascii=False) + "\n")

    async def _send(self, frame: dict[str, Any]) -> None:
        assert self._ws is not None, "not connected"
        self._log("client", frame)
        await self._ws.send(json.dumps(frame))

    async def _receive(self) -> dict[str, Any]:
        assert self._ws is not None, "not connected"
        frame: dict[str, Any] = json.loads(await asyncio.wait_for(self._ws.recv(), TIMEOUT))
        answers = self._asked.pop(frame["id"], None) if "id" in frame else None
        self._log("host", frame, answers)
        if frame.get("method") == "action":
            self.last_seen = max(self.last_seen, frame["params"]["serverSeq"])
        return frame

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request and wait for its answer; other frames wait in the backlog."""
        ident = next(self._ids)
        self._asked[ident] = method
        await self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            frame = await self._receive()
            if frame.get("id") == ident and "method" not in frame:
                break
            self._backlog.append(frame)
        if "error" in frame:
            error = frame["error"]
            raise HostError(f"{method} failed ({error['code']}): {error['message']}")
        return frame["result"]

    async def dispatch(self, channel: str, action: dict[str, Any]) -> int:
        """Dispatch an action on a channel; returns its clientSeq, which the host echoes."""
        seq = next(self._client_seqs)
        params = {"channel": channel, "clientSeq": seq, "action": action}
        await self._send({"jsonrpc": "2.0", "method": "dispatchAction", "params": params})
        return seq

    async def next_action(self, channel: str) -> dict[str, Any]:
        """The next action envelope on ``channel`` (a refusal of ours raises HostError)."""
        while True:
            frame = self._backlog.pop(0) if self._backlog else await self._receive()
            params = frame.get("params") or {}
            if frame.get("method") != "action" or params.get("channel") != channel:
                continue
            if "rejectionReason" in params:
                what = params["action"]["type"]
                raise HostError(f"{what} refused: {params['rejectionReason']}")
            return dict(params)

    # -- the protocol ---------------------------------------------------------------
    async def initialize(self) -> dict[str, Any]:
        params = {
            "channel": ROOT,
            "protocolVersions": ["1.0.0"],
            "clientId": self.client_id,
            "initialSubscriptions": [ROOT],
        }
        result: dict[str, Any] = await self.request("initialize", params)
        self.last_seen = max(self.last_seen, result["serverSeq"])
        return result

    async def subscribe(self, channel: str) -> dict[str, Any]:
        result = await self.request("subscribe", {"channel": channel})
        snapshot: dict[str, Any] = result["snapshot"]
        self.last_seen = max(self.last_seen, snapshot["fromSeq"])
        if channel not in self.subscriptions:
            self.subscriptions.append(channel)
        return snapshot

    async def reconnect(self) -> dict[str, Any]:
        """A new connection that picks up where the last one left off."""
        await self.open()
        params = {
            "channel": ROOT,
            "clientId": self.client_id,
            "lastSeenServerSeq": self.last_seen,
            "subscriptions": self.subscriptions,
        }
        answer: dict[str, Any] = await self.request("reconnect", params)
        if answer["type"] == "replay":
            # What was missed, in order: put it where next_action looks first.
            for envelope in answer["actions"]:
                self.last_seen = max(self.last_seen, envelope["serverSeq"])
            frames = [{"method": "action", "params": env} for env in answer["actions"]]
            self._backlog[:0] = frames
        else:
            for snapshot in answer["snapshots"]:
                self.last_seen = max(self.last_seen, snapshot["fromSeq"])
        return answer


class Turn:
    """One turn of a chat: started with a client-made id and time, read until it ends."""

    ENDS = ("chat/turnComplete", "chat/turnCancelled", "chat/error")

    def __init__(self, client: Client, chat: str, text: str) -> None:
        self.client, self.chat, self.text = client, chat, text
        self.id = str(uuid.uuid4())
        self.started = time.monotonic()

    async def start(self) -> None:
        message = {"text": self.text, "origin": {"kind": "user"}}
        action = {"type": "chat/turnStarted", "turnId": self.id, "startedAt": now()}
        await self.client.dispatch(self.chat, {**action, "message": message})

    async def follow(
        self,
        *,
        approve: bool = True,
        answer: str = "Ada",
        until: Callable[[dict[str, Any]], bool] | None = None,
        out: TextIO = sys.stdout,
    ) -> dict[str, Any]:
        """Print what the agent says, settle what it asks, and return the action that ended
        the turn (or the first action ``until`` accepts)."""
        while True:
            action: dict[str, Any] = (await self.client.next_action(self.chat))["action"]
            if action.get("turnId", self.id) != self.id:
                continue
            kind = action["type"]
            if kind == "chat/responsePart" and action["part"]["kind"] == "markdown":
                out.write(action["part"]["content"])
            elif kind == "chat/delta":
                out.write(action["content"])
            elif kind == "chat/toolCallReady" and "confirmed" not in action:
                # Ready and not yet confirmed: the agent waits for a person's yes or no.
                title = action.get("confirmationTitle") or action["invocationMessage"]
                out.write(f"\n[{title} {'yes' if approve else 'no'}]\n")
                await self.confirm(action["toolCallId"], approve)
            elif kind == "chat/inputRequested":
                request = action["request"]
                out.write(f"\n[{request.get('message') or 'A question'}: {answer}]\n")
                await self.reply(request, answer)
            out.flush()
            if kind in self.ENDS or (until is not None and until(action)):
                if kind in self.ENDS:
                    out.write("\n")
                return action

    async def confirm(self, tool_call_id: str, approve: bool) -> None:
        decision: dict[str, Any] = {
            "type": "chat/toolCallConfirmed",
            "turnId": self.id,
            "toolCallId": tool_call_id,
            "approved": approve,
        }
        decision.update({"confirmed": "user-action"} if approve else {"reason": "denied"})
        await self.client.dispatch(self.chat, decision)

    async def reply(self, request: dict[str, Any], text: str) -> None:
        """Answer every question of an input request with ``text``."""
        answers = {
            question["id"]: {"state": "submitted", "value": {"kind": "text", "value": text}}
            for question in request.get("questions", [])
        }
        completed = {"type": "chat/inputCompleted", "requestId": request["id"]}
        await self.client.dispatch(
            self.chat, {**completed, "response": "accept", "answers": answers}
        )

    async def cancel(self) -> None:
        duration = int((time.monotonic() - self.started) * 1000)
        cancelled = {"type": "chat/turnCancelled", "turnId": self.id, "duration": duration}
        await self.client.dispatch(self.chat, cancelled)


async def tour(url: str, provider: str, record: TextIO | None, out: TextIO) -> None:
    client = Client(url, f"example-{uuid.uuid4()}", record)
    await client.open()
    root = (await client.initialize())["snapshots"][0]["state"]
    providers = [agent["provider"] for agent in root["agents"]]
    if provider not in providers:
        raise HostError(
            f"this host offers no {provider!r} agent (it offers {', '.join(providers) or 'none'}); "
            "start it with the demo agent installed: ahp serve --plugins scripted"
        )

    # A session: the client names it, the host answers null once it exists.
    session = f"ahp-session:/{uuid.uuid4()}"
    await client.request("createSession", {"channel": session, "provider": provider})
    chat = (await client.subscribe(session))["state"]["defaultChat"]
    await client.subscribe(chat)
    out.write(f"session {session}\n")

    for text in ("echo hello", "ask"):
        out.write(f"> {text}\n")
        turn = Turn(client, chat, text)
        await turn.start()
        await turn.follow(out=out)

    # A slow turn; the connection drops while it runs, and the client comes back.
    out.write("> slow\n")
    slow = Turn(client, chat, "slow")
    await slow.start()
    await slow.follow(until=lambda action: action["type"] == "chat/delta", out=out)
    await client.drop()
    await asyncio.sleep(1.0)
    answer = await client.reconnect()
    out.write(f"\n[reconnected: {answer['type']}]\n")
    await slow.follow(until=lambda action: action["type"] == "chat/delta", out=out)
    await slow.cancel()
    ended = await slow.follow(out=out)
    out.write(f"[{ended['type']}]\n")

    # Every session on the host, a page of one at a time.
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"channel": ROOT, "limit": 1}
        if cursor is not None:
            params["cursor"] = cursor
        page = await client.request("listSessions", params)
        for item in page["items"]:
            out.write(f"listed {item['resource']}: {item['title']}\n")
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    await client.drop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("url", help="the host's address with its token: ws://HOST:PORT/?token=…")
    parser.add_argument("--provider", default="scripted", help="the agent to talk to")
    parser.add_argument("--record", metavar="FILE", help="write every frame to FILE (JSON lines)")
    args = parser.parse_args(argv)
    record = open(args.record, "w", encoding="utf-8") if args.record else None  # noqa: SIM115
    try:
        asyncio.run(tour(args.url, args.provider, record, sys.stdout))
    except (HostError, WebSocketException, OSError, TimeoutError) as error:
        print(f"ahp_client: {error}", file=sys.stderr)
        return 1
    finally:
        if record is not None:
            record.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
