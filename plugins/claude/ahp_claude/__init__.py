"""ahp-claude: Claude Code sessions for ahp, through claude-agent-sdk and the CLI it ships."""

from ahp_claude.agent import ClaudeAgent, ClaudeTurnFailed
from ahp_claude.backend import PROVIDER, ClaudeBackend

__all__ = ["PROVIDER", "ClaudeAgent", "ClaudeBackend", "ClaudeTurnFailed"]
