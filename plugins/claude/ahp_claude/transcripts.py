"""The CLI's own transcripts (``<config dir>/projects/<project>/<session id>.jsonl``), read directly.

A turn starts at a user entry that carries the person's words (not a tool result,
not a command the harness wrote for itself); everything up to the next one is what
the agent did. Turns are rebuilt through the host's reporter, the same one live
turns use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ahp_claude import questions, tools
from ahp_claude.background import notification_message
from ahpcore.sessions.contract import Approval, InputAnswer, TranscriptReader

INTERRUPTED = "[Request interrupted by user"
DENIED = ("denied this tool call", "doesn't want to proceed", "user rejected")


def find(config_dir: Path, session_id: str) -> Path | None:
    projects = config_dir / "projects"
    if not projects.is_dir() or "/" in session_id or not session_id:
        return None
    for path in projects.glob(f"*/{session_id}.jsonl"):
        return path
    return None


def read_entries(path: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    with path.open("rb") as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line the CLI was still writing
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


def prompt_text(entry: Mapping[str, Any]) -> str | None:
    """The person's words if ``entry`` starts a turn, else None."""
    if entry.get("type") != "user" or entry.get("isSidechain") or entry.get("isMeta"):
        return None
    message = entry.get("message") or {}
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        if any(isinstance(p, dict) and p.get("type") == "tool_result" for p in content):
            return None
        text = "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    else:
        return None
    stripped = text.lstrip()
    # What the harness writes for itself (a /model switch, command output) is no turn.
    if stripped.startswith(("<command-", "<local-command", INTERRUPTED)):
        return None
    return text


def turns(
    entries: Iterable[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]:
    found: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]] = []
    for entry in entries:
        if prompt_text(entry) is not None:
            found.append((entry, []))
        elif found and entry.get("type") in ("assistant", "user") and not entry.get("isSidechain"):
            found[-1][1].append(entry)
    return found


def rebuild(
    entries: list[dict[str, Any]],
    reader: TranscriptReader,
    decisions: Mapping[str, Mapping[str, Any]] | None = None,
    turn_ids: Mapping[str, str] | None = None,
) -> None:
    """Every turn of a transcript through ``reader``.

    ``decisions`` says which calls asked and what the answer was; ``turn_ids`` names
    the turns whose id was not their transcript uuid.
    """
    decisions = decisions or {}
    turn_ids = turn_ids or {}
    for start, rest in turns(entries):
        text = prompt_text(start) or ""
        start_id = str(start.get("uuid"))
        report = reader.turn(
            turn_ids.get(start_id, start_id),
            # A turn the CLI began when background work ended reads as it did live.
            notification_message(start) or {"text": text, "origin": {"kind": "user"}},
            started_at=start.get("timestamp"),
        )
        calls: dict[str, tuple[str, dict[str, Any]]] = {}
        usage: dict[str, Mapping[str, Any]] = {}
        model: str | None = None
        state = "complete"
        for entry in rest:
            message = entry.get("message") or {}
            content = message.get("content")
            if entry.get("type") == "assistant":
                model = message.get("model") or model
                if message.get("id") and message.get("usage"):
                    usage[message["id"]] = message["usage"]
                for block in content if isinstance(content, list) else ():
                    _assistant_block(report, block, calls)
            elif isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        _tool_result(report, block, calls, entry.get("toolUseResult"), decisions)
                    elif isinstance(block, dict) and str(block.get("text", "")).startswith(
                        INTERRUPTED
                    ):
                        state = "cancelled"
            elif isinstance(content, str) and content.startswith(INTERRUPTED):
                state = "cancelled"
        if usage:
            # The latest call's prompt and answer: what the context held when the turn ended.
            last = list(usage.values())[-1]
            context = sum(
                int(last.get(key) or 0)
                for key in (
                    "input_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                    "output_tokens",
                )
            )
            report.usage(
                context_used=context,
                input_tokens=sum(int(u.get("input_tokens") or 0) for u in usage.values()),
                output_tokens=sum(int(u.get("output_tokens") or 0) for u in usage.values()),
                model=model,
                cache_read_tokens=sum(
                    int(u.get("cache_read_input_tokens") or 0) for u in usage.values()
                ),
            )
        reader.end_turn(state=state)  # type: ignore[arg-type]


