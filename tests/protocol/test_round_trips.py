"""Wire round-trips: every 0.8.0 round-trip fixture decodes into the lenient models and
re-encodes to its canonical output.

Each fixture names a protocol type; the lenient generated models (or, for types
the schemas lack, ``ahpcore.protocol.extensions``) decode ``input`` and the dump
(by alias, unset fields left out) must equal ``acceptableOutputs[0]`` as JSON:
key presence counts, and so does 7 versus 7.0. Cases that cannot pass are
listed with their reason in ``round_trip_skips.toml``.
"""

from __future__ import annotations

import json
import os
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from ahpcore.protocol import extensions, models, reference

ROUND_TRIPS = reference.data_dir() / "fixtures-0.8.0" / "round-trips"
SKIPS_FILE = Path(__file__).with_name("round_trip_skips.toml")

if not ROUND_TRIPS.is_dir():
    _missing = (
        f"AHP round-trip fixtures not found at {ROUND_TRIPS}; "
        "make them with python -m ahpcore.protocol.reference"
    )
    if os.environ.get("CI"):
        pytest.fail(_missing, pytrace=False)
    pytest.skip(_missing, allow_module_level=True)

CASES = sorted(ROUND_TRIPS.glob("*.json"))
SKIPS: dict[str, dict[str, str]] = tomllib.loads(SKIPS_FILE.read_text("utf-8"))


def _changes_of_summary() -> Any:
    # TypeScript's Partial<SessionSummary> is inlined by the schema as the
    # `changes` object of root/sessionSummaryChanged; it has no name of its own.
    return models.SessionSummaryChangedParams.model_fields["changes"].annotation


@cache
def _adapter(type_name: str) -> TypeAdapter[Any]:
    special: dict[str, Any] = {
        "JsonRpcMessage": extensions.JsonRpcMessage,
        # Conformance requires unknown variants of these unions to survive verbatim.
        "StateAction": extensions.OpenStateAction,
        "Customization": extensions.OpenCustomization,
        "PartialSessionSummary": _changes_of_summary(),
    }
    target = special.get(type_name) or getattr(models, type_name)
    return TypeAdapter(target)


def _as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _params() -> list[Any]:
    params = []
    for path in CASES:
        entry = SKIPS.get(path.name)
        marks = [pytest.mark.skip(reason=f"schema changed: {entry['reason']}")] if entry else []
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


@pytest.mark.parametrize("path", _params())
def test_round_trip(path: Path) -> None:
    case = json.loads(path.read_text("utf-8"))
    assert len(case["acceptableOutputs"]) == 1, "the fixtures define one canonical output"
    adapter = _adapter(case["type"])
    decoded = adapter.validate_python(case["input"])
    encoded = adapter.dump_python(decoded, mode="json", by_alias=True, exclude_unset=True)
    assert _as_json(encoded) == _as_json(case["acceptableOutputs"][0])


def test_fixture_set_is_complete() -> None:
    # The README promises 39 cases, 37 in group A and 2 in group B.
    groups = [json.loads(path.read_text("utf-8"))["group"] for path in CASES]
    assert len(CASES) == 39
    assert groups.count("A") == 37
    assert groups.count("B") == 2


def test_skip_list_is_well_formed() -> None:
    names = {path.name for path in CASES}
    for name, entry in SKIPS.items():
        assert name in names, f"{name} is listed in {SKIPS_FILE.name} but is no fixture"
        assert entry.keys() == {"reason", "schema_change"}, name
        assert entry["reason"].strip() and entry["schema_change"].strip(), name


def test_group_b_inputs_carry_keys_the_decoder_drops() -> None:
    # Group B inputs hold unknown keys: the lenient decode must drop exactly
    # those, giving the canonical output rather than the preserving one.
    for path in CASES:
        case = json.loads(path.read_text("utf-8"))
        if case["group"] != "B":
            continue
        assert _as_json(case["preservedOutput"]) != _as_json(case["acceptableOutputs"][0])
        assert set(case["preservedOutput"]) > set(case["acceptableOutputs"][0])
