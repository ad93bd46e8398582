"""Garbage for the host: hypothesis strategies of broken frames, and the probe that checks
every answer. Used by test_garbage.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anyio
from hypothesis import assume
from hypothesis import strategies as st
from websockets.protocol import State

from ahpcore.engine.router import PORT_OF_COMMAND
from ahpcore.host import HostSettings
from ahpcore.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)
from ahpcore.protocol.methods import CLIENT_NOTIFICATIONS
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.rpc.framing import MAX_JSON_DEPTH, dumps
from ahpcore.testing import AhpTestClient, RunningHost

#: An answer that is a success rather than an error.
RESULT = 0
#: Ping ids carry this prefix; generated string ids never do, so answers cannot be confused.
PING_PREFIX = "probe-ping-"
#: Small enough that the oversize tests are cheap, big enough for 10,000 levels of nesting.
GARBAGE_FRAME_LIMIT = 1 << 20
STEP_TIMEOUT = 10.0
#: Stands in a frame for text json.dumps would not write (NaN, deep nesting, lone surrogates).
HOLE = "@@hole@@"

# The property tests are sync (they drive their own portal); the anyio plugin leaves them be.


def _settings(max_frame_bytes: int = GARBAGE_FRAME_LIMIT) -> HostSettings:
    return HostSettings(sessions="memory", port=0, max_frame_bytes=max_frame_bytes)


# --- What a frame should get back ------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One response is owed: with one of ``ids``, and a code from ``codes`` (RESULT: success)."""

    ids: tuple[Any, ...]
    codes: frozenset[int]
    #: Text the error message must contain (the right channel, the missing port).
    mentions: str | None = None
    #: No answer is also right (a parse error for what may have been a notification).
    optional: bool = False


@dataclass(frozen=True)
class Case:
    frame: str | bytes
    #: None: no response frame at all (a notification, a stray response).
    answer: Answer | None
    label: str
    #: A dispatch the host must answer with an envelope to its sender: the clientSeq the
    #: envelope's origin carries (refused or applied, never dropped).
    owes_envelope: int | None = None


def _usable(ident: Any) -> bool:
    return isinstance(ident, int | str) and not isinstance(ident, bool)


def _answered_as(ident: Any) -> tuple[Any, ...]:
    """The id an error must carry: the request's when it could be read, else null."""
    return (ident,) if _usable(ident) else (None,)


# --- Strategies -------------------------------------------------------------------------

#: Bounded: Python refuses to read an integer of more than 4300 digits (a parse error).
_ints = st.integers(min_value=-(2**64), max_value=2**64)
#: Finite only: NaN and Infinity are not JSON; hostile_values() sends them on purpose.
_floats = st.floats(allow_nan=False, allow_infinity=False)
_scalars = st.none() | st.booleans() | _ints | _floats | st.text(max_size=12)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
non_objects = json_values.filter(lambda value: not isinstance(value, dict))
usable_ids = st.integers(min_value=-(2**53), max_value=2**70) | st.text(max_size=16).filter(
    lambda text: not text.startswith(PING_PREFIX) and HOLE not in text
)
unusable_ids = (
    st.none()
    | st.booleans()
    | _floats
    | st.lists(_scalars, max_size=2)
    | st.dictionaries(st.text(max_size=4), _scalars, max_size=2)
)
#: Names this host does not serve as requests (port-backed commands, notification names, noise).
unknown_methods = (
    st.sampled_from(sorted(PORT_OF_COMMAND))
    | st.sampled_from(["dispatchAction", "unsubscribe", "action", "shutdown", "Ping", "ping "])
    | st.text(max_size=24)
)
non_strings = st.one_of(
    _ints, _floats, st.booleans(), st.lists(st.text(max_size=3)),
    st.dictionaries(st.text(max_size=3), _ints, max_size=2), st.none(),
)  # fmt: skip
non_string_lists = st.one_of(
    _ints, st.text(max_size=5), st.dictionaries(st.text(max_size=3), _ints),
    st.lists(_ints | st.none() | st.booleans(), min_size=1, max_size=3),
)  # fmt: skip
#: Lax pydantic reads "5" as a number, so a wrong number is never a string.
non_numbers = st.one_of(st.lists(_ints, max_size=2), st.dictionaries(st.text(), _ints, max_size=1))


