"""MkDocs hook: the navigation, built from the pages that exist.

Pages are listed in the order below when present; any other page is added at
the end, so a page added later shows up without a change here and a page that
is not there yet leaves no broken entry behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ORDER: list[tuple[str, str | list[tuple[str, str]]]] = [
    ("Home", "index.md"),
    ("Getting started", "getting-started.md"),
    ("Writing a client", "clients.md"),
    ("Chatting from the terminal", "chat.md"),
    ("The inspector page", "inspector.md"),
    ("Configuration", "configuration.md"),
    ("Running as a service", "service.md"),
    ("Automations", "automations.md"),
    ("Telemetry", "telemetry.md"),
    ("People and roles", "users.md"),
    ("Agents on other machines", "remote.md"),
    ("Using VS Code", "vscode.md"),
    ("Architecture", "architecture.md"),
    (
        "Plugins",
        [
            ("Writing plugins", "plugins.md"),
            ("Hook reference", "hooks.md"),
            ("The plugin API", "plugin-api.md"),
        ],
    ),
    (
        "Backends",
        [
            ("The backend contract", "backend-contract.md"),
            ("Write a backend", "write-a-backend.md"),
        ],
    ),
    ("Security", "security.md"),
    ("Compatibility", "compatibility.md"),
    ("Conformance check", "check.md"),
]


def _title(path: str) -> str:
    return Path(path).stem.replace("-", " ").capitalize()


def build_nav(docs_dir: Path) -> list[Any]:
    present = {p.relative_to(docs_dir).as_posix() for p in docs_dir.rglob("*.md")}
    present = {p for p in present if not p.startswith("_")}
    nav: list[Any] = []
    listed: set[str] = set()
    for title, target in ORDER:
        if isinstance(target, str):
            if target in present:
                nav.append({title: target})
                listed.add(target)
            continue
        children = [{name: page} for name, page in target if page in present]
        listed.update(page for _, page in target)
        if children:
            nav.append({title: children})
    nav += [{_title(page): page} for page in sorted(present - listed)]
    return nav


def on_config(config: Any) -> Any:
    config["nav"] = build_nav(Path(config["docs_dir"]))
    return config
