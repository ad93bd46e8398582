"""``ahp sessions``: list, show and dispose of sessions, on the running host or in its state folder.

Where the answer comes from:

* ``--url``: the host listening there.
* otherwise, the host holding the state folder's lock (it writes where it
  listens into the lock file), reached with the token from ``AHP_TOKEN``,
  ``--token-file``, ``--token`` or, failing those, the one kept in the state
  folder;
* no host holds it: the session store itself. ``list`` and ``show`` read it
  without writing; ``dispose`` takes the state folder's lock (so no host can
  start on it meanwhile) and runs the host in this process, listening nowhere,
  to dispose of the session exactly as a running host would, the backend's own
  copy included.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import anyio
import typer

from ahpcore.defaults import default_state_dir
from ahpcore.logs import escape
from ahpcore.operate.client import Connection, HostError, OperateError
from ahpcore.operate.options import FLAG, JsonOption
from ahpcore.protocol import uris
from ahpcore.protocol.errors import SESSION_NOT_FOUND
from ahpcore.protocol.uris import ROOT_CHANNEL

#: Rows asked of a running host per ``listSessions`` page ...
PAGE = 500
#: ... and at most this many pages (five million sessions) before the list stops.
MAX_PAGES = 10_000
#: The session store's file in the state folder (see ``ahpcore.store.open_store``).
STORE_FILE = "sessions.sqlite3"

#: The words for a session's activity (the status bits below ``STATUS_IS_READ``).
_ACTIVITY = {1: "idle", 2: "error", 8: "working", 24: "needs input"}
_IS_READ, _IS_ARCHIVED = 1 << 5, 1 << 6


StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        envvar="AHP_STATE_DIR",
        help="The state folder of the host to ask (its lock names where it listens).",
        show_default=str(default_state_dir()),
    ),
]
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="AHP_URL",
        help="Ask the host listening at this address (ws://127.0.0.1:8765/).",
        show_default="the host holding the state folder, else the state folder itself",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="AHP_TOKEN",
        show_envvar=True,
        help="The host's connection token (visible in `ps`: prefer AHP_TOKEN or --token-file).",
        show_default="the token kept in the state folder",
    ),
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        envvar="AHP_TOKEN_FILE",
        help="Read the host's connection token from this file.",
        show_default="none",
    ),
]
SessionArgument = Annotated[
    str,
    typer.Argument(
        metavar="SESSION",
        help="The session's URI, its id, or enough of the id's start to name one session.",
        show_default=False,
    ),
]


# -- where the sessions are --------------------------------------------------------------
@dataclass
class Source:
    """A running host (``url``) or, with ``url`` None, the state folder's store."""

    state_dir: Path
    url: str | None = None
    token: str | None = None
    #: Where the token came from, for an error to name.
    token_source: str | None = None
    #: The pid of the host holding the state folder, when one does.
    pid: int | None = None

    def describe(self) -> str:
        if self.url is None:
            return f"the state folder {self.state_dir} (no host is running on it)"
        held = f" (pid {self.pid})" if self.pid is not None else ""
        return f"the host at {self.url}{held}"

    def as_json(self) -> dict[str, Any]:
        return {"host": self.url, "stateFolder": str(self.state_dir)}


def _token(
    state_dir: Path, token: str | None, token_file: Path | None
) -> tuple[str | None, str | None]:
    """(the token, where it came from) for a running host, or (None, None)."""
    if token and token_file:
        raise OperateError("give the token once: --token (or AHP_TOKEN) or --token-file", 2)
    if token:
        return token, "--token or AHP_TOKEN"
    if token_file is not None:
        try:
            return token_file.read_text("utf-8").strip(), f"--token-file {token_file}"
        except OSError as exc:
            why = (exc.strerror or str(exc)).lower()
            raise OperateError(f"cannot read token file {token_file} ({why})", 2) from None
    from ahpcore import tokens

    path = tokens.token_path(state_dir)
    if not path.exists():
        return None, None
    try:
        return tokens.stored_token(state_dir), f"the stored token {path}"
    except tokens.TokenError as exc:
        raise OperateError(str(exc)) from None


