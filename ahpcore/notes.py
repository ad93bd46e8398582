"""Notes on how this host serves a protocol method or action, kept next to the code.

``@note("initialize", "…")`` on a handler (or a plain ``note(...)`` call
beside the code that sends something) adds a line to that row of the
compatibility table ``ahp compat`` prints. A note explains; it never decides
a row's status, which ``ahpcore.compat`` reads from what the host dispatches
to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: protocol method or action type -> notes, in the order they were added.
NOTES: dict[str, list[str]] = {}


def add_note(name: str, text: str) -> None:
    notes = NOTES.setdefault(name, [])
    if text not in notes:
        notes.append(text)


def note(*names: str, text: str) -> Callable[[F], F]:
    """Decorate a handler with a note for each of ``names``; the handler is unchanged."""

    def decorate(function: F) -> F:
        for name in names:
            add_note(name, text)
        return function

    return decorate


# -- rows left out on purpose -------------------------------------------------------------
# Said here, where ``ahp compat`` does not look for senders: a quoted action name
# anywhere else reads as code that sends it.
for _canvas_row in ("canvas/stateChanged", "chat/canvasesChanged"):
    add_note(
        _canvas_row,
        "Not sent on purpose: no agent this host runs (Claude Code, ACP agents, pi, the demo) "
        "draws a canvas; a chat's canvas references would be kept across restarts with its "
        "changesets.",
    )

# SessionState.annotations (the counts of a session's annotations) has no session action in
# the protocol: the host writes it into the session's state without one. A client replaying
# a session's actions therefore keeps the counts of its last snapshot; rows carry the new
# ones (root/sessionSummaryChanged) and so does the session's next snapshot.
add_note(
    "root/sessionSummaryChanged",
    "Also sent when a session's annotation counts change (SessionSummary.annotations). "
    "The protocol has no session action for SessionState.annotations, so none is sent on "
    "the session's channel: a client watching the session reads the counts in its next "
    "snapshot, and one replaying the session's actions holds those of its last.",
)
