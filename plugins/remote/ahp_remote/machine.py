"""One remote machine: the link to its host, kept up with backoff, and what is known of it.

A ``Machine`` is this host's one client of the remote host. It keeps:

- the remote's agents (its root channel), which the backends answer ``agents()`` from;
- the remote channels this host's chats watch, subscribed again after every
  reconnection: with ``reconnect`` first, so what the remote did while the link
  was down is replayed in order; a watcher whose channel could not be replayed
  is handed a fresh snapshot instead (``reset``);
- the remote's session list, refreshed now and then and kept on disk with the
  agents, so a restarted host lists remote sessions and offers remote providers
  before the machine answers again.

A machine that cannot be reached is retried with a growing delay (half a
second up to a minute); nothing waits on it but what needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ahp_remote import __version__
from ahp_remote.config import MachineSpec, tunnel_target
from ahp_remote.link import Link, LinkClosed, PipeLink, RemoteError, SocketLink, TunnelLink
from ahpcore.api import escape, write_private
from ahpcore.protocol import ROOT_CHANNEL

log = logging.getLogger(__name__)

#: The delay before the first retry of a machine that cannot be reached, and the longest.
FIRST_RETRY = 0.5
LAST_RETRY = 60.0
#: How long a listing of the remote's sessions is used before it is asked again.
CATALOGUE_SECONDS = 30.0
#: Remote sessions listed at most, page by page.
CATALOGUE_MAX = 2000
CATALOGUE_PAGE = 500
#: How long a dispatch that wants its answer waits for it.
ANSWER_SECONDS = 30.0


class Watcher(Protocol):
    """What watches one remote channel for a chat of this host."""

    def take(self, action: dict[str, Any], origin: Mapping[str, Any] | None) -> None:
        """An action the remote applied to the channel, in order."""

    def reset(self, state: dict[str, Any] | None) -> None:
        """The channel as it is now, after a reconnection that could not replay what was
        missed (None: the remote has no such channel any more)."""

    def lost(self, why: str) -> None:
        """The link went down; ``reset`` or more actions follow once it is back."""

    def relinked(self) -> None:
        """The link is back and what was missed has been replayed."""


class Machine:
    """The link to one machine's host and what this host knows of it."""

    def __init__(self, spec: MachineSpec, cache: Path | None) -> None:
        self.spec = spec
        self.cache = cache
        #: The remote's ``AgentInfo`` dicts, as its root channel has them.
        self.agents: list[dict[str, Any]] = []
        #: The remote's terminals (``TerminalInfo`` dicts), as its root channel lists them.
        self.terminals: list[dict[str, Any]] = []
        self.terminal_listeners: list[Callable[[], None]] = []
        #: The remote's sessions (``SessionSummary`` rows) as last listed.
        self.rows: list[dict[str, Any]] = []
        self.listed_at = 0.0
        self.reason = "not reached yet"
        self.retry_in: float | None = None
        self.up = asyncio.Event()
        #: Set once the remote was reached since this host started (or its agents were kept).
        self.ever_up = False
        self.link: Link | None = None
        #: The id this host goes by on the remote, kept across reconnections for ``reconnect``.
        self.client_id = f"ahp-remote-{uuid.uuid4().hex[:12]}"
        self._seq: int | None = None
        #: How the last link began: "snapshot" (initialize, or nothing to replay) or "replay".
        self.relinked_by = ""
        self._client_seq = itertools.count(1)
        self._watchers: dict[str, list[Watcher]] = {}
        #: (channel, id(watcher)) -> actions held for a watcher until it took its snapshot.
        self._pending: dict[tuple[str, int], list[tuple[dict[str, Any], Any]]] = {}
        #: clientSeq -> the dispatch waiting to hear whether the remote took it.
        self._answers: dict[int, asyncio.Future[str | None]] = {}
        #: What the remote sent while a handshake's answer was being taken in.
        self._early: list[tuple[str, dict[str, Any]]] | None = None
        self._changed: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._kick = asyncio.Event()
        self._load()

    # -- the cache on disk ----------------------------------------------------------------
    def _load(self) -> None:
        if self.cache is None:
            return
        try:
            data = json.loads(self.cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict):
            agents, rows = data.get("agents"), data.get("sessions")
            if isinstance(agents, list):
                self.agents = [a for a in agents if isinstance(a, dict) and a.get("provider")]
            if isinstance(rows, list):
                self.rows = [r for r in rows if isinstance(r, dict) and r.get("resource")]

    def _save(self) -> None:
        if self.cache is None:
            return
        try:
            write_private(
                self.cache,
                json.dumps({"agents": self.agents, "sessions": self.rows}, separators=(",", ":")),
            )
        except OSError as exc:
            log.warning("cannot keep what is known of %s in %s: %s", self.title, self.cache, exc)

    # -- what others ask ------------------------------------------------------------------
    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def streams(self) -> bool:
        """Whether the remote host outlives a link (a WebSocket, direct or through an SSH
        tunnel): then a dropped link may be reconnected and what was missed replayed. A
        child process's host ends with its link."""
        return self.spec.kind in ("url", "tunnel")

    def remote_agent(self, provider: str) -> dict[str, Any] | None:
        return next((a for a in self.agents if a.get("provider") == provider), None)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever the machine's agents or state change."""
        self._changed.append(listener)

    def _tell(self) -> None:
        for listener in self._changed:
            try:
                listener()
            except Exception:
                log.exception("telling of a change on %s failed", self.title)

    def state_line(self) -> str:
        """Why the machine cannot be used now, in a line; empty when it can."""
        if self.up.is_set():
            return ""
        retry = f"; trying again in {self.retry_in:.0f} s" if self.retry_in else ""
        return f"{self.title} is not reachable ({self.reason}){retry}"

    async def ready(self, timeout: float) -> None:
        """Wait (a while) until the link is up; ``LinkClosed`` saying why it is not."""
        if self.up.is_set():
            return
        self._kick.set()  # someone needs it now: no point waiting out the backoff
        try:
            async with asyncio.timeout(timeout):
                await self.up.wait()
        except TimeoutError:
            raise LinkClosed(self.state_line() or f"{self.title} is not reachable") from None

    async def request(self, method: str, params: Mapping[str, Any]) -> Any:
        link = self.link
        if link is None or not self.up.is_set():
            raise LinkClosed(self.state_line())
        return await link.request(method, {"channel": ROOT_CHANNEL, **params})

    async def dispatch(
        self, channel: str, action: Mapping[str, Any], *, answered: bool = False
    ) -> str | None:
        """Dispatch an action on a remote channel. With ``answered``, wait until the remote
        applied it (None) or refused it (the reason it gave)."""
        link = self.link
        if link is None or not self.up.is_set():
            raise LinkClosed(self.state_line())
        seq = next(self._client_seq)
        waiting: asyncio.Future[str | None] | None = None
        if answered:
            waiting = self._answers[seq] = asyncio.get_running_loop().create_future()
        try:
            await link.notify(
                "dispatchAction", {"channel": channel, "clientSeq": seq, "action": dict(action)}
            )
            if waiting is None:
                return None
            try:
                async with asyncio.timeout(ANSWER_SECONDS):
                    return await waiting
            except TimeoutError:
                raise LinkClosed(
                    f"{self.title} did not answer {action.get('type')} in {ANSWER_SECONDS:.0f} s"
                ) from None
        finally:
            self._answers.pop(seq, None)

    async def watch(self, uri: str, watcher: Watcher) -> dict[str, Any]:
        """Subscribe to a remote channel for ``watcher``; its state now."""
        link = self.link
        if link is None or not self.up.is_set():
            raise LinkClosed(self.state_line())
        key = (uri, id(watcher))

        def answered() -> None:
            # Actions sent right after the answer are read before this resumes: they wait
            # for the caller to take the snapshot first, then follow it in order.
            self._pending[key] = []
            self._watchers.setdefault(uri, []).append(watcher)

        try:
            result = await link.request("subscribe", {"channel": uri}, on_answer=answered)
        except BaseException:
            self._pending.pop(key, None)
            if watcher in self._watchers.get(uri, ()):
                self._watchers[uri].remove(watcher)
            raise
        asyncio.get_running_loop().call_soon(self._release, uri, watcher)
        snapshot = result.get("snapshot") if isinstance(result, dict) else None
        return dict(snapshot["state"]) if isinstance(snapshot, dict) else {}

    def _release(self, uri: str, watcher: Watcher) -> None:
        held = self._pending.pop((uri, id(watcher)), [])
        if watcher not in self._watchers.get(uri, ()):
            return
        for action, origin in held:
            try:
                watcher.take(action, origin)
            except Exception:
                log.exception("relaying %s from %s failed", action.get("type"), self.title)

    async def unwatch(self, uri: str, watcher: Watcher) -> None:
        watchers = self._watchers.get(uri, [])
        if watcher in watchers:
            watchers.remove(watcher)
        if watchers:
            return
        self._watchers.pop(uri, None)
        link = self.link
        if link is not None and self.up.is_set():
            with contextlib.suppress(LinkClosed):
                await link.notify("unsubscribe", {"channel": uri})

    async def sessions(self, *, fresh: bool = False) -> list[dict[str, Any]]:
        """The remote's sessions: as last listed, listed again when that is old (or ``fresh``)."""
        stale = time.monotonic() - self.listed_at > CATALOGUE_SECONDS
        if self.up.is_set() and (fresh or stale or not self.listed_at):
            rows: list[dict[str, Any]] = []
            cursor: str | None = None
            try:
                while len(rows) < CATALOGUE_MAX:
                    params: dict[str, Any] = {"limit": CATALOGUE_PAGE}
                    if cursor:
                        params["cursor"] = cursor
                    page = await self.request("listSessions", params)
                    rows.extend(page.get("items") or ())
                    cursor = page.get("nextCursor")
                    if not cursor:
                        break
            except (LinkClosed, RemoteError) as exc:
                log.info("cannot list the sessions of %s now: %s", self.title, exc)
            else:
                self.rows = rows
                self.listed_at = time.monotonic()
                self._save()
        return list(self.rows)

    # -- the link's life ------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        link = self.link
        if link is not None:
            await link.close()

    async def first_contact(self, timeout: float) -> bool:
        """Start, and wait up to ``timeout`` for the link to come up; whether it did."""
        self.start()
        try:
            async with asyncio.timeout(timeout):
                await self.up.wait()
        except TimeoutError:
            return False
        return True

    async def _run(self) -> None:
        delay = FIRST_RETRY
        while not self._stopping:
            link = None
            try:
                link = await self._connect()
            except (LinkClosed, RemoteError, OSError) as exc:
                self._down(str(exc), link)
            else:
                delay = FIRST_RETRY
                await link.closed.wait()
                self._down(link.why, link)
            if self._stopping:
                return
            self.retry_in = delay
            self._tell()
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._kick.wait()
            self.retry_in = None
            delay = min(delay * 2, LAST_RETRY)

    def _down(self, why: str, link: Link | None) -> None:
        was_up = self.up.is_set()
        self.up.clear()
        self.reason = why or "the link ended"
        if link is not None and link is self.link:
            self.link = None
        if was_up:
            log.warning("lost the link to %s: %s", self.title, escape(self.reason))
            for watchers in list(self._watchers.values()):
                for watcher in list(watchers):
                    watcher.lost(self.reason)
        else:
            log.info("%s", escape(self.state_line() or self.reason))
        self._tell()

    def _open_link(self) -> PipeLink | SocketLink | TunnelLink:
        spec = self.spec
        if spec.kind == "url":
            return SocketLink(self.title, spec.url, spec.token)
        if spec.kind == "tunnel":
            return TunnelLink(
                self.title,
                spec.url,
                spec.token,
                ssh=spec.argv,
                destination=spec.destination,
                target=tunnel_target(spec.url),
            )
        return PipeLink(self.title, spec.argv)

    async def _connect(self) -> Link:
        link = self._open_link()
        link.on_notification = self._notified
        self._early = []
        try:
            await link.open()
            wanted = [ROOT_CHANNEL, *self._watchers]
            result: dict[str, Any] | None = None
            if self._seq is not None:
                try:
                    result = await link.request(
                        "reconnect",
                        {
                            "channel": ROOT_CHANNEL,
                            "clientId": self.client_id,
                            "lastSeenServerSeq": self._seq,
                            "subscriptions": wanted,
                        },
                    )
                except RemoteError as exc:  # a host that takes no reconnect: start afresh
                    log.info("%s did not take reconnect (%s); initializing", self.title, exc)
            if result is None:
                result = await link.request(
                    "initialize",
                    {
                        "channel": ROOT_CHANNEL,
                        "protocolVersions": ["1.0.0"],
                        "clientId": self.client_id,
                        "clientInfo": {"name": "ahp-remote", "version": __version__},
                        "initialSubscriptions": wanted,
                    },
                )
                self._seq = int(result["serverSeq"])
            replayed = list(result.get("actions") or ()) if result.get("type") == "replay" else []
            snapshots = list(result.get("snapshots") or ())
            missing = list(result.get("missing") or ())
        except BaseException:
            self._early = None
            await link.close("the remote host did not take this host as its client")
            raise
        self.link = link
        self.relinked_by = "replay" if result.get("type") == "replay" else "snapshot"
        self.reason = ""
        self.up.set()
        self.ever_up = True
        how = "replaying what was missed" if replayed else "from a snapshot"
        log.info("linked to %s (%s)", self.title, how if self._watchers else "no session open")
        for snapshot in snapshots:
            self._snapshot(snapshot)
        for envelope in replayed:
            self._envelope(envelope)
        for uri in missing:
            for watcher in list(self._watchers.get(uri, ())):
                watcher.reset(None)
        early, self._early = self._early or [], None
        for method, params in early:
            self._notified(method, params)
        for watchers in list(self._watchers.values()):
            for watcher in list(watchers):
                watcher.relinked()
        self._tell()
        return link

    # -- what the remote sends --------------------------------------------------------------
    def _snapshot(self, snapshot: Mapping[str, Any]) -> None:
        uri, state = snapshot.get("resource"), snapshot.get("state")
        seq = snapshot.get("fromSeq")
        if isinstance(seq, int | float) and (self._seq is None or seq > self._seq):
            self._seq = int(seq)
        if uri == ROOT_CHANNEL and isinstance(state, dict):
            self._agents(state.get("agents") or [])
            self._terminals(state.get("terminals") or [])
            return
        for watcher in list(self._watchers.get(str(uri), ())):
            watcher.reset(dict(state) if isinstance(state, dict) else None)

    def _agents(self, agents: list[Any]) -> None:
        found = [dict(a) for a in agents if isinstance(a, dict) and a.get("provider")]
        if found != self.agents:
            self.agents = found
            self._save()

    def _terminals(self, terminals: list[Any]) -> None:
        self.terminals = [dict(t) for t in terminals if isinstance(t, dict)]
        for listener in list(self.terminal_listeners):
            try:
                listener()
            except Exception:
                log.exception("telling of the terminals of %s failed", self.title)

    def _notified(self, method: str, params: dict[str, Any]) -> None:
        if self._early is not None:
            self._early.append((method, params))
            return
        if method == "action":
            self._envelope(params)
        elif method in ("root/sessionAdded", "root/sessionSummaryChanged"):
            summary = params.get("summary") or params.get("changes")
            resource = (summary or {}).get("resource") or params.get("session")
            if method == "root/sessionAdded" and isinstance(summary, dict):
                self.rows = [r for r in self.rows if r.get("resource") != resource]
                self.rows.insert(0, dict(summary))
                self._save()
            elif isinstance(summary, dict):
                for row in self.rows:
                    if row.get("resource") == resource:
                        row.update(summary)
        elif method == "root/sessionRemoved":
            gone = params.get("session")
            self.rows = [r for r in self.rows if r.get("resource") != gone]
            self._save()

    def _envelope(self, envelope: Mapping[str, Any]) -> None:
        channel, action = envelope.get("channel"), envelope.get("action")
        if not isinstance(action, dict):
            return
        origin = envelope.get("origin")
        if isinstance(origin, dict) and origin.get("clientId") == self.client_id:
            # First: a refusal (or a no-op's echo) repeats a serverSeq already seen.
            waiting = self._answers.get(origin.get("clientSeq"))  # type: ignore[arg-type]
            if waiting is not None and not waiting.done():
                refused = envelope.get("rejectionReason")
                waiting.set_result(str(refused) if refused is not None else None)
        if "rejectionReason" in envelope:
            log.info(
                "%s refused %s on %s: %s",
                self.title,
                action.get("type"),
                channel,
                escape(str(envelope["rejectionReason"]))[:200],
            )
            return
        seq = envelope.get("serverSeq")
        if isinstance(seq, int | float):
            if self._seq is not None and seq <= self._seq:
                return  # seen already (a replay overlapping what arrived before the drop)
            self._seq = int(seq)
        if channel == ROOT_CHANNEL:
            if action.get("type") == "root/agentsChanged":
                self._agents(action.get("agents") or [])
                self._tell()
            elif action.get("type") == "root/terminalsChanged":
                self._terminals(action.get("terminals") or [])
            return
        said = origin if isinstance(origin, dict) else None
        for watcher in list(self._watchers.get(str(channel), ())):
            pending = self._pending.get((str(channel), id(watcher)))
            if pending is not None:
                pending.append((action, said))
                continue
            try:
                watcher.take(action, said)
            except Exception:
                log.exception("relaying %s from %s failed", action.get("type"), self.title)
