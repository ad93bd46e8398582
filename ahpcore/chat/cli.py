"""``ahp chat``: talk to an agent on a running host from the terminal.

The host is found as ``ahp sessions`` finds it: ``--url``, or the one holding
the state folder's lock, with the token from ``AHP_TOKEN``, ``--token-file``,
``--token`` or the one kept in the state folder.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from ahpcore.operate.client import HostError, OperateError
from ahpcore.operate.options import FLAG
from ahpcore.operate.sessions import (
    StateDirOption,
    TokenFileOption,
    TokenOption,
    find_source,
    pick,
    status_words,
    when,
)
from ahpcore.protocol.uris import ROOT_CHANNEL, alias_uri, file_uri

#: Sessions listed before picking one.
LISTED = 10
#: Sessions asked for a page at a time, at most this many pages, to find one by id.
PAGE, MAX_PAGES = 500, 1000


UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="AHP_URL",
        help="Talk to the host listening at this address (ws://127.0.0.1:8765/).",
        show_default="the host holding the state folder",
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``chat`` to the ``ahp`` command."""
    app.command("chat")(chat_command)


def chat_command(
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            metavar="<session>",
            help="Open this session: its URI, id, or enough of the id's start "
            "(no environment variable).",
            show_default="ask, or start a new one",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar="<provider>",
            help="Start a new session with this agent: its provider name, as --list shows "
            "(no environment variable).",
            show_default="ask, or the first agent",
        ),
    ] = None,
    folder: Annotated[
        Path | None,
        typer.Option(
            "--folder",
            metavar="<folder>",
            help="The working folder of a new session (no environment variable).",
            show_default="the current folder",
        ),
    ] = None,
    list_only: Annotated[
        bool,
        typer.Option(
            "--list",
            help="List the host's agents and recent sessions, then stop (no environment variable).",
            show_default="off",
            **FLAG,
        ),
    ] = False,
    state_dir: StateDirOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Chat with an agent on a running host: stream its answers, approve its tools."""
    if session and agent:
        raise _stop(OperateError("give --session or --agent, not both", 2))
    directory = (folder or Path.cwd()).expanduser().resolve()
    if not directory.is_dir():
        raise _stop(OperateError(f"--folder {directory} is not a folder", 2))
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if not list_only and not interactive:
        raise _stop(OperateError("ahp chat needs a terminal (stdin and stdout); --list does not"))
    try:
        source = find_source(state_dir, url, token, token_file)
        if source.url is None:
            raise OperateError(
                f"no host is running on {source.state_dir}: start one with ahp serve, or give --url"
            )
        code = anyio.run(
            _main,
            source.url,
            source.token,
            source.token_source,
            session,
            agent,
            directory,
            list_only,
            backend="asyncio",
        )
    except OperateError as exc:
        raise _stop(exc) from None
    raise typer.Exit(code)


def _stop(exc: OperateError) -> typer.Exit:
    typer.echo(f"ahp: {exc}", err=True)
    return typer.Exit(exc.code)


async def _main(
    url: str,
    token: str | None,
    token_source: str | None,
    session: str | None,
    agent: str | None,
    directory: Path,
    list_only: bool,
) -> int:
    from rich.console import Console

    from ahpcore.chat.app import Chat, print_header
    from ahpcore.chat.link import open_link
    from ahpcore.chat.model import Model

    console = Console(highlight=False)
    client_id = f"ahp-chat-{uuid.uuid4()}"
    async with open_link(url, token, token_source, client_id) as (link, hello):
        model = Model(client_id)
        for snapshot in hello.get("snapshots") or []:
            model.take_snapshot(snapshot)
        chat = Chat(link, model, console, hello.get("terminalCommandPrefix"))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(chat.consume)
            try:
                summaries = await _sessions(link, everything=session is not None)
                if list_only:
                    _list(console, model, summaries)
                    return 0
                if session is None and agent is None:
                    picked = await _choose(console, model, summaries)
                    if picked is None:
                        return 0
                    session, agent = picked
                created = session is None
                if session is None:
                    session = await _create(link, model, agent, directory)
                else:
                    session = pick(session, summaries, url)["resource"]
                await chat.open_session(session)
                print_header(console, model, created, chat.prefix)
                chat.show_history()
                await chat.run()
                return 0
            except OperateError as exc:
                # Said here: raised out of the task groups, it would come wrapped in a group.
                print(f"ahp: {exc}", file=sys.stderr, flush=True)
                return exc.code
            finally:
                tasks.cancel_scope.cancel()
    return 0


async def _sessions(link: Any, everything: bool) -> list[dict[str, Any]]:
    """The host's sessions, newest first: the first page, or every page to find one by id."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"channel": ROOT_CHANNEL, "limit": PAGE}
    for _ in range(MAX_PAGES if everything else 1):
        page = await link.request("listSessions", params) or {}
        found.extend(s for s in page.get("items") or [] if isinstance(s, dict))
        if not page.get("nextCursor"):
            break
        params["cursor"] = page["nextCursor"]
    return found


