"""The strict wire validator: clean frames pass, broken ones are reported exactly.

Each broken frame is a valid, realistic frame with keys added or removed at
shallow and deep positions; the report must name every one of them, by kind
and JSON path, and nothing else. State actions come partly from the 0.8.0
reducer fixtures (those the current schema still accepts).
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from ahpcore.protocol import reference, strict
from ahpcore.protocol.methods import COMMANDS
from ahpcore.protocol.wire import (
    WireIssue,
    action_models,
    assert_valid_frame,
    channel_literals,
    classify_frame,
    model_for_action,
    params_problem,
    validate_frame,
    validate_params,
    validate_value,
)

# --------------------------------------------------------------------------
# Helpers


REDUCERS = reference.data_dir() / "fixtures-0.8.0" / "reducers"


def found(frame: Any, **kwargs: Any) -> set[tuple[str, str]]:
    """The (kind, path) pairs of every issue, checked to carry messages."""
    issues = validate_frame(frame, **kwargs)
    assert all(isinstance(i, WireIssue) and i.message for i in issues)
    pairs = [(i.kind, i.path) for i in issues]
    assert len(pairs) == len(set(pairs)), f"duplicate issues: {issues}"
    return set(pairs)


def changed(frame: dict[str, Any], *edits: tuple[str, Any]) -> dict[str, Any]:
    """A deep copy of ``frame`` with edits applied: (path, value) sets, (path, DELETE) removes.

    Paths are dotted, with ``[i]`` for list items: ``params.action.message.attachments[0]``.
    """
    frame = copy.deepcopy(frame)
    for path, value in edits:
        *parents, last = _segments(path)
        node: Any = frame
        for segment in parents:
            node = node[segment]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return frame


DELETE = object()


def _segments(path: str) -> Iterator[str | int]:
    for part in path.split("."):
        name, *indices = re.split(r"\[(\d+)\]", part)
        if name:
            yield name
        yield from (int(index) for index in indices if index)


def request(method: str, params: dict[str, Any], id_: int | str = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def success(result: Any, id_: int | str = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def envelope(channel: str, action: Any, seq: Any = 7) -> dict[str, Any]:
    return notification("action", {"channel": channel, "action": action, "serverSeq": seq})


def dispatch(channel: str, action: Any, seq: Any = 3) -> dict[str, Any]:
    return notification("dispatchAction", {"channel": channel, "clientSeq": seq, "action": action})


# --------------------------------------------------------------------------
# Realistic valid frames

SESSION = "ahp-session:/3f1c"
CHAT = "ahp-chat:/3f1c/main"
TERMINAL = "ahp-terminal:/3f1c/t1"
CHANGESET = "ahp-changeset:/3f1c/session"
ANNOTATIONS = "ahp-annotations:/3f1c"
WATCH = "ahp-watch:/w1"

INITIALIZE = request(
    "initialize",
    {
        "channel": "ahp-root://",
        "protocolVersions": ["1.0.0", "0.10.0"],
        "clientId": "client-7",
        "clientInfo": {"name": "test-client", "version": "0.3.1", "title": "Test Client"},
        "initialSubscriptions": ["ahp-root://"],
        "locale": "en-GB",
    },
)

ROOT_STATE = {
    "agents": [
        {
            "provider": "demo",
            "displayName": "Demo Agent",
            "description": "Answers from a script",
            "models": [{"id": "demo-1", "provider": "demo", "name": "Demo One"}],
        }
    ],
    "activeSessions": 1,
}

INITIALIZE_RESULT = success(
    {
        "protocolVersion": "1.0.0",
        "serverSeq": 42,
        "serverInfo": {"name": "ahp", "version": "0.1.0"},
        "snapshots": [{"resource": "ahp-root://", "state": ROOT_STATE, "fromSeq": 42}],
        "terminalCommandPrefix": "!",
    }
)

CHAT_STATE = {
    "resource": CHAT,
    "title": "Why does the build fail?",
    "status": 8,
    "modifiedAt": "2026-03-01T10:00:05.000Z",
    "turns": [
        {
            "id": "turn-1",
            "startedAt": "2026-03-01T10:00:00.000Z",
            "duration": 1500,
            "message": {
                "text": "Why does the build fail?",
                "origin": {"kind": "user"},
                "attachments": [{"type": "simple", "label": "build.log"}],
            },
            "responseParts": [
                {"kind": "markdown", "id": "part-1", "content": "Let me look at the log."},
                {
                    "kind": "toolCall",
                    "toolCall": {
                        "status": "completed",
                        "toolCallId": "tc-1",
                        "toolName": "read",
                        "displayName": "Read File",
                        "invocationMessage": "Reading build.log",
                        "pastTenseMessage": {"markdown": "Read `build.log`"},
                        "success": True,
                        "confirmed": "not-needed",
                        "content": [{"type": "text", "text": "ld: cannot find -lfoo"}],
                    },
                },
            ],
            "usage": {"inputTokens": 120, "outputTokens": 48, "model": "demo-1"},
            "state": "complete",
        }
    ],
    "activeTurn": {
        "id": "turn-2",
        "startedAt": "2026-03-01T10:00:04.000Z",
        "message": {"text": "Fix it", "origin": {"kind": "user"}},
        "responseParts": [{"kind": "reasoning", "id": "part-3", "content": "The library"}],
    },
}

SUBSCRIBE = request("subscribe", {"channel": CHAT}, id_="sub-1")
SUBSCRIBE_RESULT = success(
    {"snapshot": {"resource": CHAT, "state": CHAT_STATE, "fromSeq": 17}}, id_="sub-1"
)

ERROR_RESPONSE = {
    "jsonrpc": "2.0",
    "id": 4,
    "error": {"code": -32602, "message": "params.channel: field required", "data": {"at": 1}},
}

SESSION_ADDED = notification(
    "root/sessionAdded",
    {
        "channel": "ahp-root://",
        "summary": {
            "resource": SESSION,
            "provider": "demo",
            "title": "Build fix",
            "status": 1,
            "createdAt": "2026-03-01T09:59:00.000Z",
            "modifiedAt": "2026-03-01T10:00:05.000Z",
        },
    },
)

#: One hand-built action per channel kind, with a channel of that kind.
ACTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "root": ("ahp-root://", {"type": "root/activeSessionsChanged", "activeSessions": 2}),
    "session": (SESSION, {"type": "session/titleChanged", "title": "Build fix"}),
    "chat": (
        CHAT,
        {
            "type": "chat/turnStarted",
            "turnId": "turn-3",
            "startedAt": "2026-03-01T10:01:00.000Z",
            "message": {
                "text": "Use the side investigation",
                "origin": {"kind": "user"},
                "attachments": [
                    {"type": "chat", "label": "Side chat", "resource": "ahp-chat:/3f1c/side"}
                ],
            },
        },
    ),
    "terminal": (TERMINAL, {"type": "terminal/data", "data": "ok\r\n"}),
    "changeset": (CHANGESET, {"type": "changeset/statusChanged", "status": "ready"}),
    "annotations": (
        ANNOTATIONS,
        {"type": "annotations/entryRemoved", "annotationId": "a-1", "entryId": "e-2"},
    ),
    "resourceWatch": (
        WATCH,
        {
            "type": "resourceWatch/changed",
            "changes": {"items": [{"uri": "file:///a", "type": "added"}]},
        },
    ),
}

TOOL_CALL_PART_ACTION = {
    "type": "chat/responsePart",
    "turnId": "turn-2",
    "part": {
        "kind": "toolCall",
        "toolCall": {
            "status": "streaming",
            "toolCallId": "tc-2",
            "toolName": "bash",
            "displayName": "Run Command",
        },
    },
}

#: Reducer-fixture actions the current schema still accepts, by fixture and position,
#: with the channel kind they belong to.
FIXTURE_ACTIONS = [
    ("002-root-activesessionschanged.json", 0, "ahp-root://"),
    ("170-session-chatadded-appends.json", 0, SESSION),
    ("010-session-delta-appends-content.json", 0, CHAT),
    ("010-session-delta-appends-content.json", 1, CHAT),
    ("019-tool-call-full-lifecycle-start-delta-ready-confirmed-complete.json", 3, CHAT),
    ("072-terminal-data-appends.json", 1, TERMINAL),
    ("074-terminal-resized.json", 0, TERMINAL),
    ("136-changeset-status-changed-to-ready.json", 0, CHANGESET),
    ("215-annotations-entryremoved-drops-matching-entry.json", 0, ANNOTATIONS),
    ("200-resourcewatch-changed-passthrough.json", 0, WATCH),
]


@pytest.fixture(scope="module")
def reducer_fixtures() -> dict[str, Any]:
    if not REDUCERS.is_dir():
        message = f"AHP reducer fixtures not found at {REDUCERS}; make them with python -m ahpcore.protocol.reference"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return {path.name: json.loads(path.read_text("utf-8")) for path in REDUCERS.glob("*.json")}


# --------------------------------------------------------------------------
# Valid frames pass clean

VALID_FRAMES = [
    pytest.param(INITIALIZE, "client", None, id="initialize-request"),
    pytest.param(INITIALIZE_RESULT, "server", "initialize", id="initialize-result"),
    pytest.param(SUBSCRIBE, "client", None, id="subscribe-request"),
    pytest.param(SUBSCRIBE_RESULT, "server", "subscribe", id="subscribe-result"),
    pytest.param(success(None), "server", "ping", id="ping-null-result"),
    pytest.param(success({"anything": 1}), "server", None, id="result-without-method"),
    pytest.param(ERROR_RESPONSE, "server", None, id="error-response"),
    pytest.param(ERROR_RESPONSE, "server", "subscribe", id="error-answering-subscribe"),
    pytest.param(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
        "server",
        None,
        id="parse-error-null-id",
    ),
    pytest.param(SESSION_ADDED, "server", None, id="session-added"),
    pytest.param(
        request("resourceRead", {"channel": "ahp-root://", "uri": "file:///a"}),
        "server",
        None,
        id="host-to-client-request",
    ),
    pytest.param(
        success({"data": "aGk=", "encoding": "base64"}),
        "client",
        "resourceRead",
        id="client-answers-host-request",
    ),
    pytest.param(notification("unsubscribe", {"channel": CHAT}), "client", None, id="unsubscribe"),
    pytest.param(envelope(SESSION, ACTIONS["session"][1]), "server", None, id="action"),
]


@pytest.mark.parametrize(("frame", "direction", "answers"), VALID_FRAMES)
def test_valid_frames_pass(frame: dict[str, Any], direction: Any, answers: str | None) -> None:
    assert validate_frame(frame, direction=direction, request_method=answers) == []
    assert_valid_frame(json.dumps(frame), direction=direction, request_method=answers)


@pytest.mark.parametrize("kind", list(ACTIONS))
def test_actions_of_every_channel_kind_pass_both_ways(kind: str) -> None:
    channel, action = ACTIONS[kind]
    assert validate_frame(envelope(channel, action), direction="server") == []
    assert validate_frame(dispatch(channel, action), direction="client") == []


def test_action_envelope_with_origin_passes() -> None:
    frame = envelope(SESSION, ACTIONS["session"][1])
    frame["params"]["origin"] = {"clientId": "client-7", "clientSeq": 3}
    assert validate_frame(frame, direction="server") == []


@pytest.mark.parametrize(("name", "index", "channel"), FIXTURE_ACTIONS)
def test_reducer_fixture_actions_pass(
    reducer_fixtures: dict[str, Any], name: str, index: int, channel: str
) -> None:
    action = reducer_fixtures[name]["actions"][index]
    assert_valid_frame(envelope(channel, action), direction="server")
    assert_valid_frame(dispatch(channel, action), direction="client")


def test_both_tool_call_confirmation_shapes_pass() -> None:
    base = {"type": "chat/toolCallConfirmed", "turnId": "turn-2", "toolCallId": "tc-2"}
    approved = base | {"approved": True, "confirmed": "user-action"}
    denied = base | {"approved": False, "reason": "denied", "reasonMessage": "Too risky"}
    assert validate_frame(envelope(CHAT, approved), direction="server") == []
    assert validate_frame(dispatch(CHAT, denied), direction="client") == []


# --------------------------------------------------------------------------
# Broken frames: every undeclared and missing key, exactly


def test_request_unknown_and_missing_keys_shallow_and_deep() -> None:
    frame = changed(
        INITIALIZE,
        ("params.clientId", DELETE),
        ("params.transport", "ws"),
        ("params.clientInfo.vendor", "acme"),
        ("params.clientInfo.name", DELETE),
        ("params.field_meta", {}),
    )
    assert found(frame, direction="client") == {
        ("missing_key", "$.params.clientId"),
        ("unknown_key", "$.params.transport"),
        ("unknown_key", "$.params.clientInfo.vendor"),
        ("missing_key", "$.params.clientInfo.name"),
        # The wire key is `_meta`; the model's attribute name is no key at all.
        ("unknown_key", "$.params.field_meta"),
    }


def test_meta_is_reported_by_its_wire_name() -> None:
    frame = changed(INITIALIZE, ("params._meta", ["not", "an", "object"]))
    assert found(frame, direction="client") == {("wrong_type", "$.params._meta")}
    ok = changed(INITIALIZE, ("params._meta", {"vendor.example/anything": {"goes": True}}))
    assert found(ok, direction="client") == set()


def test_subscribe_result_deep_inside_snapshot_state() -> None:
    turn = "result.snapshot.state.turns[0]"
    tool_call = f"{turn}.responseParts[1].toolCall"
    frame = changed(
        SUBSCRIBE_RESULT,
        (f"{turn}.id", DELETE),
        (f"{turn}.message.attachments[0].size", 12),
        (f"{tool_call}.pastTenseMessage", DELETE),
        (f"{tool_call}.progress", 0.5),
        (f"{tool_call}.content[0].text", DELETE),
        (f"{turn}.usage.cost", 3),
        ("result.snapshot.state.activeTurn.responseParts[0].id", DELETE),
        ("result.snapshot.state.pinned", True),
        ("result.snapshot.fromSeq", DELETE),
        ("result.cursor", "c1"),
    )
    assert found(frame, direction="server", request_method="subscribe") == {
        ("missing_key", "$.result.snapshot.state.turns[0].id"),
        ("unknown_key", "$.result.snapshot.state.turns[0].message.attachments[0].size"),
        (
            "missing_key",
            "$.result.snapshot.state.turns[0].responseParts[1].toolCall.pastTenseMessage",
        ),
        ("unknown_key", "$.result.snapshot.state.turns[0].responseParts[1].toolCall.progress"),
        (
            "missing_key",
            "$.result.snapshot.state.turns[0].responseParts[1].toolCall.content[0].text",
        ),
        ("unknown_key", "$.result.snapshot.state.turns[0].usage.cost"),
        ("missing_key", "$.result.snapshot.state.activeTurn.responseParts[0].id"),
        ("unknown_key", "$.result.snapshot.state.pinned"),
        ("missing_key", "$.result.snapshot.fromSeq"),
        ("unknown_key", "$.result.cursor"),
    }


def test_initialize_result_deep_inside_root_state() -> None:
    frame = changed(
        INITIALIZE_RESULT,
        ("result.snapshots[0].state.agents[0].models[0].name", DELETE),
        ("result.snapshots[0].state.agents[0].models[0].tier", "gold"),
        ("result.snapshots[0].state.agents[0].icon", "x.png"),
        ("result.serverInfo.name", DELETE),
        ("result.protocolVersion", DELETE),
    )
    assert found(frame, direction="server", request_method="initialize") == {
        ("missing_key", "$.result.snapshots[0].state.agents[0].models[0].name"),
        ("unknown_key", "$.result.snapshots[0].state.agents[0].models[0].tier"),
        ("unknown_key", "$.result.snapshots[0].state.agents[0].icon"),
        ("missing_key", "$.result.serverInfo.name"),
        ("missing_key", "$.result.protocolVersion"),
    }


def test_result_shape_is_not_checked_without_the_request_method() -> None:
    frame = changed(SUBSCRIBE_RESULT, ("result.snapshot.state.pinned", True))
    assert found(frame, direction="server") == set()


def test_error_response_keys() -> None:
    frame = changed(
        ERROR_RESPONSE, ("error.message", DELETE), ("error.detail", "x"), ("retry", True)
    )
    assert found(frame, direction="server") == {
        ("missing_key", "$.error.message"),
        ("unknown_key", "$.error.detail"),
        ("unknown_key", "$.retry"),
    }
    assert found(changed(ERROR_RESPONSE, ("error.code", "-32602")), direction="server") == {
        ("wrong_type", "$.error.code")
    }


def test_notification_keys_shallow_and_deep() -> None:
    frame = changed(
        SESSION_ADDED,
        ("params.summary.createdAt", DELETE),
        ("params.summary.colour", "teal"),
        ("params.summary.project", {"uri": "file:///w"}),
        ("params.seq", 4),
    )
    assert found(frame, direction="server") == {
        ("missing_key", "$.params.summary.createdAt"),
        ("unknown_key", "$.params.summary.colour"),
        ("missing_key", "$.params.summary.project.displayName"),
        ("unknown_key", "$.params.seq"),
    }


BROKEN_ACTIONS = {
    # kind: (edits to the action, expected (kind, path under $.params.action))
    "root": (
        [("activeSessions", DELETE), ("delta", 1)],
        {("missing_key", ".activeSessions"), ("unknown_key", ".delta")},
    ),
    "session": (
        [("title", DELETE), ("previous", "Old")],
        {("missing_key", ".title"), ("unknown_key", ".previous")},
    ),
    "chat": (
        [("message.attachments[0].resource", DELETE), ("message.origin.by", "me")],
        {
            ("missing_key", ".message.attachments[0].resource"),
            ("unknown_key", ".message.origin.by"),
        },
    ),
    "terminal": (
        [("data", DELETE), ("stream", "stdout")],
        {("missing_key", ".data"), ("unknown_key", ".stream")},
    ),
    "changeset": (
        [("status", DELETE), ("files", [])],
        {("missing_key", ".status"), ("unknown_key", ".files")},
    ),
    "annotations": (
        [("entryId", DELETE), ("reason", "resolved")],
        {("missing_key", ".entryId"), ("unknown_key", ".reason")},
    ),
    "resourceWatch": (
        [("changes.items[0].uri", DELETE), ("changes.items[0].size", 3)],
        {("missing_key", ".changes.items[0].uri"), ("unknown_key", ".changes.items[0].size")},
    ),
}


@pytest.mark.parametrize("kind", list(BROKEN_ACTIONS))
def test_action_envelope_and_dispatch_report_action_keys(kind: str) -> None:
    channel, action = ACTIONS[kind]
    edits, expected = BROKEN_ACTIONS[kind]
    broken = changed({"action": action}, *((f"action.{path}", value) for path, value in edits))
    wanted = {(issue, f"$.params.action{path}") for issue, path in expected}
    assert found(envelope(channel, broken["action"]), direction="server") == wanted
    assert found(dispatch(channel, broken["action"]), direction="client") == wanted


def test_action_envelope_own_keys() -> None:
    frame = changed(
        envelope(SESSION, ACTIONS["session"][1]),
        ("params.serverSeq", DELETE),
        ("params.clientSeq", 2),
        ("params.origin", {"clientSeq": 1}),
    )
    assert found(frame, direction="server") == {
        ("missing_key", "$.params.serverSeq"),
        ("unknown_key", "$.params.clientSeq"),
        ("missing_key", "$.params.origin.clientId"),
    }


def test_response_part_deep_inside_an_action() -> None:
    frame = changed(
        envelope(CHAT, TOOL_CALL_PART_ACTION),
        ("params.action.part.toolCall.toolName", DELETE),
        ("params.action.part.toolCall.startedBy", "agent"),
        ("params.action.part.index", 0),
    )
    assert found(frame, direction="server") == {
        ("missing_key", "$.params.action.part.toolCall.toolName"),
        ("unknown_key", "$.params.action.part.toolCall.startedBy"),
        ("unknown_key", "$.params.action.part.index"),
    }


def test_dispatch_action_params() -> None:
    channel, action = ACTIONS["chat"]
    frame = changed(
        dispatch(channel, action),
        ("params.clientSeq", DELETE),
        ("params.serverSeq", 9),
        ("params.action.message.text", DELETE),
        ("params.action.message.attachments[0].preview", "..."),
    )
    assert found(frame, direction="client") == {
        ("missing_key", "$.params.clientSeq"),
        ("unknown_key", "$.params.serverSeq"),
        ("missing_key", "$.params.action.message.text"),
        ("unknown_key", "$.params.action.message.attachments[0].preview"),
    }


def test_a_broken_action_is_judged_against_its_own_type_only() -> None:
    # StateAction is a plain union of ~100 members; only the member named by
    # `type` may speak, so one bad key gives one issue.
    frame = changed(envelope(SESSION, ACTIONS["session"][1]), ("params.action.title", 5))
    issues = validate_frame(frame, direction="server")
    assert [(i.kind, i.path) for i in issues] == [("wrong_type", "$.params.action.title")]


def test_unknown_or_missing_action_type() -> None:
    unknown = envelope(SESSION, {"type": "session/renamed", "title": "x"})
    assert found(unknown, direction="server") == {("wrong_value", "$.params.action.type")}
    untyped = dispatch(SESSION, {"title": "x"})
    assert found(untyped, direction="client") == {("missing_key", "$.params.action.type")}
    not_object = dispatch(SESSION, "session/titleChanged")
    assert found(not_object, direction="client") == {("wrong_type", "$.params.action")}


def test_tool_call_confirmation_shape_is_picked_by_approved() -> None:
    base = {"type": "chat/toolCallConfirmed", "turnId": "turn-2", "toolCallId": "tc-2"}
    # Denied, but carrying the approved shape's key: judged as the denied shape.
    wrong = base | {"approved": False, "confirmed": "user-action"}
    assert found(dispatch(CHAT, wrong), direction="client") == {
        ("missing_key", "$.params.action.reason"),
        ("unknown_key", "$.params.action.confirmed"),
    }
    # The schema leaves `approved` untyped; the protocol says true or false.
    odd = base | {"approved": "yes", "confirmed": "user-action"}
    assert found(dispatch(CHAT, odd), direction="client") == {
        ("wrong_value", "$.params.action.approved")
    }


def test_an_unknown_tag_inside_a_union_is_one_issue() -> None:
    frame = changed(envelope(CHAT, TOOL_CALL_PART_ACTION), ("params.action.part.kind", "video"))
    assert found(frame, direction="server") == {("wrong_value", "$.params.action.part.kind")}
    frame = changed(
        envelope(CHAT, TOOL_CALL_PART_ACTION), ("params.action.part.toolCall.status", "paused")
    )
    assert found(frame, direction="server") == {
        ("wrong_value", "$.params.action.part.toolCall.status")
    }


def test_untagged_union_reports_the_closest_member() -> None:
    # Snapshot.state has no tag: a root state with a broken agent is still a root state.
    frame = changed(INITIALIZE_RESULT, ("result.snapshots[0].state.agents[0].description", DELETE))
    assert found(frame, direction="server", request_method="initialize") == {
        ("missing_key", "$.result.snapshots[0].state.agents[0].description")
    }
    frame = changed(SUBSCRIBE_RESULT, ("result.snapshot.state.turns[0].message.text", 4))
    assert found(frame, direction="server", request_method="subscribe") == {
        ("wrong_type", "$.result.snapshot.state.turns[0].message.text")
    }


def test_a_value_no_union_member_accepts() -> None:
    frame = changed(
        SUBSCRIBE_RESULT,
        ("result.snapshot.state.turns[0].responseParts[1].toolCall.pastTenseMessage", 12),
    )
    issues = validate_frame(frame, direction="server", request_method="subscribe")
    assert [(i.kind, i.path) for i in issues] == [
        (
            "wrong_type",
            "$.result.snapshot.state.turns[0].responseParts[1].toolCall.pastTenseMessage",
        )
    ]
    assert "string" in issues[0].message


# --------------------------------------------------------------------------
# Values the generated models let through but the wire does not


def test_optional_keys_are_left_out_not_null() -> None:
    frame = changed(SUBSCRIBE_RESULT, ("result.snapshot.state.activeTurn", None))
    issues = validate_frame(frame, direction="server", request_method="subscribe")
    assert [(i.kind, i.path) for i in issues] == [
        ("wrong_type", "$.result.snapshot.state.activeTurn")
    ]
    assert "left out" in issues[0].message
    frame = changed(envelope(SESSION, ACTIONS["session"][1]), ("params.origin", None))
    assert found(frame, direction="server") == {("wrong_type", "$.params.origin")}


def test_session_status_is_a_bitset() -> None:
    in_progress_archived = changed(SESSION_ADDED, ("params.summary.status", 8 | 64))
    assert found(in_progress_archived, direction="server") == set()
    negative = changed(SESSION_ADDED, ("params.summary.status", -1))
    assert found(negative, direction="server") == {("wrong_value", "$.params.summary.status")}


def test_sequence_numbers_are_integers() -> None:
    frame = envelope(SESSION, ACTIONS["session"][1], seq=7.0)
    assert found(frame, direction="server") == {("wrong_type", "$.params.serverSeq")}
    frame = dispatch(SESSION, ACTIONS["session"][1], seq=True)
    assert found(frame, direction="client") == {("wrong_type", "$.params.clientSeq")}


# --------------------------------------------------------------------------
# JSON-RPC envelope, methods and directions


def test_envelope_fields() -> None:
    frame = changed(INITIALIZE, ("jsonrpc", "1.0"), ("id", True), ("trace", "abc"))
    assert found(frame, direction="client") == {
        ("wrong_value", "$.jsonrpc"),
        ("wrong_type", "$.id"),
        ("unknown_key", "$.trace"),
    }
    assert found(
        changed(SUBSCRIBE_RESULT, ("id", DELETE), ("jsonrpc", DELETE)), direction="server"
    ) == {("missing_key", "$.id"), ("missing_key", "$.jsonrpc")}
    assert found(changed(SUBSCRIBE_RESULT, ("id", None)), direction="server") == {
        ("wrong_type", "$.id")
    }


def test_params_must_be_present_and_structured() -> None:
    assert found(changed(SUBSCRIBE, ("params", DELETE)), direction="client") == {
        ("missing_key", "$.params")
    }
    assert found(changed(SUBSCRIBE, ("params", None)), direction="client") == {
        ("wrong_type", "$.params")
    }
    assert found(changed(SUBSCRIBE, ("params", [CHAT])), direction="client") == {
        ("wrong_type", "$.params")
    }


def test_null_results() -> None:
    assert found(success({}), direction="server", request_method="ping") == {
        ("wrong_value", "$.result")
    }
    assert found(success(None), direction="server", request_method="subscribe") == {
        ("wrong_type", "$.result")
    }


@pytest.mark.parametrize(
    ("frame", "direction"),
    [
        (request("frobnicate", {}), "client"),
        (request("action", {}), "client"),  # a host notification
        (request("subscribe", {"channel": CHAT}), "server"),  # hosts do not subscribe
        (notification("subscribe", {"channel": CHAT}), "client"),  # a request without id
        (notification("dispatchAction", {}), "server"),  # clients dispatch, hosts do not
        (request("dispatchAction", {}), "client"),  # a notification with an id
    ],
)
def test_unknown_methods(frame: dict[str, Any], direction: Any) -> None:
    issues = validate_frame(frame, direction=direction)
    assert [(i.kind, i.path) for i in issues] == [("unknown_method", "$.method")]


def test_response_to_an_unknown_request_method() -> None:
    assert found(success({}), direction="server", request_method="frobnicate") == {
        ("unknown_method", "$")
    }
    # Clients answer only the host's requests.
    assert found(success({}), direction="client", request_method="subscribe") == {
        ("unknown_method", "$")
    }


@pytest.mark.parametrize(
    "frame",
    [
        "{not json",
        "[]",
        '{"jsonrpc": "2.0", "id": 1, "result": NaN}',
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "m"}},
        42,
    ],
)
def test_malformed(frame: Any) -> None:
    issues = validate_frame(frame, direction="server")
    assert [(i.kind, i.path) for i in issues] == [("malformed", "$")]


def test_classify_frame() -> None:
    assert classify_frame(INITIALIZE) == "request"
    assert classify_frame(SESSION_ADDED) == "notification"
    assert classify_frame(SUBSCRIBE_RESULT) == "success"
    assert classify_frame(ERROR_RESPONSE) == "error"
    assert classify_frame({"jsonrpc": "2.0"}) is None


def test_direction_is_checked() -> None:
    with pytest.raises(ValueError, match="direction"):
        validate_frame(INITIALIZE, direction="host")  # type: ignore[arg-type]


def test_assert_valid_frame_lists_every_issue() -> None:
    frame = changed(INITIALIZE, ("params.clientId", DELETE), ("params.transport", "ws"))
    with pytest.raises(AssertionError) as raised:
        assert_valid_frame(frame, direction="client")
    text = str(raised.value)
    assert "2 issue(s)" in text
    assert "$.params.clientId: missing_key" in text
    assert "$.params.transport: unknown_key" in text


# --------------------------------------------------------------------------
# Helpers for the engine and for tests


def test_params_problem_names_the_field() -> None:
    assert params_problem("subscribe", {}) == "params.channel: field required"
    assert (
        params_problem("subscribe", {"channel": CHAT, "depth": 1}) == "params.depth: unknown field"
    )
    assert params_problem("subscribe", {"channel": 5}) == "params.channel: expected a string, got 5"
    assert params_problem("initialize", None) == "params: field required"
    assert params_problem("subscribe", {"channel": CHAT}) is None
    with pytest.raises(KeyError):
        params_problem("action", {})


def test_validate_params_and_value() -> None:
    assert validate_params("unsubscribe", {"channel": CHAT}) == []
    assert [i.path for i in validate_params("unsubscribe", {})] == ["$.params.channel"]
    issues = validate_value("ChatState", {**CHAT_STATE, "title": None}, path="$.state")
    assert [(i.kind, i.path) for i in issues] == [("wrong_type", "$.state.title")]
    title_changed = {"type": "session/titleChanged", "title": "x"}
    assert validate_value(strict.SessionTitleChangedAction, title_changed) == []
    assert validate_value("StateAction", title_changed) == []
    # Host -> client requests have params too.
    assert validate_params("resourceRead", {"channel": "ahp-root://"}, direction="server") != []
    with pytest.raises(KeyError):
        validate_params("action", {})  # the host sends it, clients do not


def test_channel_literals() -> None:
    literals = channel_literals()
    assert literals["initialize"] == "ahp-root://"
    assert literals["listSessions"] == "ahp-root://"
    assert literals["runAutomation"] == "ahp-automations://"
    assert "subscribe" not in literals
    assert "createSession" not in literals
    assert set(literals) <= set(COMMANDS)


def test_action_models_and_picking_by_type() -> None:
    models = action_models()
    assert models["session/titleChanged"] == (strict.SessionTitleChangedAction,)
    assert set(models["chat/toolCallConfirmed"]) == {
        strict.ChatToolCallApprovedAction,
        strict.ChatToolCallDeniedAction,
    }
    assert len(models) >= 100
    base = {"type": "chat/toolCallConfirmed", "turnId": "t", "toolCallId": "c"}
    assert model_for_action(base | {"approved": True}) is strict.ChatToolCallApprovedAction
    assert model_for_action(base | {"approved": False}) is strict.ChatToolCallDeniedAction
    assert model_for_action(base | {"reason": "skipped"}) is strict.ChatToolCallDeniedAction
    assert model_for_action({"type": "terminal/data"}) is strict.TerminalDataAction
    assert model_for_action({"type": "nope"}) is None
    assert model_for_action("terminal/data") is None


def test_reducer_fixture_drift_is_explained(reducer_fixtures: dict[str, Any]) -> None:
    # Every 0.8.0 fixture action either passes, or fails only where the schema
    # moved on since (or where the fixture deliberately uses an unknown type,
    # or writes `undefined` as null).
    drift = {
        "chat/error": {("missing_key", ".part"), ("unknown_key", ".error")},
        "session/customizationsChanged": {("unknown_key", ".customizations[*].enabled")},
        "session/customizationUpdated": {("unknown_key", ".customization.enabled")},
        "session/customizationToggled": {
            ("missing_key", ".enablement"),
            ("unknown_key", ".enabled"),
        },
        "root/terminalsChanged": {
            ("missing_key", ".terminals[*].lifecycle"),
            ("missing_key", ".terminals[*].claim.chat"),
        },
        "terminal/claimed": {("missing_key", ".claim.chat")},
        "changeset/contentChanged": {("unknown_key", ".error")},
        "annotations/set": {
            ("missing_key", ".annotation.origin"),
            ("unknown_key", ".annotation.turnId"),
        },
        "annotations/updated": {("unknown_key", ".turnId")},
        "session/activityChanged": {("wrong_type", ".activity")},
        "chat/activityChanged": {("wrong_type", ".activity")},
        "changeset/operationsChanged": {("wrong_type", ".operations")},
        "session/changesetsChanged": {("wrong_type", ".changesets")},
        "chat/turnsLoaded": {("wrong_type", ".turns[*].usage")},
    }
    checked = 0
    for name, case in sorted(reducer_fixtures.items()):
        for action in case["actions"]:
            checked += 1
            issues = found(envelope(SESSION, action), direction="server")
            got = {(kind, re.sub(r"\[\d+\]", "[*]", path)) for kind, path in issues}
            got = {(kind, path.removeprefix("$.params.action")) for kind, path in got}
            if action["type"] in drift:
                assert got <= drift[action["type"]], (name, got)
            elif action["type"] not in action_models():
                assert got == {("wrong_value", ".type")}, name
            else:
                assert got == set(), (name, got)
    assert checked > 400


def test_a_cleared_activity_may_be_null_in_a_summary_change_and_nowhere_else():
    frame = {
        "jsonrpc": "2.0",
        "method": "root/sessionSummaryChanged",
        "params": {"channel": "ahp-root://", "session": "x:/1", "changes": {"activity": None}},
    }
    assert validate_frame(frame, direction="server") == []
    frame["params"]["changes"]["title"] = None
    (issue,) = validate_frame(frame, direction="server")
    assert (issue.kind, issue.path) == ("wrong_type", "$.params.changes.title")
