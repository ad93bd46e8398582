"""The import graph of a package as its source spells it: every ``import`` anywhere in a
module (inside functions and ``if TYPE_CHECKING:`` blocks too) is an edge."""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def modules(root: Path, package: str) -> dict[str, Path]:
    """Module name -> file, for ``package`` found under ``root``."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(node: ast.AST, module: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    # "from pkg import name" imports the submodule pkg.name when there is one.
    return [
        f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
        for alias in node.names
    ]


def edges(known: dict[str, Path], prefix: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            for target in _imported(node, name, path.name == "__init__.py", known):
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name and target.split(".")[0] == prefix:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found
