"""The checks, in the order they run, and the run that holds what they share.

A check is an async function of the run: it returns a detail (pass), or
raises ``Failed`` or ``Skipped`` with the reason; ``CheckError`` (no answer,
a closed connection) is a failure too. A check naming others in ``needs``
is skipped, saying which, unless they passed. Each runs under a deadline of
its own, so a host that never answers fails checks one after another rather
than holding the run.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeGuard

import anyio

from ahpcore.check.client import Answer, CheckError, HostConnection, NoAnswer, Observations
from ahpcore.check.replay import channel_kind, first_difference, fold
from ahpcore.check.results import CheckResult
from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    PARSE_ERROR,
    PROVIDER_NOT_FOUND,
    SESSION_ALREADY_EXISTS,
    SESSION_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from ahpcore.protocol.methods import COMMANDS
from ahpcore.protocol.uris import ROOT_CHANNEL, same_session
from ahpcore.protocol.versions import SUPPORTED_VERSIONS

#: The protocol version the check speaks: the newest, whose schemas it validates against.
NEWEST = SUPPORTED_VERSIONS[0]
#: A version no host speaks (the unsupported-version check confirms it of this one).
UNSPOKEN = "999.0.0"
#: Commands every host serves: a -32601 for one of them is a fault, not an option left out.
REQUIRED_COMMANDS = frozenset({"initialize", "ping", "reconnect", "subscribe", "listSessions"})
#: Commands probed on a connection of their own, before any initialize.
UNINITIALIZED_PROBES = frozenset({"initialize", "reconnect"})
#: Action types that end a turn.
TURN_ENDS = frozenset({"chat/turnComplete", "chat/turnCancelled", "chat/error"})


@dataclass
class Options:
    """What ``ahp check`` was told."""

    url: str
    token: str | None = None
    #: Seconds to wait for one answer or one expected frame.
    timeout: float = 10.0
    #: Seconds a session may take to become ready, and a turn to end.
    turn_timeout: float = 60.0
    #: The provider to create sessions with (default: the first agent needing no sign-in).
    agent: str | None = None
    #: What the turn checks say to the agent.
    prompt: str = "hello"
    #: What the cancel check says before cancelling (the demo agent counts slowly on "slow").
    cancel_prompt: str = "slow"


class Failed(Exception):
    """The host did something the protocol does not allow; the message says what."""


class Skipped(Exception):
    """The check cannot run against this host; the message says why."""


Body = Callable[["Run"], Awaitable[str]]


@dataclass(frozen=True)
class Check:
    name: str
    body: Body
    needs: tuple[str, ...] = ()
    #: Runs under the turn timeout, not the answer timeout.
    slow: bool = False


def _new_session() -> str:
    return f"ahp-session:/{uuid.uuid4()}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _expect_error(answer: Answer, *codes: int, what: str, optional: str | None = None) -> str:
    """The detail of an answer that is one of ``codes``; ``Failed`` otherwise.

    ``optional``: a command a host may leave out, whose -32601 skips the check.
    """
    if optional and not answer.ok and answer.code == METHOD_NOT_FOUND:
        raise Skipped(f"{optional} is not served here (-32601)")
    wanted = " or ".join(str(code) for code in codes)
    if answer.ok:
        raise Failed(f"{what}: answered {answer.describe()}; expected error {wanted}")
    if answer.code not in codes:
        raise Failed(
            f"{what}: answered error {answer.code}; expected {wanted} ({answer.describe()})"
        )
    return f"{what}: error {answer.code}"


@dataclass
class Run:
    options: Options
    seen: Observations = field(default_factory=Observations)
    results: list[CheckResult] = field(default_factory=list)
    connections: list[HostConnection] = field(default_factory=list)
    main: HostConnection | None = None
    init: dict[str, Any] = field(default_factory=dict)
    agent: dict[str, Any] | None = None
    session: str | None = None
    chat: str | None = None
    second_chat: str | None = None
    session_disposed: bool = False
    reconnect_answer: Answer | None = None
    reconnect_unknown: str | None = None
    _labels: int = 0

    async def connect(self, label: str, client_id: str | None = None) -> HostConnection:
        self._labels += 1
        connection = HostConnection(
            self.options.url,
            token=self.options.token,
            timeout=self.options.timeout,
            observations=self.seen,
            client_id=client_id or f"ahp-check-{uuid.uuid4()}",
            label=f"connection {self._labels} ({label})",
        )
        await connection.open()
        self.connections.append(connection)
        return connection

    async def fresh(self, label: str, *, initialize: bool = True) -> HostConnection:
        connection = await self.connect(label)
        if initialize:
            answer = await connection.initialize([NEWEST], [])
            if not answer.ok:
                raise CheckError(f"initialize on a new connection answered {answer.describe()}")
        return connection

    @property
    def host(self) -> HostConnection:
        if self.main is None or not self.main.is_open:
            raise CheckError("the main connection is gone")
        return self.main

    async def close_all(self) -> None:
        if self.session and not self.session_disposed and self.main and self.main.is_open:
            with anyio.move_on_after(self.options.timeout):
                await self.main.request("disposeSession", {"channel": self.session})
        for connection in self.connections:
            await connection.close()


# --------------------------------------------------------------------------
# handshake


async def connect_check(run: Run) -> str:
    run.main = await run.connect("main")
    return f"WebSocket open to {run.options.url}"


async def initialize_check(run: Run) -> str:
    answer = await run.host.initialize([NEWEST])
    if not answer.ok:
        raise Failed(f"initialize offering {NEWEST} answered {answer.describe()}")
    result = answer.result
    if not isinstance(result, dict):
        raise Failed(f"initialize answered {answer.describe()}, not an object")
    run.init = result
    problems = []
    if result.get("protocolVersion") != NEWEST:
        problems.append(
            f"protocolVersion {result.get('protocolVersion')!r}, which the client did not offer"
            f" (it offered [{NEWEST!r}])"
        )
    if not _is_number(result.get("serverSeq")):
        problems.append(f"serverSeq {result.get('serverSeq')!r} is not a number")
    snapshots = result.get("snapshots")
    roots = [
        s for s in snapshots or [] if isinstance(s, dict) and s.get("resource") == ROOT_CHANNEL
    ]
    if not roots:
        problems.append("no snapshot of ahp-root://, which initialSubscriptions asked for")
    if problems:
        raise Failed("initialize answered " + "; ".join(problems))
    agents = (roots[0].get("state") or {}).get("agents") or []
    return (
        f"protocol {result['protocolVersion']}, serverSeq {result['serverSeq']}, "
        f"{len(agents)} agent(s)"
    )


async def ping_before_initialize_check(run: Run) -> str:
    connection = await run.fresh("ping first", initialize=False)
    answer = await connection.request("ping", {"channel": ROOT_CHANNEL})
    if not answer.ok or answer.result is not None:
        raise Failed(f"ping before initialize answered {answer.describe()}; expected a null result")
    return "answered null before initialize"


async def unsupported_version_check(run: Run) -> str:
    connection = await run.fresh("unsupported version", initialize=False)
    answer = await connection.initialize([UNSPOKEN], [])
    detail = _expect_error(
        answer, UNSUPPORTED_PROTOCOL_VERSION, what=f"initialize offering only {UNSPOKEN}"
    )
    data = answer.error.get("data")
    versions = data.get("supportedVersions") if isinstance(data, dict) else None
    if not (isinstance(versions, list) and versions and all(isinstance(v, str) for v in versions)):
        raise Failed(
            f"the -32005 error's data.supportedVersions is {versions!r}: the protocol requires "
            "the list of versions the host speaks"
        )
    return f"{detail}, supportedVersions {versions}"


async def malformed_version_check(run: Run) -> str:
    connection = await run.fresh("malformed version", initialize=False)
    answer = await connection.initialize(["not-a-version"], [])
    return _expect_error(
        answer,
        INVALID_PARAMS,
        UNSUPPORTED_PROTOCOL_VERSION,
        what="initialize offering 'not-a-version'",
    )


async def version_choice_check(run: Run) -> str:
    connection = await run.fresh("version choice", initialize=False)
    offer = [UNSPOKEN, "0.0.1", NEWEST]
    answer = await connection.initialize(offer, [])
    if not answer.ok:
        raise Failed(f"initialize offering {offer} answered {answer.describe()}")
    chosen = answer.result.get("protocolVersion") if isinstance(answer.result, dict) else None
    if chosen != NEWEST:
        raise Failed(
            f"offered {offer}, the host chose {chosen!r}; the highest offered version it speaks"
            f" is {NEWEST!r}"
        )
    return f"offered {offer}, chose {chosen!r}"


# --------------------------------------------------------------------------
# errors


async def unknown_method_check(run: Run) -> str:
    answer = await run.host.request("ahpCheck/noSuchMethod", {"channel": ROOT_CHANNEL})
    return _expect_error(answer, METHOD_NOT_FOUND, what="ahpCheck/noSuchMethod")


async def parse_error_check(run: Run) -> str:
    connection = await run.fresh("parse error")
    await connection.send_text("{this is not json")
    frame = await connection.recv_until(
        lambda f: "method" not in f and f.get("id", "absent") is None,
        waiting_for="an answer (id null) to a frame that is not JSON",
    )
    return _expect_error(Answer(frame), PARSE_ERROR, what="a frame that is not JSON")


async def invalid_request_check(run: Run) -> str:
    connection = await run.fresh("invalid request")
    connection.expect_answer("ahp-check-bad", "")
    await connection.send_text('{"jsonrpc": "2.0", "id": "ahp-check-bad", "method": 42}')
    frame = await connection.recv_until(
        lambda f: "method" not in f and f.get("id", "absent") in ("ahp-check-bad", None),
        waiting_for="an answer to a request whose method is a number",
    )
    return _expect_error(Answer(frame), INVALID_REQUEST, what="a request whose method is 42")


async def params_not_object_check(run: Run) -> str:
    answer = await run.host.request("listSessions", [ROOT_CHANNEL])
    return _expect_error(
        answer, INVALID_PARAMS, INVALID_REQUEST, what='listSessions with params ["ahp-root://"]'
    )


async def invalid_params_check(method: str, run: Run) -> str:
    if method in UNINITIALIZED_PROBES:
        connection = await run.fresh(f"{method} params", initialize=False)
    else:
        connection = run.host
    answer = await connection.request(method, {"channel": 12345})
    what = f"{method} with channel 12345"
    if method == "ping" and answer.ok and answer.result is None:
        return f"{what}: answered null (a keep-alive may be lenient)"
    if not answer.ok and answer.code == METHOD_NOT_FOUND and method not in REQUIRED_COMMANDS:
        return f"{what}: not served here (-32601)"
    return _expect_error(answer, INVALID_PARAMS, what=what)


async def unknown_provider_check(run: Run) -> str:
    uri = _new_session()
    answer = await run.host.request(
        "createSession", {"channel": uri, "provider": "ahp-check-no-such-agent"}
    )
    if answer.ok:
        await run.host.request("disposeSession", {"channel": uri})
    return _expect_error(
        answer,
        PROVIDER_NOT_FOUND,
        what="createSession with provider 'ahp-check-no-such-agent'",
        optional="createSession",
    )


async def unknown_session_check(run: Run) -> str:
    answer = await run.host.request("disposeSession", {"channel": _new_session()})
    return _expect_error(
        answer,
        SESSION_NOT_FOUND,
        what="disposeSession of a session never made",
        optional="disposeSession",
    )


# --------------------------------------------------------------------------
# subscribe


async def subscribe_root_check(run: Run) -> str:
    answer = await run.host.request("subscribe", {"channel": ROOT_CHANNEL})
    if not answer.ok:
        raise Failed(f"subscribe to ahp-root:// answered {answer.describe()}")
    snapshot = answer.result.get("snapshot") if isinstance(answer.result, dict) else None
    if not isinstance(snapshot, dict) or snapshot.get("resource") != ROOT_CHANNEL:
        raise Failed(f"subscribe to ahp-root:// answered {answer.describe()}: no snapshot of it")
    from_seq, initial = snapshot.get("fromSeq"), run.init.get("serverSeq")
    if _is_number(from_seq) and _is_number(initial) and from_seq < initial:
        raise Failed(
            f"the snapshot's fromSeq {from_seq} is below the serverSeq {initial} initialize"
            " answered with earlier"
        )
    return f"snapshot at fromSeq {from_seq}"


async def unknown_channel_check(run: Run) -> str:
    answer = await run.host.request("subscribe", {"channel": _new_session()})
    return _expect_error(
        answer, SESSION_NOT_FOUND, NOT_FOUND, what="subscribe to a session never made"
    )


async def server_seq_check(run: Run) -> str:
    if run.seen.seq_faults:
        raise Failed("\n".join(run.seen.seq_faults[:5]))
    return f"never went back over {run.seen.actions} action(s)"


async def unsubscribe_isolation_check(run: Run) -> str:
    session = _need_session(run)
    leaving = await run.fresh("unsubscribes")
    staying = await run.fresh("stays subscribed")
    for connection in (leaving, staying):
        answer = await connection.request("subscribe", {"channel": session})
        if not answer.ok:
            raise Failed(f"subscribe to {session} answered {answer.describe()}")
    await leaving.notify("unsubscribe", {"channel": session})
    await leaving.sync()
    title = f"ahp check {uuid.uuid4().hex[:8]}"
    await _change_title(run, title)
    await staying.recv_until(
        lambda f: _is_action(f, session, "session/titleChanged", title=title),
        waiting_for=f"session/titleChanged on {session} at the connection still subscribed",
    )
    await leaving.sync()
    stray = [
        f["params"]["action"].get("type")
        for f in leaving.frames
        if _is_action(f, session, "session/titleChanged", title=title)
    ]
    if stray:
        raise Failed(
            f"the connection that unsubscribed from {session} was still sent {stray[0]} on it"
        )
    return "the connection that stayed heard the change; the one that left did not"


# --------------------------------------------------------------------------
# agent


def _need_session(run: Run) -> str:
    if run.agent is None:
        raise Skipped("the host offers no agent this check can use")
    if run.session is None:
        raise Skipped("no session could be created")
    return run.session


def _is_action(frame: dict[str, Any], channel: str, kind: str, **fields: Any) -> bool:
    params = frame.get("params")
    if frame.get("method") != "action" or not isinstance(params, dict):
        return False
    action = params.get("action")
    return (
        params.get("channel") == channel
        and "rejectionReason" not in params
        and isinstance(action, dict)
        and action.get("type") == kind
        and all(action.get(key) == value for key, value in fields.items())
    )


async def _change_title(run: Run, title: str) -> dict[str, Any]:
    session = _need_session(run)
    seq = await run.host.dispatch(session, {"type": "session/titleChanged", "title": title})
    echo = await run.host.answer_to(seq)
    if "rejectionReason" in echo:
        raise Failed(f"the host refused session/titleChanged: {echo['rejectionReason']}")
    return echo


async def agent_offered_check(run: Run) -> str:
    roots = [s for s in run.init.get("snapshots") or [] if s.get("resource") == ROOT_CHANNEL]
    agents = [a for a in (roots[0].get("state") or {}).get("agents") or [] if isinstance(a, dict)]
    if run.options.agent:
        chosen = [a for a in agents if a.get("provider") == run.options.agent]
        if not chosen:
            offered = ", ".join(str(a.get("provider")) for a in agents) or "none"
            raise Failed(f"the host offers no agent {run.options.agent!r} (it offers: {offered})")
    else:
        # An optional sign-in (required: false, such as ahp-users' people) bars nothing.
        chosen = [
            a
            for a in agents
            if not any(r.get("required", True) for r in a.get("protectedResources") or [])
        ]
        if not chosen:
            if agents:
                raise Skipped(
                    "every agent the host offers needs a sign-in first (protectedResources)"
                )
            raise Skipped("the host offers no agent")
    run.agent = chosen[0]
    return f"using {run.agent.get('provider')!r} ({run.agent.get('displayName')})"


async def create_session_check(run: Run) -> str:
    if run.agent is None:
        raise Skipped("the host offers no agent")
    uri = _new_session()
    provider = run.agent["provider"]
    answer = await run.host.request("createSession", {"channel": uri, "provider": provider})
    if not answer.ok:
        raise Failed(f"createSession with provider {provider!r} answered {answer.describe()}")
    run.session = uri
    subscribed = await run.host.request("subscribe", {"channel": uri})
    if not subscribed.ok:
        raise Failed(f"subscribe to the new session {uri} answered {subscribed.describe()}")
    state = ((subscribed.result or {}).get("snapshot") or {}).get("state") or {}
    lifecycle = state.get("lifecycle")
    if lifecycle != "ready":
        frame = await run.host.recv_until(
            lambda f: (
                _is_action(f, uri, "session/ready") or _is_action(f, uri, "session/creationFailed")
            ),
            run.options.turn_timeout,
            waiting_for=f"session/ready on {uri} (its lifecycle was {lifecycle!r})",
        )
        action = frame["params"]["action"]
        if action["type"] == "session/creationFailed":
            raise Failed(f"the session failed to start: {action.get('error')}")
        from_seq, snapshot = run.host.snapshots.get(uri, (None, state))
        state, _ = fold("session", snapshot, run.host.actions_for(uri), after=from_seq)
    chats = [c.get("resource") for c in state.get("chats") or [] if isinstance(c, dict)]
    run.chat = state.get("defaultChat") or (chats[0] if chats else None)
    if not run.chat:
        raise Failed(f"the ready session {uri} names no chat (no defaultChat, no chats)")
    return f"{uri} is ready; its chat is {run.chat}"


async def session_added_check(run: Run) -> str:
    session = _need_session(run)
    await run.host.recv_until(
        lambda f: (
            f.get("method") == "root/sessionAdded"
            and same_session(
                str((f.get("params") or {}).get("summary", {}).get("resource")), session
            )
        ),
        waiting_for=f"root/sessionAdded naming {session}",
    )
    return "announced to the root's subscribers"


async def duplicate_session_check(run: Run) -> str:
    session = _need_session(run)
    assert run.agent is not None
    answer = await run.host.request(
        "createSession", {"channel": session, "provider": run.agent["provider"]}
    )
    return _expect_error(answer, SESSION_ALREADY_EXISTS, what="createSession of a URI in use")


async def _run_turn(
    run: Run, chat: str, text: str, *, cancel: bool = False
) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """Start a turn (and cancel it at once when told); the action that ended it.

    Tool calls waiting for approval are denied and questions declined, so a
    turn ends without a person. Returns (turnId, ending action, the cancel's
    answer when one was sent).
    """
    host = run.host
    turn = str(uuid.uuid4())
    started = await host.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn,
            "startedAt": _now(),
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    cancelled = None
    if cancel:
        cancelled = await host.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": turn, "duration": 0}
        )
    echo = await host.answer_to(started)
    if "rejectionReason" in echo:
        raise Failed(f"the host refused chat/turnStarted: {echo['rejectionReason']}")
    cancel_answer = await host.answer_to(cancelled) if cancelled is not None else None
    if cancel_answer is not None and "rejectionReason" not in cancel_answer:
        return turn, dict(cancel_answer["action"]), cancel_answer
    deadline = anyio.current_time() + run.options.turn_timeout
    answered: set[str] = set()
    while True:
        left = deadline - anyio.current_time()
        if left <= 0:
            raise Failed(f"the turn did not end within {run.options.turn_timeout:g}s")
        try:
            frame = await host.recv_until(
                lambda f: (
                    _is_action(f, chat, "chat/toolCallReady")
                    or _is_action(f, chat, "chat/inputRequested")
                    or any(_is_action(f, chat, end, turnId=turn) for end in TURN_ENDS)
                ),
                left,
            )
        except NoAnswer:
            raise Failed(
                f"the turn did not end within {run.options.turn_timeout:g}s"
                " (no chat/turnComplete, chat/error or chat/turnCancelled)"
            ) from None
        action = frame["params"]["action"]
        kind = action["type"]
        if kind in TURN_ENDS:
            return turn, action, cancel_answer
        if kind == "chat/toolCallReady" and not action.get("confirmed"):
            call = str(action.get("toolCallId"))
            if call not in answered:
                answered.add(call)
                await host.dispatch(
                    chat,
                    {
                        "type": "chat/toolCallConfirmed",
                        "turnId": action.get("turnId"),
                        "toolCallId": call,
                        "approved": False,
                        "reason": "denied",
                    },
                )
        elif kind == "chat/inputRequested":
            request = (action.get("request") or {}).get("id")
            if request and request not in answered:
                answered.add(request)
                await host.dispatch(
                    chat,
                    {"type": "chat/inputCompleted", "requestId": request, "response": "decline"},
                )


def _ended_well(action: dict[str, Any]) -> str:
    if action["type"] == "chat/error":
        raise Failed(f"the turn ended in chat/error: {action.get('error')}")
    if action["type"] == "chat/turnCancelled":
        raise Failed("the turn ended cancelled, though nobody cancelled it")
    return "the turn completed"


async def turn_check(run: Run) -> str:
    _need_session(run)
    assert run.chat is not None
    answer = await run.host.request("subscribe", {"channel": run.chat})
    if not answer.ok:
        raise Failed(f"subscribe to the session's chat {run.chat} answered {answer.describe()}")
    _, action, _ = await _run_turn(run, run.chat, run.options.prompt)
    return f"{run.options.prompt!r}: {_ended_well(action)}"


async def cancel_check(run: Run) -> str:
    _need_session(run)
    assert run.chat is not None
    turn, action, refusal = await _run_turn(run, run.chat, run.options.cancel_prompt, cancel=True)
    if refusal is not None and "rejectionReason" in refusal:
        if action["type"] == "chat/turnComplete":
            raise Skipped(
                "the turn completed before the cancel landed, so there was nothing to cancel "
                "(give --cancel-prompt something slower)"
            )
        raise Failed(f"the host refused chat/turnCancelled: {refusal['rejectionReason']}")
    if action["type"] != "chat/turnCancelled":
        raise Failed(f"the cancelled turn ended with {action['type']}")
    fresh = await run.host.request("subscribe", {"channel": run.chat})
    state = ((fresh.result or {}).get("snapshot") or {}).get("state") if fresh.ok else None
    if not isinstance(state, dict):
        raise Failed(f"subscribe to {run.chat} after the cancel answered {fresh.describe()}")
    if (state.get("activeTurn") or {}).get("id") == turn:
        raise Failed("the chat still shows the cancelled turn as active")
    ended = [t for t in state.get("turns") or [] if isinstance(t, dict) and t.get("id") == turn]
    if not ended or ended[0].get("state") != "cancelled":
        found = ended[0].get("state") if ended else "no such turn"
        raise Failed(f"the chat's snapshot shows the cancelled turn as {found!r}")
    return "cancelled; the chat's snapshot shows the turn cancelled"


async def second_chat_check(run: Run) -> str:
    session = _need_session(run)
    assert run.agent is not None
    # An empty object offers chats; only fork and sideChat need its flags.
    if not isinstance((run.agent.get("capabilities") or {}).get("multipleChats"), dict):
        raise Skipped("the agent does not offer capabilities.multipleChats")
    chat = f"ahp-chat:/{uuid.uuid4()}"
    answer = await run.host.request("createChat", {"channel": session, "chat": chat})
    if not answer.ok:
        raise Failed(f"createChat answered {answer.describe()}")
    announced = [
        f
        for f in run.host.frames
        if _is_action(f, session, "session/chatAdded")
        and (f["params"]["action"].get("summary") or {}).get("resource") == chat
    ]
    if not announced:
        raise Failed(
            f"createChat answered before session/chatAdded named {chat} on the session channel"
        )
    run.second_chat = chat
    subscribed = await run.host.request("subscribe", {"channel": chat})
    if not subscribed.ok:
        raise Failed(f"subscribe to the new chat answered {subscribed.describe()}")
    _, action, _ = await _run_turn(run, chat, run.options.prompt)
    return f"{chat}: {_ended_well(action)}"


async def dispose_session_check(run: Run) -> str:
    session = _need_session(run)
    answer = await run.host.request("disposeSession", {"channel": session})
    if not answer.ok:
        raise Failed(f"disposeSession answered {answer.describe()}")
    run.session_disposed = True
    for channel in [session, run.chat, run.second_chat]:
        if channel:
            run.host.snapshots.pop(channel, None)
    await run.host.recv_until(
        lambda f: (
            f.get("method") == "root/sessionRemoved"
            and same_session(str((f.get("params") or {}).get("session")), session)
        ),
        waiting_for=f"root/sessionRemoved naming {session}",
    )
    after = await run.host.request("subscribe", {"channel": session})
    if after.ok:
        raise Failed(f"the disposed session can still be subscribed to: {after.describe()}")
    return "disposed, announced, and gone"


# --------------------------------------------------------------------------
# reconnect


async def reconnect_replay_check(run: Run) -> str:
    channels = [ROOT_CHANNEL] + [c for c in (run.session, run.chat) if c]
    client_id = f"ahp-check-returning-{uuid.uuid4()}"
    away = await run.connect("before reconnect", client_id)
    answer = await away.initialize([NEWEST], channels)
    if not answer.ok:
        raise Failed(f"initialize subscribing {channels} answered {answer.describe()}")
    await away.sync()
    last_seen = away.last_seq if away.last_seq is not None else away.initial_seq
    if not _is_number(last_seen):
        raise Failed(f"initialize answered serverSeq {last_seen!r}: nothing to reconnect from")
    base = {
        channel: fold(_kind(channel, away), state, away.actions_for(channel), after=from_seq)[0]
        for channel, (from_seq, state) in away.snapshots.items()
    }
    await away.close()
    titles = []
    if run.session:
        for _ in range(2):
            titles.append(f"ahp check {uuid.uuid4().hex[:8]}")
            await _change_title(run, titles[-1])
    run.reconnect_unknown = _new_session()
    back = await run.connect("reconnected", client_id)
    answer = await back.request(
        "reconnect",
        {
            "channel": ROOT_CHANNEL,
            "clientId": client_id,
            "lastSeenServerSeq": last_seen,
            "subscriptions": [*channels, run.reconnect_unknown],
        },
    )
    run.reconnect_answer = answer
    if not answer.ok or not isinstance(answer.result, dict):
        raise Failed(f"reconnect answered {answer.describe()}")
    result = answer.result
    if result.get("type") == "snapshot":
        await _compare_snapshots(back, result, channels)
        return f"answered with snapshots of {len(channels)} channel(s), each as a fresh one"
    if result.get("type") != "replay":
        raise Failed(f"reconnect answered type {result.get('type')!r}, not replay or snapshot")
    actions = [a for a in result.get("actions") or [] if isinstance(a, dict)]
    seqs: list[Any] = [a.get("serverSeq") for a in actions]
    problems = [
        f"serverSeq {seq} is not after lastSeenServerSeq {last_seen}"
        for seq in seqs
        if _is_number(seq) and seq <= last_seen
    ]
    problems += [
        f"serverSeq {b} follows {a}: replayed out of order"
        for a, b in itertools.pairwise(seqs)
        if _is_number(a) and _is_number(b) and b < a
    ]
    problems += [
        f"an action on {a.get('channel')}, which the client did not name"
        for a in actions
        if a.get("channel") not in channels
    ]
    replayed_titles = [
        a["action"].get("title")
        for a in actions
        if isinstance(a.get("action"), dict) and a["action"].get("type") == "session/titleChanged"
    ]
    problems += [
        f"the missed session/titleChanged {t!r} is not replayed"
        for t in titles
        if t not in replayed_titles
    ]
    if problems:
        raise Failed("; ".join(problems[:5]))
    for channel in channels:
        if channel not in base:
            continue
        state, _ = fold(
            _kind(channel, back, actions),
            base[channel],
            [a for a in actions if a.get("channel") == channel],
            after=last_seen,
        )
        fresh = await back.request("subscribe", {"channel": channel})
        snapshot = ((fresh.result or {}).get("snapshot") or {}) if fresh.ok else {}
        if "state" not in snapshot:
            raise Failed(f"subscribe to {channel} after reconnect answered {fresh.describe()}")
        difference = first_difference(state, snapshot["state"])
        if difference:
            raise Failed(f"the replay onto {channel} disagrees with a fresh snapshot: {difference}")
    return f"replayed {len(actions)} missed action(s); the state agrees with fresh snapshots"


async def _compare_snapshots(
    back: HostConnection, result: dict[str, Any], channels: list[str]
) -> None:
    given = {s.get("resource"): s for s in result.get("snapshots") or [] if isinstance(s, dict)}
    for channel in channels:
        if channel not in given:
            raise Failed(f"reconnect answered with snapshots but none of {channel}")
        fresh = await back.request("subscribe", {"channel": channel})
        snapshot = ((fresh.result or {}).get("snapshot") or {}) if fresh.ok else {}
        if "state" not in snapshot:
            raise Failed(f"subscribe to {channel} after reconnect answered {fresh.describe()}")
        difference = first_difference(given[channel].get("state"), snapshot["state"])
        if difference:
            raise Failed(
                f"reconnect's snapshot of {channel} disagrees with a fresh one: "
                + difference.replace("after the replay", "in reconnect's")
            )


async def reconnect_missing_check(run: Run) -> str:
    answer, unknown = run.reconnect_answer, run.reconnect_unknown
    if answer is None or unknown is None or not answer.ok:
        raise Skipped("reconnect did not answer")
    result = answer.result
    if result.get("type") == "replay":
        if unknown not in (result.get("missing") or []):
            raise Failed(
                f"the replay's missing list {result.get('missing')!r} leaves out {unknown}, which never existed"
            )
        return "a session never made is listed in missing"
    if any(
        isinstance(s, dict) and s.get("resource") == unknown for s in result.get("snapshots") or []
    ):
        raise Failed(f"reconnect sent a snapshot of {unknown}, which never existed")
    return "a session never made has no snapshot"


async def reconnect_live_check(run: Run) -> str:
    session = _need_session(run)
    back = [c for c in run.connections if c.label.endswith("(reconnected)")]
    if not back:
        raise Skipped("reconnect did not run")
    title = f"ahp check {uuid.uuid4().hex[:8]}"
    await _change_title(run, title)
    await back[-1].recv_until(
        lambda f: _is_action(f, session, "session/titleChanged", title=title),
        waiting_for=f"a change to {session} at the reconnected connection",
    )
    return "the reconnected connection hears its channels again"


async def reconnect_snapshot_check(run: Run) -> str:
    channels = [ROOT_CHANNEL]
    connection = await run.connect("reconnect from 0")
    answer = await connection.request(
        "reconnect",
        {
            "channel": ROOT_CHANNEL,
            "clientId": connection.client_id,
            "lastSeenServerSeq": 0,
            "subscriptions": channels,
        },
    )
    if not answer.ok or not isinstance(answer.result, dict):
        raise Failed(f"reconnect from serverSeq 0 answered {answer.describe()}")
    result = answer.result
    if result.get("type") == "snapshot":
        await _compare_snapshots(connection, result, channels)
        return "answered with a snapshot that agrees with a fresh one"
    if result.get("type") != "replay":
        raise Failed(f"reconnect answered type {result.get('type')!r}, not replay or snapshot")
    seqs: list[Any] = [
        a.get("serverSeq") for a in result.get("actions") or [] if isinstance(a, dict)
    ]
    numbers = [s for s in seqs if _is_number(s) and s > 0]
    if len(numbers) != len(seqs) or numbers != sorted(numbers):
        raise Failed(f"the replay from 0 carries serverSeqs {seqs[:10]}: not increasing from 1")
    return f"the host replays everything from serverSeq 0 ({len(seqs)} action(s))"


# --------------------------------------------------------------------------
# replay


def _kind(
    channel: str, connection: HostConnection, extra: list[dict[str, Any]] | None = None
) -> str:
    kind = channel_kind(channel, [*(extra or []), *connection.actions_for(channel)])
    if kind is None:
        raise Failed(f"cannot tell which reducer {channel} needs")
    return kind


async def replay_agrees_check(run: Run) -> str:
    host = run.host
    await host.sync()
    if not host.snapshots:
        raise Skipped("no snapshot was received")
    problems, applied = [], 0
    for channel, (from_seq, state) in list(host.snapshots.items()):
        envelopes = host.actions_for(channel)
        fresh = await host.request("subscribe", {"channel": channel})
        snapshot = ((fresh.result or {}).get("snapshot") or {}) if fresh.ok else {}
        if "state" not in snapshot:
            problems.append(f"{channel}: subscribe answered {fresh.describe()}")
            continue
        replayed, count = fold(
            _kind(channel, host), state, envelopes, after=from_seq, up_to=snapshot.get("fromSeq")
        )
        applied += count
        difference = first_difference(replayed, snapshot["state"])
        if difference:
            problems.append(f"{channel}: {difference}")
    if problems:
        raise Failed(
            "actions replayed onto their snapshot disagree with a fresh snapshot:\n"
            + "\n".join(problems)
        )
    return f"{len(host.snapshots)} channel(s), {applied} action(s) replayed"


# --------------------------------------------------------------------------
# frames


async def strict_frames_check(run: Run) -> str:
    if run.seen.issues:
        shown = run.seen.issues[:5]
        more = run.seen.issue_count - len(shown)
        tail = f"\n… and {more} more" if more > 0 else ""
        raise Failed(
            f"{run.seen.issue_count} frame(s) break the protocol's shapes:\n"
            + "\n".join(shown)
            + tail
        )
    return f"{run.seen.frames} frame(s), each valid against the {NEWEST} schemas"


async def text_frames_check(run: Run) -> str:
    if run.seen.binary_frames:
        raise Failed(
            f"{run.seen.binary_frames} binary frame(s): AHP over WebSocket uses text frames"
        )
    return f"{run.seen.frames} text frame(s)"


async def answer_ids_check(run: Run) -> str:
    if run.seen.id_faults:
        raise Failed("\n".join(run.seen.id_faults[:5]))
    return "every answer matched one request"


# --------------------------------------------------------------------------
# the list


_MAIN = ("handshake.initialize",)
_SESSION = ("agent.create-session",)

CHECKS: tuple[Check, ...] = (
    Check("handshake.connect", connect_check),
    Check("handshake.initialize", initialize_check, ("handshake.connect",)),
    Check("handshake.ping-before-initialize", ping_before_initialize_check, ("handshake.connect",)),
    Check("handshake.unsupported-version", unsupported_version_check, ("handshake.connect",)),
    Check("handshake.malformed-version", malformed_version_check, ("handshake.connect",)),
    Check(
        "handshake.version-choice",
        version_choice_check,
        ("handshake.initialize", "handshake.unsupported-version"),
    ),
    Check("errors.unknown-method", unknown_method_check, _MAIN),
    Check("errors.parse-error", parse_error_check, _MAIN),
    Check("errors.invalid-request", invalid_request_check, _MAIN),
    Check("errors.params-not-object", params_not_object_check, _MAIN),
    *(
        Check(f"errors.invalid-params:{method}", partial(invalid_params_check, method), _MAIN)
        for method in COMMANDS
    ),
    Check("errors.unknown-provider", unknown_provider_check, _MAIN),
    Check("errors.unknown-session", unknown_session_check, _MAIN),
    Check("subscribe.root", subscribe_root_check, _MAIN),
    Check("subscribe.unknown-channel", unknown_channel_check, _MAIN),
    Check("agent.offered", agent_offered_check, _MAIN),
    Check("agent.create-session", create_session_check, ("agent.offered",), slow=True),
    Check("agent.session-added", session_added_check, _SESSION),
    Check("agent.duplicate-session", duplicate_session_check, _SESSION),
    Check("agent.turn", turn_check, _SESSION, slow=True),
    Check("agent.cancel", cancel_check, ("agent.turn",), slow=True),
    Check("agent.second-chat", second_chat_check, _SESSION, slow=True),
    Check("subscribe.unsubscribe-isolation", unsubscribe_isolation_check, _SESSION),
    Check("reconnect.replay", reconnect_replay_check, _MAIN),
    Check("reconnect.missing", reconnect_missing_check, ("reconnect.replay",)),
    Check("reconnect.resubscribed", reconnect_live_check, ("reconnect.replay", *_SESSION)),
    Check("reconnect.snapshot", reconnect_snapshot_check, _MAIN),
    Check("replay.agrees", replay_agrees_check, _MAIN),
    Check("agent.dispose-session", dispose_session_check, _SESSION),
    Check("subscribe.server-seq", server_seq_check, ("handshake.connect",)),
    Check("frames.text", text_frames_check, ("handshake.connect",)),
    Check("frames.strict", strict_frames_check, ("handshake.connect",)),
    Check("frames.answer-ids", answer_ids_check, ("handshake.connect",)),
)

CHECK_NAMES: tuple[str, ...] = tuple(check.name for check in CHECKS)


async def _one(run: Run, check: Check) -> CheckResult:
    done = {result.name: result for result in run.results}
    for name in check.needs:
        needed = done.get(name)
        if needed is None:
            return CheckResult(check.name, "skip", f"needs {name}, which did not run")
        if needed.status != "pass":
            why = (needed.detail.splitlines() or [""])[0]
            if needed.status == "skip" and why.startswith("needs "):
                return CheckResult(check.name, "skip", why)  # the first reason, not a chain
            word = "failed" if needed.status == "fail" else "was skipped"
            return CheckResult(check.name, "skip", f"needs {name}, which {word}: {why}")
    options = run.options
    budget = (options.turn_timeout if check.slow else 0) + 4 * options.timeout
    started = time.monotonic()
    try:
        with anyio.fail_after(budget):
            detail = await check.body(run)
        status, text = "pass", detail
    except Skipped as exc:
        status, text = "skip", str(exc)
    except (Failed, CheckError) as exc:
        status, text = "fail", str(exc)
    except TimeoutError:
        status, text = "fail", f"not done within {budget:g}s"
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
        # An answer of a shape the check did not expect: the host's fault, reported
        # as one (frames.strict names the shape), never a traceback that ends the run.
        status, text = "fail", f"cannot read what the host answered ({type(exc).__name__}: {exc})"
    return CheckResult(check.name, status, text, time.monotonic() - started)  # type: ignore[arg-type]


async def run_checks(
    options: Options, only: Callable[[str], bool] | None = None
) -> list[CheckResult]:
    """Run every check (or those ``only`` admits) against ``options.url``, in order."""
    run = Run(options)
    try:
        for check in CHECKS:
            if only is not None and not only(check.name):
                continue
            run.results.append(await _one(run, check))
    finally:
        with anyio.CancelScope(shield=True):
            await run.close_all()
    return run.results