def find_source(
    state_dir: Path | None, url: str | None, token: str | None, token_file: Path | None
) -> Source:
    from ahpcore.operate.checks import lock_holder

    folder = state_dir if state_dir is not None else default_state_dir()
    if url is not None:
        chosen, source = _token(folder, token, token_file)
        return Source(folder, url, chosen, source)
    try:
        holder = lock_holder(folder)
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise OperateError(f"cannot look at the lock of {folder} ({why})") from None
    if holder is None:
        return Source(folder)
    listening = re.search(r"ws://\S+", holder.address or "")
    if listening is None:
        said = (
            "serves one client on stdio"
            if holder.address == "stdio"
            else "has not said where it listens yet (still starting?)"
        )
        raise OperateError(
            f"the host holding {folder} ({holder.describe().split(',')[0]}) {said}: "
            "it cannot be asked; give --url if it listens somewhere"
        )
    chosen, source = _token(folder, token, token_file)
    return Source(folder, listening.group(), chosen, source, holder.pid)


# -- a running host ------------------------------------------------------------------------
def _open(source: Source) -> AbstractAsyncContextManager[Connection]:
    from ahpcore.operate.client import connect_websocket

    assert source.url is not None
    return connect_websocket(source.url, source.token, source.token_source)


async def _listed(connection: Connection) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params: dict[str, Any] = {"channel": ROOT_CHANNEL, "limit": PAGE}
        if cursor is not None:
            params["cursor"] = cursor
        page = await connection.request("listSessions", params)
        items.extend(page.get("items") or [])
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return items


# -- the state folder, read without writing --------------------------------------------------
def _read_store(state_dir: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(every session's summary, newest first; the host's record of each, by id).

    The summaries are built as the host's ``listSessions`` builds them: from what
    its index last heard from each backend and what the host keeps itself.
    """
    from ahpcore.sessions.catalogue import summary_of

    path = state_dir / STORE_FILE
    if not path.exists():
        return [], {}
    try:
        db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:
        raise OperateError(f"cannot read the session store {path} ({exc})") from None
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        records: dict[str, dict[str, Any]] = {}
        if "sessions" in tables:
            for session_id, text in db.execute("SELECT id, record FROM sessions"):
                records[session_id] = json.loads(text)
        summaries: dict[str, dict[str, Any]] = {}
        if "catalogue" in tables:
            rows = db.execute(
                "SELECT id, provider, summary, backend_row, host_row FROM catalogue "
                "WHERE backend_row IS NOT NULL OR host_row IS NOT NULL"
            )
            for session_id, provider, summary, listed, host in rows:
                summaries[session_id] = (
                    json.loads(summary)
                    if summary
                    else summary_of(
                        provider,
                        session_id,
                        json.loads(listed) if listed else {},
                        json.loads(host) if host else {},
                    )
                )
    except (sqlite3.Error, ValueError) as exc:
        raise OperateError(f"cannot read the session store {path} ({exc})") from None
    finally:
        db.close()
    for session_id, record in records.items():
        # Saved by a host stopped before its index caught up: the record is the newer word.
        uri = record.get("uri")
        provider = record.get("provider") or (uris.scheme_of(uri) if isinstance(uri, str) else "")
        if session_id not in summaries and provider:
            summaries[session_id] = summary_of(provider, session_id, {}, record)
    ordered = sorted(summaries.values(), key=lambda s: (s.get("modifiedAt", ""), s["resource"]))
    return ordered[::-1], records


# -- naming a session --------------------------------------------------------------------------
def _id_of(summary: dict[str, Any]) -> str:
    try:
        return uris.session_id_of(summary["resource"])
    except ValueError:
        return str(summary["resource"])


def pick(said: str, summaries: list[dict[str, Any]], where: str) -> dict[str, Any]:
    """The one session ``said`` names among ``summaries``: by URI, id or the id's start."""
    wanted = said.strip()
    if ":" in wanted:
        try:
            wanted = uris.session_id_of(wanted)
        except ValueError as exc:
            raise OperateError(f"{said!r} is not a session URI ({exc})", 2) from None
        found = [s for s in summaries if _id_of(s) == wanted]
    else:
        found = [s for s in summaries if _id_of(s) == wanted]
        if not found and wanted:
            found = [s for s in summaries if _id_of(s).startswith(wanted)]
    if not found:
        raise OperateError(
            f"no session {said!r} among the {len(summaries)} on {where}; "
            "ahp sessions list shows them"
        )
    if len(found) > 1:
        named = ", ".join(_id_of(s) for s in found[:5]) + (", ..." if len(found) > 5 else "")
        raise OperateError(
            f"{said!r} names {len(found)} sessions ({named}); give more of the id", 2
        )
    return found[0]


# -- showing -------------------------------------------------------------------------------------
def status_words(status: int) -> str:
    words = [_ACTIVITY.get(status & 0x1F, f"status {status & 0x1F}")]
    if not status & _IS_READ:
        words.append("unread")
    if status & _IS_ARCHIVED:
        words.append("archived")
    return ", ".join(words)


def when(stamp: str) -> str:
    """An ISO time as local ``YYYY-MM-DD HH:MM`` (as it came when it is not one)."""
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return escape(stamp)


def folder(uri: str) -> str:
    """A ``file:`` URI as a path; any other URI as it is."""
    from ahpcore.protocol.uris import path_of_file_uri

    return path_of_file_uri(uri) or uri


def table(summaries: Iterable[dict[str, Any]], width: int | None = None) -> str:
    """An aligned table, one session a line; titles cut to ``width`` when given.

    Titles and ids are written with their control characters spelled out: a
    client chose them, and a terminal must not take them for commands.
    """
    header = ("ID", "PROVIDER", "MODIFIED", "STATUS", "TITLE")
    rows = [
        (
            escape(_id_of(s)),
            escape(s.get("provider", "")),
            when(str(s.get("modifiedAt", ""))),
            status_words(int(s.get("status", 1))),
            escape(s.get("title", "")),
        )
        for s in summaries
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        line = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1]))
        line = f"{line}  {row[-1]}"
        if width is not None and len(line) > width:
            line = line[: max(width - 1, 0)] + "…"
        lines.append(line.rstrip())
    return "\n".join(lines)


