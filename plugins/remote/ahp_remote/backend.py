"""A remote host's provider as a provider of this host, and the machine's own placeholder.

``RemoteBackend`` stands for one provider ``P`` of the machine ``M``: this host
lists it as ``remote-M-P`` ("<P's name> on <M>"), and a session of it is the
session ``P:/<same id>`` on M's host. The remote keeps the conversation; this
host keeps what it keeps of any session (its record, title, owner), asks the
remote for the turns when it reopens one, and lists the remote's sessions of
``P`` as its own.

``MachineBackend`` stands for a machine whose providers are not known yet
(never reached, none configured): listed so a person sees the machine and why
it cannot be used, it runs no session.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ahp_remote.chat import RemoteChat, remote_chat_uri
from ahp_remote.config import machine_provider, provider_name
from ahp_remote.link import LinkClosed, RemoteError
from ahp_remote.machine import Machine
from ahp_remote.parts import rebuild, subagent_chats
from ahpcore.api import escape
from ahpcore.ports.backend import (
    Abilities,
    AgentRefused,
    BackendNotifier,
    CatalogueRow,
    ChatStart,
    TranscriptReader,
)
from ahpcore.protocol import default_chat_uri, session_id_of

if TYPE_CHECKING:
    from ahpcore.api import PluginHost

log = logging.getLogger(__name__)

#: How long starting a session waits for a machine that is not linked right now.
START_WAIT = 15.0
#: How long reopening a past session waits for its machine before showing no turns.
REOPEN_WAIT = 5.0


class _Watching:
    """A watcher for a channel read once (a past chat's turns), which takes nothing."""

    def take(self, action: dict[str, Any], origin: Mapping[str, Any] | None) -> None:
        pass

    def reset(self, state: dict[str, Any] | None) -> None:
        pass

    def lost(self, why: str) -> None:
        pass

    def relinked(self) -> None:
        pass


def abilities_of(agent: Mapping[str, Any] | None) -> Abilities:
    """What a remote provider can do here, from the capabilities its host advertises:
    more chats, forks and side chats as it has them; the rest is the same for all."""
    capabilities = (agent or {}).get("capabilities") or {}
    chats = capabilities.get("multipleChats")
    return Abilities(
        resume=True,
        list_sessions=True,
        delete=True,
        rename=True,
        truncate=True,
        agent_truncate=True,
        steering=True,
        multiple_chats=isinstance(chats, Mapping),
        fork=isinstance(chats, Mapping) and chats.get("fork") is True,
        side_chat=isinstance(chats, Mapping) and chats.get("sideChat") is True,
        # The session's folders are the remote machine's: nothing here reaches them.
        local_folders=False,
    )


class RemoteBackend:
    """The provider ``remote-<machine>-<provider>``: sessions of one remote provider."""

    def __init__(
        self, machine: Machine, remote_provider: str, host: PluginHost | None = None
    ) -> None:
        # Fixed as the host starts, from what was last learned of the provider: the host
        # reads a backend's abilities once.
        self.abilities = abilities_of(machine.remote_agent(remote_provider))
        self.machine = machine
        #: Where a remote terminal's mirror is opened (none: terminals are named, not shown).
        self.host = host
        self.remote_provider = remote_provider
        self.provider = provider_name(machine.spec.name, remote_provider)
        self.live: dict[str, RemoteChat] = {}
        #: Backend ids of chats beside a session's default one that this host started.
        self.chats: set[str] = set()

    def attach(self, notifier: BackendNotifier) -> None:
        self.machine.on_change(notifier.agents_changed)

    async def stop(self) -> None:
        for chat in list(self.live.values()):
            try:
                await chat.close()
            except Exception:
                log.debug("closing a chat of %s failed", self.provider, exc_info=True)
        await self.machine.stop()

    # -- the root's view ------------------------------------------------------------------------
    def agents(self) -> Sequence[Mapping[str, Any]]:
        machine = self.machine
        found = machine.remote_agent(self.remote_provider)
        name = str(found.get("displayName") or self.remote_provider) if found else None
        title = f"{name or self.remote_provider} on {machine.title}"
        models = [
            {**model, "provider": self.provider}
            for model in (found or {}).get("models") or ()
            if isinstance(model, Mapping) and model.get("id")
        ] or [{"id": "default", "provider": self.provider, "name": "the remote's default"}]
        description = str((found or {}).get("description") or "")
        where = f"runs on {machine.title} ({machine.spec.reach})"
        description = f"{description} ({where})" if description else where.capitalize()
        down = machine.state_line()
        if down:
            description = f"{description}. Not available: {down}"
        elif found is None:
            description = f"{description}. Not available: {machine.title} no longer offers {self.remote_provider}"
        return [
            {
                "provider": self.provider,
                "displayName": title,
                "description": description,
                "models": models,
            }
        ]

    # -- chats ---------------------------------------------------------------------------------
    async def start(self, start: ChatStart) -> RemoteChat:
        machine = self.machine
        try:
            await machine.ready(START_WAIT)
        except LinkClosed as exc:
            raise RuntimeError(str(exc)) from None
        if machine.remote_agent(self.remote_provider) is None:
            raise RuntimeError(f"{machine.title} does not offer {self.remote_provider} now")
        chat = RemoteChat(machine, self.remote_provider, start, self.host)
        try:
            await chat.open(create=not start.resume)
        except RemoteError as exc:
            raise RuntimeError(f"{machine.title} refused: {exc.message}") from None
        except LinkClosed as exc:
            raise RuntimeError(str(exc)) from None
        self.live[start.backend_id] = chat
        if not chat.default:
            self.chats.add(start.backend_id)
        chat.forget = lambda: self.live.pop(start.backend_id, None)
        return chat

    # -- past sessions -------------------------------------------------------------------------
    def _row(self, summary: Mapping[str, Any]) -> CatalogueRow | None:
        if summary.get("provider") != self.remote_provider:
            return None
        try:
            session_id = session_id_of(str(summary.get("resource")))
        except ValueError:
            return None
        return CatalogueRow(
            session_id=session_id,
            title=str(summary.get("title") or ""),
            created_at=str(summary.get("createdAt") or ""),
            modified_at=str(summary.get("modifiedAt") or ""),
            working_directories=tuple(summary.get("workingDirectories") or ()),
        )

    async def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: str | None = None
    ) -> Sequence[CatalogueRow]:
        rows = [r for s in await self.machine.sessions() if (r := self._row(s)) is not None]
        if directory is not None:
            rows = [row for row in rows if directory in row.working_directories]
        return rows

    async def lookup(self, session_id: str) -> CatalogueRow | None:
        for fresh in (False, True):
            if fresh:
                try:  # a machine this host just started to reach may answer in a moment
                    await self.machine.ready(REOPEN_WAIT)
                except LinkClosed:
                    return None
            for summary in await self.machine.sessions(fresh=fresh):
                row = self._row(summary)
                if row is not None and row.session_id == session_id:
                    return row
        return None

    async def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        machine = self.machine
        try:
            await machine.ready(REOPEN_WAIT)
        except LinkClosed as exc:
            log.warning("cannot read the turns of %s: %s", backend_id, escape(str(exc)))
            return False
        # A default chat's backend id is its session's id; another chat's is its own.
        session = f"{self.remote_provider}:/{backend_id}"
        state: dict[str, Any] | None = None
        for uri in (default_chat_uri(session), remote_chat_uri(session, "", backend_id)):
            watching = _Watching()
            try:
                state = await machine.watch(uri, watching)
            except RemoteError:
                continue
            except LinkClosed as exc:
                log.warning("cannot read the turns of %s: %s", uri, escape(str(exc)))
                return False
            finally:
                await machine.unwatch(uri, watching)
            break
        if state is None:
            return False
        turns = [t for t in state.get("turns") or () if isinstance(t, Mapping)]
        children: dict[str, dict[str, Any]] = {}
        for turn in turns:
            for uri in subagent_chats(turn):
                watching = _Watching()
                try:
                    children[uri] = await machine.watch(uri, watching)
                except (LinkClosed, RemoteError):
                    continue  # the call is told without its child chat
                finally:
                    await machine.unwatch(uri, watching)
        for turn in turns:
            rebuild(reader, turn, machine.title, children)
        return bool(turns)

    async def delete(self, backend_id: str) -> None:
        session = f"{self.remote_provider}:/{backend_id}"
        chat = remote_chat_uri(session, "", backend_id)
        # A chat this host started is known to be one; any other id is tried as a session
        # first (a default chat's backend id is its session's), then as a chat.
        tries = [("disposeSession", session), ("disposeChat", chat)]
        if backend_id in self.chats:
            tries.reverse()
        failure: Exception | None = None
        for method, channel in tries:
            try:
                await self.machine.request(method, {"channel": channel})
                return
            except RemoteError as exc:
                failure = exc
            except LinkClosed as exc:
                failure = exc
                break
        log.warning("%s stays on %s: %s", backend_id, self.machine.title, escape(str(failure)))

    async def truncate(self, backend_id: str, turn_id: str | None) -> None:
        """A chat with no live agent here: its turns are dropped there all the same."""
        session = f"{self.remote_provider}:/{backend_id}"
        chat = remote_chat_uri(session, "" if backend_id in self.chats else backend_id, backend_id)
        action: dict[str, Any] = {"type": "chat/truncated"}
        if turn_id is not None:
            action["turnId"] = turn_id
        try:
            await self.machine.ready(START_WAIT)
            refused = await self.machine.dispatch(chat, action, answered=True)
        except LinkClosed as exc:
            raise AgentRefused(str(exc)) from None
        if refused is not None:
            raise AgentRefused(f"{self.machine.title} refused: {refused}")

    async def rename(self, backend_id: str, title: str) -> None:
        try:
            await self.machine.dispatch(
                f"{self.remote_provider}:/{backend_id}",
                {"type": "session/titleChanged", "title": title},
            )
        except LinkClosed as exc:
            log.info("the new title stays here until %s: %s", self.machine.title, exc)


