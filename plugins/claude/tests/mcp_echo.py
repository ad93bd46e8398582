"""A tiny MCP server on stdio (JSON-RPC 2.0, one message a line) with one tool, ``echo``.

Written by hand rather than with the ``mcp`` package so a CLI starts it in
milliseconds; it answers what the Claude Code CLI asks of a stdio server.
"""

from __future__ import annotations

import json
import sys

TOOLS = [
    {
        "name": "echo",
        "description": "Say the text back",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    }
]


def answer(request: dict) -> dict | None:
    method, ident = request.get("method"), request.get("id")
    if ident is None:
        return None  # a notification (initialized, cancelled): nothing to say
    if method == "initialize":
        version = (request.get("params") or {}).get("protocolVersion") or "2025-06-18"
        result: dict = {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "echo", "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        text = ((request.get("params") or {}).get("arguments") or {}).get("text", "")
        result = {"content": [{"type": "text", "text": str(text)}]}
    elif method in ("ping", "resources/list", "prompts/list"):
        result = {"resources": []} if method == "resources/list" else {}
        if method == "prompts/list":
            result = {"prompts": []}
    else:
        return {
            "jsonrpc": "2.0",
            "id": ident,
            "error": {"code": -32601, "message": f"no method {method}"},
        }
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
