"""No import cycles, counting type-only and function-local imports, in ahpcore and in
each plugin; and nothing below the composition root imports it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .import_graph import cycles, edges, modules

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [(ROOT, "ahpcore")] + [
    (package.parent, package.name)
    for pattern in ("plugins/*/ahp_*", "contrib/*/ahp_*")
    for package in sorted(ROOT.glob(pattern))
    if (package / "__init__.py").exists()
]
#: The command line and what it drives compose a host; nothing else may import it.
COMPOSERS = {
    "ahpcore.cli",
    "ahpcore.testing",
    "ahpcore.compat",
    "ahpcore.docgen",
    "ahpcore.operate.client",
    "ahpcore.operate.sessions",
}


@pytest.mark.parametrize(("root", "package"), PACKAGES, ids=[name for _, name in PACKAGES])
def test_no_import_cycles(root: Path, package: str) -> None:
    graph = edges(modules(root, package), package)
    assert cycles(graph) == []


def test_the_checker_sees_a_cycle_through_a_type_only_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n"
    )
    (package / "c.py").write_text("def f():\n    from pkg import d\n")
    (package / "d.py").write_text("import pkg.c\n")
    graph = edges(modules(tmp_path, "pkg"), "pkg")
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


def test_only_the_command_line_imports_the_host() -> None:
    graph = edges(modules(ROOT, "ahpcore"), "ahpcore")
    importers = {name for name, targets in graph.items() if "ahpcore.host" in targets}
    assert importers <= COMPOSERS
