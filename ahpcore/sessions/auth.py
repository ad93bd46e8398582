"""``authenticate``: tokens a connection pushes for the protected resources agents advertise.

A token is the connection's own: it is spent only on sessions that
connection starts, withdrawn by an empty token, and forgotten when it
expires - at which moment that connection alone is told ``auth/required``
with reason ``expired``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ahpcore.engine.clients import Client
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError
from ahpcore.protocol.uris import ROOT_CHANNEL

TOKENS = "tokens"
_HELD = "ahp.tokens"


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
    ) -> None:
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
            self._spawn(self._expire, client, resource, entry, float(expires_in))
        self._signed_in(resource, token)
        return {}

    async def _expire(self, client: Client, resource: str, entry: HeldToken, after: float) -> None:
        await anyio.sleep(after)
        held = self._held(client)
        if held.get(resource) is not entry or client.peer.closed:
            return  # replaced, withdrawn, or the connection went
        del held[resource]
        client.data[TOKENS] = self.tokens(client)
        metadata = self._resources().get(resource, {"resource": resource})
        client.peer.notify(
            "auth/required",
            {"channel": ROOT_CHANNEL, "resource": metadata, "reason": "expired"},
        )
