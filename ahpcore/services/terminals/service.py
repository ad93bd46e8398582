"""Terminal channels, ``createTerminal``/``disposeTerminal`` and the client actions on them.

Who may do what (the protocol's threat model asks hosts to fence terminals):

* a terminal starts in a directory inside a live session's working
  directories (resolved, so ``..`` and symlinks cannot step outside);
* a client claim must name the client asking, a session claim a live session
  and one of its chats;
* input, resizes, titles, clears, claims and disposal come only from whoever
  holds the claim: the client named, or for a session claim the session's
  owner or one of its active clients.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from ahpcore.engine.clients import Client
from ahpcore.engine.core import Dispatch, Engine, Refused
from ahpcore.engine.router import Router
from ahpcore.lifecycle import TurnStart
from ahpcore.markers import hookimpl
from ahpcore.ports import TerminalSpec, TerminalsPort
from ahpcore.protocol.errors import (
    ALREADY_EXISTS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    PERMISSION_DENIED,
    ProtocolError,
)
from ahpcore.protocol.uris import ROOT_CHANNEL, file_uri, path_of_file_uri
from ahpcore.services.terminals.commands import TerminalCommands
from ahpcore.services.terminals.output import (
    DEFAULT_SCROLLBACK_BYTES,
    MAX_SCROLLBACK_BYTES,
    MIN_SCROLLBACK_BYTES,
    SCROLLBACK_KEY,
    LiveTerminal,
    TerminalFeed,
    trim_content,
)
from ahpcore.sessions.folders import home_folder
from ahpcore.sessions.registry import SessionRegistry
from ahpcore.tasks import Tasks

log = logging.getLogger(__name__)

#: Terminals one client id may have open at once, and the host as a whole: each is a
#: pty and a process group, and ptys are a machine-wide resource (4096 on Linux).
MAX_TERMINALS_PER_CLIENT = 64
MAX_TERMINALS = 512
_HOLDER_ACTIONS = (
    "terminal/input",
    "terminal/resized",
    "terminal/claimed",
    "terminal/titleChanged",
    "terminal/cleared",
)


def local_path(uri: str) -> str | None:
    """The local path a ``file:`` URI (or a bare absolute path) names, or None."""
    return uri if uri.startswith("/") else path_of_file_uri(uri)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _cells(value: Any) -> bool:
    """A count of character cells a pty takes: a whole number from 1 to 10000."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return float(value).is_integer() and 0 < value <= 10000


