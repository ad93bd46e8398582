"""How the harness's tools read in a chat: their kind, what a call says it does, and did."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ahpcore.ports.backend import PendingEdit

#: The harness's tool names by the kind the reference client draws them as.
KINDS: Mapping[str, str] = {
    "Bash": "terminal",
    "BashOutput": "terminal",
    "KillShell": "terminal",
    "Read": "read",
    "NotebookRead": "read",
    "Grep": "search",
    "Glob": "search",
    "WebSearch": "search",
    "ToolSearch": "search",
    "Task": "subagent",
    "Agent": "subagent",
}

#: Tools that run a subagent (a child chat).
SUBAGENT_TOOLS = frozenset({"Task", "Agent"})

#: Tools whose approval carries a file edit.
EDIT_TOOLS = frozenset({"Write", "Edit", "MultiEdit"})

#: The SDK MCP server that carries the tools clients provide (``<clientId>__<name>``)
#: and the host's own server tools (bare names, never with ``__``).
CLIENT_SERVER = "ahp"


def pending_edits(name: str, tool_input: Mapping[str, Any]) -> list[PendingEdit]:
    """What a Write, Edit or MultiEdit would leave in its file, for the approval to show."""
    if name not in EDIT_TOOLS or not tool_input.get("file_path"):
        return []
    path = Path(str(tool_input["file_path"]))
    try:
        before: str | None = path.read_text()
    except (OSError, UnicodeDecodeError):
        before = None
    if name == "Write":
        after = str(tool_input.get("content", ""))
    else:
        edits = tool_input.get("edits") if name == "MultiEdit" else [tool_input]
        after = before or ""
        for edit in edits or ():
            old, new = str(edit.get("old_string", "")), str(edit.get("new_string", ""))
            after = (
                after.replace(old, new) if edit.get("replace_all") else after.replace(old, new, 1)
            )
    return [PendingEdit(path.as_uri(), after, before)]


def tool_meta(name: str) -> dict[str, Any] | None:
    kind = KINDS.get(name)
    return {"toolKind": kind} if kind else None


def mcp_parts(name: str) -> tuple[str, str] | None:
    """``mcp__<server>__<tool>`` as (server, tool)."""
    if not name.startswith("mcp__"):
        return None
    server, _, tool = name[5:].partition("__")
    return (server, tool) if server and tool else None


def client_tool_name(name: str) -> str | None:
    """The name a client gave its tool, when ``name`` is one on the ``ahp`` server."""
    mcp = mcp_parts(name)
    if mcp is None or mcp[0] != CLIENT_SERVER or "__" not in mcp[1]:
        return None
    return mcp[1]


def is_server_tool(name: str) -> bool:
    """One of the host's own tools, carried on the ``ahp`` server beside clients' tools."""
    mcp = mcp_parts(name)
    return mcp is not None and mcp[0] == CLIENT_SERVER and "__" not in mcp[1]


def _short(value: Any, limit: int = 80) -> str:
    text = str(value).strip().splitlines()[0] if str(value).strip() else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _subject(name: str, tool_input: Mapping[str, Any]) -> str | None:
    for key in ("command", "file_path", "notebook_path", "pattern", "path", "url", "query"):
        if key in tool_input:
            return _short(tool_input[key])
    if name in ("Task", "Agent"):
        return _short(tool_input.get("description", ""))
    return None


_VERBS: Mapping[str, tuple[str, str]] = {
    "Bash": ("Run", "Ran"),
    "Read": ("Read", "Read"),
    "Write": ("Write", "Wrote"),
    "Edit": ("Edit", "Edited"),
    "MultiEdit": ("Edit", "Edited"),
    "Grep": ("Search for", "Searched for"),
    "Glob": ("Find", "Found"),
    "WebFetch": ("Fetch", "Fetched"),
    "WebSearch": ("Search the web for", "Searched the web for"),
    "Task": ("Delegate", "Delegated"),
    "Agent": ("Delegate", "Delegated"),
}


def approval_title(name: str, tool_input: Mapping[str, Any]) -> str:
    """What a call that asks first asks, in a line (the CLI's own title wins when it gives one)."""
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    file = Path(str(path)).name if path else None
    if name in KINDS and KINDS[name] == "terminal":
        return "Run this command?"
    if name == "Write":
        return f"Write {file}?" if file else "Write a file?"
    if name in EDIT_TOOLS or name == "NotebookEdit":
        return f"Edit {file}?" if file else "Edit a file?"
    if name == "WebFetch" and tool_input.get("url"):
        return f"Fetch {_short(tool_input['url'])}?"
    if name in SUBAGENT_TOOLS:
        return f"Start the {tool_input.get('subagent_type') or 'general-purpose'} subagent?"
    mcp = mcp_parts(name)
    if mcp is not None:
        return f"Run {mcp[1]} from {mcp[0]}?"
    return f"Allow {name}?"


def invocation_message(name: str, tool_input: Mapping[str, Any]) -> str:
    verb = _VERBS.get(name, ("Run", "Ran"))[0]
    subject = _subject(name, tool_input)
    return f"{verb} `{subject}`" if subject else f"{verb} `{name}`"


def past_tense_message(name: str, tool_input: Mapping[str, Any]) -> str:
    verb = _VERBS.get(name, ("Run", "Ran"))[1]
    subject = _subject(name, tool_input)
    return f"{verb} `{subject}`" if subject else f"{verb} `{name}`"


def result_content(content: Any) -> list[dict[str, Any]]:
    """A tool result's content as protocol ToolResultContent (text only)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, Mapping) and item.get("type") == "text":
            parts.append({"type": "text", "text": str(item.get("text", ""))})
        elif isinstance(item, Mapping):
            parts.append({"type": "text", "text": json.dumps(item)[:2000]})
    return parts
