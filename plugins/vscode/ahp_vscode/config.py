"""The root config keys the VS Code window pushes on connecting (``root/configChanged``).

A key no plugin declares is refused by name, and VS Code pushes its keys in
one action: without these, part of what the window sends would bounce on
every connection. Declared here, they are kept and read back like any root
config; each description says whether this host acts on it.
"""

from __future__ import annotations

from typing import Any

_KEPT = "Kept for the VS Code window; this host does not act on it."


def _flag(title: str, description: str = _KEPT) -> dict[str, Any]:
    return {"type": "boolean", "title": title, "description": description}


def _object(title: str, description: str = _KEPT) -> dict[str, Any]:
    return {"type": "object", "title": title, "description": description}


ROOT_CONFIG: dict[str, dict[str, Any]] = {
    "telemetryLevel": {
        "type": "string",
        "title": "Telemetry level",
        "description": "The most restrictive telemetry level of the connected VS Code windows. "
        "With ahp-otlp and --otlp-endpoint, the outside collector gets everything at all, "
        "error and fatal log records at error, fatal ones at crash, nothing at off; the "
        "ahp-otlp: channels are not held to it.",
        "enum": ["all", "error", "crash", "off"],
    },
    "terminalAutoApproveEnabled": _flag(
        "Terminal auto-approve",
        "Whether terminalAutoApproveRules apply: a shell command an agent asks to run is "
        "run unasked when the rules approve it and refused when one denies it; a !command "
        "one of them denies is refused.",
    ),
    "terminalAutoApproveRules": _object(
        "Terminal auto-approve rules",
        "Command patterns VS Code approves (true), denies (false) or leaves alone (null), "
        "as chat.tools.terminal.autoApprove spells them. With terminalAutoApproveEnabled, "
        "an agent's shell command they approve runs without asking, and one a deny rule "
        "names (or a !command it names) is refused, saying which rule.",
    ),
    "disableRepoInfoTelemetry": _flag("No repository telemetry"),
    "workspaceTrust": _object("Workspace trust", "Folders the VS Code window trusts. " + _KEPT),
    "sessionSyncEnabled": _flag("Session sync"),
    "codexAgentEnabled": _flag("Codex agent"),
    "globalAutoApproveEnabled": _flag("Global auto-approve"),
    "autoReplyEnabled": _flag("Auto reply"),
    "preferLongContextEnabled": _flag("Prefer long context"),
    "systemProxyEnabled": _flag("System proxy"),
    "migrateLegacyCopilotCliEnabled": _flag("Migrate the legacy Copilot CLI"),
    "copilotMultiRootEnabled": _flag("Copilot multi-root"),
    "claudeMultiRootEnabled": _flag("Claude multi-root"),
    "codexMultiRootEnabled": _flag("Codex multi-root"),
    "editTelemetryEnabled": _flag("Edit telemetry"),
    "mcpServers": _object(
        "MCP servers",
        "VS Code's MCP servers. " + _KEPT + " Agents read their own MCP configuration.",
    ),
    "permissions": _object("Permissions", "VS Code's allow and deny lists. " + _KEPT),
    # Read by the core, which serves the artifact tools (root config "artifactTools").
    "artifactTools": _flag(
        "Artifact tools",
        "chat.artifactTools.enabled: false takes add_artifact_or_reference and its two "
        "siblings off every session at once, and agents are no longer told when to record "
        "what a session produced. Unset, the tools are offered.",
    ),
}
