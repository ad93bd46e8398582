"""Reducer for a session's ``<sessionUri>/annotations`` channel (``AnnotationsState``).

Mirrors ``types/channels-annotations/reducer.ts``: annotations and their
entries are appended on first sight and replaced in place afterwards, so a
set for a known id never reorders.
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
    index_by,
    removed,
    replaced,
    upsert_by,
    without_entry,
)

# The annotation properties annotations/updated may write; entries, id and
# _meta are only replaced by annotations/set.
_UPDATABLE = ("origin", "resource", "range", "resolved")


def _set(state: State, action: Action) -> State:
    annotations = as_list(state.get("annotations"))
    return assoc(state, "annotations", upsert_by(annotations, "id", action.get("annotation")))


def _updated(state: State, action: Action) -> State:
    annotations = as_list(state.get("annotations"))
    index = index_by(annotations, "id", action.get("annotationId"))
    if index < 0:
        return state
    annotation = dict(as_dict(annotations[index]))
    for key in _UPDATABLE:
        # Omitted fields stay as they are; this action cannot clear one.
        if action.get(key) is not None:
            annotation[key] = action[key]
    return assoc(state, "annotations", replaced(annotations, index, annotation))


def _removed(state: State, action: Action) -> State:
    return without_entry(state, "annotations", "id", action.get("annotationId"))


def _entry_set(state: State, action: Action) -> State:
    annotations = as_list(state.get("annotations"))
    index = index_by(annotations, "id", action.get("annotationId"))
    if index < 0:
        return state
    annotation = as_dict(annotations[index])
    entries = upsert_by(as_list(annotation.get("entries")), "id", action.get("entry"))
    return assoc(
        state, "annotations", replaced(annotations, index, assoc(annotation, "entries", entries))
    )


def _entry_removed(state: State, action: Action) -> State:
    annotations = as_list(state.get("annotations"))
    index = index_by(annotations, "id", action.get("annotationId"))
    if index < 0:
        return state
    annotation = as_dict(annotations[index])
    entries = as_list(annotation.get("entries"))
    entry_index = index_by(entries, "id", action.get("entryId"))
    if entry_index < 0:
        return state
    # An annotation may be left empty; producers remove it separately.
    updated = assoc(annotation, "entries", removed(entries, entry_index))
    return assoc(state, "annotations", replaced(annotations, index, updated))


_BRANCHES: dict[str, Callable[[State, Action], State]] = {
    "annotations/set": _set,
    "annotations/updated": _updated,
    "annotations/removed": _removed,
    "annotations/entrySet": _entry_set,
    "annotations/entryRemoved": _entry_removed,
}

ACTION_TYPES = frozenset(_BRANCHES)


#: Apply one annotations action; an unknown or no-op action returns the state itself.
reduce = dispatching(_BRANCHES)
