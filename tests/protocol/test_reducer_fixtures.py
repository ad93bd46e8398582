"""Reducer conformance: the protocol's 0.8.0 fixture corpus plus this repo's own cases.

Each JSON file is one case: fold ``actions`` through ``reducer`` starting at
``initial`` and compare with ``expected``. JSON null and an absent key compare
equal, as in the protocol's own harness. A case whose expectation the newer
reducers deliberately changed is waived only through
``reducer_fixture_skips.toml``; a waiver that is no longer needed fails.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

try:
    from . import conftest_reducers as helpers
except ImportError:  # tests/protocol is not a package
    import conftest_reducers as helpers  # type: ignore[no-redef]

WAIVERS = helpers.load_waivers()
OFFICIAL_DIR = helpers.official_fixture_dir()
OFFICIAL = helpers.fixture_files(OFFICIAL_DIR)
OWN = helpers.fixture_files(helpers.OWN_FIXTURES)


def _official_params() -> list[Any]:
    if OFFICIAL:
        return [pytest.param(path, id=path.name) for path in OFFICIAL]
    return [pytest.param(None, id="official-fixtures-missing")]


def _check(path: Path, own: bool) -> None:
    case = helpers.load_fixture(path)
    pristine = copy.deepcopy(case["initial"])
    pristine_actions = copy.deepcopy(case["actions"])
    final = helpers.run_fixture(case)
    assert case["initial"] == pristine, "the reducer mutated the initial state"
    assert case["actions"] == pristine_actions, "the reducer mutated an action"

    actual = helpers.drop_nulls(final)
    expected = helpers.drop_nulls(case["expected"])
    waiver = None if own else WAIVERS.get(path.name)
    if waiver is None:
        assert actual == expected, case.get("description", path.name)
        if expected == helpers.drop_nulls(case["initial"]) and len(case["actions"]) == 1:
            # An action that changes nothing must hand back the very same object.
            assert final is case["initial"], "a no-op action must return the input state itself"
        return

    if actual == expected:
        pytest.fail(f"stale waiver for {path.name}: the case now passes exactly")
    if waiver.mode == "skip":
        pytest.skip(f"{waiver.reason} (conflicts with {waiver.conflicts_with})")
    trimmed_actual = helpers.without_paths(actual, waiver.ignore)
    trimmed_expected = helpers.without_paths(expected, waiver.ignore)
    assert trimmed_actual == trimmed_expected, (
        f"differs beyond the waived fields {waiver.ignore}: {case.get('description')}"
    )


@pytest.mark.parametrize("path", _official_params())
def test_official_reducer_fixture(path: Path | None) -> None:
    if path is None:
        message = f"AHP reference fixtures not found at {OFFICIAL_DIR} (make them with python -m ahpcore.protocol.reference)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    _check(path, own=False)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in OWN])
def test_own_reducer_fixture(path: Path) -> None:
    _check(path, own=True)


def test_waivers_name_real_fixtures() -> None:
    if not OFFICIAL:
        pytest.skip("AHP reference fixtures not available")
    names = {path.name for path in OFFICIAL}
    unknown = sorted(set(WAIVERS) - names)
    assert not unknown, f"waivers for fixtures that do not exist: {unknown}"
