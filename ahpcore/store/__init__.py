"""Session stores: what the host keeps about a session on top of its backend."""

from __future__ import annotations

from pathlib import Path

from ahpcore.store.file import FileSessionStore, StoreError
from ahpcore.store.memory import MemorySessionStore

STORE_KINDS = ("file", "memory")


def open_store(kind: str, state_dir: Path) -> FileSessionStore | MemorySessionStore:
    """The store ``--sessions`` names: ``file`` (SQLite under ``state_dir``) or ``memory``."""
    if kind == "memory":
        return MemorySessionStore()
    if kind == "file":
        return FileSessionStore(state_dir / "sessions.sqlite3")
    raise ValueError(f"unknown session store {kind!r}; expected one of {', '.join(STORE_KINDS)}")


__all__ = ["STORE_KINDS", "FileSessionStore", "MemorySessionStore", "StoreError", "open_store"]
