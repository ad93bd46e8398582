"""Sessions that could not be made, kept so that someone can read why.

An automation's run makes its session with nobody watching; when that fails
(the provider is gone, the agent would not start, the worktree could not be
made) the run links the session all the same, and the session must say why
to whoever opens it later. Such a session has no agent and no chat: it is its
``SessionState`` as ``session/creationFailed`` left it (``lifecycle: "failed"``,
``creationError``), kept as a record in the session store, listed like any
past session (with the Error status bit) whether or not its provider is still
served, opened from its record after a restart, and disposed of like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from ahpcore.engine.channels import Channel
from ahpcore.engine.core import Engine
from ahpcore.protocol import uris
from ahpcore.reducers._helpers import STATUS_ERROR
from ahpcore.sessions import state as states
from ahpcore.sessions.catalogue import CatalogueIndex, host_half, summary_of

log = logging.getLogger(__name__)


def _record(uri: str, state: Mapping[str, Any], now: str) -> dict[str, Any]:
    record: dict[str, Any] = {
        "uri": uri,
        "owner": None,
        "provider": state["provider"],
        "title": state.get("title", ""),
        "createdAt": now,
        "modifiedAt": now,
        "workingDirectories": list(state.get("workingDirectories") or ()),
        "isRead": True,
        "isArchived": False,
        "config": {},
        "lifecycle": "failed",
        "creationError": dict(state.get("creationError") or {}),
        "chats": [],
    }
    if state.get("origin"):
        record["origin"] = dict(state["origin"])
    if kept := states.kept_meta(state):
        record["_meta"] = kept
    return record


def _state(record: Mapping[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {
        "provider": record["provider"],
        "title": str(record.get("title") or ""),
        "status": states.flags(STATUS_ERROR, is_read=True, is_archived=False),
        "lifecycle": "failed",
        "creationError": dict(record.get("creationError") or {}),
        "activeClients": [],
        "chats": [],
    }
    if record.get("workingDirectories"):
        state["workingDirectories"] = list(record["workingDirectories"])
    if record.get("origin"):
        state["origin"] = dict(record["origin"])
    if kept := states.kept_meta(record):
        state["_meta"] = kept
    return state


class FailedSessions:
    """The failed sessions of this host: in the store, the index and, once opened, a channel."""

    def __init__(
        self,
        engine: Engine,
        store: Any,
        index: CatalogueIndex,
        *,
        recovered: Callable[[], Awaitable[None]],
        unsettle: Callable[[str], Awaitable[None]],
    ) -> None:
        """``recovered`` waits until what an unclean stop left unindexed is indexed;
        ``unsettle`` marks a session whose record is about to be written (the index
        catches up at the next start should the host die in between)."""
        self.engine = engine
        self.store = store
        self.index = index
        self._recovered = recovered
        self._unsettle = unsettle
        #: Session id -> provider, read from the index once (None until then).
        self._known: dict[str, str] | None = None
        self._loading = anyio.Lock()

    async def known(self) -> dict[str, str]:
        """Every failed session: session id -> provider."""
        if self._known is None:
            await self._recovered()
            async with self._loading:
                if self._known is None:
                    try:
                        self._known = await self.index.failed()
                    except Exception:
                        log.exception("could not read which sessions failed to start")
                        return {}
        return self._known

    async def keep(self, uri: str, state: Mapping[str, Any], error: Mapping[str, Any]) -> None:
        """``uri`` could not be made: its channel (``state`` as it was while being made)
        goes through ``session/creationFailed``, is kept, listed and announced."""
        session_id = uris.session_id_of(uri)
        if uri not in self.engine.channels:
            self.engine.add_channel(uri, "session", {**dict(state), "lifecycle": "creating"})
        self.engine.apply(uri, {"type": "session/creationFailed", "error": dict(error)})
        failed = self.engine.channels[uri].state
        record = _record(uri, failed, states.now_iso())
        known = await self.known()
        known[session_id] = str(record["provider"])
        try:
            if self.store is not None:
                await self._unsettle(session_id)
                await self.store.put(session_id, record)
            await self.index.saved(session_id, str(record["provider"]), record)
        except Exception:
            # Still readable while the host runs; only a restart loses it.
            log.exception("could not keep the failed session %s", uri)
        summary = summary_of(str(record["provider"]), session_id, {}, host_half(record))
        self.engine.notify_root("root/sessionAdded", {"summary": summary})

    async def open(self, session_id: str) -> Channel | None:
        """The channel of a failed session, from its record; None for any other session."""
        if session_id not in await self.known() or self.store is None:
            return None
        record = await self.store.get(session_id)
        if not isinstance(record, Mapping) or record.get("lifecycle") != "failed":
            return None
        uri = str(record.get("uri") or uris.session_uri(str(record["provider"]), session_id))
        return self.engine.channels.get(uri) or self.engine.add_channel(
            uri, "session", _state(record)
        )

    async def channel(self, uri: str) -> Channel | None:
        """The channel of the failed session ``uri`` names, opened if need be; else None."""
        try:
            session_id = uris.session_id_of(uri)
        except ValueError:
            return None
        return await self.open(session_id)

    async def dispose(self, uri: str) -> None:
        """Forget the failed session ``uri`` (as its channel names it)."""
        session_id = uris.session_id_of(uri)
        if self.store is not None:
            await self.store.delete(session_id)
        await self.index.forget(session_id)
        (await self.known()).pop(session_id, None)
        self.engine.remove_channel(uri)
        self.engine.notify_root("root/sessionRemoved", {"session": uri})
        log.info("failed session %s disposed", uri)
