"""One running turn: what it keeps, and how what the CLI says becomes its chat's reports.

A turn is a client's (``ClaudeAgent.run_turn``), one the CLI began by itself
(``own_turns``) or a background subagent's (``subagents``). The agent hands it
the CLI's messages meant for it; the turn reports them into its chat (the main
agent's words) or into the child chat of a subagent's call, and answers the
CLI's questions about its calls (may a tool run; a client's tool's result).
What it needs beyond itself it asks of its ``TurnHost``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ahp_claude import questions, rebuild, sdk, tools, transcripts
from ahpcore.ports.backend import ApprovalOption, Cost, TurnEnded, TurnReporter

if TYPE_CHECKING:
    from ahp_claude.records import SessionRecords

log = logging.getLogger(__name__)

SIGN_IN = (
    "Claude Code is not signed in: run `ahp claude login` as the user running the host, "
    "or set ANTHROPIC_API_KEY in its environment, then try again."
)

#: The answers a tool call that asks offers.
ALLOW, ALLOW_ALWAYS, DENY = "allow", "allow-always", "deny"


class ClaudeTurnFailed(RuntimeError):
    """The CLI ended a turn in an error (its own words)."""


@dataclass
class Stream:
    """Where one agent's messages go: the chat's turn, or a subagent's child chat."""

    report: TurnReporter
    blocks: dict[int, str] = field(default_factory=dict)
    #: True once partial messages arrived for it (a subagent's may come whole only).
    partial: bool = False
    #: When it opened (the host's clock): a subagent's chat lasts from then to its end.
    began: float = field(default_factory=time.monotonic)


@dataclass
class Call:
    name: str
    stream: Stream
    input: dict[str, Any] = field(default_factory=dict)
    started: bool = False
    settled: bool = False  # ready was reported (asked, or ran without asking)
    denied: bool = False


class Subagents(Protocol):
    """The chat's subagents that go on past their call (``subagents.BackgroundSubagents``)."""

    def backgrounds(self, call_id: str, asked: bool) -> bool:
        """Whether the subagent of ``call_id`` runs on in the background, in a chat of its
        own; ``asked`` is whether its call asked for that."""
        ...

    def opened(self, call_id: str, child: Stream) -> None:
        """Its child chat opened: its messages go there from now on."""
        ...

    def __contains__(self, call_id: object) -> bool:
        """Whether the subagent of ``call_id`` runs in the background now."""
        ...


class TurnHost(Protocol):
    """What a turn asks of the agent whose CLI it follows (``agent.ClaudeAgent``)."""

    @property
    def model(self) -> str | None:
        """The model the CLI said it runs on."""
        ...

    @property
    def records(self) -> SessionRecords: ...

    @property
    def subagents(self) -> Subagents: ...

    def cost_of(self, total: float | None) -> float | None:
        """A turn's share of the running cost ``total`` the CLI reported as it ended."""
        ...


