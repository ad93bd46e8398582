"""The Claude backend: Claude Code sessions through claude-agent-sdk and the CLI it ships."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ahp_claude import transcripts
from ahp_claude.agent import ClaudeAgent, Spawn, entry_uuid
from ahp_claude.index import TranscriptIndex
from ahpcore.sessions.contract import Abilities, CatalogueRow, ChatStart, TranscriptReader

log = logging.getLogger(__name__)

PROVIDER = "claude"
API_RESOURCE = "https://api.anthropic.com"

#: Shown until a CLI has said which models it offers.
DEFAULT_MODELS: tuple[Mapping[str, Any], ...] = (
    {"id": "default", "name": "Default (recommended)"},
    {"id": "opus", "name": "Opus"},
    {"id": "sonnet", "name": "Sonnet"},
    {"id": "haiku", "name": "Haiku"},
)

PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions")


def config_dir(env: Mapping[str, str]) -> Path:
    """Where the CLI keeps its state: ``CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    chosen = env.get("CLAUDE_CONFIG_DIR") or os.environ.get("CLAUDE_CONFIG_DIR")
    if chosen:
        return Path(chosen)
    home = env.get("HOME") or os.environ.get("HOME") or str(Path.home())
    return Path(home) / ".claude"


class ClaudeBackend:
    provider = PROVIDER
    abilities = Abilities(
        resume=True,
        fork=True,
        side_chat=True,
        truncate=True,
        delete=True,
        list_sessions=True,
        steering=True,
    )

    def __init__(
        self, state_dir: Path, spawn: Spawn, *, env: Mapping[str, str] | None = None
    ) -> None:
        self.state_dir = state_dir
        self.spawn = spawn
        #: Set on top of the host's own environment for every CLI this backend starts.
        self.env = dict(env or {})
        self.config_dir = config_dir(self.env)
        self.home = Path(self.env.get("HOME") or os.environ.get("HOME") or Path.home())
        self.index = TranscriptIndex(self.config_dir / "projects", state_dir / "catalogue.sqlite")
        self.models: list[dict[str, Any]] = [
            {**model, "provider": PROVIDER} for model in DEFAULT_MODELS
        ]

    # -- what the root lists ------------------------------------------------------------
    def agents(self) -> Sequence[Mapping[str, Any]]:
        return [
            {
                "provider": PROVIDER,
                "displayName": "Claude",
                "description": "Claude Code, through the Claude Agent SDK",
                "models": self.models,
                "protectedResources": [
                    {"resource": API_RESOURCE, "resource_name": "Anthropic API", "required": False}
                ],
            }
        ]

    def session_config(self, directory: str | None, values: Mapping[str, Any]) -> Mapping[str, Any]:
        return {
            "permissionMode": {
                "type": "string",
                "title": "Permissions",
                "enum": list(PERMISSION_MODES),
                "default": "default",
            },
        }

    def environment(self, tokens: Mapping[str, str]) -> dict[str, str]:
        """What a CLI gets on top of the host's environment; a pushed token adds a key."""
        env = dict(self.env)
        token = tokens.get(API_RESOURCE)
        if token:
            env["ANTHROPIC_API_KEY"] = token
        return env

    # -- chats ----------------------------------------------------------------------------
    async def start(self, start: ChatStart) -> ClaudeAgent:
        return ClaudeAgent(self, start, self.spawn)

    def transcript_path(self, session_id: str) -> Path | None:
        return self.index.path_of(session_id) or transcripts.find(self.config_dir, session_id)

    def fork_point(self, source: str, turn_id: str) -> str | None:
        """The transcript entry a fork at ``turn_id`` continues from: that turn's last entry."""
        path = self.transcript_path(source)
        if path is None:
            return None
        return transcripts.turn_end_uuid(path, entry_uuid(source, turn_id), turn_id)

    def side_context(self, source: str, turn_id: str) -> str:
        path = self.transcript_path(source)
        said = transcripts.turn_text(path, entry_uuid(source, turn_id), turn_id) if path else ""
        return f"(Context from the conversation this side chat started from:)\n{said}".strip()

    # -- the catalogue --------------------------------------------------------------------
    async def catalogue(self) -> Sequence[CatalogueRow]:
        rows = await anyio.to_thread.run_sync(self.index.rows)
        return [
            CatalogueRow(
                session_id=row.session_id,
                title=row.title,
                created_at=row.created_at,
                modified_at=row.modified_at,
                working_directories=(Path(row.cwd).as_uri(),) if row.cwd else (),
            )
            for row in rows
        ]

    async def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        path = self.transcript_path(backend_id)
        if path is None:
            return False
        entries = await anyio.to_thread.run_sync(transcripts.read_entries, path)
        transcripts.rebuild(entries, reader)
        return True

    async def delete(self, backend_id: str) -> None:
        path = self.transcript_path(backend_id)
        if path is not None:
            path.unlink(missing_ok=True)
            self.index.forget(path)

    async def truncate(self, backend_id: str, turn_id: str | None) -> None:
        path = self.transcript_path(backend_id)
        if path is None:
            raise LookupError(f"no Claude transcript for session {backend_id}")
        keep = None if turn_id is None else entry_uuid(backend_id, turn_id)
        await anyio.to_thread.run_sync(transcripts.truncate, path, keep, turn_id)
