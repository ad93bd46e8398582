"""The check's WebSocket client: every frame the host sends is recorded and checked.

Each connection checks every frame strictly against the protocol's newest
shapes (closed objects: a key the protocol does not declare is an issue),
watches ``serverSeq`` and the ids of answers, and keeps the snapshots and
action envelopes it received so a replay can be compared with a fresh
snapshot. Problems are collected in a shared ``Observations``, not raised:
the checks that judge them run at the end and name them. Every wait is
bounded; a host that never answers makes ``NoAnswer``, not a hang.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from ahpcore.protocol.errors import METHOD_NOT_FOUND
from ahpcore.protocol.methods import COMMANDS
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.protocol.wire import format_issues, validate_frame

#: The largest frame taken from a host (a snapshot of a long chat can be large).
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: Issues kept per run: enough to show a pattern, bounded against a host that floods.
MAX_KEPT = 50

#: Stands in for the client's own action when checking a refusal, whose ``action``
#: is whatever the client sent; what the host wrote is the rest of the envelope.
_ANY_VALID_ACTION = {"type": "root/activeSessionsChanged", "activeSessions": 0}


class CheckError(Exception):
    """A check cannot go on: the host did not answer, or answered what cannot be used."""


class NoAnswer(CheckError):
    """Nothing matching arrived in time."""


class Refused(CheckError):
    """The host would not open a connection."""


def _show(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Answer:
    """A response frame: a result or an error."""

    frame: dict[str, Any]

    @property
    def ok(self) -> bool:
        return "result" in self.frame and "error" not in self.frame

    @property
    def result(self) -> Any:
        return self.frame.get("result")

    @property
    def error(self) -> dict[str, Any]:
        error = self.frame.get("error")
        return error if isinstance(error, dict) else {}

    @property
    def code(self) -> Any:
        return self.error.get("code")

    def describe(self) -> str:
        if self.ok:
            return f"a result {_show(self.result, 120)}"
        return f"error {self.code} ({_show(self.error.get('message', ''), 120)})"


@dataclass
class Observations:
    """What every connection of one run saw, for the checks that judge the whole run."""

    frames: int = 0
    actions: int = 0
    binary_frames: int = 0
    #: Strict-validation problems, each naming the frame it was found in.
    issues: list[str] = field(default_factory=list)
    issue_count: int = 0
    seq_faults: list[str] = field(default_factory=list)
    id_faults: list[str] = field(default_factory=list)

    def add(self, kept: list[str], text: str) -> None:
        if kept is self.issues:
            self.issue_count += 1
        if len(kept) < MAX_KEPT:
            kept.append(text)


class HostConnection:
    """One WebSocket connection to the host under check."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        timeout: float,
        observations: Observations,
        client_id: str,
        label: str,
    ) -> None:
        self.url = url
        self.token = token
        self.timeout = timeout
        self.seen = observations
        self.client_id = client_id
        self.label = label
        self.ws: ClientConnection | None = None
        #: Every frame received (parsed), in order.
        self.frames: list[dict[str, Any]] = []
        #: The latest snapshot of each channel: (fromSeq, state).
        self.snapshots: dict[str, tuple[Any, Any]] = {}
        #: The serverSeq initialize answered with, and the highest one an action carried.
        self.initial_seq: Any = None
        self.last_seq: Any = None
        self._ids = itertools.count(1)
        self._client_seq = itertools.count(1)
        self._pending: dict[Any, str] = {}
        self._backlog: list[dict[str, Any]] = []

    # -- opening and closing

    async def open(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with anyio.fail_after(self.timeout):
                self.ws = await connect(
                    self.url,
                    additional_headers=headers,
                    open_timeout=self.timeout,
                    close_timeout=min(self.timeout, 2.0),
                    max_size=MAX_FRAME_BYTES,
                    ping_interval=None,
                )
        except InvalidStatus as exc:
            status = exc.response.status_code
            hint = " (a wrong or missing --token?)" if status in (401, 403) else ""
            raise Refused(f"the host refused the WebSocket with HTTP {status}{hint}") from None
        except TimeoutError:
            raise NoAnswer(f"no WebSocket handshake within {self.timeout:g}s") from None
        except OSError as exc:
            raise Refused(f"cannot connect to {self.url}: {exc.strerror or exc}") from None
        except Exception as exc:  # an address websockets cannot use, a bad handshake
            raise Refused(f"cannot open a WebSocket to {self.url}: {exc}") from None

    async def close(self) -> None:
        if self.ws is not None:
            with anyio.move_on_after(2.0, shield=True):
                await self.ws.close()

    @property
    def is_open(self) -> bool:
        from websockets.protocol import State

        return self.ws is not None and self.ws.state is State.OPEN

    # -- sending

    async def send_text(self, text: str) -> None:
        assert self.ws is not None, "open the connection first"
        try:
            await self.ws.send(text)
        except ConnectionClosed as exc:
            raise CheckError(_closed(exc)) from None

    async def send(self, message: dict[str, Any]) -> None:
        if "id" in message and "method" in message:
            self._pending[message["id"]] = message["method"]
        await self.send_text(json.dumps(message))

    def next_id(self) -> int:
        return next(self._ids)

    def expect_answer(self, ident: Any, method: str) -> None:
        """Note a request sent as raw text, so its answer is not taken for a stray one."""
        self._pending[ident] = method

    async def request(
        self, method: str, params: Any = None, *, timeout: float | None = None, omit: bool = False
    ) -> Answer:
        """Send a request and wait (bounded) for its answer, result or error."""
        ident = self.next_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if not omit:
            message["params"] = params
        await self.send(message)
        frame = await self.recv_until(
            lambda f: f.get("id") == ident and "method" not in f,
            timeout,
            waiting_for=f"an answer to {method}",
        )
        return Answer(frame)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if method == "unsubscribe":
            self.snapshots.pop(params.get("channel", ""), None)
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def dispatch(self, channel: str, action: dict[str, Any]) -> int:
        """Dispatch an action; returns the clientSeq it carried."""
        seq = next(self._client_seq)
        await self.notify(
            "dispatchAction", {"channel": channel, "clientSeq": seq, "action": action}
        )
        return seq

    async def initialize(
        self,
        versions: Iterable[str],
        subscriptions: Iterable[str] = (ROOT_CHANNEL,),
        *,
        client_id: str | None = None,
    ) -> Answer:
        answer = await self.request(
            "initialize",
            {
                "channel": ROOT_CHANNEL,
                "protocolVersions": list(versions),
                "clientId": client_id or self.client_id,
                "initialSubscriptions": list(subscriptions),
                "clientInfo": {"name": "ahp-check"},
            },
        )
        if answer.ok and isinstance(answer.result, dict):
            self.initial_seq = answer.result.get("serverSeq")
        return answer

    async def sync(self) -> None:
        """Wait until every frame the host sent before now has arrived (a ping round trip)."""
        answer = await self.request("ping", {"channel": ROOT_CHANNEL})
        if not answer.ok:
            raise CheckError(f"ping answered {answer.describe()}")

    # -- receiving

    async def _receive(self) -> dict[str, Any]:
        assert self.ws is not None, "open the connection first"
        while True:
            try:
                data = await self.ws.recv()
            except ConnectionClosed as exc:
                raise CheckError(_closed(exc)) from None
            self.seen.frames += 1
            if isinstance(data, bytes):
                self.seen.binary_frames += 1
            frame = self._parse(data)
            if frame is None:
                continue
            self.frames.append(frame)
            await self._observe(frame)
            return frame

    def _parse(self, data: str | bytes) -> dict[str, Any] | None:
        try:
            frame = json.loads(data)
        except ValueError:
            self.seen.add(
                self.seen.issues, f"{self.label}: a frame that is not JSON: {_show(data)}"
            )
            return None
        if not isinstance(frame, dict):
            self.seen.add(
                self.seen.issues, f"{self.label}: a frame that is not a JSON object: {_show(frame)}"
            )
            return None
        return frame

    async def _observe(self, frame: dict[str, Any]) -> None:
        method: str | None = None
        if "method" not in frame and "id" in frame:
            ident = frame["id"]
            asked = self._pending.pop(ident, None)
            if asked is None and ident is not None:
                self.seen.add(
                    self.seen.id_faults,
                    f"{self.label}: an answer with id {_show(ident)}, which no pending request has"
                    " (never asked, or answered twice)",
                )
            method = asked if asked in COMMANDS else None
        self._validate(frame, method)
        if frame.get("method") == "action":
            self._note_action(frame.get("params"))
        elif isinstance(frame.get("result"), dict):
            self._note_snapshots(frame["result"])
        if "method" in frame and "id" in frame:
            # The host asks something of the client: this client serves nothing.
            await self.send(
                {
                    "jsonrpc": "2.0",
                    "id": frame["id"],
                    "error": {"code": METHOD_NOT_FOUND, "message": "ahp check serves nothing"},
                }
            )

    def _validate(self, frame: dict[str, Any], method: str | None) -> None:
        checked = frame
        params = frame.get("params")
        if (
            frame.get("method") == "action"
            and isinstance(params, dict)
            and "rejectionReason" in params
        ):
            checked = {**frame, "params": {**params, "action": _ANY_VALID_ACTION}}
        issues = validate_frame(checked, direction="server", request_method=method)
        if issues:
            what = frame.get("method") or (f"the answer to {method}" if method else "an answer")
            self.seen.add(
                self.seen.issues,
                f"{self.label}, in {what}:\n" + format_issues(issues),
            )

    def _note_action(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        self.seen.actions += 1
        seq = params.get("serverSeq")
        if not isinstance(seq, int | float) or isinstance(seq, bool):
            return  # the strict check names it
        channel = params.get("channel")
        if self.last_seq is not None and seq < self.last_seq:
            self.seen.add(
                self.seen.seq_faults,
                f"{self.label}: serverSeq went back from {self.last_seq} to {seq} "
                f"({_show(params.get('action', {}).get('type'))} on {channel})",
            )
        elif self.initial_seq is not None and seq < self.initial_seq:
            self.seen.add(
                self.seen.seq_faults,
                f"{self.label}: an action with serverSeq {seq}, below the {self.initial_seq} "
                "initialize answered with",
            )
        self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)

    def _note_snapshots(self, result: dict[str, Any]) -> None:
        found = list(result.get("snapshots") or []) if result.get("type") != "replay" else []
        if isinstance(result.get("snapshot"), dict):
            found.append(result["snapshot"])
        for snapshot in found:
            if isinstance(snapshot, dict) and isinstance(snapshot.get("resource"), str):
                self.snapshots[snapshot["resource"]] = (
                    snapshot.get("fromSeq"),
                    snapshot.get("state"),
                )

    async def recv(self, timeout: float | None = None) -> dict[str, Any]:
        if self._backlog:
            return self._backlog.pop(0)
        return await self.recv_until(lambda f: True, timeout)

    async def recv_until(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float | None = None,
        *,
        waiting_for: str = "a frame",
    ) -> dict[str, Any]:
        """The first frame matching ``predicate``; others are kept for later waits."""
        for index, frame in enumerate(self._backlog):
            if predicate(frame):
                return self._backlog.pop(index)
        limit = self.timeout if timeout is None else timeout
        try:
            with anyio.fail_after(limit):
                while True:
                    frame = await self._receive()
                    if predicate(frame):
                        return frame
                    self._backlog.append(frame)
        except TimeoutError:
            raise NoAnswer(f"waited {limit:g}s for {waiting_for}; nothing came") from None

    def drain_backlog(self, predicate: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """Take every kept frame matching ``predicate``."""
        taken = [frame for frame in self._backlog if predicate(frame)]
        self._backlog = [frame for frame in self._backlog if not predicate(frame)]
        return taken

    async def answer_to(self, client_seq: int, timeout: float | None = None) -> dict[str, Any]:
        """The envelope answering one of this connection's dispatches (echo or refusal)."""
        frame = await self.recv_until(
            lambda f: (
                f.get("method") == "action"
                and isinstance(f.get("params"), dict)
                and isinstance(f["params"].get("origin"), dict)
                and f["params"]["origin"].get("clientId") == self.client_id
                and f["params"]["origin"].get("clientSeq") == client_seq
            ),
            timeout,
            waiting_for=f"echo of this client's action #{client_seq}",
        )
        return dict(frame["params"])

    def actions_for(self, channel: str) -> list[dict[str, Any]]:
        """Envelopes received for ``channel`` that may change state (refusals left out)."""
        return [
            frame["params"]
            for frame in self.frames
            if frame.get("method") == "action"
            and isinstance(frame.get("params"), dict)
            and frame["params"].get("channel") == channel
            and "rejectionReason" not in frame["params"]
        ]


def _closed(exc: ConnectionClosed) -> str:
    received = exc.rcvd
    if received is None:
        return "the host dropped the connection"
    reason = f": {received.reason}" if received.reason else ""
    return f"the host closed the connection (code {received.code}{reason})"
