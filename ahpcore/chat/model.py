"""What the chat knows: the root, the session and the chat, folded forward from snapshots.

Each channel's state starts as the snapshot ``subscribe`` (or ``initialize``)
answered with and takes every later action through the protocol's reducers,
as the host applied it; the screen is drawn from this state alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ahpcore import reducers
from ahpcore.protocol.uris import ROOT_CHANNEL

#: Customization children a person can call with ``/name`` (as the host's completions).
COMMAND_KINDS = ("skill", "prompt")


@dataclass
class Refusal:
    """An action of this client the host refused (``rejectionReason``)."""

    action: dict[str, Any]
    reason: str


@dataclass
class Model:
    client_id: str
    root: dict[str, Any] = field(default_factory=dict)
    session_uri: str | None = None
    session: dict[str, Any] | None = None
    chat_uri: str | None = None
    chat: dict[str, Any] | None = None
    server_seq: int = 0
    refusals: list[Refusal] = field(default_factory=list)
    #: Actions on a channel being subscribed to that came before its snapshot.
    early: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)

    # -- folding --------------------------------------------------------------------
    def take_snapshot(self, snapshot: Mapping[str, Any]) -> None:
        resource, state = snapshot.get("resource"), snapshot.get("state")
        if not isinstance(state, dict):
            return
        if resource == ROOT_CHANNEL:
            self.root = state
        elif resource == self.session_uri:
            self.session = state
        elif resource == self.chat_uri:
            self.chat = state
        seq = snapshot.get("fromSeq")
        if isinstance(seq, int):
            self.server_seq = max(self.server_seq, seq)
        # What the reader took in while the answer was on its way: only what is newer.
        for envelope in self.early.pop(str(resource), []):
            later = envelope.get("serverSeq")
            if not isinstance(seq, int) or not isinstance(later, int) or later > seq:
                self.apply(envelope)

    def apply(self, envelope: Mapping[str, Any]) -> bool:
        """Fold one ``action`` notification's envelope in; True when it changed something."""
        action = envelope.get("action")
        if not isinstance(action, dict):
            return False
        origin = envelope.get("origin") or {}
        if envelope.get("rejectionReason") is not None:
            if origin.get("clientId") == self.client_id:
                self.refusals.append(Refusal(action, str(envelope["rejectionReason"])))
                return True
            return False
        seq = envelope.get("serverSeq")
        if isinstance(seq, int):
            self.server_seq = max(self.server_seq, seq)
        channel = envelope.get("channel")
        kind = reducers.channel_kind_for_action(str(action.get("type", "")))
        waiting = (self.session_uri, self.session), (self.chat_uri, self.chat)
        if any(channel == uri and state is None for uri, state in waiting):
            self.early.setdefault(str(channel), []).append(envelope)
            return False
        if channel == ROOT_CHANNEL and kind == "root":
            before = self.root
            self.root = reducers.reduce("root", self.root, action)
            return self.root is not before
        if channel == self.session_uri and kind == "session" and self.session is not None:
            before = self.session
            self.session = reducers.reduce("session", self.session, action)
            return self.session is not before
        if channel == self.chat_uri and kind == "chat" and self.chat is not None:
            before = self.chat
            self.chat = reducers.reduce("chat", self.chat, action)
            return self.chat is not before
        return False

    # -- reading --------------------------------------------------------------------
    def agents(self) -> list[dict[str, Any]]:
        return [a for a in self.root.get("agents") or [] if isinstance(a, dict)]

    def agent(self, provider: str | None) -> dict[str, Any] | None:
        return next((a for a in self.agents() if a.get("provider") == provider), None)

    def active_turn(self) -> dict[str, Any] | None:
        active = (self.chat or {}).get("activeTurn")
        return active if isinstance(active, dict) else None

    def turn(self, turn_id: str) -> tuple[dict[str, Any] | None, bool]:
        """The turn with this id and whether it has ended; (None, False) before it starts."""
        active = self.active_turn()
        if active is not None and active.get("id") == turn_id:
            return active, False
        for turn in reversed((self.chat or {}).get("turns") or []):
            if isinstance(turn, dict) and turn.get("id") == turn_id:
                return turn, True
        return None, False

    def slash_commands(self) -> list[dict[str, Any]]:
        """The commands a person can start a message with: the skills and prompts among
        the session's customizations (the agent's, before the session lists its own)."""
        customizations = (self.session or {}).get("customizations")
        if not customizations:
            provider = (self.session or {}).get("provider")
            customizations = (self.agent(provider) or {}).get("customizations") or []
        found = []
        for container in customizations:
            if not isinstance(container, dict):
                continue
            for child in container.get("children") or []:
                if not isinstance(child, dict) or child.get("type") not in COMMAND_KINDS:
                    continue
                if child.get("enabled", True) is False or child.get("disableUserInvocation"):
                    continue
                if isinstance(child.get("name"), str) and child["name"]:
                    found.append(child)
        return found
