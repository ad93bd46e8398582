"""A client's own state: a snapshot with the actions after it folded on, and where it differs.

The reducer a channel needs is read from its URI's scheme (a session URI's
scheme is its provider's, so what no scheme names and a session URI parses as
is a session), else from the type of the actions it carried.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from ahpcore import reducers
from ahpcore.protocol.uris import ROOT_CHANNEL, parse_session_uri, scheme_of

#: Channel kinds by URI scheme, as the protocol's channels are spelled.
SCHEME_KINDS: Mapping[str, str] = {
    "ahp-root": "root",
    "ahp-chat": "chat",
    "ahp-terminal": "terminal",
    "ahp-changeset": "changeset",
    "ahp-annotations": "annotations",
    "ahp-resource-watch": "resourceWatch",
    "ahp-automation": "automation",
    "ahp-automations": "automation",
    "ahp-automation-run": "automationRun",
    "ahp-canvas": "canvas",
    "ahp-session": "session",
}


def channel_kind(uri: str, envelopes: Iterable[Mapping[str, Any]] = ()) -> str | None:
    """The reducer ``uri`` needs, or None when nothing tells."""
    if uri == ROOT_CHANNEL:
        return "root"
    scheme = scheme_of(uri)
    if scheme is not None and scheme in SCHEME_KINDS:
        return SCHEME_KINDS[scheme]
    for envelope in envelopes:
        action = envelope.get("action")
        kind = (
            reducers.channel_kind_for_action(str(action.get("type")))
            if isinstance(action, dict)
            else None
        )
        if kind is not None:
            return kind
    try:
        parse_session_uri(uri)
    except ValueError:
        return None
    return "session"


def fold(
    kind: str,
    state: Any,
    envelopes: Iterable[Mapping[str, Any]],
    *,
    after: Any,
    up_to: Any = None,
) -> tuple[Any, int]:
    """Apply each envelope with ``after < serverSeq <= up_to`` once, in order.

    Returns the state and how many actions were applied. An envelope whose
    serverSeq repeats one already applied is an echo of an action that
    changed nothing; it is left out.
    """
    applied: set[Any] = set()
    for envelope in envelopes:
        seq = envelope.get("serverSeq")
        if not isinstance(seq, int | float) or seq in applied:
            continue
        if after is not None and seq <= after:
            continue
        if up_to is not None and seq > up_to:
            continue
        action = envelope.get("action")
        if not isinstance(action, Mapping):
            continue
        applied.add(seq)
        state = reducers.reduce(kind, copy.deepcopy(state), action)
    return state, len(applied)


def first_difference(mine: Any, theirs: Any, path: str = "$") -> str | None:
    """Where two JSON values first differ, with both sides; None when they are equal."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs), key=str):
            step = f"{path}.{key}"
            if key not in mine:
                return (
                    f"{step}: absent after the replay, {_short(theirs[key])} in the fresh snapshot"
                )
            if key not in theirs:
                return f"{step}: {_short(mine[key])} after the replay, absent in the fresh snapshot"
            found = first_difference(mine[key], theirs[key], step)
            if found:
                return found
        return None
    if isinstance(mine, list) and isinstance(theirs, list):
        for index, (left, right) in enumerate(zip(mine, theirs, strict=False)):
            found = first_difference(left, right, f"{path}[{index}]")
            if found:
                return found
        if len(mine) != len(theirs):
            return (
                f"{path}: {len(mine)} item(s) after the replay, {len(theirs)} in the fresh snapshot"
            )
        return None
    if mine == theirs and type(mine) is type(theirs):
        return None
    if mine == theirs and isinstance(mine, int | float) and isinstance(theirs, int | float):
        return None  # 1 and 1.0 are one JSON number
    return f"{path}: {_short(mine)} after the replay, {_short(theirs)} in the fresh snapshot"


def _short(value: Any, limit: int = 80) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