def _text(obj: Any, ascii_only: bool = True) -> str:
    return json.dumps(obj, ensure_ascii=ascii_only)


def _filled(obj: Any, text: str) -> str:
    """``obj`` as JSON with the HOLE string replaced by raw ``text``."""
    return _text(obj).replace(json.dumps(HOLE), text, 1)


def _request(ident: Any, method: Any, params: Any = None, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method, **extra}
    if params is not None:
        message["params"] = params
    return message


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


@st.composite
def not_json(draw: st.DrawFn) -> Case:
    how = draw(st.sampled_from(["text", "truncated", "binary"]))
    if how == "binary":
        # Invalid UTF-8 in a binary frame: there is no text to parse at all.
        frame: str | bytes = b"\xff" + draw(st.binary(max_size=40))
    elif how == "truncated":
        whole = _text(_request(draw(usable_ids), "ping", {"channel": ROOT_CHANNEL}))
        frame = whole[: draw(st.integers(min_value=0, max_value=len(whole) - 1))]
    else:
        frame = draw(st.text(max_size=60).filter(lambda text: not _is_json(text)))
    # "NaN" alone is JSON to Python and not an object: either refusal is right.
    return Case(
        frame, Answer((None,), frozenset({PARSE_ERROR, INVALID_REQUEST})), f"not json ({how})"
    )


@st.composite
def not_an_object(draw: st.DrawFn) -> Case:
    if draw(st.booleans()):
        value: Any = draw(non_objects)
    else:
        # A JSON-RPC batch: AHP has none, so it is one invalid request.
        value = [_request(draw(usable_ids), "ping") for _ in range(draw(st.integers(0, 3)))]
    return Case(_text(value), Answer((None,), frozenset({INVALID_REQUEST})), "json, not an object")


@st.composite
def not_json_rpc(draw: st.DrawFn) -> Case:
    """Objects that are neither a request, a notification nor a response."""
    message: dict[str, Any] = draw(
        st.dictionaries(
            st.text(max_size=8).filter(
                lambda key: key not in {"jsonrpc", "id", "method", "params", "result", "error"}
            ),
            json_values,
            max_size=3,
        )
    )
    defect = draw(st.sampled_from(["jsonrpc", "method", "params", "id", "neither"]))
    ident: Any = draw(usable_ids | unusable_ids)
    if draw(st.booleans()) or defect in ("id", "neither"):
        message["id"] = ident
    if defect == "jsonrpc":
        version = draw(st.none() | json_values.filter(lambda value: value != "2.0"))
        if version is not None:
            message["jsonrpc"] = version
        message["method"] = draw(st.text(max_size=10) | json_values)
    elif defect == "method":
        message.update(
            jsonrpc="2.0", method=draw(json_values.filter(lambda v: not isinstance(v, str)))
        )
    elif defect == "params":
        bad_params = _scalars.filter(lambda value: not isinstance(value, dict | list))
        message.update(jsonrpc="2.0", method="ping", params=draw(bad_params))
    elif defect == "id":
        message.update(jsonrpc="2.0", method="ping", id=draw(unusable_ids))
    else:
        message["jsonrpc"] = "2.0"
    owed = _answered_as(message.get("id")) if "id" in message else (None,)
    return Case(
        _text(message), Answer(owed, frozenset({INVALID_REQUEST})), f"not json-rpc ({defect})"
    )