def describe(summary: dict[str, Any], chats: list[dict[str, Any]]) -> str:
    lines = [
        f"session   {escape(summary['resource'])}",
        f"provider  {escape(summary.get('provider', ''))}",
        f"title     {escape(summary.get('title', ''))}",
        f"status    {status_words(int(summary.get('status', 1)))}",
        f"created   {when(str(summary.get('createdAt', '')))}",
        f"modified  {when(str(summary.get('modifiedAt', '')))}",
    ]
    directories = [folder(str(d)) for d in summary.get("workingDirectories") or []]
    lines.append(f"folders   {escape(', '.join(directories)) if directories else '-'}")
    lines.append(f"chats     {len(chats)}")
    for chat in chats:
        lines.append(f"  {escape(chat.get('resource', ''))}  {escape(chat.get('title', ''))}")
    return "\n".join(lines)


def _chats_of_record(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"resource": chat.get("uri", ""), "title": chat.get("title", "")}
        for chat in record.get("chats") or []
    ]


def _chats_of(summary: dict[str, Any], state: dict[str, Any] | None) -> list[dict[str, Any]]:
    rows = (state or {}).get("chats") or summary.get("chats") or []
    return [{"resource": row.get("resource", ""), "title": row.get("title", "")} for row in rows]


def _echo_json(payload: dict[str, Any]) -> None:
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))


def _stop(exc: OperateError) -> typer.Exit:
    typer.echo(f"ahp: {exc}", err=True)
    return typer.Exit(exc.code)


