"""The compatibility table: every method and action of the protocol, and how this host serves it.

Nothing here is a claim kept by hand. A host is started with the plugins it
would load and the table is read from it:

* a command is *served* when the router has a route for it, and *through a
  port* when that route exists because a plugin provides the port (the table
  names the plugins); without a route it is *refused* with the error a client
  would get. A route the core keeps without the port behind it (the
  ``resource*`` family answers only what a connected client publishes) is
  served *in part*: the live host refuses the rest, so the table must not
  call it served;
* a client action is *served* when its channel kind can exist on this host,
  by its action handler (named) or by the reducer alone;
* what the host sends (server commands, notifications, host-only actions) is
  *sent* when the code of the core or of a loaded plugin names it: a request
  by its method (or beside a ``peer.request`` of a method held in a variable,
  which is how the core relays the ``resource*`` family), an action on a
  channel kind some code opens (named in quotes or by a string constant).

Notes come from ``ahpcore.notes``, next to the handlers.
"""

from __future__ import annotations

import importlib
import inspect
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio

import ahpcore
from ahpcore import reducers
from ahpcore.engine.router import PLUGINS_OF_PORT, PORT_OF_COMMAND, missing_port_message
from ahpcore.host import Host, HostSettings
from ahpcore.notes import NOTES
from ahpcore.plugins import PluginManager
from ahpcore.protocol.methods import (
    CLIENT_NOTIFICATIONS,
    COMMANDS,
    SERVER_COMMANDS,
    SERVER_NOTIFICATIONS,
)
from ahpcore.services.resources import PORT_METHODS as RESOURCE_METHODS

#: The port whose plugin creates channels of each kind (root always exists).
PORT_OF_CHANNEL_KIND: dict[str, str | None] = {
    "root": None,
    "session": "backends",
    "chat": "backends",
    "annotations": "backends",
    "canvas": "backends",
    "terminal": "terminals",
    "changeset": "changes",
    "resourceWatch": "resources",
    "automation": "automations",
    "automationRun": "automations",
}
#: Commands the core always routes, whose main part needs a port: the ``resource*``
#: family relays what a connected client publishes and needs the resources port
#: for everything else (``file:`` URIs above all).
PORT_OF_CORE_ROUTE: dict[str, str] = {
    **dict.fromkeys(RESOURCE_METHODS, "resources"),
    "createResourceWatch": "resources",
}
#: How the table names the core to a person.
CORE = "core"
#: The kind of a method a client may call that the protocol's tables do not name (the
#: VS Code window's ``vscode/*`` requests, ``shutdown``): what a plugin adds beside it.
OUTSIDE = "outside the protocol"
#: Row kinds, in the order the table lists them.
KINDS = (
    "command",
    "server command",
    "client notification",
    "server notification",
    "action",
    OUTSIDE,
)
#: Section titles of the markdown page, by kind.
_SECTIONS = {kind: f"{kind.capitalize()}s" for kind in KINDS} | {OUTSIDE: "Outside the protocol"}
#: Source the scan for "sent" must not read: tables and reducers name everything.
_NOT_SENDERS = (
    "reducers",
    "protocol",
    "compat.py",
    "notes.py",
    "testing.py",
    "engine/router.py",
)


@dataclass(frozen=True)
class Row:
    kind: str
    name: str
    #: served | port | partial | refused | sent | not sent
    status: str
    #: Who serves or sends it: "ahpcore", plugin names, or "".
    provider: str
    #: How it is served or why it is refused, in words (never a code path).
    detail: str
    notes: tuple[str, ...] = ()
    #: What to install for it: "core", distributions ("ahp-files"), or "".
    served_by: str = ""
    #: The function that handles it, for those reading the code ("" when none).
    handler: str = ""

    def as_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["notes"] = list(self.notes)
        return row


def _qualname(function: Any) -> str:
    function = getattr(function, "__func__", function)
    module = getattr(function, "__module__", "") or ""
    name = getattr(function, "__qualname__", repr(function))
    return f"{module}.{name}" if module else name


def _plugin_sources(host: Host) -> list[tuple[str, str]]:
    """(plugin name, source text) of every module file of each loaded plugin's package."""
    core_root = Path(ahpcore.__file__).parent
    sources: list[tuple[str, str]] = []
    for path in sorted(core_root.rglob("*.py")):
        relative = path.relative_to(core_root).as_posix()
        if any(relative == skip or relative.startswith(f"{skip}/") for skip in _NOT_SENDERS):
            continue
        sources.append(("ahpcore", path.read_text("utf-8")))
    seen: set[Path] = {core_root}
    for info in host.plugins.plugins():
        plugin = host.plugins.get(info.name)
        module = inspect.getmodule(plugin) if plugin is not None else None
        if module is None or not getattr(module, "__file__", None):
            continue
        package = (module.__package__ or module.__name__).split(".")[0]
        top = importlib.import_module(package)
        root = Path(top.__file__ or module.__file__ or "").parent
        if root in seen or root.name == "site-packages":
            continue
        seen.add(root)
        sources.extend((info.name, path.read_text("utf-8")) for path in sorted(root.rglob("*.py")))
    return sources


