"""One pi turn told to a ``TurnReporter``: live from RPC events, or rebuilt from a session file.

Both paths go through the same calls (``assistant_done``, ``tool_result`` and
the tool's start), so a reopened chat reads as it did live. pi runs its tools
without asking anybody, so every call is reported running, never waiting.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ahpcore.ports.backend import Cost, TurnReporter

#: pi's built-in tools the reference client draws with a renderer of its own (``_meta.toolKind``).
TOOL_KINDS = {
    "bash": "terminal",
    "read": "read",
    "grep": "search",
    "find": "search",
    "ls": "search",
}
#: What each built-in tool is said to do, from the argument that names what it works on.
DOING = {
    "bash": ("Running `{}`", "Ran `{}`", "command"),
    "read": ("Reading {}", "Read {}", "path"),
    "write": ("Writing {}", "Wrote {}", "path"),
    "edit": ("Editing {}", "Edited {}", "path"),
    "grep": ("Searching for {}", "Searched for {}", "pattern"),
    "find": ("Finding {}", "Found {}", "pattern"),
    "ls": ("Listing {}", "Listed {}", "path"),
}


def said(tool: str, args: Any, *, past: bool) -> str:
    """A line about a call: ``Reading a.txt`` / ``Read a.txt``; the tool's name otherwise."""
    doing = DOING.get(tool)
    if doing is not None and isinstance(args, Mapping):
        subject = args.get(doing[2])
        if isinstance(subject, str) and subject:
            line = subject.strip().splitlines()[0] if subject.strip() else subject
            return (doing[1] if past else doing[0]).format(line[:120])
    return tool


def text_content(content: Any) -> list[dict[str, Any]]:
    """pi's content blocks as result content: its text (images are left out)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    found: list[dict[str, Any]] = []
    for block in content or ():
        if isinstance(block, Mapping) and block.get("type") == "text" and block.get("text"):
            found.append({"type": "text", "text": str(block["text"])})
    return found


def message_text(content: Any) -> str:
    return "".join(str(b["text"]) for b in text_content(content))


@dataclass
class Spent:
    """What a turn's model calls cost, summed over its assistant messages."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0
    model: str | None = None
    calls: int = 0

    def add(self, message: Mapping[str, Any]) -> None:
        usage = message.get("usage")
        if not isinstance(usage, Mapping):
            return
        self.calls += 1
        self.input += int(usage.get("input") or 0)
        self.output += int(usage.get("output") or 0)
        self.cache_read += int(usage.get("cacheRead") or 0)
        self.cache_write += int(usage.get("cacheWrite") or 0)
        cost = usage.get("cost")
        if isinstance(cost, Mapping):
            self.cost += float(cost.get("total") or 0)
        if message.get("provider") and message.get("model"):
            self.model = f"{message['provider']}/{message['model']}"


@dataclass
class Call:
    id: str
    name: str
    args: Any = None
    #: started, running, done
    phase: str = "started"


