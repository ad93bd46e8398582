"""Reducer for ``ahp-changeset:`` channels (``ChangesetState``).

Mirrors ``types/channels-changeset/reducer.ts``: the file list, per-file review
flags, and the operation list with its per-operation status.
"""

from __future__ import annotations

from collections.abc import Callable

from ._helpers import (
    Action,
    State,
    as_dict,
    as_list,
    assoc,
    dispatching,
    dissoc,
    get,
    index_by,
    index_of,
    replaced,
    same,
    set_field,
    upsert_by,
    without_entry,
)


def _status_changed(state: State, action: Action) -> State:
    status = action.get("status")
    if status == "error":
        return assoc(assoc(state, "status", status), "error", action.get("error"))
    # A recovered changeset must not keep a stale error.
    return assoc(dissoc(state, "error"), "status", status)


def _file_removed(state: State, action: Action) -> State:
    return without_entry(state, "files", "id", action.get("fileId"))


def _files_review_changed(state: State, action: Action) -> State:
    ids = as_list(action.get("files"))
    reviewed = action.get("reviewed")
    files = as_list(state.get("files"))
    changed = False
    for index, file in enumerate(files):
        if index_of(ids, get(file, "id")) < 0 or same(get(file, "reviewed"), reviewed):
            continue
        changed = True
        files[index] = assoc(as_dict(file), "reviewed", reviewed)
    return assoc(state, "files", files) if changed else state


def _content_changed(state: State, action: Action) -> State:
    nxt = assoc(state, "files", action.get("files"))
    # Absent operations leave the current list alone; failures travel on
    # changeset/statusChanged, so any recorded error stays.
    if action.get("operations") is not None:
        nxt["operations"] = action["operations"]
    return nxt


def _operation_status_changed(state: State, action: Action) -> State:
    operations = state.get("operations")
    if operations is None:
        return state
    ops = as_list(operations)
    index = index_by(ops, "id", action.get("operationId"))
    if index < 0:
        return state
    current = as_dict(ops[index])
    status = action.get("status")
    if status == "error":
        op = assoc(assoc(current, "status", status), "error", action.get("error"))
    else:
        op = assoc(dissoc(current, "error"), "status", status)
    return assoc(state, "operations", replaced(ops, index, op))


def _cleared(state: State, action: Action) -> State:
    if not as_list(state.get("files")):
        return state
    return assoc(state, "files", [])


_BRANCHES: dict[str, Callable[[State, Action], State]] = {
    "changeset/statusChanged": _status_changed,
    "changeset/fileSet": lambda s, a: assoc(
        s, "files", upsert_by(as_list(s.get("files")), "id", a.get("file"))
    ),
    "changeset/fileRemoved": _file_removed,
    "changeset/filesReviewChanged": _files_review_changed,
    "changeset/contentChanged": _content_changed,
    "changeset/operationsChanged": lambda s, a: set_field(s, "operations", a.get("operations")),
    "changeset/operationStatusChanged": _operation_status_changed,
    "changeset/cleared": _cleared,
}

ACTION_TYPES = frozenset(_BRANCHES)


#: Apply one changeset action; an unknown or no-op action returns the state itself.
reduce = dispatching(_BRANCHES)
