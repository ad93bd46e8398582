"""A session's annotations: the ``<sessionUri>/annotations`` channel every session has.

Review comments on what an agent changed live here: annotations anchored to a
file, each with its entries. The channel opens when a client first names it
(subscribing or dispatching) and holds nothing until written. Every action is
checked against the channel, kept in the session's record before anyone hears
of it, and reduced by the same reducer a client runs; the session's state and
its catalogue row carry the counts (``AnnotationsSummary``).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import anyio

from ahpcore import reducers
from ahpcore.engine.channels import Channel
from ahpcore.engine.core import Dispatch, Refused
from ahpcore.notes import note
from ahpcore.protocol import uris
from ahpcore.sessions import state as states
from ahpcore.sessions.live import LiveSession
from ahpcore.sessions.registry import SessionRegistry

KIND = "annotations"
#: Every annotations action, as the compatibility notes name them.
_ACTIONS = (
    "annotations/set",
    "annotations/updated",
    "annotations/removed",
    "annotations/entrySet",
    "annotations/entryRemoved",
)


def _session_part(uri: str) -> str | None:
    """The session a ``<sessionUri>/annotations`` URI names, as spelled; None for any other URI."""
    session, sep, rest = uri.rpartition(uris.ANNOTATIONS_SEGMENT)
    if not sep or rest or not session:
        return None
    try:
        uris.parse_session_uri(session)
    except ValueError:
        return None
    return session


def _ids(items: Any) -> list[Any]:
    return [item.get("id") for item in items or () if isinstance(item, Mapping)]


class SessionAnnotations:
    """Opens, checks, keeps and counts every session's annotations."""

    def __init__(self, registry: SessionRegistry) -> None:
        self.registry = registry
        self.engine = engine = registry.engine
        #: Session -> the lock one action at a time holds from its check to its echo
        #: (a disposed or rebuilt session's goes with it).
        self._locks: weakref.WeakKeyDictionary[LiveSession, anyio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        engine.add_resolver(self._resolve)
        engine.add_opener(self._open)
        for action_type in _ACTIONS:
            engine.on_action(action_type, self.dispatched)
        engine.on_change(self._changed, types=_ACTIONS)

    # -- the channel -----------------------------------------------------------------
    def _resolve(self, uri: str) -> str | None:
        session = _session_part(uri)
        if session is None:
            return None
        held = self.registry.session_by_uri(session)
        if held is None or held.uri == session:
            return None
        return uris.annotations_uri(held.uri)

    async def _open(self, uri: str) -> Channel | None:
        spelled = _session_part(uri)
        if spelled is None:
            return None
        # A past session comes back first (its record holds the annotations).
        found = await self.engine.open_channel(spelled)
        if found is None or found.kind != "session":
            return None
        session = self.registry.session_by_uri(found.uri)
        if session is None:
            return None
        canonical = uris.annotations_uri(session.uri)
        held = self.engine.channels.get(canonical)
        if held is not None:
            return held
        return self.engine.add_channel(canonical, KIND, {"annotations": list(session.annotations)})

    # -- client actions ----------------------------------------------------------------
    @note(
        "annotations/set",
        text="Refused: an annotation with no entries or naming an entry id twice, a new one "
        "already resolved, an origin naming another session.",
    )
    @note(
        "annotations/updated",
        "annotations/removed",
        "annotations/entrySet",
        text="Refused when it names an annotation the channel does not have: the reducer "
        "would drop it silently and the sender would hold what this host never kept.",
    )
    @note(
        "annotations/entryRemoved",
        text="Refused when it names an annotation or an entry the channel does not have, or "
        "the last entry of an annotation (an annotation is never empty: remove it instead).",
    )
    @note(
        *_ACTIONS,
        text="Every session has <session>/annotations, opened when a client names it and "
        "empty until written. Reduced with the protocol's annotations reducer, and kept in "
        "the session's record before it is echoed, its sender included: an echoed action "
        "survives a restart and the session being rebuilt from its transcript, and goes "
        "when the session is disposed. The counts are on SessionState.annotations and on "
        "the session's row; no session action carries them, so the row moves with "
        "root/sessionSummaryChanged and a client watching the session reads them in its "
        "next snapshot.",
    )
    async def dispatched(self, dispatch: Dispatch) -> dict[str, Any] | None:
        """Check an annotations action, keep what it makes, then let the engine echo it.

        One action per session at a time, from its check to its echo, so each is
        checked against what the one before it left.
        """
        session = self._session_of(dispatch.channel)
        lock = self._locks.get(session)
        if lock is None:
            lock = self._locks[session] = anyio.Lock()
        async with lock:
            channel = self.engine.channels.get(dispatch.channel.uri)
            if channel is None:
                raise Refused(f"{dispatch.channel.uri} was closed: its session was disposed")
            action = dispatch.action
            _check(session, channel.state, action)
            after = reducers.reduce(KIND, channel.state, action)
            if after is channel.state:
                return action  # nothing moves: the engine answers the sender alone
            kept = session.annotations
            session.annotations = list(after.get("annotations") or [])
            try:
                # On disk before it is echoed to anyone, its sender included.
                await self.registry.save(session)
            except Exception as exc:
                session.annotations = kept
                raise Refused(f"the annotations were not saved: {exc}") from None
            if self.registry.sessions.get(session.id) is not session:
                raise Refused(f"{session.uri} was disposed meanwhile")
            # No await between here and the engine applying it: the next action waiting
            # on the lock is checked against the state this one leaves.
            return action

    def _session_of(self, channel: Channel) -> LiveSession:
        spelled = _session_part(channel.uri)
        session = self.registry.session_by_uri(spelled) if spelled is not None else None
        if session is None:
            raise Refused(f"{channel.uri} is not the annotations of a session this host holds")
        return session

    # -- the counts ----------------------------------------------------------------------
    def _changed(self, channel: Channel, action: dict[str, Any], before: dict[str, Any]) -> None:
        """The session's state and its row say the new counts.

        No session action carries ``SessionState.annotations``: it is written in
        place, so a client subscribing to the session reads it in its snapshot,
        and the row moves with ``root/sessionSummaryChanged``.
        """
        spelled = _session_part(channel.uri)
        session = self.registry.session_by_uri(spelled) if spelled is not None else None
        if session is None:
            return
        session.annotations = list(channel.state.get("annotations") or [])
        summary = states.annotations_summary(session.uri, session.annotations)
        if session.state.get("annotations") != summary:
            session.channel.state = {**session.state, "annotations": summary}
        if session.last_summary is None:
            return  # not announced yet: its first row says the counts
        row = self.registry.summary(session)
        changes = states.summary_changes(session.last_summary, row)
        if changes:
            session.last_summary = row
            self.engine.notify_root(
                "root/sessionSummaryChanged", {"session": session.uri, "changes": changes}
            )


def _check(session: LiveSession, state: Mapping[str, Any], action: Mapping[str, Any]) -> None:
    """Refuse what the protocol forbids, or what the reducer would quietly drop."""
    kind = action.get("type")
    annotations = [a for a in state.get("annotations") or () if isinstance(a, Mapping)]
    held = {a.get("id"): a for a in annotations}
    if kind == "annotations/set":
        annotation = action.get("annotation") or {}
        ident = annotation.get("id")
        entries = annotation.get("entries") or []
        if not entries:
            raise Refused(
                f"annotation {ident} has no entries: an annotation holds at least one "
                "(remove it with annotations/removed instead)"
            )
        ids = _ids(entries)
        if len(set(ids)) != len(ids):
            raise Refused(f"annotation {ident} names an entry id twice")
        if ident not in held and annotation.get("resolved"):
            raise Refused(
                f"annotation {ident} is new: a new annotation starts unresolved "
                "(resolve it afterwards with annotations/updated)"
            )
        _check_origin(session, annotation.get("origin"), ident)
        return
    ident = action.get("annotationId")
    annotation = held.get(ident)
    if annotation is None:
        raise Refused(f"{session.uri} has no annotation {ident}")
    if kind == "annotations/updated":
        if "origin" in action:
            _check_origin(session, action.get("origin"), ident)
    elif kind == "annotations/entryRemoved":
        entries = _ids(annotation.get("entries"))
        entry = action.get("entryId")
        if entry not in entries:
            raise Refused(f"annotation {ident} has no entry {entry}")
        if len(entries) == 1:
            raise Refused(
                f"entry {entry} is the last of annotation {ident}: an annotation holds at "
                "least one (remove the annotation with annotations/removed instead)"
            )


def _check_origin(session: LiveSession, origin: Any, ident: Any) -> None:
    named = origin.get("session") if isinstance(origin, Mapping) else None
    try:
        same = isinstance(named, str) and uris.session_id_of(named) == session.id
    except ValueError:
        same = False
    if not same:
        raise Refused(
            f"annotation {ident} says it belongs to {named}, not to {session.uri} "
            "whose annotations these are"
        )
