"""Turning what a backend reports into chat actions: one builder for live and rebuilt turns.

``TurnRecorder`` implements ``TurnReporter``. Every report becomes one or more
``chat/*`` (and, for questions, ``session/*``) actions handed to a sink. A live
turn's sink applies them through the engine; a rebuilt turn's sink folds
them into a detached chat state with the same reducers. Questions wait on
``Asker``, which only a live turn has.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ahpcore.lifecycle import ToolConfirmation, command_of
from ahpcore.ports.backend import (
    Approval,
    ApprovalOption,
    Cost,
    InputAnswer,
    PendingEdit,
    TurnReporter,
)

log = logging.getLogger(__name__)

#: The _meta prefix this host names its own keys with.
META_PREFIX = "ahp."
#: The ``_meta`` key of a call a plugin approved unasked: the reason it gave.
CONFIRMED_BY = f"{META_PREFIX}confirmedBy"

Action = dict[str, Any]
Sink = Callable[[Action], object]


class Asker(Protocol):
    """What a live turn waits on: the manager resolves these from client actions."""

    async def approval(self, turn_id: str, call_id: str) -> Approval: ...

    async def answer(self, turn_id: str, request: Mapping[str, Any]) -> InputAnswer: ...

    async def client_tool(
        self, turn_id: str, call_id: str, client_id: str
    ) -> Mapping[str, Any]: ...

    async def sign_in(self, turn_id: str, call_id: str, resource: str) -> str: ...


class Children(Protocol):
    """Where a turn's subagents run: a live chat's child chats, or rebuilt ones."""

    def open(
        self, turn_id: str, call_id: str, name: str, description: str
    ) -> tuple[str, TurnRecorder]:
        """The child chat's URI, and the recorder of its one turn."""
        ...

    def close(self, call_id: str, state: str) -> None:
        """The call ended: so does its child's turn (complete, error or cancelled)."""
        ...

    def keep(self, call_id: str) -> None:
        """The subagent runs in the background: its child's turn outlives the call and the
        turn, until the agent ends it (``SessionReporter.subagent_ended``)."""
        ...


class CannotAsk(RuntimeError):
    """A rebuilt turn reported a question: history has no one to ask."""


def _drop_none(**fields: Any) -> Action:
    return {key: value for key, value in fields.items() if value is not None}


def option_json(option: ApprovalOption) -> Action:
    """A ``ConfirmationOption``."""
    return _drop_none(id=option.id, label=option.label, kind=option.kind, group=option.group)


def usage_info(
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
) -> Action:
    """A ``UsageInfo``: what the protocol names a field for, the rest in ``_meta``."""
    extra = _drop_none(
        cacheWriteTokens=cache_write_tokens,
        reasoningTokens=reasoning_tokens,
        context=(
            _drop_none(used=context_used, size=context_size)
            if context_used is not None or context_size is not None
            else None
        ),
        cost={"amount": cost.amount, "currency": cost.currency} if cost is not None else None,
    )
    bag = {f"{META_PREFIX}{key}": value for key, value in extra.items()}
    bag.update(meta or {})
    return _drop_none(
        inputTokens=input_tokens,
        outputTokens=output_tokens,
        model=model,
        cacheReadTokens=cache_read_tokens,
        _meta=bag or None,
    )