class TerminalService:
    """The host's terminals: one channel per terminal, fed by the terminals port."""

    def __init__(
        self,
        engine: Engine,
        router: Router,
        tasks: Tasks,
        port: TerminalsPort,
        sessions: SessionRegistry | None,
    ) -> None:
        self.port = port
        self.engine = engine
        self.tasks = tasks
        #: The live sessions (None on a host without backends: no session claims).
        self.sessions = sessions
        self.terminals: dict[str, LiveTerminal] = {}
        self.commands = TerminalCommands(self)
        router.add("createTerminal", self.create_terminal)
        router.add("disposeTerminal", self.dispose_terminal)
        for action_type in _HOLDER_ACTIONS:
            self.engine.on_action(action_type, self.client_action)

    # -- lifecycle -----------------------------------------------------------------
    @hookimpl
    async def ahp_session_disposing(self, session: str) -> None:
        """Dispose of every terminal the session claimed (the session is going away)."""
        for uri in list(self.terminals):
            claim = self.engine.channels[uri].state.get("claim") or {}
            if claim.get("kind") == "session" and claim.get("session") == session:
                await self.dispose(uri)

    @hookimpl
    async def ahp_turn_starting(self, start: TurnStart) -> bool:
        return await self.commands.run(start)

    # -- plumbing the feed uses ------------------------------------------------------
    def spawn(self, function: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        async def supervised() -> None:
            try:
                await function()
            except Exception:
                log.exception("terminal work failed")

        self.tasks.spawn(supervised)

    def content(self, terminal: LiveTerminal) -> list[Any]:
        channel = self.engine.channels.get(terminal.uri)
        return list(channel.state.get("content", [])) if channel is not None else []

    def scrollback_cap(self) -> int:
        """``terminalScrollbackBytes``, at most its ceiling; a value that is not a number of
        at least 64 KiB reads as the default."""
        values = self.engine.root.state.get("config", {}).get("values", {})
        pushed = values.get(SCROLLBACK_KEY)
        number = isinstance(pushed, (int, float)) and not isinstance(pushed, bool)
        if number and pushed >= MIN_SCROLLBACK_BYTES:
            # Refused past the ceiling on the way in; a value put in the state some
            # other way still cannot lift it.
            return int(min(pushed, MAX_SCROLLBACK_BYTES))
        return DEFAULT_SCROLLBACK_BYTES

    def apply(self, terminal: LiveTerminal, action: dict[str, Any]) -> None:
        if terminal.uri in self.engine.channels and self.terminals.get(terminal.uri) is terminal:
            self.engine.apply(terminal.uri, action)

    def data(self, terminal: LiveTerminal, text: str, size: int) -> None:
        """Append output, then drop the oldest output beyond the scrollback cap."""
        if self.terminals.get(terminal.uri) is not terminal:
            return
        self.engine.apply(terminal.uri, {"type": "terminal/data", "data": text})
        feed = terminal.feed
        feed.held += size
        cap = self.scrollback_cap()
        if feed.held > cap:
            # No action can say "the oldest output is gone": the cap shapes what a
            # snapshot carries, while watchers already hold what they were sent.
            channel = self.engine.channels[terminal.uri]
            content, feed.held = trim_content(list(channel.state.get("content", [])), cap)
            feed.trimmed = True
            channel.state = {**channel.state, "content": content}

    def watcher_backlog(self, terminal: LiveTerminal) -> int:
        channel = self.engine.channels.get(terminal.uri)
        if channel is None:
            return 0
        return max((client.peer.queued_bytes for client in channel.subscribers), default=0)

    def publish_list(self) -> None:
        infos = []
        for uri in self.terminals:
            channel = self.engine.channels.get(uri)
            if channel is None:
                continue
            state = channel.state
            infos.append(
                {
                    "resource": uri,
                    "title": state.get("title", ""),
                    "claim": state.get("claim"),
                    "lifecycle": state.get("lifecycle", {"status": "running"}),
                }
            )
        self.engine.apply(ROOT_CHANNEL, {"type": "root/terminalsChanged", "terminals": infos})

    # -- the fence -----------------------------------------------------------------
    def _session_roots(self, session_uri: str | None = None) -> list[str]:
        manager = self.sessions
        if manager is None:
            return []
        sessions: Any = manager.sessions.values()
        if session_uri is not None:
            found = manager.session_by_uri(session_uri)
            sessions = [found] if found is not None else []
        roots = []
        for session in sessions:
            if not session.backend.abilities.local_folders:
                continue  # its folders are another machine's: none of them is in reach here
            for directory in session.working_directories:
                path = local_path(directory)
                if path is not None:
                    roots.append(os.path.realpath(path))
        return roots

    def _default_directory(self, client: Client, session_uri: str | None, roots: list[str]) -> str:
        """Where a terminal given no cwd starts: a session's terminal in the session's first
        working directory; a client's in the user's home, or where the home is outside the
        fence, in the first working directory of the session the client watched last."""
        if session_uri is not None:
            if roots:
                return roots[0]
            raise ProtocolError(
                INVALID_PARAMS, f"params.cwd is required: {session_uri} has no working directory"
            )
        home = home_folder()
        if home is not None and any(_inside(home, root) for root in roots):
            return home
        for uri in reversed(client.subscriptions):
            watched = self._session_roots(uri)  # none for a channel that is not a session
            if watched:
                return watched[0]
        raise ProtocolError(
            PERMISSION_DENIED,
            f"params.cwd is required here: the user's home ({home or 'unknown'}) is outside "
            "every session's working directories and this client watches no session; name a "
            "directory inside a session's working directory",
        )

    def _start_directory(self, cwd: Any, claim: dict[str, Any], client: Client) -> str:
        session_uri = claim.get("session") if claim.get("kind") == "session" else None
        if session_uri is not None and self._elsewhere(session_uri):
            # Only a plugin opens one (clients are refused at the claim): a process of its
            # own, such as a mirror of the remote terminal, in no folder of the session's.
            if cwd is not None:
                raise ProtocolError(
                    PERMISSION_DENIED,
                    f"{session_uri} runs on another machine: none of its folders is here",
                )
            home = home_folder()
            return home if home is not None and os.path.isdir(home) else "/"
        roots = self._session_roots(session_uri)
        if cwd is None:
            return self._default_directory(client, session_uri, roots)
        path = local_path(cwd) if isinstance(cwd, str) else None
        if path is None:
            raise ProtocolError(INVALID_PARAMS, f"params.cwd must be a file: URI, not {cwd!r}")
        resolved = os.path.realpath(path)
        if not any(_inside(resolved, root) for root in roots):
            where = "that session's" if session_uri else "any session's"
            raise ProtocolError(
                PERMISSION_DENIED, f"{cwd} is outside {where} working directories on this host"
            )
        if not Path(resolved).is_dir():
            raise ProtocolError(NOT_FOUND, f"{cwd} is not a directory")
        return resolved

    def _elsewhere(self, session_uri: str) -> bool:
        """Whether the session's folders are another machine's (``Abilities.local_folders``)."""
        manager = self.sessions
        session = manager.session_by_uri(session_uri) if manager is not None else None
        return session is not None and not session.backend.abilities.local_folders

    def _check_claim(self, client: Client | None, claim: dict[str, Any]) -> None:
        if claim.get("kind") == "client":
            if client is not None and claim.get("clientId") != client.client_id:
                raise ProtocolError(
                    INVALID_PARAMS,
                    f"a client claim must name the client asking ({client.client_id!r})",
                )
            return
        manager = self.sessions
        session = manager.session_by_uri(claim["session"]) if manager is not None else None
        if manager is None or session is None:
            raise ProtocolError(INVALID_PARAMS, f"no session {claim['session']} on this host")
        chat = manager.chat_by_uri(claim["chat"])
        if chat is None or chat.session is not session:
            raise ProtocolError(
                INVALID_PARAMS, f"{claim['chat']} is not a chat of {claim['session']}"
            )
        if client is not None and not session.backend.abilities.local_folders:
            raise ProtocolError(
                INVALID_PARAMS,
                f"{claim['session']} runs on another machine ({session.provider}): its "
                "terminals are that machine's, and this host opens none for it",
            )

    def holds(self, client: Client, claim: Any) -> bool:
        if not isinstance(claim, dict):
            return False
        if claim.get("kind") == "client":
            return claim.get("clientId") == client.client_id
        manager = self.sessions
        session = manager.session_by_uri(claim.get("session", "")) if manager is not None else None
        if session is None:
            return False
        active = {entry.get("clientId") for entry in session.state.get("activeClients", [])}
        return client.client_id == session.owner or client.client_id in active

    # -- commands ------------------------------------------------------------------
    async def create_terminal(self, client: Client, params: dict[str, Any]) -> None:
        uri = params["channel"]
        claim = params["claim"]
        self._check_claim(client, claim)
        cwd = self._start_directory(params.get("cwd"), claim, client)
        mine = sum(1 for t in self.terminals.values() if t.creator == client.client_id)
        if mine >= MAX_TERMINALS_PER_CLIENT:
            raise ProtocolError(
                INVALID_PARAMS,
                f"client {client.client_id} already has {mine} terminals open, the most one "
                f"client may ({MAX_TERMINALS_PER_CLIENT}); dispose of one first",
            )
        await self.open(uri, claim, cwd, params, creator=client.client_id)
        log.info("client %s opened terminal %s in %s", client.label, uri, cwd)

    async def open(
        self,
        uri: str,
        claim: dict[str, Any],
        cwd: str,
        params: dict[str, Any],
        command: str | None = None,
        *,
        creator: str | None = None,
    ) -> LiveTerminal:
        """Start a terminal under ``uri`` (the fence already checked)."""
        reason = self.port.unavailable()
        if reason is not None:
            raise ProtocolError(METHOD_NOT_FOUND, reason)
        if len(self.terminals) >= MAX_TERMINALS:
            raise ProtocolError(
                INVALID_PARAMS,
                f"this host already runs {len(self.terminals)} terminals, the most it "
                f"allows ({MAX_TERMINALS}); dispose of one first",
            )
        if uri in self.engine.channels or self.engine.canonical(uri) in self.engine.channels:
            raise ProtocolError(ALREADY_EXISTS, f"a channel named {uri} already exists")
        cols, rows = params.get("cols") or 80, params.get("rows") or 24
        if not (_cells(cols) and _cells(rows)):
            raise ProtocolError(
                INVALID_PARAMS, "cols and rows must be whole numbers from 1 to 10000"
            )
        cols, rows = int(cols), int(rows)
        shell = self.engine.root.state.get("config", {}).get("values", {}).get("defaultShell")
        spec = TerminalSpec(
            uri, cwd, cols, rows, command, shell if isinstance(shell, str) and shell else None
        )
        terminal = LiveTerminal(uri, creator=creator)
        terminal.feed = TerminalFeed(self, terminal)
        state: dict[str, Any] = {
            "title": params.get("name") or "",
            "cwd": file_uri(cwd),
            "cols": cols,
            "rows": rows,
            "content": [],
            "lifecycle": {"status": "running"},
            "claim": claim,
            "supportsCommandDetection": False,
            "isPty": True,
        }
        channel = self.engine.add_channel(uri, "terminal", state)
        self.terminals[uri] = terminal
        try:
            terminal.process = await self.port.open(spec, terminal.feed)
        except Exception as exc:
            self.terminals.pop(uri, None)
            self.engine.remove_channel(uri)
            log.info("terminal %s did not start: %s", uri, exc)
            raise ProtocolError(INTERNAL_ERROR, f"the terminal did not start: {exc}") from None
        if not channel.state["title"]:
            channel.state = {**channel.state, "title": terminal.process.name}
        self.publish_list()
        return terminal

    async def dispose_terminal(self, client: Client, params: dict[str, Any]) -> None:
        uri = self.engine.canonical(params["channel"])
        terminal = self.terminals.get(uri)
        if terminal is None:
            raise ProtocolError(NOT_FOUND, f"no terminal {params['channel']} on this host")
        if not self.holds(client, self.engine.channels[uri].state.get("claim")):
            raise ProtocolError(PERMISSION_DENIED, f"{uri} is claimed by somebody else")
        await self.dispose(uri)

    async def dispose(self, uri: str) -> None:
        """Kill every process of the terminal and forget it."""
        terminal = self.terminals.pop(uri, None)
        if terminal is None:
            return
        self.engine.remove_channel(uri)
        self.publish_list()
        if terminal.process is not None:
            try:
                await terminal.process.kill()
            except Exception:
                log.exception("terminal %s: killing its processes failed", uri)
        log.info("terminal %s disposed", uri)

    # -- client actions --------------------------------------------------------------
    async def client_action(self, dispatch: Dispatch) -> dict[str, Any]:
        terminal = self.terminals.get(dispatch.channel.uri)
        if terminal is None:
            raise Refused(f"{dispatch.channel.uri} is not a terminal this host runs")
        action = dispatch.action
        action_type = action["type"]
        if not self.holds(dispatch.client, dispatch.channel.state.get("claim")):
            raise Refused(
                f"{action_type} needs the terminal's claim, which this client does not hold"
            )
        process = terminal.process
        exited = dispatch.channel.state.get("lifecycle", {}).get("status") == "exited"
        if action_type == "terminal/input":
            if exited or process is None:
                raise Refused("the terminal's process has exited")
            process.write(action["data"].encode("utf-8"))
        elif action_type == "terminal/resized":
            cols, rows = action["cols"], action["rows"]
            if not (_cells(cols) and _cells(rows)):
                # The state would keep the odd value while the pty took another.
                raise Refused("cols and rows must be whole numbers from 1 to 10000")
            cols, rows = int(cols), int(rows)
            if process is not None and not exited:
                process.resize(cols, rows)
        elif action_type == "terminal/claimed":
            try:
                self._check_claim(None, action["claim"])
            except ProtocolError as error:
                raise Refused(error.message) from None
            dispatch.after.append(self.publish_list)
        elif action_type == "terminal/titleChanged":
            dispatch.after.append(self.publish_list)
        elif action_type == "terminal/cleared":
            terminal.feed.flush()
            terminal.feed.held = 0
        return action