_VALID_PARAMS: dict[str, dict[str, Any]] = {
    "initialize": {"channel": ROOT_CHANNEL, "protocolVersions": ["1.0.0"], "clientId": "g"},
    "subscribe": {"channel": ROOT_CHANNEL},
    "reconnect": {
        "channel": ROOT_CHANNEL,
        "clientId": "g",
        "lastSeenServerSeq": 0,
        "subscriptions": [],
    },
    "listSessions": {"channel": ROOT_CHANNEL},
}
_WRONG_FIELDS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "initialize": {
        "protocolVersions": non_string_lists,
        "clientId": non_strings,
        "initialSubscriptions": non_string_lists,
    },
    "subscribe": {"channel": non_strings},
    "reconnect": {
        "clientId": non_strings,
        "lastSeenServerSeq": non_numbers | st.none(),
        "subscriptions": non_string_lists,
    },
    "listSessions": {
        "limit": non_numbers,
        "cursor": non_strings.filter(lambda value: value is not None),
    },
}


@st.composite
def wrong_params(draw: st.DrawFn) -> Case:
    ident = draw(usable_ids)
    method = draw(st.sampled_from(sorted(_WRONG_FIELDS)))
    if draw(st.integers(0, 4)) == 0:
        params: Any = draw(st.lists(json_values, max_size=3))  # an array where an object goes
        label = "params not an object"
    else:
        key = draw(st.sampled_from(sorted(_WRONG_FIELDS[method])))
        params = {**_VALID_PARAMS[method], key: draw(_WRONG_FIELDS[method][key])}
        label = f"{method}.{key} of the wrong type"
    frame = _text(_request(ident, method, params))
    return Case(frame, Answer((ident,), frozenset({INVALID_PARAMS})), label)


@st.composite
def wrong_channel(draw: st.DrawFn) -> Case:
    """A command addressed to a literal channel, sent to another one."""
    ident = draw(usable_ids)
    method = draw(st.sampled_from(["listSessions", "reconnect"]))
    channel = draw(
        st.sampled_from(["ahp-session:/x", "ahp-root:/", "AHP-ROOT://", "ahp-root:///", ""])
        | st.text(max_size=20)
    )
    assume(channel != ROOT_CHANNEL)
    params = {**_VALID_PARAMS[method], "channel": channel}
    answer = Answer((ident,), frozenset({INVALID_PARAMS}), mentions=repr(ROOT_CHANNEL))
    return Case(_text(_request(ident, method, params)), answer, f"{method} on {channel!r}")


@st.composite
def unknown_method(draw: st.DrawFn) -> Case:
    ident = draw(usable_ids)
    method = draw(unknown_methods)
    assume(method not in _SERVED)
    params = draw(st.none() | st.dictionaries(st.text(max_size=6), json_values, max_size=3))
    port = PORT_OF_COMMAND.get(method)
    if method in CLIENT_NOTIFICATIONS:  # a notification sent with an id is told so
        answer = Answer((ident,), frozenset({INVALID_REQUEST}), mentions="notification")
    else:
        answer = Answer((ident,), frozenset({METHOD_NOT_FOUND}), mentions=port and f"{port} port")
    return Case(
        _text(_request(ident, method, params), draw(st.booleans())), answer, "unknown method"
    )