def _senders(name: str, sources: Sequence[tuple[str, str]]) -> list[str]:
    quoted = (f'"{name}"', f"'{name}'")
    found: list[str] = []
    for owner, text in sources:
        if owner not in found and any(q in text for q in quoted):
            found.append(owner)
    return found


#: ``add_channel(uri, <kind>`` where the kind is a quoted literal or a name.
_ADDS_CHANNEL = re.compile(r"add_channel\(\s*[^,()]+,\s*(?:[\"']([^\"']+)[\"']|([A-Za-z_][\w.]*))")
#: ``NAME = "text"`` (annotated or not) at the start of a line: a string constant.
_CONSTANT = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=\n]+)?=\s*[\"']([^\"']*)[\"']\s*$", re.M)


def _constants(sources: Sequence[tuple[str, str]]) -> dict[str, set[str]]:
    """Every string constant loaded code defines, by name (a name may mean several)."""
    found: dict[str, set[str]] = {}
    for _, text in sources:
        for name, value in _CONSTANT.findall(text):
            found.setdefault(name, set()).add(value)
    return found


def _channel_kinds(sources: Sequence[tuple[str, str]]) -> set[str]:
    """The kinds loaded code creates channels of (``engine.add_channel(uri, kind, …)``), the
    kind written out or named by a constant (``add_channel(uri, WATCH_KIND, …)``)."""
    constants: dict[str, set[str]] | None = None
    kinds = {"root"}
    for _, text in sources:
        for literal, name in _ADDS_CHANNEL.findall(text):
            if literal:
                kinds.add(literal)
                continue
            if constants is None:
                constants = _constants(sources)
            kinds.update(constants.get(name.rpartition(".")[2], ()))
    return kinds


def _port_providers(host: Host, port: str) -> list[str]:
    if port == "backends":
        return sorted(set(host._backend_owner.values()))
    if port not in host.ports:
        return []
    return [info.name for info in host.plugins.plugins() if f"ahp_{port}" in info.hooks]


def _served_by(host: Host, owners: Iterable[str]) -> str:
    """Owners (``ahpcore`` or plugin names) as a person installs them: core, ahp-files, …"""
    distributions = {info.name: info.distribution for info in host.plugins.plugins()}
    named: list[str] = []
    for owner in owners:
        word = CORE if owner in ("ahpcore", "core") else distributions.get(owner) or owner
        if word not in named:
            named.append(word)
    return ", ".join(named)


def _install_hint(port: str) -> str:
    plugins = PLUGINS_OF_PORT.get(port, ())
    return f" (install {' or '.join(plugins)})" if plugins else ""


def _command_row(host: Host, kind: str, method: str) -> Row:
    route = host.router.routes.get(method)
    port = PORT_OF_COMMAND.get(method) or PORT_OF_CORE_ROUTE.get(method)
    notes = tuple(NOTES.get(method, ()))
    if route is None:
        reason = missing_port_message(method, port) if port else f"unknown method {method!r}"
        return Row(kind, method, "refused", "", reason, notes)
    where = _qualname(route.handler)
    if port is not None and route.owner == "ahpcore":
        providers = _port_providers(host, port)
        relayed = method in PORT_OF_CORE_ROUTE
        if providers:
            how = f"through the {port} port"
            if relayed:
                how += "; what a connected client publishes is relayed to that client"
            served_by = _served_by(host, providers)
            return Row(kind, method, "port", ", ".join(providers), how, notes, served_by, where)
        # The live host refuses the rest, so this is not "served".
        if relayed:
            part = (
                "only what a connected client publishes (<scheme>://<clientId>/…), "
                f"relayed to it; file: URIs are refused without the {port} port"
                f"{_install_hint(port)}"
            )
        else:
            part = f"in part; the rest needs the {port} port{_install_hint(port)}"
        return Row(kind, method, "partial", "ahpcore", part, notes, CORE, where)
    served_by = _served_by(host, [route.owner])
    return Row(kind, method, "served", route.owner, "", notes, served_by, where)


#: ``peer.request(method, …)``: a request whose method a variable holds.
_RELAYS = re.compile(r"peer\.request\(\s*[A-Za-z_]\w*\s*,")


