"""Reducer for ``ahp-canvas:`` channels (``CanvasState``, experimental).

Mirrors ``types/channels-canvas/reducer.ts``: ``canvas/stateChanged`` replaces
the whole state, which is how a host withdraws a live source URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._helpers import Action, State, keep_if_same

ACTION_TYPES = frozenset({"canvas/stateChanged"})


def reduce(state: State, action: Action) -> Any:
    """Apply one canvas action; an unknown or no-op action returns *state* itself."""
    if action.get("type") != "canvas/stateChanged":
        return state
    canvas = action.get("canvas")
    # Without a replacement there is no next state to adopt.
    if not isinstance(canvas, Mapping):
        return state
    return keep_if_same(state, canvas)
