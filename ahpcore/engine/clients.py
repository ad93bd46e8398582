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
    #: What plugins keep about this connection (tokens, pushed settings, ...).
    data: dict[str, Any] = field(default_factory=dict)

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
        if held is not None:
            held.append((text, weight))
        else:
            self.peer.send_text(text, weight)

    def release(self, canonical: str) -> None:
        for text, weight in self.held.pop(canonical, ()):
            self.peer.send_text(text, weight)
