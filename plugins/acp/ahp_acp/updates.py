"""One turn's ``session/update`` notifications, told to a ``TurnReporter``.

The same view serves a live turn and a turn the agent replays on
``session/load``, so a reopened chat reads as it did live. ACP tool calls move
through ``pending`` -> ``in_progress`` -> ``completed``/``failed``, and may ask
for permission on the way; each call's phase here decides which report (if
any) a change becomes, so the host sees every call start once and end once.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import schema

from ahpcore.ports.backend import (
    Approval,
    ApprovalOption,
    PendingEdit,
    TurnEnded,
    TurnReporter,
)

log = logging.getLogger(__name__)

#: ACP tool kinds the reference client draws with a renderer of its own (``_meta.toolKind``).
TOOL_KINDS = {"execute": "terminal", "read": "read", "search": "search"}
#: How much of a tool's raw output goes into its result when it reports no content.
RAW_OUTPUT_CHARS = 8 << 10
PLAN_MARKS = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}

#: A tool call's content item for a terminal, by the agent's id for it: the host
#: terminal it is, or its output so far.
TerminalContent = Callable[[str], dict[str, Any] | None]


@dataclass
class Call:
    """What is known of one tool call, merged from its start and its updates."""

    id: str
    title: str = ""
    kind: str | None = None
    raw_input: Any = None
    raw_output: Any = None
    content: list[Any] = field(default_factory=list)
    locations: list[Any] = field(default_factory=list)
    #: started, deferred (waits to know if it asks), running, asked, denied, done
    phase: str = "started"

    def merge(self, update: schema.ToolCallUpdate | schema.ToolCall) -> None:
        if update.title:
            self.title = update.title
        if update.kind:
            self.kind = update.kind
        if update.raw_input is not None:
            self.raw_input = update.raw_input
        if update.raw_output is not None:
            self.raw_output = update.raw_output
        if update.content is not None:
            self.content = list(update.content)
        if update.locations is not None:
            self.locations = list(update.locations)

    @property
    def tool_input(self) -> str | None:
        if self.raw_input is None:
            return None
        if isinstance(self.raw_input, str):
            return self.raw_input
        return json.dumps(self.raw_input, default=str)

    @property
    def message(self) -> str:
        return self.title or self.kind or "Tool call"


def _text_of(block: Any) -> str | None:
    if isinstance(block, schema.TextContentBlock):
        return block.text
    if isinstance(block, schema.ResourceContentBlock):
        return f"[{block.name or block.uri}]({block.uri})"
    if isinstance(block, schema.EmbeddedResourceContentBlock):
        resource = block.resource
        return getattr(resource, "text", None)
    return None


def _diff_text(diff: schema.FileEditToolCallContent) -> str:
    lines = difflib.unified_diff(
        (diff.old_text or "").splitlines(keepends=True),
        diff.new_text.splitlines(keepends=True),
        fromfile=diff.path if diff.old_text is not None else "/dev/null",
        tofile=diff.path,
    )
    return "```diff\n" + "".join(lines) + "\n```"


def plan_text(entries: Sequence[schema.PlanEntry]) -> str:
    return "\n".join(f"- {PLAN_MARKS.get(e.status, '[ ]')} {e.content}" for e in entries)


class TurnView:
    """Tells one turn's updates to ``report``; ``live`` turns may also ask for permission."""

    def __init__(self, report: TurnReporter, *, terminal_content: TerminalContent | None = None):
        self.report = report
        self.terminal_content = terminal_content
        self.calls: dict[str, Call] = {}
        self._plan: tuple[str, list[schema.PlanEntry]] | None = None
        self._plans = 0
        self.ended = False

    # -- what the agent says ---------------------------------------------------------
    def update(self, update: Any) -> bool:
        """Report ``update`` if it belongs to a turn; False for one that does not."""
        if self.ended:
            return True  # a cancelled turn draining: nobody is listening
        if isinstance(update, schema.AgentMessageChunk):
            text = _text_of(update.content)
            if text:
                self.report.text(text)
        elif isinstance(update, schema.AgentThoughtChunk):
            text = _text_of(update.content)
            if text:
                self.report.reasoning(text)
        elif isinstance(update, schema.ToolCallStart):
            self._tool(update, fresh=True)
        elif isinstance(update, schema.ToolCallProgress):
            self._tool(update, fresh=update.tool_call_id not in self.calls)
        elif isinstance(update, schema.AgentPlanUpdate):
            self._plan_changed(list(update.entries))
        else:
            return False
        return True

    def _start(self, call: Call) -> None:
        meta: dict[str, Any] = {}
        if call.kind in TOOL_KINDS:
            meta["toolKind"] = TOOL_KINDS[call.kind]
        if call.kind:
            meta["ahp.acpKind"] = call.kind
        if call.locations:
            meta["ahp.locations"] = [
                {k: v for k, v in (("path", loc.path), ("line", loc.line)) if v is not None}
                for loc in call.locations
            ]
        self.report.tool_start(
            call.id, call.kind or "tool", display_name=call.message, meta=meta or None
        )
        if call.tool_input:
            self.report.tool_input(call.id, call.tool_input)

    def _tool(self, update: schema.ToolCallStart | schema.ToolCallProgress, *, fresh: bool) -> None:
        call = self.calls.get(update.tool_call_id)
        if call is None:
            call = self.calls[update.tool_call_id] = Call(update.tool_call_id)
        call.merge(update)
        if fresh:
            self._start(call)
        status = update.status
        if status in ("completed", "failed"):
            self._complete(call, status == "completed")
        elif status == "in_progress":
            if call.phase in ("started", "deferred"):
                call.phase = "running"
                self.report.tool_running(
                    call.id, tool_input=call.tool_input, invocation_message=call.message
                )
        elif call.phase == "started":
            call.phase = "deferred"
            self.report.tool_ready(
                call.id, tool_input=call.tool_input, invocation_message=call.message
            )

    def _content(self, call: Call) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for item in call.content:
            if isinstance(item, schema.ContentToolCallContent):
                block = item.content
                if isinstance(block, schema.ResourceContentBlock):
                    items.append({"type": "resource", "uri": block.uri})
                elif isinstance(block, schema.ImageContentBlock):
                    items.append(
                        {
                            "type": "embeddedResource",
                            "data": block.data,
                            "contentType": block.mime_type,
                        }
                    )
                elif (text := _text_of(block)) is not None:
                    items.append({"type": "text", "text": text})
            elif isinstance(item, schema.FileEditToolCallContent):
                items.append({"type": "text", "text": _diff_text(item)})
            elif isinstance(item, schema.TerminalToolCallContent):
                shown = self.terminal_content(item.terminal_id) if self.terminal_content else None
                if shown is not None:
                    items.append(shown)
        if not items and call.raw_output is not None:
            raw = (
                call.raw_output
                if isinstance(call.raw_output, str)
                else json.dumps(call.raw_output, default=str)
            )
            items.append({"type": "text", "text": raw[:RAW_OUTPUT_CHARS]})
        return items

    def _complete(self, call: Call, success: bool) -> None:
        if call.phase in ("denied", "done"):
            return  # a denied call ended when it was denied
        call.phase = "done"
        self.report.tool_complete(
            call.id,
            success=success,
            past_tense_message=call.message,
            content=self._content(call),
            error=None if success else f"{call.message} failed",
        )

    def _plan_changed(self, entries: list[schema.PlanEntry]) -> None:
        if self._plan is None:
            self._plans += 1
            call_id = f"plan-{self._plans}"
            self.report.tool_start(
                call_id, "plan", display_name="Plan", meta={"ahp.acpKind": "plan"}
            )
            self.report.tool_running(call_id, tool_input=None, invocation_message="Planning")
            self._plan = (call_id, entries)
        call_id = self._plan[0]
        self._plan = (call_id, entries)
        done = sum(1 for e in entries if e.status == "completed")
        now = next((e.content for e in entries if e.status == "in_progress"), None)
        line = f"{done}/{len(entries)} done" + (f": {now}" if now else "")
        self.report.tool_progress(call_id, line)

    # -- questions -------------------------------------------------------------------
    async def permission(
        self,
        tool_call: schema.ToolCallUpdate,
        options: Sequence[schema.PermissionOption],
        roots: Sequence[str],
    ) -> str | None:
        """Ask a person about ``tool_call``; the chosen option's id, or None (cancelled)."""
        call = self.calls.get(tool_call.tool_call_id)
        if call is None:
            call = self.calls[tool_call.tool_call_id] = Call(tool_call.tool_call_id)
            call.merge(tool_call)
            self._start(call)
        else:
            call.merge(tool_call)
        if call.phase in ("denied", "done"):
            return None
        offered = [
            ApprovalOption(o.option_id, o.name, "approve" if o.kind.startswith("allow") else "deny")
            for o in options
        ]
        edits = [
            PendingEdit(_file_uri(item.path, roots), after=item.new_text, before=item.old_text)
            for item in call.content
            if isinstance(item, schema.FileEditToolCallContent)
        ]
        call.phase = "asked"
        try:
            approval = await self.report.tool_approval(
                call.id,
                tool_input=call.tool_input,
                invocation_message=call.message,
                options=offered,
                edits=edits,
            )
        except TurnEnded:
            return None
        chosen = _chosen(approval, options)
        call.phase = "running" if approval.approved else "denied"
        return chosen

    def finish(self) -> None:
        """The turn is over: the plan's call ends, and calls the agent left open end as stopped."""
        if self.ended:
            return
        self.ended = True
        if self._plan is not None:
            call_id, entries = self._plan
            self.report.tool_complete(
                call_id,
                success=True,
                past_tense_message="Plan",
                content=[{"type": "text", "text": plan_text(entries)}],
            )
            self._plan = None
        for call in self.calls.values():
            if call.phase not in ("denied", "done", "asked"):
                call.phase = "done"
                self.report.tool_complete(
                    call.id,
                    success=False,
                    past_tense_message=call.message,
                    error="the turn ended before the agent said the call finished",
                )


def _chosen(approval: Approval, options: Sequence[schema.PermissionOption]) -> str | None:
    if approval.selected_option_id and any(
        o.option_id == approval.selected_option_id for o in options
    ):
        return approval.selected_option_id
    # Approved or denied without naming an option: the agent's first of that kind.
    wanted = (
        ("allow_once", "allow_always") if approval.approved else ("reject_once", "reject_always")
    )
    for kind in wanted:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


def _file_uri(path: str, roots: Sequence[str]) -> str:
    target = Path(path)
    if not target.is_absolute() and roots:
        target = Path(roots[0]) / target
    return target.as_uri()
