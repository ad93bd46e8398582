"""What the core does for the automations port: the catalogue, the runs and their sessions.

The port keeps definitions and runs and fires schedules; this module serves
the protocol around it:

* ``ahp-automations://`` (and ``ahp-automations://catalog``, an older
  spelling some clients still use) holds ``AutomationState``. Create and update
  requests are checked by the port and answered with ``automation/set`` saying
  what the host now holds; ``automation/removed`` honours ``operations``.
* ``runAutomation`` (idempotent by ``requestId``), a schedule the port fires
  and an event a trigger selects each make a run, on disk before anything
  else happens. The run creates a fresh session from the definition's template
  through the session machinery, with ``SessionState.origin`` naming the
  automation and the run, and starts a turn with the definition's message.
  ``automationRun/*`` follow it: ``pending``, ``running``, then ``completed``
  when the turn completes, ``failed`` when the session cannot be made or the
  turn errors, ``cancelled`` on ``automationRun/cancelRequested``.
* ``listAutomationTriggerDefinitions`` answers what ``ahp_automation_triggers``
  offers; the core offers one trigger of its own, a session in the
  automation's folder finishing a turn.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from ahpcore import reducers
from ahpcore.engine.channels import Channel
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Dispatch, Engine, Refused
from ahpcore.engine.router import Router
from ahpcore.markers import hookimpl
from ahpcore.notes import note
from ahpcore.ports import AutomationContext, AutomationsPort, UsersPort
from ahpcore.protocol import uris
from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    PERMISSION_DENIED,
    SESSION_NOT_FOUND,
    ProtocolError,
)
from ahpcore.sessions import state as states
from ahpcore.sessions.manager import SessionManager
from ahpcore.tasks import Tasks

log = logging.getLogger(__name__)

CATALOGUE = "ahp-automations://"
#: The catalogue under the authority some clients gave it for a while.
CATALOGUE_ALIAS = "ahp-automations://catalog"
RUN_SCHEME = "ahp-automation-run:"
#: The core's own event trigger: a session working in the automation's folder finished a turn.
SESSION_TRIGGER = "ahp.sessions"
TURN_FINISHED = "turnFinished"
SESSION_TRIGGER_DEFINITION: dict[str, Any] = {
    "type": SESSION_TRIGGER,
    "title": "Sessions in this folder",
    "description": "Sessions working in the automation's first working directory. Sessions "
    "that automations made do not count.",
    "events": [
        {
            "id": TURN_FINISHED,
            "title": "A session finished a turn",
            "description": "A turn of a session in this folder completed.",
        }
    ],
}
ACTIVE = ("pending", "running")
#: Whose an automation, its runs and its runs' sessions are (ahp-users' key).
OWNER_KEY = "ahp.owner"
#: Ask the plugins for trigger definitions: query -> every answer, listed.
TriggerSource = Callable[[dict[str, Any]], Awaitable[list[dict[str, Any]]]]
#: Looks for a trigger type's events in folders (``PluginHost.look_in_automation_folders``).
FolderLook = Callable[[list[str]], Awaitable[None]]
#: How often each plugin's look goes over the folders of automations with its trigger.
LOOK_SECONDS = 2.0


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"errorType": kind, "message": message}


@dataclass
class _Run:
    """A run this host is carrying out."""

    uri: str
    automation: str
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    #: Set while its session is being made (a cancel then waits for the session).
    creating: bool = False
    cancelled: bool = False
    chat: str | None = None
    turn: str | None = None


class AutomationService:
    def __init__(
        self,
        engine: Engine,
        router: Router,
        tasks: Tasks,
        port: AutomationsPort,
        sessions: SessionManager | None,
        triggers: TriggerSource,
        people: UsersPort | None = None,
        looks: Mapping[str, FolderLook] | None = None,
    ) -> None:
        self.engine = engine
        #: Event trigger type -> the plugin's look for its events in automations' folders.
        self._looks = looks if looks is not None else {}
        #: ahp-users' port when installed: automations then have owners.
        self.people = people
        self.tasks = tasks
        self.port = port
        self.sessions = sessions
        self._triggers = triggers
        self._runs: dict[str, _Run] = {}
        #: Chat URI -> the run whose turn runs in it.
        self._following: dict[str, str] = {}
        router.add("listAutomationTriggerDefinitions", self.list_triggers)
        router.add("runAutomation", self.run_automation)
        router.add("fetchAutomationRuns", self.fetch_runs)
        engine.on_action("automation/createRequested", self.create_requested)
        engine.on_action("automation/updateRequested", self.update_requested)
        engine.on_action("automation/removed", self.removed)
        engine.on_action("automationRun/cancelRequested", self.cancel_requested)
        engine.add_resolver(self._resolve)
        engine.add_opener(self._open_run)
        engine.on_change(
            self._chat_changed, types=("chat/turnComplete", "chat/error", "chat/turnCancelled")
        )

    def capabilities(self) -> dict[str, Any]:
        """``AutomationCapabilities``: what the core does, and what the port says of itself."""
        return {"create": {}, "runCancellation": {}, **dict(self.port.capabilities())}

    async def start(self) -> None:
        """Open the port and the catalogue (before any client connects)."""
        entries = await self.port.start(self)
        catalogue = self.engine.add_channel(
            CATALOGUE, "automation", {"entries": [dict(e) for e in entries]}
        )
        if self.people is not None:
            # One catalogue, read by people of different rights: each sees the operations
            # they may perform, not the owner's.
            catalogue.view = self._view

    def running(self) -> None:
        """The host runs: schedules fire from now on, with or without clients."""
        self.tasks.spawn(self.port.schedule, name="the automations' schedules")
        self.tasks.spawn(self._look, name="looking for events in automations' folders")

    def event_folders(self, kind: str) -> list[str]:
        """The first local folder of every enabled automation with an event trigger of
        type ``kind``, each once."""
        found: list[str] = []
        for entry in self._entries():
            definition = entry.get("definition") or {}
            if not definition.get("enabled") or not any(
                t.get("kind") == "event" and t.get("type") == kind
                for t in definition.get("triggers") or ()
            ):
                continue
            template = definition.get("session") or {}
            folder = uris.first_local_path(list(template.get("workingDirectories") or ()))
            if folder is not None and folder not in found:
                found.append(folder)
        return found

    async def _look(self) -> None:
        """Every few seconds, each plugin's look over the folders its trigger is set on.

        Polling a handful of folders, rather than a watcher per folder: the look
        decides how cheap it is (ahp-git compares a few file stamps), and a folder
        costs nothing while no automation names it.
        """
        while True:
            await anyio.sleep(LOOK_SECONDS)
            for kind, look in list(self._looks.items()):
                folders = self.event_folders(kind)
                if not folders:
                    continue
                try:
                    await look(folders)
                except Exception:
                    log.exception(
                        "looking for %s events in %d folder(s) failed", kind, len(folders)
                    )

    # -- channels ------------------------------------------------------------------------
    @staticmethod
    def _resolve(uri: str) -> str | None:
        return CATALOGUE if uri == CATALOGUE_ALIAS else None

    async def _open_run(self, uri: str) -> Channel | None:
        if not uri.startswith(RUN_SCHEME):
            return None
        state = await self.port.run(uri)
        if state is None:
            return None
        return self.engine.channels.get(uri) or self.engine.add_channel(
            uri, "automationRun", dict(state)
        )

    def _entries(self) -> list[dict[str, Any]]:
        return list(self.engine.channels[CATALOGUE].state.get("entries") or [])

    def _entry(self, resource: str) -> dict[str, Any] | None:
        return next((e for e in self._entries() if e.get("resource") == resource), None)

    def _publish(self, entry: Mapping[str, Any]) -> None:
        self.engine.apply(CATALOGUE, {"type": "automation/set", "automation": dict(entry)})

    # -- AutomationEvents: what the port says of its own accord ----------------------------
    async def run_admitted(self, run: Mapping[str, Any]) -> None:
        await self._begin(dict(run))

    def entry_changed(self, entry: Mapping[str, Any]) -> None:
        self._publish(entry)

    # -- the catalogue -------------------------------------------------------------------
    def _owner(self, client: Client | None) -> str | None:
        # With ahp-users, the connection's identity (user:<name>, or root:<host> for the
        # deployment token); without it nobody owns anything.
        if self.people is None or client is None:
            return None
        return client.identity

    def _refusal(self, client: Client, entry: Mapping[str, Any], operation: str) -> str | None:
        if operation not in (entry.get("operations") or ()):
            return f"{operation} is not among the operations of {entry['resource']}"
        owner = (entry.get("_meta") or {}).get(OWNER_KEY)
        if self.people is None or owner is None or client.identity == owner:
            return None
        identity = client.identity or ""
        if identity.startswith("root:"):
            return None  # the deployment token: the host itself, every right
        person = (
            self.people.named(identity[len("user:") :]) if identity.startswith("user:") else None
        )
        if person is not None and person.role == "admin":
            return None
        return f"{identity or 'this connection'} may not {operation} {entry['resource']}: it is {owner}'s"

    def _may(self, client: Client, entry: Mapping[str, Any], operation: str) -> bool:
        identity = client.identity or ""
        if self.people is not None and identity.startswith("user:"):
            person = self.people.named(identity[len("user:") :])
            if person is None or person.role == "viewer":
                return False  # a viewer changes nothing, their own automations included
        return self._refusal(client, entry, operation) is None

    def _narrowed(self, client: Client, entry: Any) -> Any:
        if not isinstance(entry, Mapping):
            return entry
        offered = list(entry.get("operations") or ())
        mine = [op for op in offered if self._may(client, entry, op)]
        return entry if mine == offered else {**entry, "operations": mine}

    def _view(self, client: Client, value: Any) -> Any:
        """The catalogue (a state or an envelope) with the operations ``client`` may do."""
        if not isinstance(value, Mapping):
            return value
        action = value.get("action")
        if isinstance(action, Mapping):
            if action.get("type") != "automation/set":
                return value
            entry = self._narrowed(client, action.get("automation"))
            return {**value, "action": {**action, "automation": entry}}
        entries = value.get("entries")
        if not isinstance(entries, list):
            return value
        return {**value, "entries": [self._narrowed(client, e) for e in entries]}

    def _allowed(self, client: Client, entry: Mapping[str, Any], operation: str) -> None:
        reason = self._refusal(client, entry, operation)
        if reason is not None:
            raise Refused(reason)

    async def _context(self, client: Client | None, template: Any) -> AutomationContext:
        query: dict[str, Any] = {}
        if isinstance(template, Mapping):
            for key, name in (
                ("provider", "provider"),
                ("workingDirectories", "workingDirectories"),
            ):
                if key in template:
                    query[name] = template[key]
            if "config" in template:
                query["sessionConfig"] = template["config"]
        providers = tuple(self.sessions.backends) if self.sessions is not None else ()
        triggers = tuple(await self._triggers(query))
        return AutomationContext(providers, triggers, self._owner(client))

    @note(
        "automation/createRequested",
        text="Checked by the port (provider, trigger ids, the five-field cron grammar, time "
        "zones, disable conditions) and answered with automation/set holding what was kept; "
        "a refusal names the field and keeps nothing.",
    )
    async def create_requested(self, dispatch: Dispatch) -> dict[str, Any]:
        action = dispatch.action
        definition = action["definition"]
        context = await self._context(dispatch.client, definition.get("session"))
        try:
            entry = await self.port.create(action["resource"], definition, context)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        self._publish(entry)
        return action

    @note("automation/updateRequested", text="A patch: fields it does not name are left alone.")
    async def update_requested(self, dispatch: Dispatch) -> dict[str, Any]:
        action = dispatch.action
        entry = self._entry(action["resource"])
        if entry is None:
            raise Refused(f"no automation {action['resource']} on this host")
        self._allowed(dispatch.client, entry, "update")
        changes = action["changes"]
        template = changes.get("session", entry["definition"].get("session"))
        context = await self._context(dispatch.client, template)
        try:
            updated = await self.port.update(action["resource"], changes, context)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        except KeyError:
            raise Refused(f"no automation {action['resource']} on this host") from None
        self._publish(updated)
        return action

    async def removed(self, dispatch: Dispatch) -> dict[str, Any]:
        action = dispatch.action
        entry = self._entry(action["resource"])
        if entry is None:
            return action  # removing what is not there changes nothing
        self._allowed(dispatch.client, entry, "remove")
        await self.port.remove(action["resource"])
        return action

    async def list_triggers(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        query: dict[str, Any] = {
            key: params[key]
            for key in ("provider", "workingDirectories", "sessionConfig")
            if key in params
        }
        return {"items": await self._triggers(query)}

    @hookimpl
    def ahp_automation_triggers(self, query: dict[str, Any]) -> list[dict[str, Any]] | None:
        return [SESSION_TRIGGER_DEFINITION] if self.sessions is not None else None

    @note(
        "fetchAutomationRuns",
        text="Answers {}; the entry grows by one page of older runs, told to every "
        "subscriber as automation/set.",
    )
    async def fetch_runs(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        try:
            entry = await self.port.more_runs(params["automation"], params.get("cursor"))
        except KeyError:
            raise ProtocolError(
                SESSION_NOT_FOUND, f"no automation {params['automation']} on this host"
            ) from None
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"params.{exc}") from None
        self._publish(entry)
        return {}

    # -- runs ------------------------------------------------------------------------------
    @note(
        "runAutomation",
        text="The run is on disk before its session is made; the same requestId answers the "
        "same run. A switched-off automation still runs by hand.",
    )
    async def run_automation(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        automation = params["automation"]
        entry = self._entry(automation)
        if entry is None:
            raise ProtocolError(SESSION_NOT_FOUND, f"no automation {automation} on this host")
        if "run" not in (entry.get("operations") or ()):
            raise ProtocolError(INVALID_PARAMS, f"run is not among the operations of {automation}")
        reason = self._refusal(client, entry, "run")
        if reason is not None:
            raise ProtocolError(PERMISSION_DENIED, reason)
        try:
            run, made = await self.port.admit(automation, {"kind": "manual"}, params["requestId"])
        except KeyError:
            raise ProtocolError(
                SESSION_NOT_FOUND, f"no automation {automation} on this host"
            ) from None
        if made:
            await self._begin(dict(run))
        return {"resource": run["resource"]}

    async def _begin(self, run: dict[str, Any]) -> None:
        """A run the port holds as pending: its channel, its row on the entry, then its work."""
        uri = run["resource"]
        if uri not in self.engine.channels:
            self.engine.add_channel(uri, "automationRun", run)
        self._runs[uri] = _Run(uri, run["automation"])
        entry = await self.port.entry(run["automation"])
        if entry is not None:
            self._publish(entry)
        self.tasks.spawn(self._carry_out, uri, name=f"automation run {uri}")

    async def _change(self, uri: str, actions: list[dict[str, Any]]) -> None:
        """Apply run actions: kept by the port first, then told to everyone."""
        live = self._runs.get(uri)
        lock = live.lock if live is not None else anyio.Lock()
        async with lock:
            channel = self.engine.channels.get(uri)
            if channel is None:
                return
            state = channel.state
            for action in actions:
                state = reducers.reduce("automationRun", state, action)
            try:
                entry: Mapping[str, Any] | None = await self.port.record(state)
            except KeyError:
                entry = None  # the automation was removed while its run went on
            for action in actions:
                self.engine.apply(uri, action)
            if entry is not None:
                self._publish(entry)

    async def _end(self, uri: str, status: str, error: Mapping[str, Any] | None = None) -> None:
        channel = self.engine.channels.get(uri)
        if channel is None:
            return
        lifecycle = channel.state.get("lifecycle") or {}
        if lifecycle.get("status") not in ACTIVE:
            return  # ended already (a cancel crossing a completion)
        ended: dict[str, Any] = {
            "status": status,
            "createdAt": lifecycle.get("createdAt", now_iso()),
            "completedAt": now_iso(),
        }
        if lifecycle.get("startedAt"):
            ended["startedAt"] = lifecycle["startedAt"]
        elif status == "completed":
            ended["startedAt"] = ended["completedAt"]
        if status == "failed":
            ended["error"] = dict(error or _error("Failed", "the run failed"))
        await self._change(uri, [{"type": "automationRun/lifecycleChanged", "lifecycle": ended}])
        live = self._runs.pop(uri, None)
        if live is not None and live.chat is not None:
            self._following.pop(live.chat, None)
        log.info("automation run %s %s", uri, status)

    def _provider(self, template: Mapping[str, Any]) -> str:
        assert self.sessions is not None
        provider = template.get("provider")
        if isinstance(provider, str):
            return provider
        if len(self.sessions.backends) == 1:
            return next(iter(self.sessions.backends))
        raise ProtocolError(
            INVALID_PARAMS, "the template names no provider and this host has several"
        )

    async def _carry_out(self, uri: str) -> None:
        live = self._runs.get(uri)
        if live is None or live.cancelled:
            return
        entry = self._entry(live.automation)
        if entry is None:
            await self._end(
                uri, "failed", _error("AutomationRemoved", "the automation was removed")
            )
            return
        if self.sessions is None:
            await self._end(uri, "failed", _error("NoBackend", "no agent backend on this host"))
            return
        definition = entry["definition"]
        template = definition.get("session") or {}
        live.creating = True
        session_uri: str | None = None
        try:
            provider = self._provider(template)
            session_uri = uris.session_uri(provider, str(uuid.uuid4()))
            params: dict[str, Any] = {"channel": session_uri, "provider": provider}
            if template.get("workingDirectories"):
                params["workingDirectories"] = list(template["workingDirectories"])
            if template.get("config"):
                params["config"] = dict(template["config"])
            origin = {"kind": "automation", "automation": live.automation, "run": uri}
            await self.sessions.create_unattended(params, origin=origin)
            self._own(session_uri, entry)
        except Exception as exc:
            message = exc.message if isinstance(exc, ProtocolError) else str(exc) or repr(exc)
            log.warning("automation run %s could not make its session: %s", uri, message)
            error = _error("SessionCreationFailed", message)
            if session_uri is not None:
                await self._creation_failed(uri, session_uri, entry, error)
            await self._end(uri, "failed", error)
            return
        finally:
            live.creating = False
        linked = [
            {"type": "automationRun/sessionSet", "session": session_uri},
            {"type": "automationRun/primarySessionChanged", "primarySession": session_uri},
        ]
        if live.cancelled:
            await self._change(uri, linked)
            await self._end(uri, "cancelled")
            return
        lifecycle = self.engine.channels[uri].state["lifecycle"]
        running = {"status": "running", "createdAt": lifecycle["createdAt"], "startedAt": now_iso()}
        await self._change(
            uri, [*linked, {"type": "automationRun/lifecycleChanged", "lifecycle": running}]
        )
        self._start_turn(live, session_uri, definition, template)

    async def _creation_failed(
        self, run: str, session_uri: str, entry: Mapping[str, Any], error: dict[str, Any]
    ) -> None:
        """The run's session could not be made: it is kept as a failed session, linked.

        The session machinery drops a session a client asked for and could not make
        (the client hears why in the answer); nobody asked for this one, so it is kept
        with ``session/creationFailed`` (listed, readable after a restart, disposable)
        and linked from the run, so whoever opens the run sees what happened.
        """
        assert self.sessions is not None
        if session_uri not in self.engine.channels:
            definition = entry.get("definition") or {}
            template = definition.get("session") or {}
            state: dict[str, Any] = {
                "provider": session_uri.partition(":")[0],
                "title": str(definition.get("title") or ""),
                "status": states.flags(states.STATUS_IDLE, is_read=True, is_archived=False),
                "lifecycle": "creating",
                "activeClients": [],
                "chats": [],
                "origin": {"kind": "automation", "automation": entry["resource"], "run": run},
            }
            if template.get("workingDirectories"):
                state["workingDirectories"] = list(template["workingDirectories"])
            owner = (entry.get("_meta") or {}).get(OWNER_KEY)
            if owner is not None:
                state["_meta"] = {OWNER_KEY: owner}
            await self.sessions.keep_failed(session_uri, state, error)
        await self._change(
            run,
            [
                {"type": "automationRun/sessionSet", "session": session_uri},
                {"type": "automationRun/primarySessionChanged", "primarySession": session_uri},
            ],
        )

    def _own(self, session_uri: str, entry: Mapping[str, Any]) -> None:
        """The run's session is the automation owner's, so they may open it."""
        owner = (entry.get("_meta") or {}).get(OWNER_KEY)
        channel = self.engine.channels.get(session_uri)
        if owner is None or channel is None or self.sessions is None:
            return
        meta = {**(channel.state.get("_meta") or {}), OWNER_KEY: owner}
        self.sessions.registry.apply(session_uri, {"type": "session/metaChanged", "_meta": meta})

    def _start_turn(
        self,
        live: _Run,
        session_uri: str,
        definition: Mapping[str, Any],
        template: Mapping[str, Any],
    ) -> None:
        assert self.sessions is not None
        session = self.sessions.session_by_uri(session_uri)
        if session is None:
            self.tasks.spawn(
                self._end, live.uri, "failed", _error("SessionGone", "the session went")
            )
            return
        chat = session.chats[session.state["defaultChat"]]
        message = {**dict(definition["message"]), "origin": {"kind": "automation"}}
        for key in ("model", "agent"):
            if key in template and key not in message:
                message[key] = template[key]
        turn_id = str(uuid.uuid4())
        live.chat, live.turn = chat.uri, turn_id
        self._following[chat.uri] = live.uri
        self.sessions.registry.apply(
            chat.uri,
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": now_iso(),
                "message": message,
            },
        )
        chat.runner.submit(turn_id, message)

    def _chat_changed(
        self, channel: Channel, action: dict[str, Any], before: dict[str, Any]
    ) -> None:
        kind = action.get("type")
        uri = self._following.get(channel.uri)
        live = self._runs.get(uri) if uri is not None else None
        if uri is not None and live is not None and action.get("turnId") == live.turn:
            if kind == "chat/turnComplete":
                self.tasks.spawn(self._end, uri, "completed", name=f"ending {uri}")
            elif kind == "chat/turnCancelled":
                self.tasks.spawn(self._end, uri, "cancelled", name=f"ending {uri}")
            else:
                error = ((action.get("part") or {}).get("error")) or {}
                self.tasks.spawn(
                    self._end,
                    uri,
                    "failed",
                    {
                        "errorType": str(error.get("errorType") or "TurnFailed"),
                        "message": str(error.get("message") or "the turn failed"),
                    },
                    name=f"ending {uri}",
                )
        if kind == "chat/turnComplete":
            self._turn_finished(channel.uri)

    @note(
        "automationRun/cancelRequested",
        text="Cancels the run's turn; a run still making its session is cancelled once it is "
        "made. Refused for a run that has ended.",
    )
    async def cancel_requested(self, dispatch: Dispatch) -> dict[str, Any]:
        uri = dispatch.channel.uri
        status = (dispatch.channel.state.get("lifecycle") or {}).get("status")
        if status not in ACTIVE:
            raise Refused(f"the run is {status}: only a pending or running run can be cancelled")
        live = self._runs.get(uri)
        if live is None:
            self.tasks.spawn(self._end, uri, "cancelled", name=f"cancelling {uri}")
            return dispatch.action
        live.cancelled = True
        if live.chat is not None and live.turn is not None and self.sessions is not None:
            chat = self.sessions.chat_by_uri(live.chat)
            duration = chat.runner.cancel(live.turn) if chat is not None else None
            if chat is not None and duration is not None:
                # As a client's chat/turnCancelled does; the run follows the turn.
                self.sessions.registry.apply(
                    chat.uri,
                    {"type": "chat/turnCancelled", "turnId": live.turn, "duration": duration},
                )
            else:
                self.tasks.spawn(self._end, uri, "cancelled", name=f"cancelling {uri}")
        elif not live.creating:
            self.tasks.spawn(self._end, uri, "cancelled", name=f"cancelling {uri}")
        return dispatch.action

    @hookimpl
    async def ahp_session_disposing(self, session: str) -> None:
        """A run's session is going: the run stops pointing at a channel nobody can open."""
        channel = self.engine.channels.get(session)
        origin = (channel.state.get("origin") or {}) if channel is not None else {}
        run = origin.get("run") if origin.get("kind") == "automation" else None
        if not isinstance(run, str) or await self.engine.open_channel(run) is None:
            return
        await self._change(run, [{"type": "automationRun/sessionRemoved", "session": session}])

    # -- event triggers ----------------------------------------------------------------------
    def _turn_finished(self, chat_uri: str) -> None:
        if self.sessions is None:
            return
        chat = self.sessions.chat_by_uri(chat_uri)
        if chat is None or chat.parent is not None:
            return
        session = chat.session
        if (session.state.get("origin") or {}).get("kind") == "automation":
            return  # an automation's own session: counting it would run one after another
        folder = uris.first_local_path(list(session.working_directories))
        if folder is not None:
            self.fire(SESSION_TRIGGER, TURN_FINISHED, folder, {"session": session.uri})

    def fire(self, kind: str, event: str, folder: str | None, details: dict[str, Any]) -> None:
        """An event of trigger type ``kind`` happened: a run for each automation selecting it."""
        for entry in self._entries():
            definition = entry.get("definition") or {}
            if not definition.get("enabled"):
                continue
            if folder is not None and not _same_folder(definition, folder):
                continue
            for trigger in definition.get("triggers") or ():
                if trigger.get("kind") != "event" or trigger.get("type") != kind:
                    continue
                if not any(e.get("id") == event for e in trigger.get("events") or ()):
                    continue
                origin = {
                    "kind": "trigger",
                    "triggerId": trigger["id"],
                    "event": {"type": kind, "id": event, **details},
                }
                self.tasks.spawn(
                    self._triggered, entry["resource"], origin, name="an automation's event"
                )

    async def _triggered(self, automation: str, origin: dict[str, Any]) -> None:
        try:
            run, _ = await self.port.admit(automation, origin)
        except KeyError:
            return  # removed meanwhile
        await self._begin(dict(run))


def _same_folder(definition: Mapping[str, Any], folder: str) -> bool:
    template = definition.get("session") or {}
    mine = uris.first_local_path(template.get("workingDirectories") or [])
    if mine is None:
        return False
    try:
        return Path(mine).resolve() == Path(folder).resolve()
    except OSError:
        return mine == folder
