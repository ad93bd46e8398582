"""A remote turn's parts, told to a reporter here: what a snapshot of a remote chat holds.

Used to rebuild a past conversation (``Backend.read_transcript``) and to catch up
with a subagent's chat that started before this host watched it. Also what a
remote tool result may show here (``tool_content``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ahpcore.ports.backend import Approval, InputAnswer, TranscriptReader, TurnReporter

#: Content kinds of a tool result that carry data rather than point at the remote.
_KEPT_CONTENT = {"text", "embeddedResource"}


def plain(value: Any) -> str:
    """A ``StringOrMarkdown`` as text."""
    if isinstance(value, Mapping):
        return str(value.get("markdown", ""))
    return "" if value is None else str(value)


def tool_input(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


def tool_content(
    items: Sequence[Any] | None,
    machine: str,
    terminal: Callable[[str], str | None] = lambda uri: None,
) -> list[dict[str, Any]] | None:
    """A remote tool result's content as this host may show it: data kept, links named,
    a terminal mirrored here (``terminal`` answers its URI here) pointing at the mirror."""
    if items is None:
        return None
    shown: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind in _KEPT_CONTENT:
            shown.append(dict(item))
        elif kind == "terminal":
            here = terminal(str(item.get("resource")))
            if here is not None:
                shown.append({**item, "resource": here})
            else:
                shown.append(
                    {"type": "text", "text": f"(terminal on {machine}: {item.get('title')})"}
                )
        elif kind == "subagent":
            shown.append({"type": "text", "text": f"(subagent on {machine}: {item.get('title')})"})
        elif kind == "fileEdit":
            after = item.get("after") or item.get("before") or {}
            name = after.get("uri") if isinstance(after, Mapping) else None
            shown.append({"type": "text", "text": f"(edited on {machine}: {name or 'a file'})"})
        elif kind == "resource":
            shown.append({"type": "text", "text": f"(on {machine}: {item.get('uri')})"})
    return shown


# -- a past turn, told again ---------------------------------------------------------------------
def subagent_chats(turn: Mapping[str, Any]) -> list[str]:
    """The remote chats the subagents of a turn's tool calls ran in."""
    found = []
    for part in turn.get("responseParts") or ():
        call = part.get("toolCall") if isinstance(part, Mapping) else None
        for item in (call or {}).get("content") or ():
            if isinstance(item, Mapping) and item.get("type") == "subagent":
                found.append(str(item.get("resource")))
    return found


def rebuild(
    reader: TranscriptReader,
    turn: Mapping[str, Any],
    machine: str,
    children: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Tell one turn of a remote chat's snapshot through ``reader``, as it ran;
    ``children`` holds the remote subagent chats its calls ran (URI -> chat state)."""
    report = reader.turn(
        str(turn["id"]), dict(turn.get("message") or {}), started_at=turn.get("startedAt")
    )
    error = tell_parts(report, turn.get("responseParts") or (), machine, children=children)
    usage = turn.get("usage")
    if isinstance(usage, Mapping):
        report.usage(
            input_tokens=int(usage.get("inputTokens") or 0),
            output_tokens=int(usage.get("outputTokens") or 0),
            model=usage.get("model"),
            cache_read_tokens=usage.get("cacheReadTokens"),
            meta=usage.get("_meta"),
        )
    state = turn.get("state")
    reader.end_turn(
        state=state if state in ("complete", "cancelled", "error") else "complete",
        duration_ms=int(turn.get("duration") or 0),
        error=error if state == "error" else None,
    )


def tell_parts(
    report: TurnReporter,
    parts: Sequence[Any],
    machine: str,
    terminal: Callable[[str], str | None] = lambda uri: None,
    *,
    children: Mapping[str, Mapping[str, Any]] | None = None,
) -> str | None:
    """Tell the response parts of a turn that ran there, as they ran; the error it ended
    with, if one of them says so."""
    error: str | None = None
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("kind")
        if kind == "markdown":
            report.text(str(part.get("content", "")))
        elif kind == "reasoning":
            report.reasoning(str(part.get("content", "")))
        elif kind == "systemNotification":
            report.notification(plain(part.get("content")), meta=part.get("_meta"))
        elif kind == "toolCall":
            tell_tool(report, part.get("toolCall") or {}, machine, terminal, children=children)
        elif kind == "inputRequest":
            request = part.get("request") or {}
            said = part.get("response")
            response: Literal["accept", "decline", "cancel"] = (
                said if said in ("accept", "decline") else "cancel"
            )
            report.asked(
                list(request.get("questions") or ()),
                InputAnswer(response, dict(request.get("answers") or {})),
                message=request.get("message"),
            )
        elif kind == "error":
            error = str((part.get("error") or {}).get("message") or "the turn failed")
    return error


def tell_tool(
    report: TurnReporter,
    call: Mapping[str, Any],
    machine: str,
    terminal: Callable[[str], str | None] = lambda uri: None,
    *,
    children: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """One tool call as its part has it now: started, asked and answered, run, completed;
    a subagent it ran told in a child chat when its remote chat is in ``children``."""
    call_id = str(call.get("toolCallId", ""))
    contributor = call.get("contributor") or {}
    report.tool_start(
        call_id,
        str(call.get("toolName", "")),
        display_name=call.get("displayName"),
        intention=call.get("intention"),
        meta=call.get("_meta"),
        mcp_server=contributor.get("customizationId") if contributor.get("kind") == "mcp" else None,
    )
    raw = call.get("toolInput")
    given = raw if isinstance(raw, str) or raw is None else None
    message = plain(call.get("invocationMessage"))
    status = call.get("status")
    if status in ("streaming", "pending-confirmation"):
        return  # not run yet: a live relay asks for the approval itself
    asked = call.get("confirmed") in ("user-action", "setting")
    if status == "cancelled":
        reason = call.get("reason")
        report.tool_decided(
            call_id,
            tool_input=given,
            invocation_message=message,
            approval=Approval(False, reason="skipped" if reason == "skipped" else "denied")
            if reason in ("denied", "skipped")
            else None,
        )
        return
    if asked:
        report.tool_decided(
            call_id, tool_input=given, invocation_message=message, approval=Approval(True)
        )
    else:
        report.tool_running(call_id, tool_input=given, invocation_message=message)
    content = list(call.get("content") or ()) if call.get("content") is not None else None
    for item in content or ():
        child = (
            (children or {}).get(str(item.get("resource"))) if isinstance(item, Mapping) else None
        )
        if child is None or item.get("type") != "subagent":
            continue
        content = [c for c in content or () if c is not item]  # the child chat names it here
        sub = report.subagent(
            call_id, str(item.get("agentName") or "subagent"), str(item.get("title") or "")
        )
        turns = [t for t in child.get("turns") or () if isinstance(t, Mapping)]
        if turns:
            tell_parts(sub, turns[-1].get("responseParts") or (), machine, terminal)
    if status == "completed":
        error = call.get("error")
        report.tool_complete(
            call_id,
            success=bool(call.get("success")),
            past_tense_message=plain(call.get("pastTenseMessage")),
            content=tool_content(content, machine, terminal),
            error=str(error.get("message")) if isinstance(error, Mapping) else None,
        )