# -- the commands ----------------------------------------------------------------------------------
def list_command(
    as_json: JsonOption = False,
    state_dir: StateDirOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """List the sessions: id, provider, when last changed, status and title, newest first."""
    try:
        source = find_source(state_dir, url, token, token_file)
        if source.url is None:
            summaries, _ = _read_store(source.state_dir)
        else:

            async def ask() -> list[dict[str, Any]]:
                async with _open(source) as connection:
                    return await _listed(connection)

            summaries = anyio.run(ask, backend="asyncio")
    except OperateError as exc:
        raise _stop(exc) from None
    if as_json:
        _echo_json({**source.as_json(), "sessions": summaries})
        return
    typer.echo(f"{len(summaries)} session(s) on {source.describe()}", err=True)
    if summaries:
        width = os.get_terminal_size().columns if sys.stdout.isatty() else None
        typer.echo(table(summaries, width))


def show_command(
    session: SessionArgument,
    as_json: JsonOption = False,
    state_dir: StateDirOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Show one session: its title, status, times, folders and chats."""
    try:
        source = find_source(state_dir, url, token, token_file)
        detail: dict[str, Any]
        if source.url is None:
            summaries, records = _read_store(source.state_dir)
            summary = pick(session, summaries, source.describe())
            record = records.get(_id_of(summary))
            chats = _chats_of_record(record) if record else _chats_of(summary, None)
            detail = {"record": record}
        else:

            async def ask() -> tuple[dict[str, Any], dict[str, Any] | None]:
                async with _open(source) as connection:
                    found = pick(session, await _listed(connection), source.describe())
                    # Subscribing opens a past session on the host, as a client showing it would.
                    answer = await connection.request("subscribe", {"channel": found["resource"]})
                    await connection.notify("unsubscribe", {"channel": found["resource"]})
                    return found, (answer.get("snapshot") or {}).get("state")

            summary, state = anyio.run(ask, backend="asyncio")
            chats = _chats_of(summary, state)
            detail = {"state": state}
    except OperateError as exc:
        raise _stop(exc) from None
    if as_json:
        _echo_json({**source.as_json(), "summary": summary, "chats": chats, **detail})
        return
    typer.echo(describe(summary, chats))


def dispose_command(
    session: SessionArgument,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Do not ask first (needed when stdin is not a terminal).",
            show_default="off",
            **FLAG,
        ),
    ] = False,
    as_json: JsonOption = False,
    state_dir: StateDirOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Dispose of one session for good: its chats, its record and the backend's copy."""
    try:
        source = find_source(state_dir, url, token, token_file)
        if source.url is None:
            summaries, _ = _read_store(source.state_dir)
            summary = pick(session, summaries, source.describe())
            _confirm(summary, yes)
            _dispose_in_process(source.state_dir, summary["resource"])
        else:

            async def dispose() -> dict[str, Any]:
                async with _open(source) as connection:
                    found = pick(session, await _listed(connection), source.describe())
                    await anyio.to_thread.run_sync(_confirm, found, yes)
                    await connection.request("disposeSession", {"channel": found["resource"]})
                    return found

            summary = anyio.run(dispose, backend="asyncio")
    except HostError as exc:
        if exc.rpc_code != SESSION_NOT_FOUND:
            raise _stop(exc) from None
        gone = OperateError(f"no session {session!r} on {source.describe()}: {exc.rpc_message}")
        raise _stop(gone) from None
    except OperateError as exc:
        raise _stop(exc) from None
    if as_json:
        _echo_json({**source.as_json(), "disposed": summary["resource"]})
        return
    title = escape(summary.get("title", ""))
    typer.echo(f"disposed of {escape(summary['resource'])}{f' ({title})' if title else ''}")


def _confirm(summary: dict[str, Any], yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise OperateError(
            "disposing of a session deletes its conversation for good: add --yes to go ahead", 2
        )
    title = escape(summary.get("title", ""))
    asked = f"Dispose of {escape(summary['resource'])}{f' ({title})' if title else ''} for good?"
    if not typer.confirm(asked, default=False):
        raise OperateError("nothing disposed of", 1)


def _dispose_in_process(state_dir: Path, uri: str) -> None:
    """Dispose of ``uri`` through a host started here on ``state_dir``, listening nowhere.

    The state folder's lock is held throughout, so a host starting meanwhile is
    refused rather than run on the store beside this one.
    """
    from ahpcore.logs import configure as configure_logging
    from ahpcore.statelock import StateFolderInUse, StateLock

    try:
        # Held until this process ends, which lets it go however it ends.
        StateLock.acquire(state_dir)
    except StateFolderInUse as exc:
        raise OperateError(f"{exc}; try again") from None
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise OperateError(f"cannot lock state folder {state_dir} ({why})") from None
    configure_logging("warning")  # the host's own complaints, nothing of its routine
    anyio.run(_dispose_with_host, state_dir, uri, backend="asyncio")


async def _dispose_with_host(state_dir: Path, uri: str) -> None:
    from ahpcore.host import Host, HostSettings
    from ahpcore.operate.client import connect_in_process
    from ahpcore.plugins import PluginError, PluginManager, Selection

    try:
        manager = PluginManager(selection=Selection.from_options(None, False))
        host = Host(manager, HostSettings(sessions="file", state_dir=state_dir))
    except PluginError as exc:
        raise OperateError(str(exc), 2) from None
    async with host, connect_in_process(host) as connection:
        await connection.request("disposeSession", {"channel": uri})


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="sessions",
        help="List, show and dispose of sessions, on the running host or in its state folder.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
    )
    app.command("list")(list_command)
    app.command("show")(show_command)
    app.command("dispose")(dispose_command)
    return app
