"""``authenticate``: tokens a connection pushes for the protected resources agents advertise.

A token is the connection's own: it is spent only on sessions that
connection starts, withdrawn by an empty token, and forgotten when it
expires - at which moment that connection alone is told ``auth/required``
with reason ``expired``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from ahpcore.engine.clients import Client
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError
from ahpcore.protocol.uris import ROOT_CHANNEL

TOKENS = "tokens"
_HELD = "ahp.tokens"
_TIMER = "ahp.tokens.timer"
#: What a connection's expiry timer task is called.
TIMER_NAME = "token expiry of client"


@dataclass
class Timer:
    """A connection's one expiry timer; ``changed`` wakes it to look again."""

    changed: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class HeldToken:
    token: str
    expires_at: float | None


class Authenticator:
    def __init__(
        self,
        resources: Callable[[], dict[str, dict[str, Any]]],
        spawn: Callable[..., None],
        signed_in: Callable[[str, str], None] = lambda resource, token: None,
        host_resources: Callable[
            [], Mapping[str, tuple[Any, Callable[[Client, str], Awaitable[None]]]]
        ] = dict,
    ) -> None:
        #: Resources the host answers for itself: a token for one is never held or
        #: handed to an agent.
        self._host_resources = host_resources
        #: resource URL -> its ProtectedResourceMetadata, as agents (and blocked
        #: tool calls) ask for it.
        self._resources = resources
        self._spawn = spawn
        #: Told of every token pushed, so a call blocked on that sign-in goes on.
        self._signed_in = signed_in

    @staticmethod
    def _held(client: Client) -> dict[str, HeldToken]:
        held: dict[str, HeldToken] = client.data.setdefault(_HELD, {})
        return held

    def tokens(self, client: Client) -> dict[str, str]:
        """The tokens this connection may spend now (expired ones are not)."""
        now = time.monotonic()
        return {
            resource: held.token
            for resource, held in self._held(client).items()
            if held.expires_at is None or held.expires_at > now
        }

    async def authenticate(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        resource = params["resource"]
        own = self._host_resources().get(resource)
        if own is not None:
            await own[1](client, params["token"])
            return {}
        known = self._resources()
        if resource not in known:
            offered = ", ".join(sorted(known)) or "none"
            raise ProtocolError(
                INVALID_PARAMS,
                f"params.resource: no agent on this host asks for {resource!r} (advertised: {offered})",
            )
        held = self._held(client)
        token = params["token"]
        if token == "":
            held.pop(resource, None)  # an empty token signs out
            client.data[TOKENS] = self.tokens(client)
            return {}
        expires_in = params.get("expiresIn")
        if expires_in is not None and (
            isinstance(expires_in, bool) or not isinstance(expires_in, int) or expires_in < 1
        ):
            raise ProtocolError(INVALID_PARAMS, "params.expiresIn must be a positive integer")
        entry = HeldToken(token, time.monotonic() + expires_in if expires_in else None)
        held[resource] = entry
        client.data[TOKENS] = self.tokens(client)
        if expires_in:
            self._watch_expiry(client)
        self._signed_in(resource, token)
        return {}

    def _watch_expiry(self, client: Client) -> None:
        # One timer per connection, however many tokens it pushes: it sleeps until
        # the soonest expiry, and stops when nothing expires or the connection goes.
        timer: Timer | None = client.data.get(_TIMER)
        if timer is None:
            timer = client.data[_TIMER] = Timer()
            self._spawn(self._expire_all, client, timer, name=f"{TIMER_NAME} {client.label}")
        else:
            timer.changed.set()

    def disconnected(self, client: Client) -> None:
        """The connection went: its timer stops now rather than at the next expiry."""
        timer: Timer | None = client.data.get(_TIMER)
        if timer is not None:
            timer.changed.set()

    async def _expire_all(self, client: Client, timer: Timer) -> None:
        try:
            while not client.peer.closed:
                now = time.monotonic()
                held = self._held(client)
                due = [
                    r for r, h in held.items() if h.expires_at is not None and h.expires_at <= now
                ]
                for resource in due:
                    del held[resource]
                    self._tell_expired(client, resource)
                if due:
                    client.data[TOKENS] = self.tokens(client)
                pending = [h.expires_at for h in held.values() if h.expires_at is not None]
                if not pending:
                    return
                timer.changed = anyio.Event()
                with anyio.move_on_after(min(pending) - now):
                    await timer.changed.wait()
        finally:
            if client.data.get(_TIMER) is timer:
                del client.data[_TIMER]

    def _tell_expired(self, client: Client, resource: str) -> None:
        metadata = self._resources().get(resource, {"resource": resource})
        client.peer.notify(
            "auth/required",
            {"channel": ROOT_CHANNEL, "resource": metadata, "reason": "expired"},
        )
