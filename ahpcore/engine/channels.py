"""A channel: a URI, the kind of state behind it, that state, and who watches it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ahpcore.engine.clients import Client


@dataclass(eq=False)
class Channel:
    uri: str
    #: Which reducer owns the state: root, session, chat, terminal, changeset, ...
    kind: str
    state: dict[str, Any]
    #: client -> the spelling of this channel's URI that client subscribed with.
    subscribers: dict[Client, str] = field(default_factory=dict)
    #: A channel with no state (``ahp-otlp:``): subscribing answers no snapshot, nothing
    #: is reduced onto it, and what it carries are notifications, never replayed.
    stateless: bool = False
    #: What one subscriber is shown of the state or of an envelope (``view(client,
    #: value)``, a new value, never the one given): for a channel whose readers see
    #: different things of one state. None: everyone sees the same.
    view: Callable[[Client, Any], Any] | None = None
