"""What a live agent reports outside a turn the host started, subagent chats, and the
file edits served while an approval waits.

``AgentReporter`` is the ``SessionReporter`` a chat's agent gets at start.
``ChildChats`` runs a turn's subagents in child chats. ``EditServer`` holds
the after-side of edits a pending approval shows, under ``ahp-edit:`` URIs.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from ahpcore.ports.backend import Cost, PendingEdit, TurnOrigin, TurnReporter
from ahpcore.sessions import state as states
from ahpcore.sessions.asker import ChatAsker
from ahpcore.sessions.live import Runner
from ahpcore.sessions.turns import TurnRecorder, usage_info

EDIT_SCHEME = "ahp-edit"


class EditServer:
    """Edits a pending approval shows: served under ``ahp-edit:`` URIs until it settles."""

    def __init__(self) -> None:
        self._by_key: dict[str, list[str]] = {}
        self._content: dict[str, str] = {}
        self._ids = itertools.count(1)

    def offer(self, key: str, edits: Sequence[PendingEdit]) -> list[dict[str, Any]]:
        """The ``FileEdit`` items for ``edits``; their content is readable until withdrawn."""
        self.withdraw(key)
        items, served = [], []
        for edit in edits:
            after = f"{EDIT_SCHEME}:{next(self._ids)}/after"
            self._content[after] = edit.after
            served.append(after)
            item: dict[str, Any] = {"after": {"uri": edit.path, "content": {"uri": after}}}
            if edit.before is not None:
                before = f"{EDIT_SCHEME}:{next(self._ids)}/before"
                self._content[before] = edit.before
                served.append(before)
                item["before"] = {"uri": edit.path, "content": {"uri": before}}
            items.append(item)
        self._by_key[key] = served
        return items

    def withdraw(self, key: str) -> None:
        for uri in self._by_key.pop(key, []):
            self._content.pop(uri, None)

    def read(self, uri: str) -> str | None:
        return self._content.get(uri)


def subagent_chat_uri(parent_uri: str, call_id: str) -> str:
    """Where the subagent of a tool call runs: derived, so a rebuild finds the same chat."""
    return f"{parent_uri}/subagent/{call_id}"


class ChildChats:
    """The subagents of one live turn, each one turn of a child chat."""

    def __init__(self, runner: Runner, turn_id: str) -> None:
        self.runner = runner
        self.turn_id = turn_id
        self._open: dict[str, tuple[Runner, float]] = {}

    def open(
        self, turn_id: str, call_id: str, name: str, description: str
    ) -> tuple[str, TurnRecorder]:
        hub = self.runner.hub
        child = hub.child_chat(self.runner.chat, call_id, description or name)
        message = {"text": description, "origin": {"kind": "tool"}}
        hub.apply(
            child.uri,
            {
                "type": "chat/turnStarted",
                "turnId": call_id,
                "startedAt": states.now_iso(),
                "message": message,
            },
        )
        self._open[call_id] = (child.runner, time.monotonic())
        runner = child.runner
        recorder = TurnRecorder(
            call_id,
            chat=lambda action: hub.apply(child.uri, action),
            session=lambda action: hub.apply(child.session.uri, action),
            chat_uri=child.uri,
            asker=ChatAsker(hub, child, lambda ask_id: None),
            tool_owner=child.session.tool_owner,
            children=ChildChats(runner, call_id),
            edits_pending=runner.serve_edits,
            confirming=lambda fields: hub.tool_confirming(child, fields),
        )
        return child.uri, recorder

    def keep(self, call_id: str) -> None:
        opened = self._open.pop(call_id, None)
        if opened is not None:
            self.runner.background_children[call_id] = opened

    def close(self, call_id: str, state: str) -> None:
        opened = self._open.pop(call_id, None)
        if opened is not None:
            end_child(self.runner, call_id, *opened, state)


def end_child(runner: Runner, call_id: str, child: Runner, started: float, state: str) -> None:
    """End the one turn of a subagent's child chat (its id is the call's), if still running."""
    child.end_asks(call_id)
    chat = child.chat
    active = chat.state.get("activeTurn") or {}
    if active.get("id") != call_id:
        return
    duration = int((time.monotonic() - started) * 1000)
    if state == "complete":
        action: dict[str, Any] = {"type": "chat/turnComplete", "turnId": call_id}
    elif state == "error":
        part = {"kind": "error", "error": {"errorType": "error", "message": "the call failed"}}
        action = {"type": "chat/error", "turnId": call_id, "part": part}
    else:
        action = {"type": "chat/turnCancelled", "turnId": call_id}
    runner.hub.apply(chat.uri, {**action, "duration": duration})
    if chat.state.get("activity"):
        runner.hub.apply(chat.uri, {"type": "chat/activityChanged"})


class AgentReporter:
    """The ``SessionReporter`` of one chat's agent."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    @property
    def _chat(self) -> Any:
        return self.runner.chat

    def _session_apply(self, action: dict[str, Any]) -> None:
        self.runner.hub.apply(self._chat.session.uri, action)

    def begin_turn(
        self, message: Mapping[str, Any], *, origin: TurnOrigin = "agent"
    ) -> AbstractAsyncContextManager[TurnReporter]:
        return self.runner.agent_turn(message, origin)

    def start_soon(self, function: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self.runner.start_soon(function, *args)

    def background_work_set(
        self,
        work_id: str,
        *,
        label: str,
        command: str | None = None,
        subagent_call_id: str | None = None,
        started_at: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        work: dict[str, Any] = {
            "id": work_id,
            "label": label,
            "startedAt": started_at or states.now_iso(),
        }
        if meta:
            work["_meta"] = dict(meta)
        if subagent_call_id is not None:
            work.update(kind="subagent", chat=subagent_chat_uri(self._chat.uri, subagent_call_id))
        else:
            work.update(kind="shell", command=command or label)
        self.runner.hub.apply(self._chat.uri, {"type": "chat/backgroundWorkSet", "work": work})

    def background_work_removed(self, work_id: str) -> None:
        self.runner.hub.apply(self._chat.uri, {"type": "chat/backgroundWorkRemoved", "id": work_id})

    def subagent_ended(self, call_id: str, *, success: bool = True) -> None:
        opened = self.runner.background_children.pop(call_id, None)
        if opened is not None:
            end_child(self.runner, call_id, *opened, "complete" if success else "error")

    def customizations(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._session_apply(
            {"type": "session/customizationsChanged", "customizations": [dict(i) for i in items]}
        )

    def customization_updated(self, item: Mapping[str, Any]) -> None:
        self._session_apply({"type": "session/customizationUpdated", "customization": dict(item)})

    def customization_removed(self, customization_id: str) -> None:
        self._session_apply({"type": "session/customizationRemoved", "id": customization_id})

    def config(self, values: Mapping[str, Any]) -> None:
        if values:
            self._session_apply({"type": "session/configChanged", "config": dict(values)})
            self.runner.hub.save_soon(self._chat.session)

    def meta(self, values: Mapping[str, Any]) -> None:
        # session/metaChanged replaces _meta whole: merge into what is there, so keys
        # another source set (git facts, the owner) survive.
        session = self._chat.session
        current = dict(session.state.get("_meta") or {})
        merged = dict(current)
        for key, value in values.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        if merged != current:
            self._session_apply({"type": "session/metaChanged", "_meta": merged})

    def mcp_server_state(
        self, customization_id: str, state: Mapping[str, Any], *, channel: str | None = None
    ) -> None:
        action: dict[str, Any] = {
            "type": "session/mcpServerStateChanged",
            "id": customization_id,
            "state": dict(state),
        }
        if channel is not None:
            action["channel"] = channel
        self._session_apply(action)

    def title(self, title: str) -> None:
        if title.strip():
            self._session_apply({"type": "session/titleChanged", "title": title.strip()})
            self.runner.hub.save_soon(self._chat.session)

    def usage(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        model: str | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        context_used: int | None = None,
        context_size: int | None = None,
        cost: Cost | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        chat = self._chat
        # Counted to the running turn, else to the latest one; a chat with none has nowhere.
        turn_id = self.runner.turn_id
        if turn_id is None:
            turns = chat.state.get("turns") or []
            turn_id = turns[-1].get("id") if turns else None
        if turn_id is None:
            return
        usage = usage_info(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
            context_used=context_used,
            context_size=context_size,
            cost=cost,
            meta=meta,
        )
        self.runner.hub.apply(chat.uri, {"type": "chat/usage", "turnId": turn_id, "usage": usage})
