"""A finding of ``ahp doctor``: one line of its report, from the core or a plugin."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One finding: ``name`` says what was checked, ``said`` what was found, ``fix``
    (for a failure) what to do about it."""

    name: str
    ok: bool
    said: str
    fix: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)
