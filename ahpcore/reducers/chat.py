"""Reducer for ``ahp-chat:`` channels (``ChatState``).

Mirrors ``types/channels-chat/reducer.ts``: turn lifecycle, the tool call state
machine, input requests carried as response parts, pending messages and the
chat-level metadata actions. Clock-free: ``modifiedAt`` is the turn's
``startedAt`` when a turn starts and ``startedAt + duration`` when it ends, and
no other action touches it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._helpers import (
    STATUS_ACTIVITY_MASK,
    STATUS_ERROR,
    STATUS_IDLE,
    STATUS_IN_PROGRESS,
    STATUS_INPUT_NEEDED,
    STATUS_IS_ARCHIVED,
    STATUS_IS_READ,
    Action,
    JsonDict,
    State,
    add_milliseconds,
    as_dict,
    as_list,
    assoc,
    compact,
    dispatching,
    dissoc,
    get,
    index_by,
    index_of,
    removed,
    same,
    set_field,
    status_of,
    truthy,
    upsert_by,
    with_status_flag,
    working_directory_removed,
    working_directory_set,
)
from ._tool_calls import (
    BLOCKING,
    CANCELLED,
    COMPLETED,
    STREAMING,
    TOOL_CALL,
    Updater,
    auth_required_updater,
    auth_resolved_updater,
    cancelled_part,
    complete_updater,
    confirmed_updater,
    content_changed_updater,
    delta_updater,
    first,
    ready_updater,
    result_confirmed_updater,
)

# ResponsePartKind
MARKDOWN = "markdown"
REASONING = "reasoning"
INPUT_REQUEST = "inputRequest"
ERROR_PART = "error"


# ─── Status ──────────────────────────────────────────────────────────────────


def _has_blocking_tool_call(state: State) -> bool:
    return any(
        get(part, "kind") == TOOL_CALL and get(get(part, "toolCall"), "status") in BLOCKING
        for part in as_list(get(state.get("activeTurn"), "responseParts"))
    )


def _has_open_input_request(state: State) -> bool:
    return any(
        get(part, "kind") == INPUT_REQUEST and get(part, "response") is None
        for part in as_list(get(state.get("activeTurn"), "responseParts"))
    )


def _summary_status(state: State, terminal: int | None = None) -> int:
    if terminal:
        activity = terminal
    elif _has_open_input_request(state) or _has_blocking_tool_call(state):
        activity = STATUS_INPUT_NEEDED
    elif state.get("activeTurn") is not None:
        activity = STATUS_IN_PROGRESS
    else:
        activity = STATUS_IDLE
    return (status_of(state) & ~STATUS_ACTIVITY_MASK) | activity


def _refresh_status(state: State) -> State:
    return set_field(state, "status", _summary_status(state))


# ─── Structural updates ──────────────────────────────────────────────────────


def _active_turn(state: State, turn_id: Any) -> Mapping[str, Any] | None:
    active = state.get("activeTurn")
    if not isinstance(active, Mapping) or not same(active.get("id"), turn_id):
        return None
    return active


def _with_parts(state: State, active: Mapping[str, Any], parts: list[Any]) -> JsonDict:
    return assoc(state, "activeTurn", assoc(active, "responseParts", parts))


def _update_tool_call(state: State, turn_id: Any, tool_call_id: Any, updater: Updater) -> State:
    """Apply *updater* to the matching tool call; an updater returning its input declines."""
    active = _active_turn(state, turn_id)
    if active is None:
        return state
    parts = as_list(active.get("responseParts"))
    found = False
    for index, part in enumerate(parts):
        tc = get(part, "toolCall")
        if get(part, "kind") != TOOL_CALL or not isinstance(tc, Mapping):
            continue
        if not same(tc.get("toolCallId"), tool_call_id):
            continue
        updated = updater(tc)
        if updated is not tc:
            found = True
            parts[index] = assoc(part, "toolCall", updated)
    return _with_parts(state, active, parts) if found else state


def _update_part(state: State, turn_id: Any, part_id: Any, updater: Updater) -> State:
    """Apply *updater* to the first part whose id (or tool call id) is *part_id*."""
    active = _active_turn(state, turn_id)
    if active is None:
        return state
    parts = as_list(active.get("responseParts"))
    for index, part in enumerate(parts):
        if not isinstance(part, Mapping):
            continue
        if part.get("kind") == TOOL_CALL:
            ident = get(part.get("toolCall"), "toolCallId")
        else:
            ident = part.get("id")
        if same(ident, part_id):
            parts[index] = updater(part)
            return _with_parts(state, active, parts)
    return state


def _append_text(kind: str, content: Any) -> Updater:
    def updater(part: Mapping[str, Any]) -> Any:
        # The append is defined for one part kind only; any other part is untouched.
        if part.get("kind") != kind or not isinstance(content, str):
            return part
        current = part.get("content")
        return assoc(part, "content", (current if isinstance(current, str) else "") + content)

    return updater


def _end_turn(
    state: State,
    turn_id: Any,
    turn_state: str,
    duration: Any,
    terminal: int | None = None,
    error_part: Any = None,
) -> State:
    active = _active_turn(state, turn_id)
    if active is None:
        return state
    parts: list[Any] = []
    for part in as_list(active.get("responseParts")):
        tc = get(part, "toolCall")
        in_flight = isinstance(tc, Mapping) and tc.get("status") not in (COMPLETED, CANCELLED)
        if get(part, "kind") == TOOL_CALL and in_flight:
            # A turn that ends leaves no tool call in flight.
            part = cancelled_part(as_dict(tc))
        parts.append(part)
    if truthy(error_part):
        parts.append(error_part)
    # The producer's duration is opaque, but a negative one would be nonsense.
    clamped = (
        max(0, duration)
        if isinstance(duration, int | float) and not isinstance(duration, bool)
        else None
    )
    turn = compact(
        id=active.get("id"),
        startedAt=active.get("startedAt"),
        duration=clamped,
        message=active.get("message"),
        responseParts=parts,
        usage=active.get("usage"),
        state=turn_state,
    )
    nxt = dissoc(state, "activeTurn")
    nxt["turns"] = [*as_list(state.get("turns")), turn]
    # Where JavaScript would throw (no usable duration or startedAt) the turn
    # still ends and modifiedAt keeps its previous value.
    modified = None if clamped is None else add_milliseconds(active.get("startedAt"), clamped)
    if modified is not None:
        nxt["modifiedAt"] = modified
    nxt["status"] = _summary_status(nxt, terminal)
    return nxt


def _find_open_input(parts: list[Any], request_id: Any) -> int:
    for index, part in enumerate(parts):
        if (
            get(part, "kind") == INPUT_REQUEST
            and get(part, "response") is None
            and same(get(get(part, "request"), "id"), request_id)
        ):
            return index
    return -1


def _answers_or_none(answers: JsonDict) -> JsonDict | None:
    return answers if answers else None


# ─── Branches ────────────────────────────────────────────────────────────────


def _turn_started(state: State, action: Action) -> State:
    active = compact(
        id=action.get("turnId"),
        startedAt=action.get("startedAt"),
        message=action.get("message"),
        responseParts=[],
    )
    nxt = assoc(state, "activeTurn", active)
    nxt["status"] = with_status_flag(_summary_status(nxt), STATUS_IS_READ, False)
    nxt = assoc(nxt, "modifiedAt", action.get("startedAt"))
    queued_id = action.get("queuedMessageId")
    if truthy(queued_id):
        # A turn auto-started from a pending message consumes that message.
        if same(get(nxt.get("steeringMessage"), "id"), queued_id):
            nxt.pop("steeringMessage", None)
        if nxt.get("queuedMessages") is not None:
            left = [m for m in as_list(nxt["queuedMessages"]) if not same(get(m, "id"), queued_id)]
            nxt = assoc(nxt, "queuedMessages", left or None)
    return nxt


def _turn_resume(state: State, action: Action) -> State:
    if truthy(state.get("activeTurn")):
        return state
    turns = as_list(state.get("turns"))
    last = turns[-1] if turns else None
    if not isinstance(last, Mapping) or not same(last.get("id"), action.get("turnId")):
        return state
    if last.get("state") != "error":
        return state
    parts = as_list(last.get("responseParts"))
    tail = parts[-1] if parts else None
    # Only an error the host declared resumable can be resumed.
    if get(tail, "kind") != ERROR_PART or get(tail, "resumable") is not True:
        return state
    started = last.get("startedAt")
    active = compact(
        id=last.get("id"),
        startedAt=started if started is not None else state.get("modifiedAt"),
        message=last.get("message"),
        responseParts=last.get("responseParts"),
        usage=last.get("usage"),
    )
    nxt = assoc(state, "turns", turns[:-1])
    nxt["activeTurn"] = active
    nxt["status"] = with_status_flag(_summary_status(nxt), STATUS_IS_READ, False)
    return nxt


def _response_part(state: State, action: Action) -> State:
    active = _active_turn(state, action.get("turnId"))
    part = action.get("part")
    # An error part only arrives through chat/error, which also ends the turn.
    if active is None or get(part, "kind") == ERROR_PART:
        return state
    return _with_parts(state, active, [*as_list(active.get("responseParts")), part])


def _tool_call_start(state: State, action: Action) -> State:
    active = _active_turn(state, action.get("turnId"))
    if active is None:
        return state
    tool_call = compact(
        toolCallId=action.get("toolCallId"),
        toolName=action.get("toolName"),
        displayName=action.get("displayName"),
        intention=action.get("intention"),
        contributor=action.get("contributor"),
        _meta=action.get("_meta"),
        status=STREAMING,
    )
    part = {"kind": TOOL_CALL, "toolCall": tool_call}
    return _with_parts(state, active, [*as_list(active.get("responseParts")), part])


def _usage(state: State, action: Action) -> State:
    active = _active_turn(state, action.get("turnId"))
    if active is None:
        return state
    return assoc(state, "activeTurn", assoc(active, "usage", action.get("usage")))


def _truncated(state: State, action: Action) -> State:
    clear_all = action.get("turnId") is None
    if clear_all:
        turns: list[Any] = []
    else:
        turns = as_list(state.get("turns"))
        index = index_by(turns, "id", action["turnId"])
        if index < 0:
            return state
        turns = turns[: index + 1]
    nxt = assoc(dissoc(state, "activeTurn"), "turns", turns)
    if clear_all:
        # Nothing older remains to page in.
        nxt.pop("turnsNextCursor", None)
    nxt["status"] = _summary_status(nxt)
    return nxt


def _turns_loaded(state: State, action: Action) -> State:
    turns = as_list(state.get("turns"))
    known = [get(turn, "id") for turn in turns]
    older = [
        turn
        for turn in as_list(action.get("turns"))
        if not any(same(get(turn, "id"), ident) for ident in known)
    ]
    nxt = assoc(state, "turns", [*older, *turns])
    return assoc(nxt, "turnsNextCursor", action.get("turnsNextCursor"))


def _input_requested(state: State, action: Action) -> State:
    active = state.get("activeTurn")
    if not isinstance(active, Mapping):
        return state
    request = action.get("request")
    parts = as_list(active.get("responseParts"))
    index = _find_open_input(parts, get(request, "id"))
    if index >= 0:
        # Drafted answers survive a re-request that brings none of its own.
        answers = first(get(request, "answers"), get(get(parts[index], "request"), "answers"))
        parts[index] = {
            "kind": INPUT_REQUEST,
            "request": assoc(as_dict(request), "answers", answers),
        }
    else:
        parts.append({"kind": INPUT_REQUEST, "request": request})
    nxt = _with_parts(state, active, parts)
    nxt["status"] = with_status_flag(_summary_status(nxt), STATUS_IS_READ, False)
    return nxt


def _input_answer_changed(state: State, action: Action) -> State:
    active = state.get("activeTurn")
    if not isinstance(active, Mapping):
        return state
    parts = as_list(active.get("responseParts"))
    index = _find_open_input(parts, action.get("requestId"))
    if index < 0:
        return state
    part = parts[index]
    request = as_dict(part.get("request"))
    answers = dict(as_dict(request.get("answers")))
    question = str(action.get("questionId"))
    if action.get("answer") is None:
        answers.pop(question, None)
    else:
        answers[question] = action["answer"]
    parts[index] = assoc(part, "request", assoc(request, "answers", _answers_or_none(answers)))
    return _with_parts(state, active, parts)


def _input_completed(state: State, action: Action) -> State:
    active = state.get("activeTurn")
    if not isinstance(active, Mapping):
        return state
    parts = as_list(active.get("responseParts"))
    index = _find_open_input(parts, action.get("requestId"))
    if index < 0:
        return state
    part = parts[index]
    request = as_dict(part.get("request"))
    answers = {**as_dict(request.get("answers")), **as_dict(action.get("answers"))}
    done = assoc(part, "request", assoc(request, "answers", _answers_or_none(answers)))
    parts[index] = assoc(done, "response", action.get("response"))
    nxt = _with_parts(state, active, parts)
    nxt["status"] = _summary_status(nxt)
    return nxt


def _pending_message_set(state: State, action: Action) -> State:
    entry = compact(id=action.get("id"), message=action.get("message"))
    if action.get("kind") == "steering":
        return assoc(state, "steeringMessage", entry)
    return assoc(
        state, "queuedMessages", upsert_by(as_list(state.get("queuedMessages")), "id", entry)
    )


def _pending_message_removed(state: State, action: Action) -> State:
    if action.get("kind") == "steering":
        steering = state.get("steeringMessage")
        if steering is None or not same(get(steering, "id"), action.get("id")):
            return state
        return dissoc(state, "steeringMessage")
    queued = state.get("queuedMessages")
    if queued is None:
        return state
    left = [m for m in as_list(queued) if not same(get(m, "id"), action.get("id"))]
    if len(left) == len(queued):
        return state
    return assoc(state, "queuedMessages", left or None)


def _queued_reordered(state: State, action: Action) -> State:
    queued = state.get("queuedMessages")
    if queued is None:
        return state
    messages = as_list(queued)
    # Like a JS Map built from the queue: a repeated id keeps its last message.
    by_id: list[tuple[Any, Any]] = []
    for message in messages:
        ident = get(message, "id")
        by_id = [pair for pair in by_id if not same(pair[0], ident)] + [(ident, message)]
    ordered: list[Any] = []
    reordered: list[Any] = []
    for ident in as_list(action.get("order")):
        match = next((m for i, m in by_id if same(i, ident)), None)
        if match is not None and index_of(ordered, ident) < 0:
            ordered.append(ident)
            reordered.append(match)
    # Messages the order does not mention keep their relative order at the end,
    # so a client with a stale view never drops one.
    reordered += [m for m in messages if index_of(ordered, get(m, "id")) < 0]
    return assoc(state, "queuedMessages", reordered)


def _background_work_set(state: State, action: Action) -> State:
    work = as_list(state.get("backgroundWork"))
    return assoc(state, "backgroundWork", upsert_by(work, "id", action.get("work")))


def _background_work_removed(state: State, action: Action) -> State:
    work = state.get("backgroundWork")
    if work is None:
        return state
    index = index_by(as_list(work), "id", action.get("id"))
    if index < 0:
        return state
    return assoc(state, "backgroundWork", removed(work, index))


def _catalogue(key: str) -> Callable[[State, Action], State]:
    """Full replacement that clears the field when the action carries none."""

    def branch(state: State, action: Action) -> State:
        value = action.get(key)
        return set_field(state, key, value if truthy(value) else None)

    return branch


def _flag(key: str, flag: int) -> Callable[[State, Action], State]:
    def branch(state: State, action: Action) -> State:
        return set_field(
            state, "status", with_status_flag(state.get("status"), flag, truthy(action.get(key)))
        )

    return branch


def _field(field: str, source: str | None = None) -> Callable[[State, Action], State]:
    def branch(state: State, action: Action) -> State:
        return set_field(state, field, action.get(source or field))

    return branch


def _on_tool_call(
    make: Callable[[Action], Updater], refresh: bool
) -> Callable[[State, Action], State]:
    def branch(state: State, action: Action) -> State:
        nxt = _update_tool_call(state, action.get("turnId"), action.get("toolCallId"), make(action))
        return _refresh_status(nxt) if refresh else nxt

    return branch


_BRANCHES: dict[str, Callable[[State, Action], State]] = {
    "chat/turnStarted": _turn_started,
    "chat/turnResume": _turn_resume,
    "chat/delta": lambda s, a: _update_part(
        s, a.get("turnId"), a.get("partId"), _append_text(MARKDOWN, a.get("content"))
    ),
    "chat/reasoning": lambda s, a: _update_part(
        s, a.get("turnId"), a.get("partId"), _append_text(REASONING, a.get("content"))
    ),
    "chat/responsePart": _response_part,
    "chat/turnComplete": lambda s, a: _end_turn(s, a.get("turnId"), "complete", a.get("duration")),
    "chat/turnCancelled": lambda s, a: _end_turn(
        s, a.get("turnId"), "cancelled", a.get("duration")
    ),
    "chat/error": lambda s, a: _end_turn(
        s, a.get("turnId"), "error", a.get("duration"), STATUS_ERROR, a.get("part")
    ),
    "chat/activityChanged": _field("activity"),
    "chat/workingDirectorySet": working_directory_set,
    "chat/workingDirectoryRemoved": working_directory_removed,
    "chat/toolCallStart": _tool_call_start,
    "chat/toolCallDelta": _on_tool_call(delta_updater, refresh=False),
    "chat/toolCallReady": _on_tool_call(ready_updater, refresh=True),
    "chat/toolCallConfirmed": _on_tool_call(confirmed_updater, refresh=True),
    "chat/toolCallComplete": _on_tool_call(complete_updater, refresh=True),
    "chat/toolCallResultConfirmed": _on_tool_call(result_confirmed_updater, refresh=True),
    "chat/toolCallContentChanged": _on_tool_call(content_changed_updater, refresh=False),
    "chat/toolCallAuthRequired": _on_tool_call(auth_required_updater, refresh=True),
    "chat/toolCallAuthResolved": _on_tool_call(auth_resolved_updater, refresh=True),
    "chat/usage": _usage,
    "chat/truncated": _truncated,
    "chat/turnsLoaded": _turns_loaded,
    "chat/inputRequested": _input_requested,
    "chat/inputAnswerChanged": _input_answer_changed,
    "chat/inputCompleted": _input_completed,
    "chat/pendingMessageSet": _pending_message_set,
    "chat/pendingMessageRemoved": _pending_message_removed,
    "chat/queuedMessagesReordered": _queued_reordered,
    "chat/draftChanged": _field("draft"),
    "chat/backgroundWorkSet": _background_work_set,
    "chat/backgroundWorkRemoved": _background_work_removed,
    "chat/movableChanged": _field("movable"),
    "chat/changesetsChanged": _catalogue("changesets"),
    "chat/canvasesChanged": _catalogue("canvases"),
    "chat/isReadChanged": _flag("isRead", STATUS_IS_READ),
    "chat/isArchivedChanged": _flag("isArchived", STATUS_IS_ARCHIVED),
}

ACTION_TYPES = frozenset(_BRANCHES)


#: Apply one chat action; an unknown or no-op action returns the state itself.
reduce = dispatching(_BRANCHES)


__all__ = ["ACTION_TYPES", "reduce"]
