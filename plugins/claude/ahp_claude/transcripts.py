"""The CLI's own transcripts (``<config dir>/projects/<project>/<session id>.jsonl``), read directly.

A turn starts at a user entry that carries the person's words or a slash command
they sent (not a tool result, not what the harness wrote for itself); everything up
to the next one is what the agent did. ``ahp_claude.rebuild`` replays the turns
through the host's reporter, the same one live turns use.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ahp_claude.tagged import between

INTERRUPTED = "[Request interrupted by user"

#: What the CLI writes as the model's answer to a prompt left unanswered when it resumes
#: a conversation (the turn before was cut off): words nobody said.
FILLER = "No response requested."
SYNTHETIC_MODEL = "<synthetic>"


def is_filler(model: Any, content: Any) -> bool:
    """Whether an assistant message is the CLI's stand-in answer, not the model's."""
    if model != SYNTHETIC_MODEL:
        return False
    if isinstance(content, list):
        texts = [
            p.get("text") if isinstance(p, Mapping) else getattr(p, "text", None) for p in content
        ]
        content = texts[0] if len(texts) == 1 else None
    return content == FILLER


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
    if entry.get("isCompactSummary") or entry.get("isVisibleInTranscriptOnly"):
        return None  # the summary a compaction left for the model, not anybody's words
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
    if stripped.startswith("<command-name>"):
        return _command(entry, stripped)
    # What the harness writes for itself (command output, an interruption) is no turn.
    if stripped.startswith(("<command-", "<local-command", INTERRUPTED)):
        return None
    return text


def _command(entry: Mapping[str, Any], text: str) -> str | None:
    """A slash command somebody sent, as they typed it.

    ``set_model`` writes a ``/model`` command of its own; a command a person sent
    carries the turn attribution the CLI gives every prompt.
    """
    name = between(text, "command-name")
    if name is None:
        return None
    command = name.strip()
    if command == "/model" and not entry.get("turnAttributionKey"):
        return None
    args = between(text, "command-args")
    said = args.strip() if args else ""
    return f"{command} {said}" if said else command


def _boundary(entry: Mapping[str, Any]) -> bool:
    return entry.get("type") == "system" and entry.get("subtype") == "compact_boundary"


def turns(
    entries: Iterable[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]:
    """Each turn's first entry and what followed it in the main conversation.

    A compaction a ``/compact`` turn asked for is written before that turn's own
    entry: a boundary goes to the turn whose entries come next.
    """
    found: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]] = []
    waiting: list[Mapping[str, Any]] = []
    for entry in entries:
        if entry.get("isSidechain"):
            continue
        if prompt_text(entry) is not None:
            found.append((entry, waiting))
            waiting = []
        elif _boundary(entry):
            waiting.append(entry)
        elif found and entry.get("type") in ("assistant", "user", "system"):
            if entry.get("isMeta") or entry.get("isCompactSummary"):
                continue
            message = entry.get("message") or {}
            if entry.get("type") == "assistant" and is_filler(
                message.get("model"), message.get("content")
            ):
                continue
            found[-1][1].extend(waiting)
            waiting = []
            found[-1][1].append(entry)
    if found:
        found[-1][1].extend(waiting)
    return found


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


def up_to(entries: list[dict[str, Any]], last: str | None) -> list[dict[str, Any]]:
    """The entries up to the one whose uuid is ``last`` (all of them for None)."""
    if last is None:
        return entries
    for index, entry in enumerate(entries):
        if entry.get("uuid") == last:
            return entries[: index + 1]
    return entries


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
    # Through an owner-only file: the CLI keeps its transcripts from other users' eyes.
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(e) + "\n" for e in kept))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
