"""No import cycle inside ahp_claude, counting every import the source holds.

A cycle hidden behind a function-local import or an ``if TYPE_CHECKING:`` block is
still two modules that cannot be understood (or split) apart, so this reads every
``import`` statement anywhere in a module, not only the ones run at load time.
An import of a submodule does not count as one of its package: that edge is
Python's, not the code's.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import ahp_claude

PACKAGE = "ahp_claude"
ROOT = Path(ahp_claude.__file__).parent


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package by its dotted name (``pkg`` for ``pkg/__init__.py``)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def _is_package(name: str, known: Mapping[str, Path]) -> bool:
    return name in known and known[name].name == "__init__.py"


def imported(name: str, path: Path, known: Mapping[str, Path], package: str = PACKAGE) -> set[str]:
    """The package's modules that ``name`` imports, wherever in its source it does."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = name if _is_package(name, known) else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = here.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                # ``from pkg import sub`` imports the submodule, not the package's own code.
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    return {
        t
        for t in targets
        if t in known and t != name and (t == package or t.startswith(package + "."))
    }


def graph(package_root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    known = modules(package_root, package)
    return {name: imported(name, path, known, package) for name, path in known.items()}


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(edges.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_sees_hidden_imports(tmp_path: Path) -> None:
    # A cycle made only of a function-local import and a TYPE_CHECKING one still counts.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg import a\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\ng = 1\n"
    )
    (pkg / "c.py").write_text("import pkg.a\n")
    edges = graph(pkg, "pkg")
    assert edges == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert cycles(edges) == [["pkg.a", "pkg.b"]]


def test_no_import_cycle_in_ahp_claude() -> None:
    edges = graph()
    assert len(edges) > 10  # the package was found, with its modules
    found = cycles(edges)
    assert not found, "import cycles in ahp_claude: " + "; ".join(" <-> ".join(c) for c in found)
