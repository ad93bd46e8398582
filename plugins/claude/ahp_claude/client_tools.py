"""Tools clients provide, offered to the CLI through one in-process MCP server named ``ahp``,
with the host's own server tools beside them (bare names; a client's carry ``<clientId>__``).

The MCP handler learns the tool's name and input but not the model's tool-use id,
so a call is matched to the tool_use block the model streamed: by tool name, then
by input, oldest first.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ahp_claude import sdk
from ahp_claude.tools import CLIENT_SERVER

#: (tool name as the client named it, input) -> the ToolCallResult the client gave.
Runner = Callable[[str, dict[str, Any]], Awaitable[Mapping[str, Any]]]


def server(
    definitions: Sequence[Mapping[str, Any]],
    run: Runner,
    server_definitions: Sequence[Mapping[str, Any]] = (),
    run_server: Runner | None = None,
) -> sdk.McpSdkServerConfig | None:
    offered = [(d, run) for d in definitions]
    if run_server is not None:
        offered += [(d, run_server) for d in server_definitions]
    tools: list[sdk.SdkMcpTool[Any]] = []
    for definition, runner in offered:
        name = str(definition.get("name", ""))
        if not name:
            continue
        schema = definition.get("inputSchema") or {"type": "object", "properties": {}}

        async def handler(
            arguments: dict[str, Any], name: str = name, runner: Runner = runner
        ) -> dict[str, Any]:
            result = await runner(name, dict(arguments))
            return to_mcp(result)

        tools.append(
            sdk.SdkMcpTool(
                name=name,
                description=str(definition.get("description") or definition.get("title") or name),
                input_schema=dict(schema),
                handler=handler,
            )
        )
    return sdk.create_sdk_mcp_server(CLIENT_SERVER, tools=tools) if tools else None


def to_mcp(result: Mapping[str, Any]) -> dict[str, Any]:
    """A protocol ToolCallResult as an MCP tool result."""
    content = []
    for item in result.get("content") or ():
        if item.get("type") == "text":
            content.append({"type": "text", "text": str(item.get("text", ""))})
        else:
            content.append({"type": "text", "text": json.dumps(item)})
    if not content and result.get("error"):
        content.append({"type": "text", "text": str(result["error"].get("message", "failed"))})
    return {"content": content, "is_error": not result.get("success", True)}
