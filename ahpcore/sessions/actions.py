"""The client actions that need more than a reducer: starting and cancelling turns,
answering questions, client tool results, titles, bits the store keeps.

Each handler runs before the engine applies the action: it may refuse it,
rewrite it, or queue work that follows it (``dispatch.after``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ahpcore.engine.core import Dispatch, Refused
from ahpcore.sessions import calls
from ahpcore.sessions.contract import Approval, InputAnswer
from ahpcore.sessions.live import LiveChat, LiveSession

if TYPE_CHECKING:
    from ahpcore.sessions.manager import SessionManager


class ClientActions:
    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

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
            "chat/toolCallContentChanged": self.tool_content_changed,
            "chat/draftChanged": self.remember,
            "chat/isReadChanged": self.remember,
            "session/isReadChanged": self.remember,
            "session/isArchivedChanged": self.remember,
        }

    def chat_of(self, dispatch: Dispatch) -> LiveChat:
        chat = self.manager.chat_by_uri(dispatch.channel.uri)
        if chat is None:
            raise Refused(f"{dispatch.channel.uri} is not a chat this host runs")
        return chat

    def session_of(self, dispatch: Dispatch) -> LiveSession:
        session = self.manager.session_by_uri(dispatch.channel.uri)
        if session is None:
            raise Refused(f"{dispatch.channel.uri} is not a session this host runs")
        return session

    async def turn_started(self, dispatch: Dispatch) -> dict[str, Any]:
        chat = self.chat_of(dispatch)
        if chat.state.get("activeTurn") is not None:
            raise Refused("a turn is already running in this chat: queue the message instead")
        if chat.state.get("interactivity") in ("read-only", "hidden"):
            raise Refused(f"{chat.uri} is read-only")
        action = dispatch.action
        self.manager.host.spawn(self.manager.run_turn, chat, action["turnId"], action["message"])
        return action

    async def turn_cancelled(self, dispatch: Dispatch) -> dict[str, Any]:
        chat = self.chat_of(dispatch)
        action = dispatch.action
        active = chat.state.get("activeTurn")
        if active is None or active.get("id") != action["turnId"] or chat.turn_scope is None:
            return action  # stops nothing, so changes nothing: answered to its sender alone
        chat.turn_scope.cancel()
        duration = int((time.monotonic() - chat.turn_started) * 1000)
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
        agent = chat.agent
        steer = getattr(agent, "steer", None)
        if (
            action["kind"] == "steering"
            and chat.turn_scope is not None
            and chat.session.backend.abilities.steering
            and callable(steer)
        ):
            dispatch.after.append(lambda: self._steer(chat, steer, action))
        else:
            dispatch.after.append(lambda: self.manager.take_next(chat))
        return action

    def _steer(self, chat: LiveChat, steer: Any, action: dict[str, Any]) -> None:
        """Hand a steering message to the running turn; taken, it leaves the pending slot."""
        if steer(action["message"]):
            self.manager.apply(
                chat.uri,
                {"type": "chat/pendingMessageRemoved", "kind": "steering", "id": action["id"]},
            )

    async def truncated(self, dispatch: Dispatch) -> dict[str, Any]:
        chat = self.chat_of(dispatch)
        backend = chat.session.backend
        if not backend.abilities.truncate:
            raise Refused(f"the {backend.provider} backend cannot truncate a conversation")
        if chat.state.get("activeTurn") is not None:
            raise Refused("a turn is running: cancel it before truncating")
        turn_id = dispatch.action.get("turnId")
        known = [turn.get("id") for turn in chat.older_turns + chat.state.get("turns", [])]
        if turn_id is not None and turn_id not in known:
            raise Refused(f"{chat.uri} has no turn {turn_id!r}")
        await calls.call(backend.truncate, chat.backend_id, turn_id)
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
            dispatch.after.append(
                lambda: self.manager.host.spawn(self._resume, chat, turn_id, message)
            )
        return dispatch.action

    async def _resume(self, chat: LiveChat, turn_id: str, message: dict[str, Any]) -> None:
        active = chat.state.get("activeTurn") or {}
        if active.get("id") == turn_id:
            await self.manager.run_turn(chat, turn_id, message, resume=True)

    async def chat_archived(self, dispatch: Dispatch) -> dict[str, Any] | None:
        chat = self.chat_of(dispatch)
        session = chat.session
        if session.state.get("defaultChat") == chat.uri:
            # Archiving the default chat is archiving the session.
            archived = dispatch.action["isArchived"]
            self.manager.apply(
                session.uri, {"type": "session/isArchivedChanged", "isArchived": archived}
            )
            self.manager.save_soon(session)
            return None
        dispatch.after.append(lambda: self.manager.save_soon(session))
        return dispatch.action

    async def title_changed(self, dispatch: Dispatch) -> dict[str, Any]:
        title = dispatch.action.get("title", "")
        if not isinstance(title, str) or not title.strip():
            raise Refused("a session's title cannot be blank")
        session = self.session_of(dispatch)
        dispatch.after.append(lambda: self.manager.save_soon(session))
        return {**dispatch.action, "title": title.strip()}

    async def active_client_set(self, dispatch: Dispatch) -> dict[str, Any]:
        self.session_of(dispatch)
        active = dict(dispatch.action["activeClient"])
        # Announced under the id the client introduced itself with, not the payload's.
        active["clientId"] = dispatch.client.client_id or active.get("clientId", "")
        return {**dispatch.action, "activeClient": active}

    async def remember(self, dispatch: Dispatch) -> dict[str, Any]:
        owner = self.manager.session_by_uri(dispatch.channel.uri)
        if owner is None:
            chat = self.manager.chat_by_uri(dispatch.channel.uri)
            owner = chat.session if chat else None
        if owner is not None:
            session = owner
            dispatch.after.append(lambda: self.manager.save_soon(session))
        return dispatch.action

    async def session_directories(self, dispatch: Dispatch) -> dict[str, Any]:
        """A session's folders change; its agents start again, resumed, in the new set."""
        session = self.session_of(dispatch)
        action = dispatch.action
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
        running = [chat.uri for chat in session.chats.values() if chat.turn_scope is not None]
        if running:
            raise Refused(f"a turn is running in {running[0]}: the folders change between turns")
        dispatch.after.append(lambda: self.manager.host.spawn(self._restart_agents, session))
        return action

    async def _restart_agents(self, session: LiveSession) -> None:
        session.working_directories = tuple(session.state.get("workingDirectories") or ())
        for chat in session.chats.values():
            await self.manager.stop_chat(chat)  # the next turn starts it again, resumed
        self.manager.save_soon(session)

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
        if chat.turn_scope is not None:
            raise Refused("a turn is running in this chat: its folders change between turns")
        dispatch.after.append(lambda: self.manager.host.spawn(self.manager.stop_chat, chat))
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
        dispatch.after.append(lambda: self.manager.save_soon(session))
        return dispatch.action

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