class MachineBackend:
    """The provider ``remote-<machine>`` of a machine whose providers are not known yet."""

    abilities = Abilities(multiple_chats=False, local_folders=False)

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.provider = machine_provider(machine.spec.name)

    def attach(self, notifier: BackendNotifier) -> None:
        self.machine.on_change(notifier.agents_changed)

    async def stop(self) -> None:
        await self.machine.stop()

    def agents(self) -> Sequence[Mapping[str, Any]]:
        machine = self.machine
        down = machine.state_line()
        if down:
            said = f"Not available: {down}"
        else:
            offered = ", ".join(str(a.get("provider")) for a in machine.agents) or "no agent"
            said = (
                f"Reached; it offers {offered}. Restart this host to offer them "
                "(they are remembered from now on)"
            )
        return [
            {
                "provider": self.provider,
                "displayName": machine.title,
                "description": f"The AHP host on {machine.title} ({machine.spec.reach}). {said}",
                "models": [{"id": "default", "provider": self.provider, "name": "none yet"}],
            }
        ]

    async def start(self, start: ChatStart) -> Any:
        raise RuntimeError(self.agents()[0]["description"])

    def catalogue(self, **_: Any) -> Sequence[CatalogueRow]:
        return []

    def lookup(self, session_id: str) -> None:
        return None

    def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        return False

    def delete(self, backend_id: str) -> None:
        return None

    def truncate(self, backend_id: str, turn_id: str | None) -> None:
        raise LookupError(f"{self.machine.title} runs no session here")
