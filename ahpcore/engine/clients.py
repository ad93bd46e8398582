"""One connected client, as the engine sees it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ahpcore.logs import escape
from ahpcore.rpc.peer import Peer


@dataclass(eq=False)
class Client:
    peer: Peer
    client_id: str | None = None
    #: The version answered at initialize (what the client offered), and the host's own
    #: version the connection is served as.
    protocol_version: str | None = None
    served_as: str | None = None
    #: canonical channel URI -> the spelling this client used for it.
    subscriptions: dict[str, str] = field(default_factory=dict)
    #: Frames (text, weight) for channels whose snapshot has been taken but not yet
    #: answered, in order.
    held: dict[str, list[tuple[str, int | None]]] = field(default_factory=dict)
    #: Bytes in ``held``, counted against clientQueueBytes.
    held_bytes: int = 0
    #: What plugins keep about this connection (tokens, pushed settings, ...).
    data: dict[str, Any] = field(default_factory=dict)
    #: Who opened the connection, as a users port names them (``user:<name>``,
    #: ``root:<host>``); None on a host without one.
    identity: str | None = None

    @property
    def initialized(self) -> bool:
        return self.client_id is not None

    @property
    def label(self) -> str:
        # The clientId is the client's to choose, newlines included: escaped for the logs.
        return f"{self.peer.id}" + (f" ({escape(self.client_id)})" if self.client_id else "")

    def deliver(self, canonical: str, text: str, weight: int | None = None) -> None:
        """Send a channel's frame, or hold it until that channel's snapshot has been answered.

        ``weight`` is the frame's UTF-8 size when the caller already knows it.
        """
        held = self.held.get(canonical)
        if held is None:
            self.peer.send_text(text, weight)
            return
        weight = len(text.encode("utf-8")) if weight is None else weight
        # Held frames are owed to the client as much as queued ones: same budget.
        behind = self.held_bytes + self.peer.queued_bytes
        if behind > 0 and behind + weight > self.peer.queue_limit():
            self.peer.fall_behind(behind)
            return
        held.append((text, weight))
        self.held_bytes += weight

    def release(self, canonical: str) -> None:
        frames = self.held.pop(canonical, ())
        for _, weight in frames:
            self.held_bytes -= weight or 0
        for text, weight in frames:
            self.peer.send_text(text, weight)

    def drop_held(self, canonical: str) -> None:
        """Forget frames held for a channel no longer watched."""
        for _, weight in self.held.pop(canonical, ()):
            self.held_bytes -= weight or 0
