"""claude-agent-sdk, loaded when a chat's first CLI starts rather than with a chat.

Importing the SDK takes one to two seconds of CPU (it brings the MCP SDK and its
pydantic models). A session is created, or reopened from its transcript, without
it; the backend loads it in a worker thread (``load``) before the first CLI starts,
so neither the event loop nor a client's ``createSession`` waits on the import.
Modules of this plugin name the SDK's classes as ``sdk.<Name>``: the names resolve
on first use, once it is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from claude_agent_sdk import AssistantMessage as AssistantMessage
    from claude_agent_sdk import ClaudeAgentOptions as ClaudeAgentOptions
    from claude_agent_sdk import ClaudeSDKClient as ClaudeSDKClient
    from claude_agent_sdk import McpSdkServerConfig as McpSdkServerConfig
    from claude_agent_sdk import PermissionResultAllow as PermissionResultAllow
    from claude_agent_sdk import PermissionResultDeny as PermissionResultDeny
    from claude_agent_sdk import ResultMessage as ResultMessage
    from claude_agent_sdk import SdkMcpTool as SdkMcpTool
    from claude_agent_sdk import StreamEvent as StreamEvent
    from claude_agent_sdk import SystemMessage as SystemMessage
    from claude_agent_sdk import TextBlock as TextBlock
    from claude_agent_sdk import ThinkingBlock as ThinkingBlock
    from claude_agent_sdk import ToolPermissionContext as ToolPermissionContext
    from claude_agent_sdk import ToolResultBlock as ToolResultBlock
    from claude_agent_sdk import ToolUseBlock as ToolUseBlock
    from claude_agent_sdk import UserMessage as UserMessage
    from claude_agent_sdk import create_sdk_mcp_server as create_sdk_mcp_server


def load() -> None:
    """Import the SDK (blocking: call it in a worker thread)."""
    import claude_agent_sdk  # noqa: F401


def loaded() -> bool:
    import sys

    return "claude_agent_sdk" in sys.modules


def __getattr__(name: str) -> Any:
    import claude_agent_sdk

    try:
        value = getattr(claude_agent_sdk, name)
    except AttributeError:
        raise AttributeError(f"claude_agent_sdk has no {name!r}") from None
    globals()[name] = value  # looked up once
    return value
