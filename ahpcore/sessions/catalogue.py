"""listSessions: live sessions and the backends' past ones, most recent first, paged on demand.

A cursor is signed with a key of this host's run, so a cursor this host did
not issue is refused rather than misread.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError


class Cursors:
    def __init__(self) -> None:
        self._key = secrets.token_bytes(16)

    def _sign(self, offset: int) -> str:
        return hmac.new(self._key, str(offset).encode(), hashlib.sha256).hexdigest()[:16]

    def issue(self, offset: int) -> str:
        return f"{offset}.{self._sign(offset)}"

    def read(self, cursor: str) -> int:
        offset, _, signature = cursor.partition(".")
        if not offset.isdigit() or not hmac.compare_digest(signature, self._sign(int(offset))):
            raise ProtocolError(INVALID_PARAMS, f"cursor {cursor!r} was not issued by this host")
        return int(offset)


def page(
    rows: Sequence[Mapping[str, Any]], cursors: Cursors, limit: Any, cursor: Any
) -> dict[str, Any]:
    """The whole catalogue without ``limit``; a page and ``nextCursor`` with it."""
    ordered = sorted(rows, key=lambda row: str(row.get("modifiedAt", "")), reverse=True)
    start = cursors.read(cursor) if isinstance(cursor, str) else 0
    if limit is None:
        return {"items": [dict(row) for row in ordered[start:]]}
    if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 1:
        raise ProtocolError(INVALID_PARAMS, "params.limit must be a positive integer")
    end = start + int(limit)
    result: dict[str, Any] = {"items": [dict(row) for row in ordered[start:end]]}
    if end < len(ordered):
        result["nextCursor"] = cursors.issue(end)
    return result
