"""Property test: reducers never raise and never mutate what they are given.

States start from every fixture's ``initial`` (the official corpus when it is
present, and this repo's own cases) and from the states reached by folding
random actions over them. Actions are schema-shaped, with ids drawn from a
small pool harvested from those states so they hit existing entries.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ahpcore.reducers import ACTION_TYPES, REDUCERS, channel_kind_for_action
from ahpcore.reducers._helpers import same

try:
    from . import conftest_reducers as helpers
except ImportError:  # tests/protocol is not a package
    import conftest_reducers as helpers  # type: ignore[no-redef]

Strategy = st.SearchStrategy[Any]

# ─── Seed states and the id pool ─────────────────────────────────────────────

_ID_KEYS = {
    "id",
    "turnId",
    "toolCallId",
    "partId",
    "resource",
    "clientId",
    "chat",
    "requestId",
    "commandId",
    "operationId",
    "annotationId",
    "session",
    "uri",
}


def _harvest(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _ID_KEYS and isinstance(item, str):
                out.add(item)
            _harvest(item, out)
    elif isinstance(value, list):
        for item in value:
            _harvest(item, out)


def _seed_states() -> dict[str, list[Any]]:
    seeds: dict[str, list[Any]] = {kind: [] for kind in REDUCERS}
    files = helpers.fixture_files(helpers.official_fixture_dir())
    files += helpers.fixture_files(helpers.OWN_FIXTURES)
    for path in files:
        case = helpers.load_fixture(path)
        seeds[case["reducer"]].append(case["initial"])
    return seeds


SEEDS = _seed_states()
_pool: set[str] = {"x", "t1", "turn-1", "tc1", "p1", "a1", "w1"}
for _states in SEEDS.values():
    for _state in _states:
        _harvest(_state, _pool)
IDS = st.sampled_from(sorted(_pool))
TEXT = st.sampled_from(["", "a", "hello ", "ls -la"])
BOOL = st.booleans()
NUM = st.integers(min_value=-5, max_value=5000)
STAMP = st.sampled_from(["2026-01-01T00:00:00.000Z", "1970-01-01T00:00:01.000Z", "not-a-date"])
META = st.one_of(st.none(), st.just({"k": 1}))
MESSAGE = st.builds(lambda t: {"text": t, "origin": {"kind": "user"}}, TEXT)
ERROR = st.just({"errorType": "e", "message": "m"})
STATUS_BITS = st.sampled_from([1, 2, 8, 24, 33, 40, 65, 97])


def obj(**fields: Strategy) -> Strategy:
    """A dict strategy; fields whose strategy draws ``None`` are left out."""

    def build(values: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in values.items() if v is not None}

    return st.fixed_dictionaries(fields).map(build)


def opt(strategy: Strategy) -> Strategy:
    return st.one_of(st.none(), strategy)


PART = st.one_of(
    obj(kind=st.just("markdown"), id=IDS, content=TEXT),
    obj(kind=st.just("reasoning"), id=IDS, content=TEXT),
    obj(kind=st.just("error"), error=ERROR, resumable=opt(BOOL)),
    obj(
        kind=st.just("toolCall"),
        toolCall=obj(toolCallId=IDS, toolName=TEXT, status=st.just("running")),
    ),
)
REQUEST = obj(id=IDS, kind=st.just("elicitation"), answers=opt(st.just({"q": "a"})))
CONTRIBUTOR = st.one_of(
    obj(kind=st.just("mcp"), customizationId=IDS), obj(kind=st.just("client"), clientId=IDS)
)
ENABLEMENT = st.lists(obj(kind=st.just("global"), enabled=BOOL), max_size=2)
CUSTOMIZATION = obj(
    type=st.sampled_from(["plugin", "mcpServer", "directory"]), id=IDS, uri=TEXT, name=TEXT
)

ACTIONS: dict[str, Strategy] = {
    "root/agentsChanged": obj(agents=st.lists(obj(provider=IDS), max_size=2)),
    "root/activeSessionsChanged": obj(activeSessions=NUM),
    "root/terminalsChanged": obj(terminals=st.lists(obj(resource=IDS), max_size=2)),
    "root/configChanged": obj(config=st.just({"k": 1}), replace=opt(BOOL)),
    "session/ready": obj(),
    "session/creationFailed": obj(error=ERROR),
    "session/chatAdded": obj(summary=obj(resource=IDS, title=TEXT, status=STATUS_BITS)),
    "session/chatRemoved": obj(chat=IDS),
    "session/chatUpdated": obj(chat=IDS, changes=obj(title=TEXT, resource=opt(IDS))),
    "session/chatsReordered": obj(chats=st.lists(IDS, max_size=4)),
    "session/defaultChatChanged": obj(defaultChat=opt(IDS)),
    "session/titleChanged": obj(title=TEXT),
    "session/isReadChanged": obj(isRead=BOOL),
    "session/isArchivedChanged": obj(isArchived=BOOL),
    "session/activityChanged": obj(activity=opt(TEXT)),
    "session/changesetsChanged": obj(changesets=opt(st.lists(obj(uri=IDS), max_size=2))),
    "session/configChanged": obj(config=st.just({"k": 2}), replace=opt(BOOL)),
    "session/metaChanged": obj(_meta=META),
    "session/serverToolsChanged": obj(tools=st.lists(obj(name=TEXT), max_size=2)),
    "session/activeClientSet": obj(activeClient=obj(clientId=IDS, tools=st.just([]))),
    "session/activeClientRemoved": obj(clientId=IDS),
    "session/workingDirectorySet": obj(directory=IDS),
    "session/workingDirectoryRemoved": obj(directory=IDS),
    "session/workingDirectoryReplaced": obj(directory=IDS, replacement=IDS),
    "session/inputNeededSet": obj(
        request=obj(id=IDS, kind=st.sampled_from(["question", "toolClientExecution"]))
    ),
    "session/inputNeededRemoved": obj(id=IDS),
    "session/customizationsChanged": obj(customizations=st.lists(CUSTOMIZATION, max_size=2)),
    "session/customizationToggled": obj(id=IDS, enablement=ENABLEMENT),
    "session/customizationUpdated": obj(customization=CUSTOMIZATION),
    "session/customizationRemoved": obj(id=IDS),
    "session/mcpServerStateChanged": obj(
        id=IDS, state=obj(kind=st.sampled_from(["running", "starting"])), channel=opt(IDS)
    ),
    "session/mcpServerStartRequested": obj(id=IDS),
    "session/mcpServerStopRequested": obj(id=IDS),
    "session/mcpServerBackgroundRequested": obj(id=IDS),
    "chat/turnStarted": obj(turnId=IDS, startedAt=STAMP, message=MESSAGE, queuedMessageId=opt(IDS)),
    "chat/turnResume": obj(turnId=IDS),
    "chat/delta": obj(turnId=IDS, partId=IDS, content=TEXT),
    "chat/reasoning": obj(turnId=IDS, partId=IDS, content=TEXT),
    "chat/responsePart": obj(turnId=IDS, part=PART),
    "chat/turnComplete": obj(turnId=IDS, duration=NUM),
    "chat/turnCancelled": obj(turnId=IDS, duration=NUM),
    "chat/error": obj(
        turnId=IDS, duration=NUM, part=obj(kind=st.just("error"), error=ERROR, resumable=opt(BOOL))
    ),
    "chat/activityChanged": obj(activity=opt(TEXT)),
    "chat/workingDirectorySet": obj(directory=IDS),
    "chat/workingDirectoryRemoved": obj(directory=IDS),
    "chat/toolCallStart": obj(
        turnId=IDS,
        toolCallId=IDS,
        toolName=TEXT,
        displayName=TEXT,
        contributor=opt(CONTRIBUTOR),
        _meta=META,
    ),
    "chat/toolCallDelta": obj(
        turnId=IDS, toolCallId=IDS, content=opt(TEXT), invocationMessage=opt(TEXT), _meta=META
    ),
    "chat/toolCallReady": obj(
        turnId=IDS,
        toolCallId=IDS,
        invocationMessage=TEXT,
        toolInput=opt(TEXT),
        confirmed=opt(st.just("not-needed")),
        options=opt(st.lists(obj(id=IDS, label=TEXT), max_size=2)),
        contributor=opt(CONTRIBUTOR),
        _meta=META,
    ),
    "chat/toolCallConfirmed": obj(
        turnId=IDS,
        toolCallId=IDS,
        approved=BOOL,
        confirmed=opt(st.just("user-action")),
        reason=opt(st.just("denied")),
        selectedOptionId=opt(IDS),
        editedToolInput=opt(TEXT),
    ),
    "chat/toolCallComplete": obj(
        turnId=IDS,
        toolCallId=IDS,
        requiresResultConfirmation=opt(BOOL),
        result=obj(success=BOOL, pastTenseMessage=TEXT, content=opt(st.just([]))),
    ),
    "chat/toolCallResultConfirmed": obj(turnId=IDS, toolCallId=IDS, approved=BOOL),
    "chat/toolCallContentChanged": obj(
        turnId=IDS, toolCallId=IDS, content=st.just([{"type": "text", "text": "x"}])
    ),
    "chat/toolCallAuthRequired": obj(
        turnId=IDS, toolCallId=IDS, auth=obj(reason=st.just("required"))
    ),
    "chat/toolCallAuthResolved": obj(turnId=IDS, toolCallId=IDS),
    "chat/usage": obj(turnId=IDS, usage=obj(inputTokens=NUM, outputTokens=NUM)),
    "chat/truncated": obj(turnId=opt(IDS)),
    "chat/turnsLoaded": obj(
        turns=st.lists(
            obj(id=IDS, message=MESSAGE, responseParts=st.just([]), state=st.just("complete")),
            max_size=2,
        ),
        turnsNextCursor=opt(TEXT),
    ),
    "chat/inputRequested": obj(request=REQUEST),
    "chat/inputAnswerChanged": obj(requestId=IDS, questionId=IDS, answer=opt(TEXT)),
    "chat/inputCompleted": obj(
        requestId=IDS, response=opt(st.just("accept")), answers=opt(st.just({"q": "b"}))
    ),
    "chat/pendingMessageSet": obj(
        kind=st.sampled_from(["steering", "queued"]), id=IDS, message=MESSAGE
    ),
    "chat/pendingMessageRemoved": obj(kind=st.sampled_from(["steering", "queued"]), id=IDS),
    "chat/queuedMessagesReordered": obj(order=st.lists(IDS, max_size=4)),
    "chat/draftChanged": obj(draft=opt(MESSAGE)),
    "chat/backgroundWorkSet": obj(
        work=obj(id=IDS, kind=st.just("shell"), label=TEXT, startedAt=STAMP, command=TEXT)
    ),
    "chat/backgroundWorkRemoved": obj(id=IDS),
    "chat/movableChanged": obj(movable=BOOL),
    "chat/changesetsChanged": obj(changesets=opt(st.lists(obj(uri=IDS), max_size=2))),
    "chat/canvasesChanged": obj(canvases=opt(st.lists(obj(resource=IDS), max_size=2))),
    "chat/isReadChanged": obj(isRead=BOOL),
    "chat/isArchivedChanged": obj(isArchived=BOOL),
    "terminal/data": obj(data=TEXT),
    "terminal/input": obj(data=TEXT),
    "terminal/resized": obj(cols=NUM, rows=NUM),
    "terminal/claimed": obj(claim=obj(kind=st.just("client"), clientId=IDS)),
    "terminal/titleChanged": obj(title=TEXT),
    "terminal/cwdChanged": obj(cwd=IDS),
    "terminal/exited": obj(exitCode=opt(NUM)),
    "terminal/cleared": obj(),
    "terminal/commandDetectionAvailable": obj(),
    "terminal/commandExecuted": obj(commandId=IDS, commandLine=TEXT, timestamp=NUM),
    "terminal/commandFinished": obj(commandId=IDS, exitCode=opt(NUM), durationMs=opt(NUM)),
    "changeset/statusChanged": obj(
        status=st.sampled_from(["computing", "recomputing", "ready", "error"]), error=opt(ERROR)
    ),
    "changeset/fileSet": obj(file=obj(id=IDS, reviewed=opt(BOOL))),
    "changeset/fileRemoved": obj(fileId=IDS),
    "changeset/filesReviewChanged": obj(files=st.lists(IDS, max_size=3), reviewed=BOOL),
    "changeset/contentChanged": obj(
        files=st.lists(obj(id=IDS), max_size=2),
        operations=opt(st.lists(obj(id=IDS, status=st.just("idle")), max_size=2)),
    ),
    "changeset/operationsChanged": obj(
        operations=opt(st.lists(obj(id=IDS, status=st.just("idle")), max_size=2))
    ),
    "changeset/operationStatusChanged": obj(
        operationId=IDS, status=st.sampled_from(["idle", "running", "error"]), error=opt(ERROR)
    ),
    "changeset/cleared": obj(),
    "annotations/set": obj(
        annotation=obj(id=IDS, resource=IDS, entries=st.lists(obj(id=IDS, text=TEXT), max_size=2))
    ),
    "annotations/updated": obj(
        annotationId=IDS, resolved=opt(BOOL), resource=opt(IDS), origin=opt(obj(session=IDS))
    ),
    "annotations/removed": obj(annotationId=IDS),
    "annotations/entrySet": obj(annotationId=IDS, entry=obj(id=IDS, text=TEXT)),
    "annotations/entryRemoved": obj(annotationId=IDS, entryId=IDS),
    "resourceWatch/changed": obj(changes=st.just([])),
    "automation/createRequested": obj(resource=IDS, definition=st.just({"title": "t"})),
    "automation/updateRequested": obj(resource=IDS, changes=st.just({"title": "u"})),
    "automation/set": obj(
        automation=obj(resource=IDS, definition=st.just({"title": "t"}), runs=st.just([]))
    ),
    "automation/removed": obj(resource=IDS),
    "automationRun/lifecycleChanged": obj(
        lifecycle=obj(status=st.sampled_from(["pending", "running", "cancelled"]))
    ),
    "automationRun/sessionSet": obj(session=IDS),
    "automationRun/sessionRemoved": obj(session=IDS),
    "automationRun/primarySessionChanged": obj(primarySession=opt(IDS)),
    "automationRun/cancelRequested": obj(),
    "canvas/stateChanged": obj(
        canvas=obj(instanceId=IDS, extensionId=IDS, canvasId=IDS, url=opt(IDS))
    ),
}

# Used when no fixture offers a seed for a kind (the shared corpus is absent).
_DEFAULT_STATES: dict[str, Any] = {
    "root": {"agents": [], "config": {"schema": {}, "values": {}}},
    "session": {
        "provider": "p",
        "title": "S",
        "status": 1,
        "lifecycle": "ready",
        "activeClients": [],
        "chats": [],
    },
    "chat": {
        "resource": "ahp-chat:/c",
        "title": "C",
        "status": 1,
        "modifiedAt": "2026-01-01T00:00:00.000Z",
        "turns": [],
    },
    "terminal": {"content": []},
    "changeset": {"status": "ready", "files": []},
    "annotations": {"annotations": []},
    "resourceWatch": {},
    "automation": {"entries": []},
    "automationRun": {
        "resource": "r",
        "automation": "a",
        "origin": {"kind": "manual"},
        "lifecycle": {"status": "pending"},
        "sessions": [],
    },
    "canvas": {"instanceId": "i", "extensionId": "e", "canvasId": "c"},
}


def _with_type(action_type: str) -> Strategy:
    return ACTIONS[action_type].map(lambda fields: {"type": action_type, **fields})


def _actions_for(kind: str) -> Strategy:
    known = [_with_type(t) for t in sorted(ACTION_TYPES[kind])]
    unknown = st.just({"type": f"{kind}/notARealAction", "x": 1})
    return st.one_of(*known, unknown)


def _states_for(kind: str) -> Strategy:
    return st.sampled_from([*SEEDS[kind], _DEFAULT_STATES[kind]])


def test_every_action_type_has_a_strategy() -> None:
    for kind, types in ACTION_TYPES.items():
        for action_type in types:
            assert action_type in ACTIONS, action_type
            assert channel_kind_for_action(action_type) == kind


@st.composite
def _scenario(draw: Callable[[Strategy], Any]) -> tuple[str, Any, list[Any]]:
    kind = draw(st.sampled_from(sorted(REDUCERS)))
    state = draw(_states_for(kind))
    actions = draw(st.lists(_actions_for(kind), min_size=1, max_size=8))
    return kind, state, actions


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenario())
def test_reducers_are_pure(scenario: tuple[str, Any, list[Any]]) -> None:
    kind, state, actions = scenario
    reduce = REDUCERS[kind]
    for action in actions:
        state_before = copy.deepcopy(state)
        action_before = copy.deepcopy(action)
        after = reduce(state, action)
        assert state == state_before, f"{action['type']} mutated its input state"
        assert action == action_before, f"{action['type']} mutated its action"
        assert isinstance(after, Mapping)
        if same(after, state):
            assert after is state, f"{action['type']} changed nothing but returned a new object"
        state = after


@pytest.mark.parametrize("kind", sorted(REDUCERS))
def test_unknown_action_returns_the_same_object(kind: str) -> None:
    state = (SEEDS[kind] or [_DEFAULT_STATES[kind]])[0]
    assert REDUCERS[kind](state, {"type": f"{kind}/doesNotExist"}) is state


def test_dispatch_tables_partition_every_action() -> None:
    from ahpcore.reducers import ALL_ACTION_TYPES, CLIENT_DISPATCHABLE, HOST_ONLY

    assert CLIENT_DISPATCHABLE <= ALL_ACTION_TYPES
    assert CLIENT_DISPATCHABLE | HOST_ONLY == ALL_ACTION_TYPES
    assert not CLIENT_DISPATCHABLE & HOST_ONLY
    assert "chat/turnStarted" in CLIENT_DISPATCHABLE
    assert "chat/turnComplete" in HOST_ONLY
    assert channel_kind_for_action("automationRun/cancelRequested") == "automationRun"
    assert channel_kind_for_action("automation/set") == "automation"
    assert channel_kind_for_action("tcp/data") is None
