"""A session store that forgets everything when the host stops."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


class MemorySessionStore:
    def __init__(self) -> None:
        self._records: dict[str, dict[str, Any]] = {}

    async def get(self, session_id: str) -> dict[str, Any] | None:
        record = self._records.get(session_id)
        return copy.deepcopy(record) if record is not None else None

    async def put(self, session_id: str, record: Mapping[str, Any]) -> None:
        self._records[session_id] = copy.deepcopy(dict(record))

    async def delete(self, session_id: str) -> None:
        self._records.pop(session_id, None)

    async def ids(self) -> list[str]:
        return list(self._records)

    def close(self) -> None:
        self._records.clear()
