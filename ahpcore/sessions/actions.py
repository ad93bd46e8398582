"""The client actions that need more than a reducer: starting and cancelling turns,
answering questions, client tool results, titles, bits the store keeps.

Each handler runs before the engine applies the action: it may refuse it,
rewrite it, or queue work that follows it (``dispatch.after``).
"""

from __future__ import annotations

import logging
from typing import Any

from ahpcore.awaitables import resolve
from ahpcore.engine.core import Dispatch, Refused
from ahpcore.ports.backend import AgentRefused, Approval, InputAnswer
from ahpcore.protocol.errors import ProtocolError
from ahpcore.sessions import calls
from ahpcore.sessions.folders import check_folder
from ahpcore.sessions.live import LiveChat, LiveSession
from ahpcore.sessions.registry import SessionRegistry

log = logging.getLogger(__name__)

#: Action types whose handler also takes them on a chat's channel.
ON_CHATS_TOO = frozenset({"session/titleChanged"})
#: Folder actions that give a session a folder -> the field naming it.
FOLDER_ADDED_BY = {
    "session/workingDirectorySet": "directory",
    "session/workingDirectoryReplaced": "replacement",
}


class ClientActions:
    def __init__(self, registry: SessionRegistry) -> None:
        self.registry = registry

    def handlers(self) -> dict[str, Any]:
        """Action type -> handler, for the engine."""
        return {
            "chat/turnStarted": self.turn_started,
            "chat/turnCancelled": self.turn_cancelled,
            "chat/toolCallConfirmed": self.tool_confirmed,
            "chat/toolCallComplete": self.client_tool_complete,
            "chat/toolCallResultConfirmed": self.result_confirmed,
            "chat/inputCompleted": self.input_completed,
            "chat/pendingMessageSet": self.pending_set,
            "chat/truncated": self.truncated,
            "chat/turnResume": self.turn_resume,
            "chat/isArchivedChanged": self.chat_archived,
            "session/titleChanged": self.title_changed,
            "session/activeClientSet": self.active_client_set,
            "session/workingDirectorySet": self.session_directories,
            "session/workingDirectoryRemoved": self.session_directories,
            "session/workingDirectoryReplaced": self.session_directories,
            "chat/workingDirectorySet": self.chat_directories,
            "chat/workingDirectoryRemoved": self.chat_directories,
            "session/configChanged": self.config_changed,
            "session/customizationToggled": self.customization_toggled,
            "session/mcpServerStartRequested": self.mcp_requested,
            "session/mcpServerStopRequested": self.mcp_requested,
            "chat/toolCallContentChanged": self.tool_content_changed,
            "chat/draftChanged": self.remember,
            "chat/isReadChanged": self.remember,
            "session/isReadChanged": self.remember,
            "session/isArchivedChanged": self.remember,
        }

    def chat_of(self, dispatch: Dispatch) -> LiveChat:
        chat = self.registry.chat_by_uri(dispatch.channel.uri)
        if chat is None:
            raise Refused(f"{dispatch.channel.uri} is not a chat this host runs")
        return chat

    def session_of(self, dispatch: Dispatch) -> LiveSession:
        session = self.registry.session_by_uri(dispatch.channel.uri)
        if session is None:
            raise Refused(f"{dispatch.channel.uri} is not a session this host runs")
        return session

    async def turn_started(self, dispatch: Dispatch) -> dict[str, Any]:
        chat = self.chat_of(dispatch)
        active = chat.state.get("activeTurn")
        if active is not None and not _agent_began(active):
            raise Refused("a turn is already running in this chat: queue the message instead")
        if chat.state.get("interactivity") in ("read-only", "hidden"):
            raise Refused(f"{chat.uri} is read-only")
        if chat.parent is not None:
            raise Refused(f"{chat.uri} is a subagent's chat: its turns are the agent's")
        if active is not None:
            # The agent began a turn of its own just as a person sent this one, a race the
            # person cannot see: their message waits its turn rather than being lost.
            dispatch.after.append(chat.runner.take_next)
            return {
                "type": "chat/pendingMessageSet",
                "kind": "queued",
                "id": dispatch.action["turnId"],
                "message": dispatch.action["message"],
            }
        action = dispatch.action
        # Runs once the reducer made the turn active; it waits for a turn still winding down.
        dispatch.after.append(lambda: chat.runner.submit(action["turnId"], action["message"]))
        return action

    async def turn_cancelled(self, dispatch: Dispatch) -> dict[str, Any]:
        chat = self.chat_of(dispatch)
        action = dispatch.action
        active = chat.state.get("activeTurn")
        if active is None or active.get("id") != action["turnId"]:
            return action  # stops nothing, so changes nothing: answered to its sender alone
        duration = chat.runner.cancel(action["turnId"])
        if duration is None:
            return action
        return {**action, "duration": duration}

    def ask(self, dispatch: Dispatch, ask_id: str, kind: str) -> Any:
        session = self.chat_of(dispatch).session
        ask = session.asks.get(ask_id)
        return ask if ask is not None and ask.kind == kind else None

    async def tool_confirmed(self, dispatch: Dispatch) -> dict[str, Any]:
        action = dispatch.action
        ask = self.ask(dispatch, action["toolCallId"], "toolConfirmation")
        if ask is not None:
            approved = action.get("approved") is True
            suggestion = action.get("userSuggestion")
            dispatch.after.append(
                lambda: ask.settle(
                    Approval(
                        approved=approved,
                        edited_input=action.get("editedToolInput"),
                        reason=action.get("reason"),
                        suggestion=suggestion.get("text") if isinstance(suggestion, dict) else None,
                        selected_option_id=action.get("selectedOptionId"),
                    )
                )
            )
        return action

    async def client_tool_complete(self, dispatch: Dispatch) -> dict[str, Any]:
        action = dispatch.action
        ask = self.ask(dispatch, action["toolCallId"], "toolClientExecution")
        if ask is None:
            raise Refused(f"no client tool call {action['toolCallId']} is waiting for a result")
        if ask.client_id != dispatch.client.client_id:
            raise Refused(
                f"only client {ask.client_id}, which runs tool call {action['toolCallId']}, may complete it"
            )
        dispatch.after.append(lambda: ask.settle(dict(action["result"])))
        return action

    async def result_confirmed(self, dispatch: Dispatch) -> None:
        raise Refused(
            "this host never completes a tool call with requiresResultConfirmation, "
            "so there is no result to confirm"
        )

    async def input_completed(self, dispatch: Dispatch) -> dict[str, Any]:
        action = dispatch.action
        ask = self.ask(dispatch, action["requestId"], "chatInput")
        if ask is not None:
            synced = {}
            for entry in self.chat_of(dispatch).session.state.get("inputNeeded", []):
                if entry.get("id") == action["requestId"]:
                    synced = entry.get("request", {}).get("answers", {})
            answers = action.get("answers") or synced
            dispatch.after.append(lambda: ask.settle(InputAnswer(action["response"], answers)))
        return action

    async def pending_set(self, dispatch: Dispatch) -> dict[str, Any]:
        chat = self.chat_of(dispatch)
        action = dispatch.action
        runner = chat.runner
        if (
            action["kind"] == "steering"
            and runner.turn_id is not None
            and chat.session.backend.abilities.steering
            and callable(getattr(runner.agent, "steer", None))
        ):
            dispatch.after.append(lambda: self.registry.spawn(self._steer, chat, action))
        else:
            dispatch.after.append(runner.take_next)
        return action

    async def _steer(self, chat: LiveChat, action: dict[str, Any]) -> None:
        """Hand a steering message to the running turn; taken, it leaves the pending slot."""
        if await chat.runner.steer(action["message"]):
            self.registry.apply(
                chat.uri,
                {"type": "chat/pendingMessageRemoved", "kind": "steering", "id": action["id"]},
            )
        else:
            chat.runner.take_next()

    async def truncated(self, dispatch: Dispatch) -> dict[str, Any]:
        chat = self.chat_of(dispatch)
        backend = chat.session.backend
        if not backend.abilities.truncate:
            raise Refused(f"the {backend.provider} backend cannot truncate a conversation")
        if chat.state.get("activeTurn") is not None or chat.runner.running:
            raise Refused("a turn is running: cancel it before truncating")
        turn_id = dispatch.action.get("turnId")
        known = [turn.get("id") for turn in chat.older_turns + chat.state.get("turns", [])]
        if turn_id is not None and turn_id not in known:
            raise Refused(f"{chat.uri} has no turn {turn_id!r}")
        truncate = getattr(chat.runner.agent, "truncate", None)
        reference = chat.references.get(turn_id) if turn_id is not None else None
        try:
            if backend.abilities.agent_truncate and callable(truncate):
                # Through the live agent: it stops and starts again at the kept point.
                await resolve(truncate(turn_id, reference))
            else:
                await calls.call(backend.truncate, chat.backend_id, turn_id)
        except AgentRefused as refusal:
            raise Refused(str(refusal)) from None
        kept = {t.get("id") for t in chat.older_turns + chat.state.get("turns", [])}
        chat.references = {
            t: r for t, r in chat.references.items() if turn_id is not None and t in kept
        }
        if turn_id is None:
            chat.older_turns = []
        elif turn_id in [turn.get("id") for turn in chat.older_turns]:
            keep = [turn.get("id") for turn in chat.older_turns].index(turn_id) + 1
            chat.older_turns = chat.older_turns[:keep]
        return dispatch.action

    async def turn_resume(self, dispatch: Dispatch) -> dict[str, Any]:
        chat = self.chat_of(dispatch)
        backend = chat.session.backend
        if not backend.abilities.turn_resume:
            raise Refused(f"the {backend.provider} backend cannot resume a turn")
        turns = chat.state.get("turns") or []
        last = turns[-1] if turns else None
        turn_id = dispatch.action["turnId"]
        if (
            chat.state.get("activeTurn") is None
            and last is not None
            and last.get("id") == turn_id
            and last.get("state") == "error"
        ):
            message = last["message"]
            # Runs once the reducer has made the turn active again.
            dispatch.after.append(lambda: chat.runner.submit(turn_id, message, resume=True))
        return dispatch.action

    async def chat_archived(self, dispatch: Dispatch) -> dict[str, Any] | None:
        chat = self.chat_of(dispatch)
        session = chat.session
        if session.state.get("defaultChat") == chat.uri:
            # Archiving the default chat is archiving the session.
            archived = dispatch.action["isArchived"]
            self.registry.apply(
                session.uri, {"type": "session/isArchivedChanged", "isArchived": archived}
            )
            self.registry.save_soon(session)
            return None
        dispatch.after.append(lambda: self.registry.save_soon(session))
        return dispatch.action

    async def title_changed(self, dispatch: Dispatch) -> dict[str, Any] | None:
        """Rename a session, or one chat when dispatched on the chat's channel."""
        title = dispatch.action.get("title", "")
        if dispatch.channel.kind == "chat":
            await self._rename_chat(dispatch, title)
            return None
        if not isinstance(title, str) or not title.strip():
            raise Refused("a session's title cannot be blank")
        session = self.session_of(dispatch)
        try:
            # On disk before it is echoed to anyone, its sender included.
            await self.registry.save(session, title=title.strip())
        except Exception as exc:
            raise Refused(f"the title was not saved: {exc}") from None
        default = session.chats.get(session.state.get("defaultChat", ""))
        if default is not None:
            await self._tell_backend(session, default, title.strip())
        # Concurrent titles may commit in one order and apply in another: the next
        # save writes whichever applied last.
        dispatch.after.append(lambda: self.registry.save_soon(session))
        return {**dispatch.action, "title": title.strip()}

    async def _rename_chat(self, dispatch: Dispatch, title: Any) -> None:
        chat = self.chat_of(dispatch)
        if not isinstance(title, str) or not title.strip():
            raise Refused("a chat's title cannot be blank")
        session = chat.session
        title = title.strip()
        await self._tell_backend(session, chat, title)
        self.registry.apply(
            session.uri,
            {"type": "session/chatUpdated", "chat": chat.uri, "changes": {"title": title}},
        )
        try:
            await self.registry.save(session)
        except Exception:
            log.exception("saving the new title of %s failed", chat.uri)
        # The sender is owed an answer on the channel it dispatched on.
        dispatch.engine.answer_sender(
            dispatch.client, dispatch.channel.uri, dispatch.action, dispatch.origin
        )

    @staticmethod
    async def _tell_backend(session: LiveSession, chat: LiveChat, title: str) -> None:
        rename = getattr(session.backend, "rename", None)
        if session.backend.abilities.rename and callable(rename):
            try:
                await calls.call(rename, chat.backend_id, title)
            except AgentRefused as refusal:
                raise Refused(str(refusal)) from None

    async def active_client_set(self, dispatch: Dispatch) -> dict[str, Any]:
        self.session_of(dispatch)
        active = dict(dispatch.action["activeClient"])
        # Announced under the id the client introduced itself with, not the payload's.
        active["clientId"] = dispatch.client.client_id or active.get("clientId", "")
        return {**dispatch.action, "activeClient": active}

    async def remember(self, dispatch: Dispatch) -> dict[str, Any]:
        uri = dispatch.channel.uri
        if dispatch.channel.kind == "chat":
            # A chat's URI names no session: found as a chat without a failed parse first.
            chat = self.registry.chat_by_uri(uri)
            owner = chat.session if chat else self.registry.session_by_uri(uri)
        else:
            owner = self.registry.session_by_uri(uri)
            if owner is None:
                chat = self.registry.chat_by_uri(uri)
                owner = chat.session if chat else None
        if owner is not None:
            session = owner
            # A draft changes with every keystroke and is never acknowledged as kept:
            # its save waits for the rest of the burst.
            draft = dispatch.action["type"] == "chat/draftChanged"
            within = self.registry.draft_save_delay if draft else 0.0
            dispatch.after.append(lambda: self.registry.save_soon(session, within=within))
        return dispatch.action

    async def session_directories(self, dispatch: Dispatch) -> dict[str, Any]:
        """A session's folders change; its agents start again, resumed, in the new set."""
        session = self.session_of(dispatch)
        action = dispatch.action
        # A folder a session takes widens what its clients reach: checked as at createSession.
        added = FOLDER_ADDED_BY.get(action["type"])
        if added is not None:
            try:
                check_folder(action.get(added), f"action.{added}")
            except ProtocolError as refusal:
                raise Refused(refusal.message) from None
        current = list(session.state.get("workingDirectories") or [])
        if action["type"] == "session/workingDirectoryRemoved" and current[:1] == [
            action["directory"]
        ]:
            raise Refused(
                "the first working directory is where the agent runs and cannot be removed; "
                "replace it with session/workingDirectoryReplaced"
            )
        if (
            action["type"] == "session/workingDirectoryReplaced"
            and action["directory"] not in current
        ):
            raise Refused(f"{action['directory']} is not one of the session's working directories")
        running = [chat.uri for chat in session.chats.values() if chat.runner.running]
        if running:
            raise Refused(f"a turn is running in {running[0]}: the folders change between turns")
        dispatch.after.append(lambda: self.registry.spawn(self._restart_agents, session))
        return action

    async def _restart_agents(self, session: LiveSession) -> None:
        session.working_directories = tuple(session.state.get("workingDirectories") or ())
        for chat in list(session.chats.values()):
            await chat.runner.stop()  # the next turn starts it again, resumed
        self.registry.save_soon(session)

    async def chat_directories(self, dispatch: Dispatch) -> dict[str, Any]:
        """A chat holds a subset of its session's folders, never more and never without its first."""
        chat = self.chat_of(dispatch)
        action = dispatch.action
        directory = action["directory"]
        allowed = list(chat.session.state.get("workingDirectories") or [])
        if action["type"] == "chat/workingDirectorySet" and directory not in allowed:
            raise Refused(f"{directory} is not one of the session's working directories")
        current = list(chat.state.get("workingDirectories") or [])
        if action["type"] == "chat/workingDirectoryRemoved" and current[:1] == [directory]:
            raise Refused("a chat's first working directory is where it runs and cannot be removed")
        if chat.runner.running:
            raise Refused("a turn is running in this chat: its folders change between turns")
        dispatch.after.append(lambda: self.registry.spawn(chat.runner.stop))
        return action

    async def config_changed(self, dispatch: Dispatch) -> dict[str, Any]:
        """Only keys the session's schema marks ``sessionMutable`` may change mid-session."""
        session = self.session_of(dispatch)
        properties = session.state.get("config", {}).get("schema", {}).get("properties", {})
        refused = sorted(
            key
            for key in dispatch.action.get("config", {})
            if not (properties.get(key) or {}).get("sessionMutable")
        )
        if refused:
            raise Refused(
                f"the {session.provider} backend does not take {', '.join(refused)} "
                "mid-session (not a sessionMutable key of its config)"
            )
        values = dict(dispatch.action.get("config", {}))
        if session.backend.abilities.configure:
            # The live agents take it first; one refusing refuses the change.
            for agent in self._agents(session, "configure"):
                await self._ask_agent(agent.configure(values))
        dispatch.after.append(lambda: self.registry.save_soon(session))
        return dispatch.action

    @staticmethod
    def _agents(session: LiveSession, method: str) -> list[Any]:
        found = []
        for chat in session.chats.values():
            agent = chat.runner.agent
            if agent is not None and callable(getattr(agent, method, None)):
                found.append(agent)
        return found

    @staticmethod
    async def _ask_agent(answer: Any) -> None:
        try:
            await resolve(answer)
        except AgentRefused as refusal:
            raise Refused(str(refusal)) from None

    async def customization_toggled(self, dispatch: Dispatch) -> dict[str, Any]:
        session = self.session_of(dispatch)
        action = dispatch.action
        if session.backend.abilities.toggle:
            enabled = _enabled(action.get("enablement"))
            for agent in self._agents(session, "toggle"):
                await self._ask_agent(agent.toggle(action["id"], enabled))
        return action

    async def mcp_requested(self, dispatch: Dispatch) -> dict[str, Any]:
        session = self.session_of(dispatch)
        action = dispatch.action
        if session.backend.abilities.mcp_control:
            method = "mcp_start" if action["type"].endswith("StartRequested") else "mcp_stop"
            for agent in self._agents(session, method):
                await self._ask_agent(getattr(agent, method)(action["id"]))
        return action

    async def tool_content_changed(self, dispatch: Dispatch) -> dict[str, Any]:
        """What a client's tool prints as it runs is that client's to say, and nobody else's."""
        chat = self.chat_of(dispatch)
        action = dispatch.action
        active = chat.state.get("activeTurn") or {}
        call = None
        if active.get("id") == action["turnId"]:
            for part in active.get("responseParts", []):
                tool = part.get("toolCall") if part.get("kind") == "toolCall" else None
                if tool is not None and tool.get("toolCallId") == action["toolCallId"]:
                    call = tool
        if call is None or call.get("status") != "running":
            raise Refused(f"no running tool call {action['toolCallId']} in this chat")
        contributor = call.get("contributor") or {}
        if contributor.get("kind") != "client":
            raise Refused(f"tool call {action['toolCallId']} is the agent's own; no client runs it")
        if contributor.get("clientId") != dispatch.client.client_id:
            raise Refused(
                f"only client {contributor.get('clientId')}, which runs tool call "
                f"{action['toolCallId']}, may stream into it"
            )
        return action


def _enabled(enablement: Any) -> bool:
    """Whether a ``CustomizationEnablement`` list leaves the customization on anywhere."""
    if not isinstance(enablement, list):
        return True
    return any(entry.get("enabled", True) for entry in enablement if isinstance(entry, dict))


def _agent_began(turn: Any) -> bool:
    """Whether a turn is one the agent began itself (``SessionReporter.begin_turn``)."""
    origin = (turn.get("message") or {}).get("origin") or {}
    return isinstance(origin, dict) and origin.get("kind") in ("agent", "systemNotification")
