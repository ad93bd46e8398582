"""The package's lazy names: what it exports, where each lives, and what type checkers see agree."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import ahp_scripted


def _type_checking_homes() -> dict[str, str]:
    """Name -> module, from the ``if TYPE_CHECKING:`` imports of the package's source."""
    tree = ast.parse(Path(ahp_scripted.__file__).read_text())
    homes: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module
                for alias in statement.names:
                    homes[alias.asname or alias.name] = statement.module
    return homes


def test_every_exported_name_has_one_home_and_type_checkers_see_the_same_one():
    homes = ahp_scripted._HOME
    assert sorted(ahp_scripted.__all__) == sorted(homes)
    assert _type_checking_homes() == homes
    for name, module in homes.items():
        assert getattr(ahp_scripted, name) is getattr(importlib.import_module(module), name)
    assert set(ahp_scripted.__all__) <= set(dir(ahp_scripted))


def test_an_unknown_name_is_an_attribute_error_naming_it():
    try:
        ahp_scripted.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("an unknown name was found")


def test_importing_the_package_loads_none_of_its_modules():
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, ahp_scripted; "
            "print(sorted(m for m in sys.modules if m.startswith('ahp_scripted.')))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert loaded == "[]"