def _list(console: Any, model: Any, summaries: list[dict[str, Any]]) -> None:
    from rich.text import Text

    from ahpcore.chat.render import clean

    console.print(Text("Agents", style="bold"))
    for each in model.agents():
        line = Text(f"  {clean(each.get('provider'))}", style="cyan")
        line.append(f"  {clean(each.get('displayName', ''))}")
        if each.get("description"):
            line.append(f"  {clean(each['description'])}", style="dim")
        console.print(line)
    if not model.agents():
        console.print(Text("  none: install an agent plugin", style="dim"))
    console.print(Text("Recent sessions", style="bold"))
    for number, summary in enumerate(summaries[:LISTED], 1):
        console.print(_session_line(number, summary))
    if not summaries:
        console.print(Text("  none yet", style="dim"))


def _session_line(number: int, summary: dict[str, Any]) -> Any:
    from rich.text import Text

    from ahpcore.chat.render import clean

    line = Text(f"  {number:>2}  ")
    line.append(when(str(summary.get("modifiedAt", ""))), style="dim")
    line.append(f"  {clean(summary.get('provider', ''))}", style="cyan")
    line.append(f"  {status_words(int(summary.get('status', 1)))}", style="dim")
    line.append(f"  {clean(summary.get('title') or '(untitled)')}")
    return line


async def _choose(
    console: Any, model: Any, summaries: list[dict[str, Any]]
) -> tuple[str | None, str | None] | None:
    """(session, agent) the person picks: a listed session's number, or an agent's name."""
    from prompt_toolkit import PromptSession

    agents = [str(a.get("provider")) for a in model.agents()]
    if not agents and not summaries:
        raise OperateError("the host offers no agent and has no session to open")
    _list(console, model, summaries)
    default = agents[0] if agents else ""
    asking: PromptSession[str] = PromptSession()
    while True:
        try:
            typed = (
                await asking.prompt_async(
                    f"A session's number, or an agent for a new one [{default}]: ",
                    handle_sigint=False,
                )
            ).strip()
        except (EOFError, KeyboardInterrupt):
            return None
        typed = typed or default
        if typed.isdigit() and 1 <= int(typed) <= min(LISTED, len(summaries)):
            return str(summaries[int(typed) - 1]["resource"]), None
        if typed in agents:
            return None, typed
        console.print(f"[yellow]no session {typed} and no agent by that name[/yellow]")


async def _create(link: Any, model: Any, agent: str | None, directory: Path) -> str:
    agents = [str(a.get("provider")) for a in model.agents()]
    provider = agent or (agents[0] if agents else None)
    if provider is None:
        raise OperateError("the host offers no agent: install an agent plugin")
    if provider not in agents:
        raise OperateError(
            f"no agent {provider!r} on this host (agents: {', '.join(agents) or 'none'})", 2
        )
    uri = alias_uri(str(uuid.uuid4()))
    try:
        await link.request(
            "createSession",
            {
                "channel": uri,
                "provider": provider,
                "workingDirectories": [file_uri(os.fspath(directory))],
            },
        )
    except HostError as exc:
        raise OperateError(f"the host could not start a session: {exc.rpc_message}") from None
    return uri