@dataclass
class TurnRecorder:
    """A ``TurnReporter`` for one turn of one chat."""

    turn_id: str
    chat: Sink
    session: Sink
    chat_uri: str
    asker: Asker | None = None
    #: Which client provides a tool named ``<clientId>__<name>``.
    tool_owner: Callable[[str], str | None] = lambda name: None
    #: Where part numbering starts: after the parts a resumed turn already has.
    first_part: int = 1
    _open: tuple[str, str] | None = None
    _parts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _tools: dict[str, str] = field(default_factory=dict)
    #: Calls whose input is complete but which have not said yet whether they ask.
    _deferred: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    #: The backend's own id for this turn, when it reported one.
    backend_ref: str | None = None
    #: A rebuilt subagent's turn: how long it ran live (a live one is timed as it runs).
    took_ms: int | None = None
    #: A rebuilt subagent's turn its host never saw end: the error it ends in, whatever its
    #: call's result said (the transcript may read as if it finished).
    cut_off: str | None = None
    #: Where subagents run (None: this reporter cannot start one).
    children: Children | None = None
    #: Called with the pending edits of a call that asks, and again with () once answered.
    edits_pending: Callable[[str, Sequence[PendingEdit]], list[dict[str, Any]]] | None = None
    #: Asks the plugins about a call before the person is (``ahp_tool_confirming``): given
    #: the call's own fields of a ``ToolConfirmation``, the confirmation as they left it.
    confirming: Callable[[dict[str, Any]], Awaitable[ToolConfirmation]] | None = None
    #: Subagent child chats by call id: (uri, name, description).
    _subagents: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    #: Subagents running in the background, whose child turns the agent ends itself.
    _background: set[str] = field(default_factory=set)
    #: Calls that carry a progress line, which their completion takes away again.
    _progressed: set[str] = field(default_factory=set)
    #: The ``_meta`` each call started with: an action that sets a call's ``_meta`` sets it
    #: whole, so what it started with (its toolKind) goes again each time.
    _start_meta: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._parts = itertools.count(self.first_part)

    def reference(self, ref: str) -> None:
        self.backend_ref = ref

    # -- text -------------------------------------------------------------------
    def _stream(self, kind: str, action_type: str, delta: str) -> None:
        if not delta:
            return
        if self._open is not None and self._open[0] == kind:
            self.chat(
                {
                    "type": action_type,
                    "turnId": self.turn_id,
                    "partId": self._open[1],
                    "content": delta,
                }
            )
            return
        part_id = f"{self.turn_id}.{next(self._parts)}"
        self._open = (kind, part_id)
        # A part exists before it streams: open it carrying the first text.
        self.chat(
            {
                "type": "chat/responsePart",
                "turnId": self.turn_id,
                "part": {"kind": kind, "id": part_id, "content": delta},
            }
        )

    def text(self, delta: str) -> None:
        self._stream("markdown", "chat/delta", delta)

    def reasoning(self, delta: str) -> None:
        self._stream("reasoning", "chat/reasoning", delta)

    def notification(self, content: str, *, meta: Mapping[str, Any] | None = None) -> None:
        self._open = None
        part: dict[str, Any] = {"kind": "systemNotification", "content": content}
        if meta:
            part["_meta"] = dict(meta)
        self.chat({"type": "chat/responsePart", "turnId": self.turn_id, "part": part})

    # -- tools ------------------------------------------------------------------
    def tool_start(
        self,
        call_id: str,
        tool_name: str,
        *,
        display_name: str | None = None,
        intention: str | None = None,
        meta: Mapping[str, Any] | None = None,
        mcp_server: str | None = None,
    ) -> None:
        self._open = None
        owner = self.tool_owner(tool_name)
        if owner is not None and "__" not in tool_name:
            tool_name = f"{owner}__{tool_name}"  # the name every client sees a client's tool by
        self._tools[call_id] = tool_name
        if meta:
            self._start_meta[call_id] = dict(meta)
        action = _drop_none(
            type="chat/toolCallStart",
            turnId=self.turn_id,
            toolCallId=call_id,
            toolName=tool_name,
            displayName=display_name or tool_name,
            intention=intention,
            contributor=(
                {"kind": "client", "clientId": owner}
                if owner
                else {"kind": "mcp", "customizationId": mcp_server}
                if mcp_server
                else None
            ),
            _meta=dict(meta) if meta else None,
        )
        self.chat(action)

    def tool_input(self, call_id: str, delta: str) -> None:
        self.chat(
            {
                "type": "chat/toolCallDelta",
                "turnId": self.turn_id,
                "toolCallId": call_id,
                "content": delta,
            }
        )

    def _ready(
        self, call_id: str, tool_input: str | None, invocation_message: str, **extra: Any
    ) -> None:
        self.chat(
            _drop_none(
                type="chat/toolCallReady",
                turnId=self.turn_id,
                toolCallId=call_id,
                invocationMessage=invocation_message,
                toolInput=tool_input,
                **extra,
            )
        )

    def tool_ready(self, call_id: str, *, tool_input: str | None, invocation_message: str) -> None:
        # Held back: a ready without ``confirmed`` would read as a question.
        self._deferred[call_id] = (tool_input, invocation_message)

    def tool_running(
        self, call_id: str, *, tool_input: str | None, invocation_message: str
    ) -> None:
        self._deferred.pop(call_id, None)
        # confirmed says nobody was asked; without it the call reads as a question.
        self._ready(call_id, tool_input, invocation_message, confirmed="not-needed")

    def tool_progress(self, call_id: str, message: str) -> None:
        # Content and _meta are replaced whole: what a subagent call carries goes again.
        sub = call_id in self._subagents
        self._progressed.add(call_id)
        self.chat(
            {
                "type": "chat/toolCallContentChanged",
                "turnId": self.turn_id,
                "toolCallId": call_id,
                "content": [self._subagent_content(call_id)] if sub else [],
                "_meta": {**self._call_meta(call_id), "progressMessage": message},
            }
        )

    def subagent(
        self, call_id: str, name: str, description: str, *, background: bool = False
    ) -> TurnReporter:
        if self.children is None:
            raise CannotAsk("this turn cannot start a subagent")
        uri, child = self.children.open(self.turn_id, call_id, name, description)
        self._subagents[call_id] = (uri, name, description)
        if background:
            self._background.add(call_id)
            self.children.keep(call_id)
        self.chat(
            {
                "type": "chat/toolCallContentChanged",
                "turnId": self.turn_id,
                "toolCallId": call_id,
                "content": [self._subagent_content(call_id)],
                "_meta": self._call_meta(call_id),
            }
        )
        return child

    def _subagent_content(self, call_id: str) -> dict[str, Any]:
        uri, name, description = self._subagents[call_id]
        return {"type": "subagent", "resource": uri, "title": description, "agentName": name}

    def _call_meta(self, call_id: str) -> dict[str, Any]:
        """A call's whole ``_meta`` as it stands: what it started with, and its subagent's."""
        meta = dict(self._start_meta.get(call_id) or {})
        if call_id in self._subagents:
            uri, name, description = self._subagents[call_id]
            meta.update(
                subagentChatUri=uri, subagentAgentName=name, subagentDescription=description
            )
        return meta

    def end_subagents(self, state: str) -> None:
        """The turn ended: every subagent still running ends with it."""
        if self.children is not None:
            for call_id in list(self._subagents):
                if call_id not in self._background:
                    self.children.close(call_id, state)

    async def tool_approval(
        self,
        call_id: str,
        *,
        tool_input: str | None,
        invocation_message: str,
        title: str | None = None,
        options: Sequence[ApprovalOption] = (),
        edits: Sequence[PendingEdit] = (),
    ) -> Approval:
        deferred = self._deferred.pop(call_id, None)
        if self.asker is None:
            raise CannotAsk("a rebuilt turn cannot ask for approval")
        if deferred is not None and tool_input is None:
            tool_input = deferred[0]
        settled = await self._settled(call_id, tool_input, invocation_message, title, options)
        if settled is not None:
            return settled
        served = self.edits_pending(call_id, edits) if self.edits_pending and edits else None
        self._ready(
            call_id,
            tool_input,
            invocation_message,
            confirmationTitle=title,
            options=[option_json(option) for option in options] or None,
            edits={"items": served} if served else None,
        )
        try:
            return await self.asker.approval(self.turn_id, call_id)
        finally:
            if served and self.edits_pending is not None:
                self.edits_pending(call_id, ())

    async def _settled(
        self,
        call_id: str,
        tool_input: str | None,
        invocation_message: str,
        title: str | None,
        options: Sequence[ApprovalOption],
    ) -> Approval | None:
        """The answer a plugin gave in the person's stead, already told to clients; None
        when none decided and the person is to be asked."""
        if self.confirming is None:
            return None
        kind = (self._start_meta.get(call_id) or {}).get("toolKind")
        confirmation = await self.confirming(
            {
                "turn_id": self.turn_id,
                "call_id": call_id,
                "tool_name": self._tools.get(call_id, ""),
                "tool_kind": kind if isinstance(kind, str) else None,
                "tool_input": tool_input,
                "invocation_message": invocation_message,
                "command": command_of(kind if isinstance(kind, str) else None, tool_input),
            }
        )
        if not confirmation.decided:
            return None
        log.info(
            "%s %s the tool call %s in %s: %s",
            confirmation.decided_by or "a plugin",
            "approved" if confirmation.approved else "denied",
            call_id,
            self.chat_uri,
            confirmation.reason,
        )
        if confirmation.approved:
            meta = {**(self._start_meta.get(call_id) or {}), CONFIRMED_BY: confirmation.reason}
            self._start_meta[call_id] = meta  # later actions set _meta whole: it stays
            self._ready(call_id, tool_input, invocation_message, confirmed="setting", _meta=meta)
            return Approval(True, setting=confirmation.reason)
        denial = Approval(
            False, reason="denied", suggestion=confirmation.reason, setting=confirmation.reason
        )
        # Asked and answered at once, as a rebuilt turn reads: the call shows what it was.
        self.tool_decided(
            call_id,
            tool_input=tool_input,
            invocation_message=invocation_message,
            approval=denial,
            title=title,
            options=options,
        )
        return denial

    def tool_decided(
        self,
        call_id: str,
        *,
        tool_input: str | None,
        invocation_message: str,
        approval: Approval | None,
        title: str | None = None,
        options: Sequence[ApprovalOption] = (),
    ) -> None:
        # The same two actions a live approval makes: ready without confirmed, then the answer.
        self._ready(
            call_id,
            tool_input,
            invocation_message,
            confirmationTitle=title,
            options=[option_json(option) for option in options] or None,
        )
        if approval is not None:
            self.chat(self.decision(call_id, approval))

    def decision(self, call_id: str, approval: Approval) -> Action:
        """The chat/toolCallConfirmed saying what was answered."""
        if approval.approved:
            return _drop_none(
                type="chat/toolCallConfirmed",
                turnId=self.turn_id,
                toolCallId=call_id,
                approved=True,
                confirmed="setting" if approval.setting is not None else "user-action",
                editedToolInput=approval.edited_input,
                selectedOptionId=approval.selected_option_id,
            )
        return _drop_none(
            type="chat/toolCallConfirmed",
            turnId=self.turn_id,
            toolCallId=call_id,
            approved=False,
            reason=approval.reason if approval.reason in ("denied", "skipped") else "denied",
            reasonMessage=approval.setting,
            selectedOptionId=approval.selected_option_id,
        )

    def tool_complete(
        self,
        call_id: str,
        *,
        success: bool,
        past_tense_message: str,
        content: Sequence[Mapping[str, Any]] | None = None,
        error: str | None = None,
    ) -> None:
        deferred = self._deferred.pop(call_id, None)
        if deferred is not None:
            self.tool_running(call_id, tool_input=deferred[0], invocation_message=deferred[1])
        items = [dict(c) for c in content] if content is not None else None
        if call_id in self._subagents:
            items = [*(items or []), self._subagent_content(call_id)]
            if self.children is not None and call_id not in self._background:
                self.children.close(call_id, "complete" if success else "error")
        result = _drop_none(
            success=success,
            pastTenseMessage=past_tense_message,
            content=items,
            error={"message": error} if error is not None else None,
        )
        action: dict[str, Any] = {
            "type": "chat/toolCallComplete",
            "turnId": self.turn_id,
            "toolCallId": call_id,
            "result": result,
        }
        if call_id in self._progressed:
            # A progress line says what a running call does: done, the call reads as rebuilt.
            action["_meta"] = self._call_meta(call_id)
        self.chat(action)

    async def client_tool(
        self, call_id: str, tool_name: str, *, tool_input: str, invocation_message: str
    ) -> Mapping[str, Any]:
        if self.asker is None:
            raise CannotAsk("a rebuilt turn cannot run a client's tool")
        owner = self.tool_owner(tool_name)
        if owner is None:
            raise LookupError(f"no active client provides a tool named {tool_name!r}")
        if call_id not in self._tools:
            self.tool_start(call_id, tool_name)
        self._ready(call_id, tool_input, invocation_message, confirmed="not-needed")
        return await self.asker.client_tool(self.turn_id, call_id, owner)

    async def tool_auth(self, call_id: str, requirement: Mapping[str, Any]) -> str:
        if self.asker is None:
            raise CannotAsk("a rebuilt turn cannot wait for a sign-in")
        resource = str(requirement["resource"]["resource"])
        self.chat(
            {
                "type": "chat/toolCallAuthRequired",
                "turnId": self.turn_id,
                "toolCallId": call_id,
                "auth": dict(requirement),
            }
        )
        token = await self.asker.sign_in(self.turn_id, call_id, resource)
        self.chat(
            {"type": "chat/toolCallAuthResolved", "turnId": self.turn_id, "toolCallId": call_id}
        )
        return token

    # -- questions --------------------------------------------------------------
    async def ask(
        self, questions: Sequence[Mapping[str, Any]], *, message: str | None = None
    ) -> InputAnswer:
        if self.asker is None:
            raise CannotAsk("a rebuilt turn cannot ask a question")
        self._open = None
        request = _drop_none(
            id=f"{self.turn_id}.ask{next(self._parts)}",
            message=message,
            questions=[dict(q) for q in questions],
        )
        self.chat({"type": "chat/inputRequested", "request": request})
        return await self.asker.answer(self.turn_id, request)

    def asked(
        self,
        questions: Sequence[Mapping[str, Any]],
        answer: InputAnswer,
        *,
        message: str | None = None,
    ) -> None:
        self._open = None
        request_id = f"{self.turn_id}.ask{next(self._parts)}"
        request = _drop_none(id=request_id, message=message, questions=[dict(q) for q in questions])
        self.chat({"type": "chat/inputRequested", "request": request})
        self.chat(
            _drop_none(
                type="chat/inputCompleted",
                requestId=request_id,
                response=answer.response,
                answers=dict(answer.answers) or None,
            )
        )

    # -- the rest ---------------------------------------------------------------
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
        self.chat(
            {
                "type": "chat/usage",
                "turnId": self.turn_id,
                "usage": usage_info(
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
                ),
            }
        )

    def title(self, title: str) -> None:
        if title.strip():
            self.session({"type": "session/titleChanged", "title": title.strip()})

    def activity(self, activity: str | None) -> None:
        self.chat(_drop_none(type="chat/activityChanged", activity=activity))

    def customizations(self, items: Sequence[Mapping[str, Any]]) -> None:
        self.session(
            {"type": "session/customizationsChanged", "customizations": [dict(i) for i in items]}
        )

    def config(self, values: Mapping[str, Any]) -> None:
        if values:
            self.session({"type": "session/configChanged", "config": dict(values)})
