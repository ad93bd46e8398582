"""ahp-claude: Claude Code sessions for ahp, through claude-agent-sdk and the CLI it ships."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ahp_claude.backend import PROVIDER, ClaudeBackend

if TYPE_CHECKING:
    from ahp_claude.agent import ClaudeAgent, ClaudeTurnFailed

__all__ = ["PROVIDER", "ClaudeAgent", "ClaudeBackend", "ClaudeTurnFailed"]


def __getattr__(name: str) -> Any:
    # The agent pulls in claude-agent-sdk: loaded when asked for, not with the plugin.
    if name in ("ClaudeAgent", "ClaudeTurnFailed"):
        from ahp_claude import agent

        return getattr(agent, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
