"""Shared helpers for the reducer tests (imported explicitly, not a conftest)."""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ahpcore.protocol import reference
from ahpcore.reducers import REDUCERS

HERE = Path(__file__).resolve().parent
OWN_FIXTURES = HERE / "fixtures"
SKIPS_FILE = HERE / "reducer_fixture_skips.toml"


def official_fixture_dir() -> Path:
    return reference.data_dir() / "fixtures-0.8.0" / "reducers"


@dataclass(frozen=True)
class Waiver:
    """One entry of the skip list: skip the case, or leave fields out of the comparison."""

    mode: str
    reason: str
    conflicts_with: str
    ignore: tuple[str, ...] = ()


def load_waivers() -> dict[str, Waiver]:
    if not SKIPS_FILE.exists():
        return {}
    raw = tomllib.loads(SKIPS_FILE.read_text(encoding="utf-8"))
    out: dict[str, Waiver] = {}
    for name, entry in raw.get("fixtures", {}).items():
        mode = entry.get("mode", "skip")
        if mode not in ("skip", "ignore-fields"):
            raise ValueError(f"{name}: unknown waiver mode {mode!r}")
        if not entry.get("reason") or not entry.get("conflicts_with"):
            raise ValueError(f"{name}: a waiver needs a reason and conflicts_with")
        out[name] = Waiver(
            mode, entry["reason"], entry["conflicts_with"], tuple(entry.get("ignore", ()))
        )
    return out


def fixture_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.json"))


def load_fixture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def drop_nulls(value: Any) -> Any:
    """The protocol harness reads JSON null as ``undefined``; an absent key is the same."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def without_paths(value: Any, paths: tuple[str, ...]) -> Any:
    """A copy of *value* with each dotted path removed (used only by waivers)."""
    value = copy.deepcopy(value)
    for path in paths:
        *parents, last = path.split(".")
        node = value
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return value


def fold(reducer: str, initial: Any, actions: list[Any]) -> Iterator[tuple[Any, Any, Any]]:
    """Yield ``(before, action, after)`` for each action folded through *reducer*."""
    reduce = REDUCERS[reducer]
    state = initial
    for action in actions:
        after = reduce(state, action)
        yield state, action, after
        state = after


def run_fixture(case: dict[str, Any]) -> Any:
    state = case["initial"]
    for _, _, after in fold(case["reducer"], case["initial"], case["actions"]):
        state = after
    return state