def _assistant_block(report: Any, block: Any, calls: dict[str, tuple[str, dict[str, Any]]]) -> None:
    if not isinstance(block, dict):
        return
    kind = block.get("type")
    if kind == "text":
        report.text(str(block.get("text", "")))
    elif kind == "thinking":
        report.reasoning(str(block.get("thinking", "")))
    elif kind == "tool_use":
        call_id, name = str(block.get("id")), str(block.get("name"))
        tool_input = dict(block.get("input") or {})
        calls[call_id] = (name, tool_input)
        if name == "AskUserQuestion":
            return
        mcp = tools.mcp_parts(name)
        if mcp is not None and mcp[0] == tools.CLIENT_SERVER:
            report.tool_start(call_id, mcp[1])
        else:
            report.tool_start(
                call_id, name, meta=tools.tool_meta(name), mcp_server=mcp[0] if mcp else None
            )
        report.tool_input(call_id, json.dumps(tool_input))


def _tool_result(
    report: Any,
    block: Mapping[str, Any],
    calls: dict[str, tuple[str, dict[str, Any]]],
    result: Any,
    decisions: Mapping[str, Mapping[str, Any]],
) -> None:
    call_id = str(block.get("tool_use_id"))
    if call_id not in calls:
        return
    name, tool_input = calls.pop(call_id)
    content = tools.result_content(block.get("content"))
    said = " ".join(c["text"] for c in content)
    if name == "AskUserQuestion":
        asked = questions.to_protocol(tool_input)
        recorded = result.get("answers") if isinstance(result, Mapping) else None
        answers = questions.answers_from_tool(asked, recorded or {})
        report.asked(asked, InputAnswer("accept" if answers else "decline", answers))
        return
    invocation = tools.invocation_message(name, tool_input)
    as_json = json.dumps(tool_input)
    decided = decisions.get(call_id)
    if decided is not None and decided.get("asked"):
        approval = (
            Approval(
                bool(decided.get("approved")),
                edited_input=decided.get("edited"),
                reason=decided.get("reason"),
            )
            if "approved" in decided
            else None
        )
        report.tool_decided(
            call_id,
            tool_input=as_json,
            invocation_message=invocation,
            approval=approval,
            title=decided.get("title"),
        )
        if approval is None or not approval.approved:
            return
    elif block.get("is_error") and any(word in said for word in DENIED):
        report.tool_decided(
            call_id,
            tool_input=as_json,
            invocation_message=invocation,
            approval=Approval(False, reason="denied"),
        )
        return
    else:
        report.tool_running(call_id, tool_input=as_json, invocation_message=invocation)
    error = bool(block.get("is_error"))
    report.tool_complete(
        call_id,
        success=not error,
        past_tense_message=tools.past_tense_message(name, tool_input),
        content=content,
        error=(said or "failed") if error else None,
    )


def _turn_span(entries: list[dict[str, Any]], *ids: str) -> tuple[int, int] | None:
    """Indexes of the first and last entry of the turn whose start has one of ``ids``."""
    start = None
    for index, entry in enumerate(entries):
        if prompt_text(entry) is None:
            continue
        if start is not None:
            return start, index - 1
        if entry.get("uuid") in ids:
            start = index
    return (start, len(entries) - 1) if start is not None else None


def turn_end_uuid(path: Path, *ids: str) -> str | None:
    entries = read_entries(path)
    span = _turn_span(entries, *ids)
    if span is None:
        return None
    for entry in reversed(entries[span[0] : span[1] + 1]):
        if entry.get("uuid") and entry.get("type") in ("assistant", "user"):
            return str(entry["uuid"])
    return None


def turn_text(path: Path, *ids: str) -> str:
    entries = read_entries(path)
    span = _turn_span(entries, *ids)
    if span is None:
        return ""
    said: list[str] = []
    for entry in entries[span[0] : span[1] + 1]:
        content = (entry.get("message") or {}).get("content")
        if entry.get("type") == "assistant" and isinstance(content, list):
            said += [str(b.get("text", "")) for b in content if b.get("type") == "text"]
    return "\n".join(said)


def truncate(path: Path, keep: str | None, turn_id: str | None) -> None:
    """Drop every turn after the kept one (all turns for None); the file keeps its header."""
    entries = read_entries(path)
    if keep is None:
        cut = next((i for i, e in enumerate(entries) if prompt_text(e) is not None), len(entries))
    else:
        span = _turn_span(entries, keep, turn_id or keep)
        if span is None:
            raise LookupError(f"the transcript has no turn {turn_id!r}")
        cut = span[1] + 1
    kept = entries[:cut]
    temporary = path.with_suffix(".jsonl.tmp")
    temporary.write_text("".join(json.dumps(e) + "\n" for e in kept))
    temporary.replace(path)
