"""The ``ahp`` command: ``serve``, ``plugins``, ``version``."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Annotated

import anyio
import typer

from ahpcore import __version__
from ahpcore.host import DEFAULT_HOST, DEFAULT_MAX_FRAME_BYTES, DEFAULT_PORT, Host, HostSettings
from ahpcore.plugins import PluginError, PluginManager, Selection
from ahpcore.store import STORE_KINDS

app = typer.Typer(
    name="ahp",
    help="A plugin-first host for the Agent Host Protocol.",
    no_args_is_help=True,
    add_completion=False,
)
log = logging.getLogger("ahp")

PluginsOption = Annotated[
    str | None,
    typer.Option("--plugins", help="Load only these plugins (comma-separated names)."),
]
NoPluginsOption = Annotated[
    bool,
    typer.Option("--no-plugins", help="Protocol only: load the essential core plugins alone."),
]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _manager(plugins: str | None, no_plugins: bool) -> PluginManager:
    return PluginManager(selection=Selection.from_options(plugins, no_plugins))


def _fail(message: str) -> typer.Exit:
    typer.echo(f"ahp: {message}", err=True)
    return typer.Exit(2)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="TCP port to listen on (0 picks a free one).")] = (
        DEFAULT_PORT
    ),
    plugins: PluginsOption = None,
    no_plugins: NoPluginsOption = False,
    sessions: Annotated[
        str, typer.Option(help=f"Session store: {' or '.join(STORE_KINDS)}.")
    ] = "file",
    token: Annotated[
        str | None,
        typer.Option(
            help="Connection token clients must present (default: $AHP_TOKEN or a new one)."
        ),
    ] = None,
    no_token: Annotated[
        bool, typer.Option("--no-token", help="Accept clients without a token (loopback only).")
    ] = False,
    stdio: Annotated[
        bool, typer.Option("--stdio", help="Serve one client over stdin/stdout instead.")
    ] = False,
    socket: Annotated[
        Path | None, typer.Option("--socket", help="Also listen on this Unix domain socket.")
    ] = None,
    max_frame_bytes: Annotated[
        int, typer.Option(help="Largest inbound frame; a bigger one closes the connection.")
    ] = DEFAULT_MAX_FRAME_BYTES,
    compression: Annotated[
        bool, typer.Option(help="permessage-deflate on WebSocket connections.")
    ] = True,
    state_dir: Annotated[
        Path | None, typer.Option(help="Where the host keeps its state (default: platform's).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the host."""
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if sessions not in STORE_KINDS:
        raise _fail(f"--sessions must be one of {', '.join(STORE_KINDS)}, not {sessions!r}")
    if no_token and token:
        raise _fail("--token and --no-token contradict each other")
    if no_token and not stdio and not _is_loopback(host):
        raise _fail(
            f"refusing to listen on {host} without a connection token: anyone who can reach "
            "it could run agents on this machine. Drop --no-token or bind to 127.0.0.1."
        )
    if no_token:
        log.warning("accepting WebSocket clients without a connection token (loopback only)")
        chosen_token = None
    else:
        chosen_token = token or os.environ.get("AHP_TOKEN") or secrets.token_urlsafe(24)
    settings = HostSettings(
        host=host,
        port=port,
        sessions=sessions,
        max_frame_bytes=max_frame_bytes,
        compression=compression,
    )
    if state_dir is not None:
        settings.state_dir = state_dir
    try:
        the_host = Host(_manager(plugins, no_plugins), settings)
        anyio.run(_serve, the_host, chosen_token, stdio, socket, backend="asyncio")
    except PluginError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def _serve(host: Host, token: str | None, stdio: bool, socket: Path | None) -> None:
    async with host:
        await _serve_transports(host, token, stdio, socket)