@dataclass
class TurnView:
    """Tells one turn to ``report``."""

    report: TurnReporter
    calls: dict[str, Call] = field(default_factory=dict)
    spent: Spent = field(default_factory=Spent)
    #: Why the model's last answer failed, if it did (pi's ``errorMessage``).
    error: str | None = None
    aborted: bool = False
    ended: bool = False

    # -- live: RPC events ------------------------------------------------------------
    def event(self, event: Mapping[str, Any]) -> None:
        if self.ended:
            return  # a cancelled turn draining: nobody is listening
        kind = event.get("type")
        if kind == "message_update":
            self._streamed(event.get("assistantMessageEvent") or {})
        elif kind == "message_end":
            message = event.get("message") or {}
            if message.get("role") == "assistant":
                self.assistant_done(message)
        elif kind == "tool_execution_start":
            call = self._call(str(event.get("toolCallId")), str(event.get("toolName") or "tool"))
            call.args = event.get("args", call.args)
            self.running(call)
        elif kind == "tool_execution_update":
            partial = event.get("partialResult") or {}
            lines = message_text(partial.get("content")).strip().splitlines()
            if lines:
                self.report.tool_progress(str(event.get("toolCallId")), lines[-1][:200])
        elif kind == "tool_execution_end":
            result = event.get("result") or {}
            self.tool_result(
                str(event.get("toolCallId")),
                str(event.get("toolName") or "tool"),
                result.get("content"),
                is_error=bool(event.get("isError")),
            )
        elif kind == "compaction_end" and event.get("result"):
            self.report.notification(
                "pi compacted the conversation", meta={"ahp.compaction": str(event.get("reason"))}
            )
        elif kind == "auto_retry_start":
            self.report.activity(f"Retrying ({event.get('errorMessage') or 'a failed call'})")
        elif kind == "auto_retry_end":
            self.report.activity(None)

    def _streamed(self, delta: Mapping[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("delta"):
            self.report.text(str(delta["delta"]))
        elif kind == "thinking_delta" and delta.get("delta"):
            self.report.reasoning(str(delta["delta"]))
        elif kind == "toolcall_start":
            block = _block(delta)
            if block.get("id"):
                self._call(str(block["id"]), str(block.get("name") or "tool"))
        elif kind == "toolcall_delta" and delta.get("delta"):
            block = _block(delta)
            if block.get("id") and str(block["id"]) in self.calls:
                self.report.tool_input(str(block["id"]), str(delta["delta"]))
        elif kind == "toolcall_end":
            block = delta.get("toolCall") or {}
            if block.get("id"):
                self._call(str(block["id"]), str(block.get("name") or "tool")).args = block.get(
                    "arguments"
                )

    # -- both: whole messages ------------------------------------------------------------
    def assistant_message(self, message: Mapping[str, Any]) -> None:
        """A whole assistant message, as a session file keeps it (rebuilding)."""
        for block in message.get("content") or ():
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                self.report.text(str(block["text"]))
            elif kind == "thinking" and block.get("thinking"):
                self.report.reasoning(str(block["thinking"]))
            elif kind == "toolCall" and block.get("id"):
                call = self._call(str(block["id"]), str(block.get("name") or "tool"))
                call.args = block.get("arguments")
                if call.args is not None:
                    self.report.tool_input(call.id, json.dumps(call.args))
        self.assistant_done(message)

    def assistant_done(self, message: Mapping[str, Any]) -> None:
        self.spent.add(message)
        stop = message.get("stopReason")
        if stop == "error":
            self.error = str(message.get("errorMessage") or "the model call failed")
        elif stop == "aborted":
            self.aborted = True

    def tool_result(self, call_id: str, name: str, content: Any, *, is_error: bool) -> None:
        call = self._call(call_id, name)
        if call.phase == "done":
            return
        self.running(call)
        call.phase = "done"
        result = text_content(content)
        self.report.tool_complete(
            call.id,
            success=not is_error,
            past_tense_message=said(call.name, call.args, past=True),
            content=result,
            error=message_text(content) or "the tool failed" if is_error else None,
        )

    def _call(self, call_id: str, name: str) -> Call:
        call = self.calls.get(call_id)
        if call is None:
            call = self.calls[call_id] = Call(call_id, name)
            meta: dict[str, Any] = {}
            if name in TOOL_KINDS:
                meta["toolKind"] = TOOL_KINDS[name]
            self.report.tool_start(call_id, name, display_name=name, meta=meta or None)
        return call

    def running(self, call: Call) -> None:
        if call.phase != "started":
            return
        call.phase = "running"
        self.report.tool_running(
            call.id,
            tool_input=json.dumps(call.args) if call.args is not None else None,
            invocation_message=said(call.name, call.args, past=False),
        )

    def finish(self) -> None:
        """The turn is over: calls left open fail, and what it spent is said."""
        if self.ended:
            return
        self.ended = True
        for call in self.calls.values():
            if call.phase != "done":
                call.phase = "done"
                self.report.tool_complete(
                    call.id,
                    success=False,
                    past_tense_message=said(call.name, call.args, past=True),
                    error="the turn ended before the tool finished",
                )
        spent = self.spent
        if spent.calls:
            self.report.usage(
                input_tokens=spent.input,
                output_tokens=spent.output,
                model=spent.model,
                cache_read_tokens=spent.cache_read or None,
                cache_write_tokens=spent.cache_write or None,
                cost=Cost(round(spent.cost, 6)) if spent.cost else None,
            )


def _block(delta: Mapping[str, Any]) -> Mapping[str, Any]:
    """The content block a streaming delta is about, from the partial message it carries."""
    partial = delta.get("partial") or {}
    content: Sequence[Any] = partial.get("content") or ()
    index = delta.get("contentIndex")
    if isinstance(index, int) and 0 <= index < len(content) and isinstance(content[index], Mapping):
        return content[index]
    return {}