def _requesters(name: str, sources: Sequence[tuple[str, str]]) -> list[str]:
    """Who asks a client ``name``: ``peer.request("name", ...)``, or a module that names it
    and asks a peer for a method it holds in a variable (the core relays ``resourceRead``
    and the rest to the client that publishes the URI). The name alone is ambiguous, since
    the same method is also a command the host serves."""
    pattern = re.compile(r"\.request\(\s*[\"']" + re.escape(name) + r"[\"']")
    quoted = (f'"{name}"', f"'{name}'")
    found: list[str] = []
    for owner, text in sources:
        if owner in found:
            continue
        if pattern.search(text) or (_RELAYS.search(text) and any(q in text for q in quoted)):
            found.append(owner)
    return found


def _sent_row(
    host: Host,
    kind: str,
    name: str,
    sources: Sequence[tuple[str, str]],
    why_not: str,
    through: Sequence[str] = (),
) -> Row:
    """``through``: the plugins whose port feeds what is sent (ahp-files' watches feed
    ``resourceWatch/changed``), named beside whoever's code sends it."""
    senders = _requesters(name, sources) if kind == "server command" else _senders(name, sources)
    notes = tuple(NOTES.get(name, ()))
    if senders:
        served_by = _served_by(host, [*senders, *through])
        return Row(kind, name, "sent", ", ".join(senders), "sent by the host", notes, served_by)
    return Row(kind, name, "not sent", "", why_not, notes)


def _action_row(
    host: Host, action: str, sources: Sequence[tuple[str, str]], kinds: set[str]
) -> Row:
    channel_kind = str(reducers.channel_kind_for_action(action))
    port = PORT_OF_CHANNEL_KIND.get(channel_kind)
    notes = tuple(NOTES.get(action, ()))
    has_port = port is None or (port == "backends" and bool(host.backends)) or port in host.ports
    if not has_port:
        why = f"no {channel_kind} channels without the {port} port{_install_hint(str(port))}"
    elif channel_kind not in kinds:
        why = f"no code on this host opens {channel_kind} channels"
    else:
        why = ""
    if action not in reducers.CLIENT_DISPATCHABLE:
        if why:
            return Row("action", action, "not sent", "", why, notes)
        through = _port_providers(host, port) if port and port != "backends" else []
        return _sent_row(host, "action", action, sources, "no code on this host emits it", through)
    if why:
        return Row("action", action, "refused", "", why, notes)
    handler = host.engine_or_fail._action_handlers.get(action)
    owners = _port_providers(host, port) if port else ["ahpcore"]
    if handler is not None:
        how, where = "checked and carried out by the host", _qualname(handler)
    else:
        how, where = "applied as sent", ""
    served_by = _served_by(host, owners)
    return Row("action", action, "served", ", ".join(owners), how, notes, served_by, where)


def rows_of(host: Host) -> list[Row]:
    """The table for a started host."""
    sources = _plugin_sources(host)
    rows = [_command_row(host, "command", method) for method in COMMANDS]
    rows += [
        _sent_row(
            host, "server command", method, sources, "the host never asks a client for resources"
        )
        for method in SERVER_COMMANDS
    ]
    for method in CLIENT_NOTIFICATIONS:
        served = method in host.router.notifications
        rows.append(
            Row(
                "client notification",
                method,
                "served" if served else "refused",
                "ahpcore" if served else "",
                "" if served else "ignored",
                tuple(NOTES.get(method, ())),
                CORE if served else "",
                _qualname(host.router.notifications[method]) if served else "",
            )
        )
    rows += [
        _sent_row(host, "server notification", method, sources, "no code on this host sends it")
        for method in SERVER_NOTIFICATIONS
    ]
    kinds = _channel_kinds(sources)
    rows += [
        _action_row(host, action, sources, kinds) for action in sorted(reducers.ALL_ACTION_TYPES)
    ]
    return rows + _outside_rows(host)


def _outside_rows(host: Host) -> list[Row]:
    """A row for each method or notification the router serves that the protocol does not
    name, with the plugin serving it: a client of this host may call it, and the table is
    where a person looks for what a host answers."""
    rows: list[Row] = []
    for method in sorted(set(host.router.routes) - set(COMMANDS)):
        route = host.router.routes[method]
        rows.append(
            Row(
                OUTSIDE,
                method,
                "served",
                route.owner,
                "a request the protocol does not define",
                tuple(NOTES.get(method, ())),
                _served_by(host, [route.owner]),
                _qualname(route.handler),
            )
        )
    for method in sorted(set(host.router.notifications) - set(CLIENT_NOTIFICATIONS)):
        handler = host.router.notifications[method]
        rows.append(
            Row(
                OUTSIDE,
                method,
                "served",
                "ahpcore",
                "a notification the protocol does not define",
                tuple(NOTES.get(method, ())),
                CORE,
                _qualname(handler),
            )
        )
    return rows