async def _serve_transports(
    host: Host, token: str | None, stdio: bool, socket: Path | None
) -> None:
    from ahpcore.transports import stdio as stdio_transport
    from ahpcore.transports.websocket import start_unix_server, start_websocket_server

    for failure in host.plugins.failures:
        typer.echo(f"ahp: plugin {failure.name} left out: {failure.error}", err=True)
    settings = host.settings
    servers = []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
            if stdio:
                wire, reader = await stdio_transport.open_pipes(
                    max_frame_bytes=settings.max_frame_bytes
                )

                async def frames() -> bytes | None:
                    return await stdio_transport.read_line(reader)

                await host.serve_connection(wire, frames)
                tg.cancel_scope.cancel()
                return
            server = await start_websocket_server(
                host.serve_connection,
                host=settings.host,
                port=settings.port,
                token=token,
                max_frame_bytes=settings.max_frame_bytes,
                compression=settings.compression,
            )
            servers.append(server)
            bound = next(iter(server.sockets)).getsockname()
            shown_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            url = f"ws://{shown_host}:{bound[1]}/"
            typer.echo(f"ahp {__version__} listening on {url}")
            if token:
                typer.echo(f"connection token: {token}")
                typer.echo(f"connect with: {url}?token={token}")
            if socket is not None:
                servers.append(
                    await start_unix_server(
                        host.serve_connection,
                        path=str(socket),
                        max_frame_bytes=settings.max_frame_bytes,
                        compression=settings.compression,
                    )
                )
                typer.echo(f"also listening on unix socket {socket}")
            typer.echo(
                f"plugins: {', '.join(host.plugins.names())}; press Ctrl-C to stop", err=True
            )
            sys.stdout.flush()
    finally:
        with anyio.CancelScope(shield=True):
            for server in servers:
                server.close()
                await server.wait_closed()
        typer.echo("ahp stopped", err=True)


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s; stopping", signal.Signals(signum).name)
            scope.cancel()
            return


@app.command("plugins")
def plugins_command(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    hook: Annotated[
        str | None, typer.Option("--hook", help="Only plugins implementing this hook.")
    ] = None,
    plugins: PluginsOption = None,
    no_plugins: NoPluginsOption = False,
) -> None:
    """List the plugins this host would load: name, distribution, version, hooks."""
    try:
        manager = _manager(plugins, no_plugins).load()
    except PluginError as exc:
        raise _fail(str(exc)) from None
    rows = [info for info in manager.plugins() if hook is None or hook in info.hooks]
    if as_json:
        payload = {
            "plugins": [info.as_json() for info in rows],
            "failed": [
                {"name": f.name, "distribution": f.distribution, "error": f.error}
                for f in manager.failures
            ],
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    for info in rows:
        origin = f"{info.distribution} {info.version or ''}".strip() if info.distribution else "-"
        flag = " (essential)" if info.essential else ""
        typer.echo(f"{info.name}{flag}  [{origin}]  {', '.join(info.hooks) or 'no hooks'}")
    for failure in manager.failures:
        typer.echo(f"{failure.name}  FAILED: {failure.error}", err=True)


@app.command("compat")
def compat_command(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="The docs page (docs/compatibility.md).")
    ] = False,
    plugins: PluginsOption = None,
    no_plugins: NoPluginsOption = False,
) -> None:
    """List every protocol method and action and how this host serves it."""
    from ahpcore import compat

    try:
        manager = _manager(plugins, no_plugins)
        rows = compat.table(manager)
    except PluginError as exc:
        raise _fail(str(exc)) from None
    names = manager.names()
    if as_json:
        typer.echo(json.dumps(compat.as_json(rows, names), indent=2))
    elif markdown:
        typer.echo(compat.as_markdown(rows, names), nl=False)
    else:
        typer.echo(compat.as_text(rows))


@app.command()
def version() -> None:
    """Print the host's version and the protocol versions it speaks."""
    from ahpcore.protocol.versions import SUPPORTED_VERSIONS

    typer.echo(f"ahp {__version__} (protocol {', '.join(SUPPORTED_VERSIONS)})")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