@st.composite
def deeply_nested(draw: st.DrawFn) -> Case:
    depth = draw(st.integers(min_value=MAX_JSON_DEPTH + 1, max_value=10_000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    nested = opener * depth + "0" + closer * depth
    ident = draw(usable_ids)
    if draw(st.booleans()):
        frame = nested
    else:
        frame = _filled(_request(ident, "ping", {"channel": ROOT_CHANNEL, "_meta": HOLE}), nested)
    # The id sits beside something unparseable: answering it is allowed, not owed.
    answer = Answer((None, ident), frozenset({PARSE_ERROR, INVALID_REQUEST}))
    return Case(frame, answer, f"nested {depth} deep")


@st.composite
def nested_within_bound(draw: st.DrawFn) -> Case:
    """Nesting the host allows (the ping's own object, params and _meta take 3 levels)."""
    depth = draw(st.integers(min_value=1, max_value=MAX_JSON_DEPTH - 4))
    ident = draw(usable_ids)
    nested = '{"a":' + "[" * depth + "]" * depth + "}"
    frame = _filled(_request(ident, "ping", {"channel": ROOT_CHANNEL, "_meta": HOLE}), nested)
    return Case(frame, Answer((ident,), frozenset({RESULT})), f"nested {depth} deep, allowed")


@st.composite
def garbage_notifications(draw: st.DrawFn) -> Case:
    method = draw(unknown_methods | st.sampled_from(["unsubscribe", "dispatchAction"]))
    if method == "unsubscribe":
        # Never the root: the probe watches it to check serverSeq.
        params: Any = draw(
            st.fixed_dictionaries({"channel": json_values.filter(lambda c: c != ROOT_CHANNEL)})
            | st.dictionaries(st.text(max_size=6), json_values, max_size=3)
        )
    else:
        params = draw(
            st.none()
            | st.lists(json_values, max_size=2)
            | st.dictionaries(st.sampled_from(["channel", "action", "clientSeq"]), json_values)
        )
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return Case(_text(message), None, f"notification {method!r}", _owed_envelope(method, params))


def _owed_envelope(method: str, params: Any) -> int | None:
    """The clientSeq a dispatch's answering envelope carries, if it is owed one."""
    if method != "dispatchAction" or not isinstance(params, dict):
        return None  # without a params object there is nothing to say the refusal about
    channel, action, seq = params.get("channel"), params.get("action"), params.get("clientSeq")
    if not (isinstance(channel, str) and isinstance(action, dict)):
        return None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


_ACTION_TYPES = [
    "root/configChanged",
    "root/agentsChanged",
    "root/activeSessionsChanged",
    "session/titleChanged",
    "chat/turnStarted",
    "nope/nothing",
]


@st.composite
def garbage_dispatches(draw: st.DrawFn) -> Case:
    """Dispatches shaped well enough that the host owes the sender an envelope."""
    config = st.dictionaries(
        st.sampled_from(["clientQueueBytes", "replayBytes"]) | st.text(max_size=6),
        st.integers(min_value=-1, max_value=2**40) | json_values,
        max_size=3,
    )
    action = draw(
        st.fixed_dictionaries(
            {"type": st.sampled_from(_ACTION_TYPES) | json_values},
            optional={
                "config": config | json_values,
                "replace": json_values,
                "agents": json_values,
            },
        )
    )
    channel = draw(st.sampled_from([ROOT_CHANNEL, "ahp-session:/x", ""]) | st.text(max_size=12))
    params: dict[str, Any] = {"channel": channel, "action": action}
    if draw(st.booleans()):
        params["clientSeq"] = draw(_ints | json_values)
    message = {"jsonrpc": "2.0", "method": "dispatchAction", "params": params}
    owed = _owed_envelope("dispatchAction", params)
    return Case(_text(message), None, f"dispatch {action.get('type')!r}", owed)


@st.composite
def stray_responses(draw: st.DrawFn) -> Case:
    """Answers to requests the host never made: nothing to answer back."""
    ident = draw(usable_ids)
    if draw(st.booleans()):
        message = {"jsonrpc": "2.0", "id": ident, "result": draw(json_values)}
    else:
        error = {"code": draw(st.integers(-33000, 0)), "message": draw(st.text(max_size=10))}
        message = {"jsonrpc": "2.0", "id": ident, "error": error}
    return Case(_text(message), None, "stray response")


@st.composite
def valid_requests(draw: st.DrawFn) -> Case:
    """A few frames that are fine, so the probe is seen telling them apart."""
    ident = draw(usable_ids)
    method = draw(st.sampled_from(["ping", "listSessions"]))
    frame: str | bytes = _text(_request(ident, method, {"channel": ROOT_CHANNEL}))
    if draw(st.booleans()):
        frame = frame.encode("utf-8")  # a binary frame carrying UTF-8 JSON is read as text
    return Case(frame, Answer((ident,), frozenset({RESULT})), f"valid {method}")


@st.composite
def hostile_values(draw: st.DrawFn) -> Case:
    """JSON Python reads but the wire cannot carry: NaN, Infinity, overflow, lone surrogates.

    Refusing the frame as a parse error is right (answered under a null id, even
    for a dispatch: a frame that cannot be read cannot be known to be a
    notification); so is taking it, as long as the answer can be sent and the
    value never reaches state, which is checked after every example.
    """
    token = draw(
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", '"\\ud800"', '"a\\udfff"'])
    )
    ident = draw(usable_ids)
    shape = draw(st.sampled_from(["id", "ping-meta", "reconnect", "config", "unknown-config"]))
    if shape == "id":
        read_as = json.loads(token)
        answer = Answer((None, read_as), _ANY_ERROR)
        return Case(_filled(_request(HOLE, "nosuch"), token), answer, f"id {token}")
    if shape == "ping-meta":
        frame = _filled(
            _request(ident, "ping", {"channel": ROOT_CHANNEL, "_meta": {"v": HOLE}}), token
        )
        return Case(frame, Answer((None, ident), _ANY_ERROR | {RESULT}), f"ping _meta {token}")
    if shape == "reconnect":
        params = {**_VALID_PARAMS["reconnect"], "lastSeenServerSeq": HOLE}
        frame = _filled(_request(ident, "reconnect", params), token)
        return Case(frame, Answer((None, ident), _ANY_ERROR), f"reconnect {token}")
    key = "replayBytes" if shape == "config" else "noSuchKey"
    action = {"type": "root/configChanged", "config": {key: HOLE}}
    params = {"channel": ROOT_CHANNEL, "clientSeq": 1, "action": action}
    frame = _filled({"jsonrpc": "2.0", "method": "dispatchAction", "params": params}, token)
    answer = Answer((None,), frozenset({PARSE_ERROR}), optional=True)
    return Case(frame, answer, f"dispatch {key}={token}")


_SERVED = frozenset({"initialize", "ping", "subscribe", "reconnect", "listSessions"})
_ANY_ERROR = frozenset({PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS})

garbage = st.one_of(
    not_json(),
    not_an_object(),
    not_json_rpc(),
    wrong_params(),
    wrong_channel(),
    unknown_method(),
    deeply_nested(),
    nested_within_bound(),
    garbage_notifications(),
    garbage_dispatches(),
    stray_responses(),
    valid_requests(),
)


# --- The probe: one connection, one example at a time -----------------------------------


@dataclass
class Probe:
    """Sends one garbage frame and checks what comes back, on a connection kept across examples."""

    running: RunningHost
    client: AhpTestClient | None = None
    #: The newest serverSeq this client has seen (snapshot or action).
    last_seq: int = 0
    pings: int = 0
    clients_made: list[AhpTestClient] = field(default_factory=list)

    async def _live(self) -> AhpTestClient:
        # A frame that killed the connection fails its example; the next one gets a new
        # connection so hypothesis can shrink to the frame that did it.
        if self.client is None or self.client.connection.state is not State.OPEN:
            self.client = await self.running.connect(client_id=f"garbage-{len(self.clients_made)}")
            self.clients_made.append(self.client)
            result = await self.client.initialize()
            self.last_seq = result["serverSeq"]
        return self.client

    async def _ping_collecting(self, client: AhpTestClient, seen: list[dict[str, Any]]) -> None:
        self.pings += 1
        ident = f"{PING_PREFIX}{self.pings}"
        await client.send(_request(ident, "ping", {"channel": ROOT_CHANNEL}))
        while True:
            frame = await client.recv()
            if frame.get("id") == ident and "method" not in frame:
                assert frame == {"jsonrpc": "2.0", "id": ident, "result": None}
                return
            seen.append(frame)

    async def check(self, case: Case) -> None:
        client = await self._live()
        try:
            with anyio.fail_after(STEP_TIMEOUT):
                seen = await self._exchange(client, case)
            self._check_answers(case, [f for f in seen if "method" not in f])
            envelopes = [f["params"] for f in seen if f.get("method") == "action"]
            self._check_envelopes(case, client, envelopes)
            self._check_host_state()
        except BaseException:
            # Whatever went wrong, the next example starts from a clean connection.
            self.client = None
            with anyio.move_on_after(2, shield=True):
                await client.close()
            raise

    async def _exchange(self, client: AhpTestClient, case: Case) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        await client.send_raw(case.frame)
        await self._ping_collecting(client, seen)
        owed = case.answer is not None and not case.answer.optional
        if owed and not any("method" not in f for f in seen):
            # Requests are served concurrently, so the answer may trail the ping's; a
            # missing one is reported by _check_answers rather than as a timeout.
            with anyio.move_on_after(2):
                seen.append(await client.recv_until(lambda f: "method" not in f))
        # A second round trip catches a duplicate answer sent after the first.
        await self._ping_collecting(client, seen)
        return seen

    @staticmethod
    def _check_answers(case: Case, answers: list[dict[str, Any]]) -> None:
        expected = case.answer
        if expected is None:
            assert answers == [], f"{case.label}: a frame owed no answer got {answers}"
            return
        if expected.optional and not answers:
            return
        assert len(answers) == 1, f"{case.label}: owed one answer, got {answers}"
        (answer,) = answers
        assert answer["id"] in expected.ids, f"{case.label}: answered under {answer['id']!r}"
        if "result" in answer:
            assert RESULT in expected.codes, f"{case.label}: succeeded: {answer}"
            return
        error = answer["error"]
        assert error["code"] != INTERNAL_ERROR, f"{case.label}: the host failed: {error}"
        assert error["code"] in expected.codes, f"{case.label}: {error}"
        if expected.mentions:
            assert expected.mentions in error["message"], f"{case.label}: {error}"

    def _check_envelopes(
        self, case: Case, client: AhpTestClient, envelopes: list[dict[str, Any]]
    ) -> None:
        if case.owes_envelope is not None:
            mine = {"clientId": client.client_id, "clientSeq": case.owes_envelope}
            assert any(e.get("origin") == mine for e in envelopes), (
                f"{case.label}: a dispatch was dropped without a refusal: {envelopes}"
            )
        for envelope in envelopes:
            seq = envelope["serverSeq"]
            if "rejectionReason" in envelope:
                assert seq == self.last_seq, f"a refusal moved serverSeq: {envelope}"
            else:
                # A change takes the next number; an echo of a no-op repeats the current one.
                assert seq in (self.last_seq, self.last_seq + 1), f"serverSeq gap: {envelope}"
                self.last_seq = seq

    def _check_host_state(self) -> None:
        engine = self.running.host.engine_or_fail
        # Every change the host numbered reached this watcher, and its state can still go out.
        assert self.last_seq == engine.server_seq, "the host numbered a change nobody was sent"
        for channel in engine.channels.values():
            assert _sendable(channel.state), f"{channel.uri} holds a value no frame can carry"

    async def finish(self) -> None:
        """The host still serves a newcomer, and the survivor's actions fold to the snapshot."""
        with anyio.fail_after(STEP_TIMEOUT):
            client = await self._live()
            await client.assert_replay_agrees()
            newcomer = await self.running.connect()
            await newcomer.initialize()
            await newcomer.sync()


def _sendable(value: Any) -> bool:
    try:
        dumps(value).encode("utf-8")
    except ValueError:  # UnicodeEncodeError is a ValueError too
        return False
    return True