class Turn:
    def __init__(self, report: TurnReporter, host: TurnHost, main: Stream | None = None) -> None:
        self.report = report
        self._host = host
        self.done = anyio.Event()
        self.error: str | None = None
        #: False once cancelled: what the CLI says while draining is dropped.
        self.live = True
        self.calls: dict[str, Call] = {}
        #: Subagents running for a call of this turn, by that call's id.
        self.children: dict[str, Stream] = {}
        self.questions: set[str] = set()
        #: Steering messages sent into this turn that no result has taken in yet.
        self.steering: set[str] = set()
        #: Tokens in the context after the main agent's latest model call (its prompt and answer).
        self.context_used: int | None = None
        self.context_prompt = 0
        #: The transcript uuid of the message that began the turn.
        self.entry: str | None = None
        #: Where the main agent's words go (a background subagent's turn: its child chat).
        self.main = main if main is not None else Stream(report)

    def fail(self, error: str) -> None:
        """End the turn in ``error``, unless it has ended already."""
        if not self.done.is_set():
            self.error = error
            self.done.set()

    # -- what the CLI says ---------------------------------------------------------------
    def translate(self, stream: Stream, message: Any) -> None:
        """What one agent (the main one, or a subagent) said, into ``stream``."""
        if isinstance(message, sdk.StreamEvent):
            self._on_event(stream, message.event)
        elif isinstance(message, sdk.AssistantMessage):
            if transcripts.is_filler(message.model, message.content):
                return  # the CLI's stand-in for a cut-off turn's answer, not the model's words
            if message.error == "authentication_failed":
                # The CLI's own "Not logged in · Please run /login" is no answer, and names
                # a command the host's user cannot run: the turn ends in SIGN_IN instead.
                self.error = SIGN_IN
                return
            for block in message.content:
                if isinstance(block, sdk.ToolUseBlock):
                    self._tool_ready(stream, block)
                elif not stream.partial and isinstance(block, sdk.TextBlock):
                    stream.report.text(block.text)
                elif not stream.partial and isinstance(block, sdk.ThinkingBlock):
                    stream.report.reasoning(block.thinking)
        elif isinstance(message, sdk.UserMessage) and isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, sdk.ToolResultBlock):
                    self._on_tool_result(block)

    def child(self, call_id: str) -> Stream | None:
        """The child chat a subagent's messages go to, opened with its first message."""
        child = self.children.get(call_id)
        if child is not None:
            return child
        call = self.calls.get(call_id)
        if call is None or call.name not in tools.SUBAGENT_TOOLS:
            return None
        report = call.stream.report
        if not call.settled:
            call.settled = True  # it runs: nobody was asked
            report.tool_running(
                call_id,
                tool_input=json.dumps(call.input),
                invocation_message=tools.invocation_message(call.name, call.input),
            )
        name = str(call.input.get("subagent_type") or "general-purpose")
        description = str(call.input.get("description") or name)
        subagents = self._host.subagents
        background = subagents.backgrounds(call_id, bool(call.input.get("run_in_background")))
        try:
            child = Stream(report.subagent(call_id, name, description, background=background))
        except Exception:  # a reporter that cannot open child chats: the call still runs
            log.debug("no child chat for subagent %s", call_id, exc_info=True)
            return None
        if background:
            subagents.opened(call_id, child)
        self.children[call_id] = child
        return child

    def progress(self, call_id: str, line: str) -> None:
        """What the subagent of one of this turn's calls does now: a line on its call."""
        if self.done.is_set() or call_id not in self.children:
            return
        try:
            self.calls[call_id].stream.report.tool_progress(call_id, line)
        except Exception:  # a progress line is not worth a turn
            log.debug("reporting a task's progress failed", exc_info=True)

    def compacted(self, about: Mapping[str, Any]) -> None:
        """The CLI compacted the conversation: the chat says so where it happened."""
        if self.done.is_set():
            return
        rebuild.notice(self.report, str(about.get("trigger") or "manual"), about.get("pre_tokens"))

    def result(self, message: sdk.ResultMessage) -> None:
        """The CLI's result: the turn's usage, and its end (unless steering is still due)."""
        usage = message.usage or {}
        if self.live and usage:
            cost = self._host.cost_of(message.total_cost_usd)
            models = message.model_usage or {}
            running_on = self._host.model
            model = running_on if running_on in models else next(iter(models), running_on)
            entry = models.get(model) if model else None
            window = entry.get("contextWindow") if entry else None
            self.report.usage(
                input_tokens=int(usage.get("input_tokens") or 0),
                output_tokens=int(usage.get("output_tokens") or 0),
                model=model,
                context_used=self.context_used,
                context_size=int(window) if window else None,
                cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
                cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
                cost=Cost(float(cost)) if cost is not None else None,
            )
            if self.entry is not None:
                # What the transcript will not say, for the turn rebuilt from it later.
                self._host.records.turn_end(
                    self.entry,
                    {
                        "model": model,
                        "contextSize": window,
                        "cost": cost,
                        "costTotal": message.total_cost_usd,
                    },
                )
        if message.is_error and self.error is None:
            said = message.result or ", ".join(message.errors or ()) or message.subtype
            self.error = SIGN_IN if about_sign_in(said) else f"Claude Code: {said}"
        self.steering -= set(message.user_message_uuids or ())
        if self.steering and self.live and self.error is None:
            # A steering message came too late for this run: the CLI answers it next, still
            # as part of this turn.
            return
        self.done.set()

    def _on_event(self, stream: Stream, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        report = stream.report
        stream.partial = True
        if kind in ("message_start", "message_delta") and stream is self.main:
            self._count_context(event)
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                call_id, name = str(block["id"]), str(block["name"])
                stream.blocks[int(event.get("index", 0))] = call_id
                self.calls[call_id] = Call(name, stream)
                if name == "AskUserQuestion":
                    self.questions.add(call_id)
                    return
                self._tool_start(call_id, name)
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                report.text(str(delta.get("text", "")))
            elif delta.get("type") == "thinking_delta":
                report.reasoning(str(delta.get("thinking", "")))
            elif delta.get("type") == "input_json_delta":
                streaming = stream.blocks.get(int(event.get("index", 0)))
                if streaming and streaming not in self.questions:
                    report.tool_input(streaming, str(delta.get("partial_json", "")))

    def _count_context(self, event: Mapping[str, Any]) -> None:
        # Each model call sends the whole conversation: the latest call's prompt (fresh, cached
        # and newly cached tokens) plus its answer is what the context holds now.
        message = event.get("message") or {}
        usage = event.get("usage") or message.get("usage") or {}
        prompt = sum(
            int(usage.get(key) or 0)
            for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
        output = int(usage.get("output_tokens") or 0)
        if event.get("type") == "message_start":
            self.context_prompt = prompt
        self.context_used = self.context_prompt + output

    def _tool_start(self, call_id: str, name: str) -> None:
        call = self.calls[call_id]
        if call.started:
            return
        call.started = True
        mcp = tools.mcp_parts(name)
        client_name = tools.client_tool_name(name)
        if client_name is not None:
            # A client's tool: the core names it and its contributor.
            call.stream.report.tool_start(call_id, client_name)
            return
        call.stream.report.tool_start(
            call_id,
            name,
            meta=tools.tool_meta(name),
            mcp_server=mcp[0] if mcp else None,
        )

    def _tool_ready(self, stream: Stream, block: sdk.ToolUseBlock) -> None:
        call = self.calls.setdefault(block.id, Call(block.name, stream))
        call.input = dict(block.input)
        if block.id in self.questions or call.settled or is_client_tool(block.name):
            return
        self._tool_start(block.id, block.name)
        # Whether it asks is known only if can_use_tool is called: say ready, decide later.
        call.stream.report.tool_ready(
            block.id,
            tool_input=json.dumps(call.input),
            invocation_message=tools.invocation_message(call.name, call.input),
        )

    def _on_tool_result(self, block: sdk.ToolResultBlock) -> None:
        call = self.calls.get(block.tool_use_id)
        if call is None or block.tool_use_id in self.questions or call.denied:
            return
        if is_client_tool(call.name):
            return  # the client already completed it
        report = call.stream.report
        if not call.settled:
            call.settled = True
            report.tool_running(
                block.tool_use_id,
                tool_input=json.dumps(call.input),
                invocation_message=tools.invocation_message(call.name, call.input),
            )
        error = bool(block.is_error)
        content = tools.result_content(block.content)
        report.tool_complete(
            block.tool_use_id,
            success=not error,
            past_tense_message=tools.past_tense_message(call.name, call.input),
            content=content,
            error=(content[0]["text"] if content else "failed") if error else None,
        )
        child = self.children.get(block.tool_use_id)
        if child is not None and block.tool_use_id not in self._host.subagents:
            # Its chat ended with its call: how long it ran, for the chat rebuilt later.
            took = int((time.monotonic() - child.began) * 1000)
            self._host.records.subagent(block.tool_use_id, took)

    # -- what the CLI asks ---------------------------------------------------------------
    async def client_tool(self, name: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        """Run a client's tool the CLI calls (through the host's in-process MCP server)."""
        full = f"mcp__{tools.CLIENT_SERVER}__{name}"
        candidates = [
            call_id
            for call_id, call in self.calls.items()
            if call.name == full and not call.settled
        ]
        matching = [c for c in candidates if self.calls[c].input == arguments]
        if not (matching or candidates):
            return {"success": False, "error": {"message": f"no call of {name} is waiting"}}
        call_id = (matching or candidates)[0]
        call = self.calls[call_id]
        call.settled = True
        try:
            result = await call.stream.report.client_tool(
                call_id,
                name,
                tool_input=json.dumps(arguments),
                invocation_message=f"Run `{name}`",
            )
        except TurnEnded:
            return {"success": False, "error": {"message": "the turn ended"}}
        if result.get("pastTenseMessage"):
            # The transcript keeps what the tool answered, not how the client said it went.
            self._host.records.decision(call_id, {"pastTenseMessage": result["pastTenseMessage"]})
        return result

    async def approve(
        self,
        call_id: str,
        name: str,
        tool_input: dict[str, Any],
        context: sdk.ToolPermissionContext,
    ) -> sdk.PermissionResultAllow | sdk.PermissionResultDeny:
        """May the call ``call_id`` of this turn run: a person answers, in the call's chat.
        An "allow always" answer comes back with the CLI's suggestions as permissions."""
        if name == "AskUserQuestion":
            return await self._ask(tool_input)
        if is_client_tool(name):
            return sdk.PermissionResultAllow()  # the client that runs it is its own judge
        if tools.is_server_tool(name):
            return sdk.PermissionResultAllow()  # the host's own: it checks what it is asked
        call = self.calls.setdefault(call_id, Call(name, self.main))
        call.input = dict(tool_input)
        self._tool_start(call_id, name)
        call.settled = True
        options = [ApprovalOption(ALLOW, "Allow", "approve")]
        if context.suggestions:
            options.append(ApprovalOption(ALLOW_ALWAYS, "Allow always", "approve"))
        options.append(ApprovalOption(DENY, "Deny", "deny"))
        title = context.title or tools.approval_title(name, tool_input)
        # What was offered too, so a rebuilt call names the option picked as the live one.
        asked: dict[str, Any] = {
            "asked": True,
            "title": title,
            "options": [{"id": o.id, "label": o.label, "kind": o.kind} for o in options],
        }
        records = self._host.records
        try:
            approval = await call.stream.report.tool_approval(
                call_id,
                tool_input=json.dumps(tool_input),
                invocation_message=tools.invocation_message(name, tool_input),
                title=title,
                options=options,
                edits=tools.pending_edits(name, tool_input),
            )
        except TurnEnded:
            call.denied = True
            records.decision(call_id, asked)
            return sdk.PermissionResultDeny(message="The turn ended.", interrupt=True)
        records.decision(
            call_id,
            {
                **asked,
                "approved": approval.approved,
                "reason": approval.reason,
                "edited": approval.edited_input,
                "selected": approval.selected_option_id,
                # Set when a host plugin decided unasked: rebuilt, the call says so again.
                "setting": approval.setting,
            },
        )
        if approval.approved:
            edited = parsed_input(approval.edited_input)
            if approval.selected_option_id == ALLOW_ALWAYS and context.suggestions:
                # "Allow always": the CLI's own suggestion becomes a rule it keeps.
                return sdk.PermissionResultAllow(
                    updated_input=edited, updated_permissions=list(context.suggestions)
                )
            return sdk.PermissionResultAllow(updated_input=edited)
        call.denied = True
        said = approval.suggestion or "The user denied this tool call."
        return sdk.PermissionResultDeny(message=said, interrupt=False)

    async def _ask(
        self, tool_input: dict[str, Any]
    ) -> sdk.PermissionResultAllow | sdk.PermissionResultDeny:
        asked = questions.to_protocol(tool_input)
        try:
            answer = await self.report.ask(asked)
        except TurnEnded:
            return sdk.PermissionResultDeny(message="The turn ended.", interrupt=True)
        if answer.response != "accept":
            return sdk.PermissionResultDeny(message="The user declined to answer.", interrupt=False)
        answers = questions.answers_for_tool(tool_input, asked, answer.answers)
        return sdk.PermissionResultAllow(updated_input={**tool_input, "answers": answers})


def is_client_tool(name: str) -> bool:
    return tools.client_tool_name(name) is not None


def parsed_input(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def about_sign_in(said: str) -> bool:
    lowered = said.lower()
    return any(
        word in lowered
        for word in ("api key", "/login", "authentication", "401", "not logged in", "unauthorized")
    )