def table(manager: PluginManager) -> list[Row]:
    """Start a host with ``manager``'s plugins (memory sessions, a throwaway state dir) and read it."""

    async def build(state_dir: Path) -> list[Row]:
        host = Host(manager, HostSettings(sessions="memory", port=0, state_dir=state_dir))
        await host.start()
        try:
            return rows_of(host)
        finally:
            await host.aclose()

    with tempfile.TemporaryDirectory(prefix="ahp-compat-") as state_dir:
        return anyio.run(build, Path(state_dir), backend="asyncio")


def as_json(rows: Iterable[Row], plugins: Sequence[str]) -> dict[str, Any]:
    return {"plugins": list(plugins), "rows": [row.as_json() for row in rows]}


_STATUS_WORDS = {
    "served": "served",
    "port": "through a port",
    "partial": "in part",
    "refused": "refused",
    "sent": "sent",
    "not sent": "not sent",
}
#: The text table's columns, as its header row names them.
TEXT_COLUMNS = ("kind", "name", "status", "served by", "how / why")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _how(row: Row) -> str:
    """What the row says to a person: how it is served or why not, then its notes."""
    return " ".join(part for part in (row.detail, *row.notes) if part)


def as_markdown(rows: Sequence[Row], plugins: Sequence[str]) -> str:
    lines = [
        "# Compatibility",
        "",
        "<!-- Generated by `ahp compat --markdown`; do not edit by hand. -->",
        "",
        "Every command, notification and state action of the Agent Host Protocol, and how",
        "this host serves it with the plugins "
        f"{', '.join(f'`{name}`' for name in plugins)} loaded. "
        "The table is read from a running host, so it cannot claim what the code does not do:",
        "",
        "- **served**: the core (or the plugin named) answers it, or, for an action, applies it;",
        "- **through a port**: a plugin provides the port behind it (*served by* names its",
        "  distribution); without that plugin it is refused with an error naming the port",
        "  and the plugin;",
        "- **in part**: the core answers some of it and refuses the rest, as the row says;",
        "- **refused**: a client gets an error saying why;",
        "- **sent** / **not sent**: for what the host sends, whether any loaded code sends it.",
        "",
        "The last section, *outside the protocol*, lists what a client may call here that the",
        "protocol does not define (the VS Code window's own requests among them), with the",
        "plugin serving each.",
        "",
        "Run `ahp compat` on your own host to see the table for the plugins you installed",
        "(`--json` for machines). `ahp compat --no-plugins` shows the protocol-only host.",
    ]
    for kind in KINDS:
        chosen = [row for row in rows if row.kind == kind]
        if not chosen and kind == OUTSIDE:
            continue
        lines += ["", f"## {_SECTIONS[kind]}", ""]
        lines += [
            "| name | status | served by | how / why | handled in |",
            "| --- | --- | --- | --- | --- |",
        ]
        for row in chosen:
            handler = f"`{row.handler}`" if row.handler else ""
            lines.append(
                f"| `{row.name}` | {_STATUS_WORDS[row.status]} | {_cell(row.served_by) or '-'} | "
                f"{_cell(_how(row))} | {handler} |"
            )
    # The totals are of the protocol; what lies outside it is counted apart.
    ours = [row for row in rows if row.kind != OUTSIDE]
    counts = {
        word: sum(1 for row in ours if row.status == key) for key, word in _STATUS_WORDS.items()
    }
    totals = ", ".join(f"{count} {word}" for word, count in counts.items())
    if outside := len(rows) - len(ours):
        totals += f"; and {outside} outside the protocol"
    lines += ["", f"Totals: {totals}."]
    return "\n".join(lines) + "\n"


def as_text(rows: Sequence[Row], width: int | None = None) -> str:
    """An aligned table with a header row, one section per kind.

    ``width``: wrap the last column to fit it. By default, the terminal's width
    when printing to one; otherwise each row stays on one line, for a pipe or a file.
    """
    import io
    import os
    import sys

    from rich import box
    from rich.console import Console
    from rich.table import Table

    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, highlight=False)
    for column in TEXT_COLUMNS:
        last = column == TEXT_COLUMNS[-1]
        grid.add_column(column, no_wrap=not last, overflow="fold" if last else "ellipsis")
    for kind in KINDS:
        chosen = [row for row in rows if row.kind == kind]
        for index, row in enumerate(chosen):
            grid.add_row(
                row.kind,
                row.name,
                _STATUS_WORDS[row.status],
                row.served_by or "-",
                _how(row),
                end_section=index == len(chosen) - 1,
            )
    if width is None and sys.stdout.isatty():
        width = os.get_terminal_size().columns
    buffer = io.StringIO()
    # Unwrapped, the table is as wide as its longest row; rich needs a bound.
    console = Console(
        file=buffer,
        width=width or 100_000,
        color_system=None,
        highlight=False,
        markup=False,
        emoji=False,
    )
    console.print(grid)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
