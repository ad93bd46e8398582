"""The ``ahp`` command: ``serve``, ``plugins``, ``version``."""

from __future__ import annotations

import gc
import ipaddress
import json
import logging
import os
import signal
import socket
import stat
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import anyio.abc

from ahpcore.addresses import connect_urls, ws_url
from ahpcore.config import CONFIG_ENV, ConfigError, ConfigFile, default_map, scan_config_option
from ahpcore.config import read as read_config
from ahpcore.defaults import (
    DEFAULT_HOST,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_PORT,
    default_state_dir,
)
from ahpcore.logs import (
    LEVELS,
    LOG_FILE_BACKUPS,
    LOG_FILE_BYTES,
    also_to_file,
    escape,
    state_log_file,
)
from ahpcore.logs import configure as configure_logging
from ahpcore.plugins import PluginError, PluginManager, Selection, hook_names
from ahpcore.rpc.budget import (
    DEFAULT_CONNECTIONS_PER_ADDRESS,
    DEFAULT_FRAMES_PER_SECOND,
    DEFAULT_HOST_QUEUE_BYTES,
)
from ahpcore.tokens import MIN_TOKEN_DISTINCT, MIN_TOKEN_LENGTH, StoredToken, TokenError, is_weak
from ahpcore.version import __version__

if TYPE_CHECKING:  # the host pulls in the protocol models: seconds, not needed to say --help
    import ssl

    import typer

    from ahpcore.host import Host
    from ahpcore.statelock import StateLock

    PluginsOption = str | None
    NoPluginsOption = bool

#: The session stores ``ahpcore.store`` opens (checked against it when serving).
STORE_KINDS = ("file", "memory")

log = logging.getLogger("ahp")

#: No protocol request fits in less (an initialize with a few subscriptions).
MIN_FRAME_BYTES = 4096

#: How long a stop may take to finish its writes before the process exits without them.
DEFAULT_STOP_TIMEOUT = 30.0
#: When a slow stop first says what it is waiting for.
STOP_NOTICE_SECONDS = 5.0
#: The exit status of a stop cut off at --stop-timeout.
EXIT_STOP_TIMEOUT = 3

#: Boolean flags take no value; typer would show ``<bool>`` after them.
_FLAG: dict[str, Any] = {"metavar": ""}


def _build_app() -> typer.Typer:
    """The typer application: ``ahp serve`` with plain options runs without it (a tenth
    of a second of imports at every start); help, errors and other commands use it.

    The commands' annotations are strings naming ``typer`` and the shared option types,
    resolved from this module's globals when typer reads them.
    """
    import typer

    globals()["typer"] = typer
    globals()["PluginsOption"] = Annotated[
        str | None,
        typer.Option(
            "--plugins",
            envvar="AHP_PLUGINS",
            metavar="<names>",
            show_default="every installed plugin",
            help="Load only these plugins (comma-separated names) besides the essential ones.",
        ),
    ]
    globals()["NoPluginsOption"] = Annotated[
        bool,
        typer.Option(
            "--no-plugins",
            envvar="AHP_NO_PLUGINS",
            help="Protocol only: load the essential core plugins alone.",
            show_default="off",
            **_FLAG,
        ),
    ]
    built = typer.Typer(
        name="ahp",
        help="A plugin-first host for the Agent Host Protocol.",
        no_args_is_help=True,
        add_completion=False,
        # Plain help: rich help shows a "<bool>" placeholder after flags that take no value.
        rich_markup_mode=None,
    )
    from typer.core import TyperCommand

    class ServeCommand(TyperCommand):
        """``serve`` reads the file its own ``--config`` names before parsing the rest,
        so the file's values sit below the environment and the flags."""

        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            explicit = scan_config_option(args)
            if explicit is not None:
                ctx.default_map = default_map(self, _config_or_exit(explicit), every_key=True)
            return super().parse_args(ctx, args)

    built.callback()(_root)
    built.command(cls=ServeCommand)(serve)
    built.command("plugins")(plugins_command)
    built.command("compat")(compat_command)
    built.command()(version)
    built.command("token")(token_command)
    built.command("logs")(logs_command)
    from ahpcore.chat.cli import register as register_chat
    from ahpcore.check.cli import register as register_check
    from ahpcore.operate import configure, doctor, sessions

    built.command("doctor")(doctor.doctor_command)
    built.add_typer(sessions.build_app(), name="sessions")
    built.add_typer(configure.build_app(), name="config")
    register_check(built)  # ahp check: a conformance kit, run against any host
    register_chat(built)  # ahp chat: a terminal client
    from ahpcore.plugin_commands import add_plugin_commands

    add_plugin_commands(built)  # ahp_cli_commands: ``ahp claude login`` and the like
    return built


def __getattr__(name: str) -> Any:
    if name == "app":  # built once, on first use; then an ordinary global
        built = globals()["app"] = _build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _echo(message: str, err: bool = False) -> None:
    """``typer.echo`` of one plain line, for the serve path, which runs without typer."""
    stream = sys.stderr if err else sys.stdout
    if stream is not None:
        stream.write(f"{message}\n")
        stream.flush()


class Fail(Exception):
    """Stops the command with one line ``ahp: <what> (<why>)`` and an exit code:
    2 for a bad command line or environment variable, 1 for a failure at run time."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


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


def _why(exc: BaseException) -> str:
    """The reason an error gives, without the call it came from."""
    if isinstance(exc, OSError):
        if exc.strerror and ":" not in exc.strerror:
            return exc.strerror[:1].lower() + exc.strerror[1:]
        if exc.errno:  # asyncio spells "error while attempting to bind on address (...): ..."
            return os.strerror(exc.errno).lower()
    return str(exc)


def _check_token_strength(token: str, source: str) -> None:
    if is_weak(token):
        raise Fail(
            f"the token from {source} is too weak (it needs at least {MIN_TOKEN_LENGTH} "
            f"characters, {MIN_TOKEN_DISTINCT} of them different; leave it out and the host "
            "makes a strong one)"
        )


def _read_token_file(path: Path) -> str:
    try:
        info = path.stat()
        if info.st_mode & 0o077:
            raise Fail(
                f"token file {path} is open to other users "
                f"(mode {stat.S_IMODE(info.st_mode):o}; run chmod 600 {path})"
            )
        token = path.read_text("utf-8").strip()
    except OSError as exc:
        raise Fail(f"cannot read token file {path} ({_why(exc)})") from None
    if not token:
        raise Fail(f"token file {path} is empty")
    return token


def _choose_token(
    token: str | None, token_file: Path | None, no_token: bool, stdio: bool, host: str
) -> str | None:
    """The token the user chose, checked; None for ``--no-token`` and for the stored one."""
    if no_token and (token or token_file):
        raise Fail("--no-token contradicts --token / --token-file (or AHP_TOKEN)")
    if token and token_file:
        raise Fail("give the token once: --token (or AHP_TOKEN) or --token-file, not both")
    if no_token:
        if not stdio and not _is_loopback(host):
            raise Fail(
                f"refusing to listen on {host} without a connection token (anyone who can "
                "reach it could run agents on this machine; drop --no-token or bind to 127.0.0.1)"
            )
        return None
    if token_file is not None:
        chosen = _read_token_file(token_file)
        _check_token_strength(chosen, f"--token-file {token_file}")
        return chosen
    if token:
        _check_token_strength(token, "--token or AHP_TOKEN")
        return token
    return None


def _check_state_dir(path: Path) -> None:
    """The state folder exists (made owner-only) and takes a file, or serving is refused."""
    if path.exists() and not path.is_dir():
        raise Fail(f"cannot use state folder {path} (it is a file, not a folder)", 1)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".ahp-write-check-"):
            pass
    except OSError as exc:
        raise Fail(f"cannot use state folder {path} ({_why(exc)})", 1) from None


def _check_serve_usage(
    host: str, port: int, log_level: str, stdio: bool, socket_path: Path | None
) -> None:
    if log_level.lower() not in LEVELS:
        raise Fail(f"unknown --log-level {log_level!r} (use {', '.join(LEVELS)})")
    if not 0 <= port <= 65535:
        raise Fail(f"--port {port} is out of range (0 to 65535; 0 picks a free port)")
    if stdio:
        try:
            mode = os.fstat(sys.stdin.fileno()).st_mode
        except (OSError, ValueError):
            raise Fail("--stdio needs stdin (stdin is closed)") from None
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            raise Fail("--stdio needs a pipe or a socket on stdin (stdin is a regular file)")
        return
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise Fail(f"cannot resolve --host {host} ({why})") from None
    if socket_path is not None and socket_path.exists() and not socket_path.is_socket():
        raise Fail(f"cannot listen on unix socket {socket_path} (it exists and is not a socket)")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _version_flag(value: bool) -> None:
    if value:
        _print_version()
        raise typer.Exit()


def _config_or_exit(explicit: Path | None) -> ConfigFile:
    try:
        return read_config(explicit)
    except ConfigError as exc:
        import click

        class ConfigFailure(click.ClickException):
            exit_code = 2

        raise ConfigFailure(str(exc)) from None


def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit (no environment variable).",
            is_eager=True,
            callback=_version_flag,
            **_FLAG,
        ),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar=CONFIG_ENV,
            help="Read settings from this TOML file (as ahp serve --config); every "
            "command takes the state folder and plugins from it.",
            show_default="config.toml in the config folder, if there",
        ),
    ] = None,
) -> None:
    """A plugin-first host for the Agent Host Protocol."""
    file = _config_or_exit(config)
    if file.path is not None:
        ctx.default_map = default_map(ctx.command, file, every_key=False)


def serve(
    host: Annotated[
        str, typer.Option(envvar="AHP_HOST", help="Address to listen on.")
    ] = DEFAULT_HOST,
    port: Annotated[
        int, typer.Option(envvar="AHP_PORT", help="TCP port to listen on (0 picks a free one).")
    ] = DEFAULT_PORT,
    plugins: PluginsOption = None,
    no_plugins: NoPluginsOption = False,
    sessions: Annotated[
        str,
        typer.Option(envvar="AHP_SESSIONS", help=f"Session store: {' or '.join(STORE_KINDS)}."),
    ] = "file",
    token: Annotated[
        str | None,
        typer.Option(
            envvar="AHP_TOKEN",
            show_envvar=True,
            help="Connection token clients must present, at least "
            f"{MIN_TOKEN_LENGTH} characters. A token on the command line is visible to "
            "every user of this machine in `ps`: prefer AHP_TOKEN or --token-file.",
            show_default="a new random token, printed at start",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_TOKEN_FILE",
            help="Read the connection token from this file, which only its owner may "
            "read (chmod 600).",
            show_default="none",
        ),
    ] = None,
    no_token: Annotated[
        bool,
        typer.Option(
            "--no-token",
            envvar="AHP_NO_TOKEN",
            help="Accept clients without a token (loopback only).",
            show_default="off",
            **_FLAG,
        ),
    ] = False,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-origin",
            envvar="AHP_ALLOW_ORIGINS",
            help="Also accept connections from web pages of this origin "
            "(https://app.example; repeat or separate with commas; * for any page on the "
            "web, which lets every site you visit drive this host).",
            metavar="<origin>",
            show_default="loopback pages and the host's own only",
        ),
    ] = None,
    stdio: Annotated[
        bool,
        typer.Option(
            "--stdio",
            envvar="AHP_STDIO",
            help="Serve one client over stdin/stdout instead.",
            show_default="off",
            **_FLAG,
        ),
    ] = False,
    socket_path: Annotated[
        Path | None,
        typer.Option(
            "--socket",
            envvar="AHP_SOCKET",
            help="Also listen on this Unix domain socket.",
            show_default="none",
        ),
    ] = None,
    inspector: Annotated[
        bool,
        typer.Option(
            "--inspector",
            envvar="AHP_INSPECTOR",
            help="Also serve a read-only page at /inspect on the same port, for a browser "
            "holding the token: clients, sessions, actions as they stream, plugins.",
            show_default="off",
            **_FLAG,
        ),
    ] = False,
    max_frame_bytes: Annotated[
        int,
        typer.Option(
            envvar="AHP_MAX_FRAME_BYTES",
            help="Largest inbound frame; a bigger one closes the connection (1009).",
        ),
    ] = DEFAULT_MAX_FRAME_BYTES,
    compression: Annotated[
        bool,
        typer.Option(envvar="AHP_COMPRESSION", help="permessage-deflate on WebSocket connections."),
    ] = True,
    inbound_frames: Annotated[
        float,
        typer.Option(
            envvar="AHP_INBOUND_FRAMES",
            help="Frames per second one connection may send (bursts of 2 s) before its "
            "frames are refused, and twice that for all connections together before the "
            "busiest are read more slowly; 0 lifts both budgets.",
        ),
    ] = DEFAULT_FRAMES_PER_SECOND,
    host_queue_bytes: Annotated[
        int,
        typer.Option(
            envvar="AHP_HOST_QUEUE_BYTES",
            help="Bytes all clients together may have yet to take; past three quarters of "
            "it the client furthest behind is closed (1008), past it a closing one is dropped.",
        ),
    ] = DEFAULT_HOST_QUEUE_BYTES,
    max_connections_per_address: Annotated[
        int,
        typer.Option(
            envvar="AHP_MAX_CONNECTIONS_PER_ADDRESS",
            help="Connections one address may hold open (all of loopback is one address); "
            "the next is refused with 429; 0 for any number.",
        ),
    ] = DEFAULT_CONNECTIONS_PER_ADDRESS,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_STATE_DIR",
            help="Where the host keeps its state.",
            show_default=str(default_state_dir()),
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option(envvar="AHP_LOG_LEVEL", help=f"One of {', '.join(LEVELS)}.")
    ] = "info",
    log_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_LOG_FILE",
            help=f"Write the log to this file instead of stderr, owner-only (0600), rotated at "
            f"{LOG_FILE_BYTES >> 20} MiB with {LOG_FILE_BACKUPS} older files kept. Without it "
            "the log goes to stderr and to logs/ahp.log in the state folder, kept the same way.",
            show_default="stderr and the state folder",
        ),
    ] = None,
    worktrees_root: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_WORKTREES_ROOT",
            help="Make session worktrees under DIR/<repo>/<name>, not beside each repo.",
            show_default="beside each repository",
        ),
    ] = None,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            envvar="AHP_OTLP_ENDPOINT",
            help="Also send the host's logs, traces and metrics to this OpenTelemetry "
            "collector over OTLP/HTTP (http://127.0.0.1:4318); needs the ahp-otlp plugin.",
            show_default="none",
        ),
    ] = None,
    stop_timeout: Annotated[
        float,
        typer.Option(
            envvar="AHP_STOP_TIMEOUT",
            help="Seconds a stop may take to finish its writes; past them the process exits "
            f"with status {EXIT_STOP_TIMEOUT}, naming the sessions not known to be saved "
            "(0 waits as long as it takes).",
        ),
    ] = DEFAULT_STOP_TIMEOUT,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_TLS_CERT",
            help="Serve wss:// with this PEM certificate (chain); needs --tls-key.",
            show_default="none: ws://",
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_TLS_KEY",
            help="The private key of --tls-cert (PEM), readable by its owner only.",
            show_default="none",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar=CONFIG_ENV,
            help="Read settings from this TOML file: every option above as a key "
            "(max_frame_bytes = 1048576) and each plugin's own table; a flag or an "
            "environment variable wins over the file.",
            show_default="config.toml in the config folder, if there",
        ),
    ] = None,
) -> None:
    """Run the host."""
    try:
        try:
            config_file = read_config(config)
        except ConfigError as exc:
            raise Fail(str(exc)) from None
        _check_serve_usage(host, port, log_level, stdio, socket_path)
        tls = _tls_context(tls_cert, tls_key, stdio)
        if max_frame_bytes < MIN_FRAME_BYTES:
            raise Fail(
                f"--max-frame-bytes {max_frame_bytes} is too small (at least {MIN_FRAME_BYTES})"
            )
        if inbound_frames < 0:
            raise Fail(f"--inbound-frames {inbound_frames} is negative (0 lifts the budget)")
        if host_queue_bytes < MIN_FRAME_BYTES:
            raise Fail(
                f"--host-queue-bytes {host_queue_bytes} is too small (at least {MIN_FRAME_BYTES})"
            )
        if max_connections_per_address < 0:
            raise Fail(
                f"--max-connections-per-address {max_connections_per_address} is negative "
                "(0 for any number)"
            )
        if stop_timeout < 0:
            raise Fail(f"--stop-timeout {stop_timeout} is negative (0 waits as long as it takes)")
        if inspector and stdio:
            raise Fail("--inspector serves its page on the TCP port, and --stdio has none")
        try:
            configure_logging(log_level, log_file=log_file)
        except OSError as exc:
            raise Fail(f"cannot write log file {log_file} ({_why(exc)})", 1) from None
        if sessions not in STORE_KINDS:
            raise Fail(f"--sessions must be one of {', '.join(STORE_KINDS)}, not {sessions!r}")
        manager = _manager(plugins, no_plugins).load()
        try:  # before anything is said or bound: a mistake in the file stops the start
            if config_file.tables:
                config_file.check_tables(
                    manager.config_tables(), manager.installed_names() - set(manager.names())
                )
        except ConfigError as exc:
            raise Fail(str(exc)) from None
        chosen_token = _choose_token(token, token_file, no_token, stdio, host)
        from ahpcore.host import Host, HostSettings

        settings = HostSettings(
            host=host,
            port=port,
            sessions=sessions,
            max_frame_bytes=max_frame_bytes,
            compression=compression,
            inbound_frames_per_second=inbound_frames if inbound_frames > 0 else None,
        )
        settings.config = config_file
        if state_dir is not None:
            # Absolute: plugins hand paths under it to processes that run elsewhere.
            settings.state_dir = state_dir.expanduser().absolute()
        settings.worktrees_root = worktrees_root
        if otlp_endpoint:
            if not otlp_endpoint.startswith(("http://", "https://")):
                raise Fail(f"--otlp-endpoint {otlp_endpoint!r} is not an http:// or https:// URL")
            settings.otlp_endpoint = otlp_endpoint
        _check_state_dir(settings.state_dir)
        if log_file is None:
            # A copy of what stderr shows, kept where ``ahp logs`` and a client's "collect
            # logs" find it; a host that cannot write it still serves.
            log_file = state_log_file(settings.state_dir)
            try:
                also_to_file(log_file)
            except OSError as exc:
                log.warning("cannot keep a log file in %s (%s)", log_file, _why(exc))
                log_file = None
        # Before anything opens the store: a second host on it is refused, not run beside.
        state_lock = _lock_state_dir(settings.state_dir) if sessions == "file" else None
        origins = [o.strip() for item in allow_origin or () for o in item.split(",") if o.strip()]
        if no_token:
            log.warning("accepting WebSocket clients without a connection token (loopback only)")
        if tls is None and not stdio and not _is_loopback(host):
            log.warning(
                "listening on %s without TLS: connection tokens travel in clear "
                "(give --tls-cert and --tls-key for wss://, or reach it through an SSH tunnel)",
                host,
            )
        the_host = Host(manager, settings)
        options = _ServeOptions(
            chosen_token
            if chosen_token is not None or no_token or stdio
            else _stored_token(settings.state_dir),
            stdio,
            socket_path,
            origins,
            host_queue_bytes=host_queue_bytes,
            max_connections_per_address=max_connections_per_address,
            state_lock=state_lock,
            log_file=log_file,
            inspector=inspector,
            tls=tls,
        )
        watch = _StopWatch(the_host, stop_timeout)
        try:
            anyio.run(_serve, the_host, options, watch, backend="asyncio")
        finally:
            watch.over()  # after the event loop's own end, which waits for its threads
    except BaseException as exc:  # one line for what the user can act on, never a traceback
        for leaf in _leaves(exc):
            if isinstance(leaf, Fail):
                _echo(f"ahp: {leaf}", err=True)
                raise SystemExit(leaf.code) from None
            if isinstance(leaf, PluginError):
                _echo(f"ahp: {leaf}", err=True)
                raise SystemExit(2) from None
        raise


@dataclass
class _ServeOptions:
    #: The token chosen at start, or the stored one, read again when its file changes.
    token: str | StoredToken | None
    stdio: bool
    socket: Path | None
    allow_origins: list[str]
    host_queue_bytes: int = DEFAULT_HOST_QUEUE_BYTES
    max_connections_per_address: int = DEFAULT_CONNECTIONS_PER_ADDRESS
    state_lock: StateLock | None = None
    log_file: Path | None = None
    #: Serve the inspector page and its ``ahp/inspect`` method (``ahpcore.inspector``).
    inspector: bool = False
    #: Set once the listeners are bound: then "ahp stopped" ends the run.
    listening: bool = False
    #: The TCP listener's TLS (``--tls-cert``/``--tls-key``): clients connect over wss://.
    tls: ssl.SSLContext | None = None


def _tls_context(cert: Path | None, key: Path | None, stdio: bool) -> ssl.SSLContext | None:
    """The server side of wss://, or None; a certificate or key that will not load is said."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise Fail("give both --tls-cert and --tls-key (or AHP_TLS_CERT and AHP_TLS_KEY)")
    if stdio:
        raise Fail("--tls-cert serves the TCP port, and --stdio has none")
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        # Never the key's text: only which files failed, and why.
        raise Fail(f"cannot load --tls-cert {cert} with --tls-key {key} ({_why(exc)})") from None
    return context


def _lock_state_dir(path: Path) -> StateLock | None:
    from ahpcore.statelock import StateFolderInUse, StateLock

    try:
        return StateLock.acquire(path)
    except StateFolderInUse as exc:
        raise Fail(str(exc), 1) from None
    except OSError as exc:
        raise Fail(f"cannot lock state folder {path} ({_why(exc)})", 1) from None


def _stored_token(state_dir: Path) -> StoredToken:
    try:
        return StoredToken(state_dir)
    except TokenError as exc:
        raise Fail(str(exc), 1) from None


class _StopWatch:
    """Bounds a stop from a thread of its own: what hangs may be the event loop itself
    (a close waiting on a database a stuck disk holds).

    Past ``STOP_NOTICE_SECONDS`` it says what the stop waits for; past ``timeout`` it
    names the sessions whose newest record is not known to be saved and ends the
    process. A session saved but not indexed is indexed at the next start; one not
    saved was never acknowledged to a client, as the host answers only what the
    store holds.
    """

    def __init__(self, host: Host, timeout: float) -> None:
        self.host = host
        self.timeout = timeout
        self._over = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.timeout <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._watch, name="ahp stop watch", daemon=True)
        self._thread.start()

    def over(self) -> None:
        self._over.set()

    def _unsure(self) -> str:
        unsure = self.host.unsure_sessions()
        if not unsure:
            return "no session's record is waiting"
        shown = ", ".join(unsure[:10]) + (
            f" and {len(unsure) - 10} more" if len(unsure) > 10 else ""
        )
        return f"sessions not known to be saved: {shown}"

    def _watch(self) -> None:
        notice = min(STOP_NOTICE_SECONDS, self.timeout / 2)
        if self._over.wait(notice):
            return
        log.warning(
            "still stopping after %.0f s: waiting for backends to stop and for the state "
            "folder's writes (%s); giving up at %.0f s (--stop-timeout)",
            notice,
            self._unsure(),
            self.timeout,
        )
        if self._over.wait(self.timeout - notice):
            return
        said = (
            f"could not stop cleanly within {self.timeout:.0f} s (--stop-timeout): is the "
            f"state folder's disk or database answering? Exiting; {self._unsure()}"
        )
        if log.isEnabledFor(logging.ERROR):
            log.error("%s", said)
            for handler in logging.getLogger().handlers:
                handler.flush()
        else:  # logging turned down: still one line for the user
            _echo(f"ahp: {said}", err=True)
        sys.stderr.flush()
        os._exit(EXIT_STOP_TIMEOUT)  # the event loop may be what hangs: no unwinding


async def _serve(host: Host, options: _ServeOptions, watch: _StopWatch) -> None:
    try:
        async with host:
            try:
                await _serve_transports(host, options, watch)
            finally:
                watch.start()  # before the host's own stop, which is what may hang
    finally:
        if options.listening:
            # After the host's own stop (backends, their probes, the store): nothing it
            # logs comes after this line.
            _echo("ahp stopped", err=True)


async def _listen(host: Host, options: _ServeOptions) -> list[Any]:
    """Bind every listener before anything is printed: a failure leaves nothing half-open."""
    from ahpcore.rpc.peer import HostQueues
    from ahpcore.transports.websocket import (
        ConnectionLimits,
        shared_inbound,
        start_unix_server,
        start_websocket_server,
    )

    settings = host.settings
    # One set of limits for both listeners: they bound the host's connections together.
    limits = ConnectionLimits(
        inbound=shared_inbound(settings.inbound_frames_per_second),
        queues=HostQueues(options.host_queue_bytes),
        per_address=options.max_connections_per_address,
    )
    if options.inspector:
        from ahpcore.inspector.figures import Figures

        Figures(host, limits.queues).register()
    servers: list[Any] = []
    try:
        try:
            servers.append(
                await start_websocket_server(
                    host.serve_connection,
                    host=settings.host,
                    port=settings.port,
                    token=options.token,
                    max_frame_bytes=settings.max_frame_bytes,
                    compression=settings.compression,
                    allow_origins=options.allow_origins,
                    limits=limits,
                    inspector=options.inspector,
                    people=host.identify,
                    tls=options.tls,
                )
            )
        except OSError as exc:
            raise Fail(
                f"cannot listen on {settings.host}:{settings.port} ({_why(exc)})", 1
            ) from None
        if options.socket is not None:
            try:
                servers.append(
                    await start_unix_server(
                        host.serve_connection,
                        path=str(options.socket),
                        max_frame_bytes=settings.max_frame_bytes,
                        compression=settings.compression,
                        allow_origins=options.allow_origins,
                        limits=limits,
                    )
                )
            except OSError as exc:
                raise Fail(
                    f"cannot listen on unix socket {options.socket} ({_why(exc)})", 1
                ) from None
    except BaseException:
        await _close_all(servers)
        raise
    return servers


async def _close_all(servers: list[Any]) -> None:
    with anyio.CancelScope(shield=True):
        for server in servers:
            server.close()
            await server.wait_closed()


def _plugin_list(host: Host) -> str:
    return ", ".join(
        f"{info.name} {info.version}" if info.version else info.name
        for info in host.plugins.plugins()
    )


async def _serve_transports(host: Host, options: _ServeOptions, watch: _StopWatch) -> None:
    from ahpcore.transports import stdio as stdio_transport

    for failure in host.plugins.failures:
        _echo(f"ahp: plugin {failure.name} left out: {escape(failure.error)}", err=True)
    settings = host.settings
    # Signals are taken over before anything is printed: a Ctrl-C right after the
    # banner stops the host cleanly rather than interrupting it.
    async with anyio.create_task_group() as tg:
        await tg.start(_stop_on_signal, tg.cancel_scope, watch)
        if options.stdio:
            wire, reader = await stdio_transport.open_pipes(
                max_frame_bytes=settings.max_frame_bytes
            )

            async def frames() -> bytes | None:
                return await stdio_transport.read_line(reader)

            _echo(
                f"ahp {__version__} serving one client on stdio; state in "
                f"{settings.state_dir}; plugins: {_plugin_list(host)}",
                err=True,
            )
            if options.log_file is not None:
                _echo(f"log in {options.log_file}", err=True)
            if options.state_lock is not None:
                options.state_lock.note("stdio")
            _settle_for_serving()
            await host.serve_connection(wire, frames)
            tg.cancel_scope.cancel()
            return
        servers = await _listen(host, options)
        options.listening = True
        _settle_for_serving()
        try:
            bound = next(iter(servers[0].sockets)).getsockname()
            url = ws_url(bound[0], bound[1])
            # A name lookup may wait on a resolver: not on the event loop.
            urls = await anyio.to_thread.run_sync(connect_urls, bound[0], bound[1])
            if options.tls is not None:
                url = "wss" + url.removeprefix("ws")
                urls = ["wss" + each.removeprefix("ws") for each in urls]
            anywhere = " (any address of this machine)" if urls[0] != url else ""
            _echo(f"ahp {__version__} listening on {url}{anywhere}")
            if options.socket is not None:
                _echo(f"also listening on unix socket {options.socket}")
            token = (
                options.token.current if isinstance(options.token, StoredToken) else options.token
            )
            if token:
                _echo(f"connection token: {token}")
                for each in urls:
                    _echo(f"connect with: {each}?token={token}")
            if options.inspector:
                query = f"?token={token}" if token else ""
                for each in urls:
                    _echo(f"inspector: {'http' + each.removeprefix('ws')}inspect{query}")
            if isinstance(options.token, StoredToken):
                _echo(
                    f"token kept in {options.token.path} (ahp token --rotate replaces it)", err=True
                )
            if options.state_lock is not None:
                also = f" and unix socket {options.socket}" if options.socket is not None else ""
                options.state_lock.note(f"{url}{also}")
            _echo(f"state in {settings.state_dir}", err=True)
            if options.log_file is not None:
                _echo(f"log in {options.log_file}", err=True)
            _echo(f"plugins: {_plugin_list(host)}", err=True)
            _echo("press Ctrl-C to stop", err=True)
            sys.stdout.flush()
            await anyio.sleep_forever()  # until a signal cancels the group
        finally:
            await _close_all(servers)


#: How long a worker thread may hold the interpreter while the event loop waits for
#: it (Python's default is 5 ms). Catalogue reads and answer encoding run in worker
#: threads; at 5 ms, each time the loop gave the interpreter up (to wait on the
#: network) it could wait that long again to get it back, and every client with it.
SWITCH_INTERVAL = 0.001


def _settle_for_serving() -> None:
    """Tune the process for serving, once everything start-up builds is built.

    What start-up built (modules, plugins, models) lives as long as the process,
    so it is kept out of the collector's passes: a full collection would walk all
    of it, holding the GIL for a tenth of a second or more while clients wait.
    """
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL)
    if log.isEnabledFor(logging.DEBUG):  # counting walks the whole heap: ~10 ms of a start
        log.debug(
            "start-up heap frozen: %d objects left out of garbage collection; "
            "thread switch interval %.1f ms",
            gc.get_freeze_count(),
            sys.getswitchinterval() * 1000,
        )


async def _stop_on_signal(
    scope: anyio.CancelScope,
    watch: _StopWatch,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            log.info("received %s; stopping", signal.Signals(signum).name)
            # From here: closing the listeners waits for each connection's requests.
            watch.start()
            scope.cancel()
            return


def plugins_command(
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Machine-readable output (no environment variable).",
            show_default="off",
            **_FLAG,
        ),
    ] = False,
    hook: Annotated[
        str | None,
        typer.Option(
            "--hook",
            help="Only plugins implementing this hook (no environment variable).",
            metavar="<hook>",
            show_default="every plugin",
        ),
    ] = None,
    plugins: PluginsOption = None,
    no_plugins: NoPluginsOption = False,
) -> None:
    """List the plugins this host would load: name, distribution, version, hooks."""
    try:
        manager = _manager(plugins, no_plugins).load()
    except PluginError as exc:
        raise _fail(str(exc)) from None
    if hook is not None and hook not in hook_names():
        raise _fail(f"no hook named {hook!r} (hooks: {', '.join(hook_names())})")
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


def compat_command(
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Machine-readable output (no environment variable).",
            show_default="off",
            **_FLAG,
        ),
    ] = False,
    markdown: Annotated[
        bool,
        typer.Option(
            "--markdown",
            help="The docs page, docs/compatibility.md (no environment variable).",
            show_default="off",
            **_FLAG,
        ),
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


def token_command(
    rotate: Annotated[
        bool,
        typer.Option(
            "--rotate",
            help="Replace the stored token with a new one; a running host takes it for new "
            "connections (no environment variable).",
            show_default="off",
            **_FLAG,
        ),
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_STATE_DIR",
            help="The state folder whose token to print.",
            show_default=str(default_state_dir()),
        ),
    ] = None,
) -> None:
    """Print the connection token kept in the state folder, made if there is none."""
    from ahpcore import tokens

    folder = state_dir or default_state_dir()
    if folder.exists() and not folder.is_dir():
        raise _fail(f"cannot use state folder {folder} (it is a file, not a folder)")
    try:
        token = tokens.rotate(folder) if rotate else tokens.stored_token(folder)
    except TokenError as exc:
        typer.echo(f"ahp: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(token)
    if rotate:
        typer.echo(
            "a host running on this state folder lets new connections in with the new token "
            "only; connections already open stay open",
            err=True,
        )
    if chosen := [name for name in ("AHP_TOKEN", "AHP_TOKEN_FILE") if os.environ.get(name)]:
        typer.echo(
            f"note: {' and '.join(chosen)} set here: a host started with it uses that token, "
            "not this one",
            err=True,
        )


def logs_command(
    lines: Annotated[
        int,
        typer.Option(
            "--lines", "-n", help="How many of the last lines to print (no environment variable)."
        ),
    ] = 40,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Go on printing lines as the host writes them, until Ctrl-C "
            "(no environment variable).",
            show_default="off",
            **_FLAG,
        ),
    ] = False,
    path_only: Annotated[
        bool,
        typer.Option(
            "--path",
            help="Print the log file's path alone (no environment variable).",
            show_default="off",
            **_FLAG,
        ),
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_STATE_DIR",
            help="The state folder whose log to read.",
            show_default=str(default_state_dir()),
        ),
    ] = None,
    log_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AHP_LOG_FILE",
            help="The log file a host was started with, if not the state folder's.",
            show_default="logs/ahp.log in the state folder",
        ),
    ] = None,
) -> None:
    """Print where the host keeps its log, and its last lines."""
    from ahpcore.logs import tail

    path = log_file or state_log_file(state_dir or default_state_dir())
    if path_only:
        typer.echo(str(path))
        return
    typer.echo(f"log in {path}", err=True)
    try:
        for line in tail(path, lines):
            typer.echo(line)
    except FileNotFoundError:
        typer.echo(f"ahp: no log file at {path} (no host has written one there yet)", err=True)
        raise typer.Exit(1) from None
    except OSError as exc:
        typer.echo(f"ahp: cannot read log file {path} ({_why(exc)})", err=True)
        raise typer.Exit(1) from None
    if follow:
        _follow(path)


def _follow(path: Path) -> None:
    """Print what is added to ``path`` as it comes, reopening it when it is rotated."""
    import time

    file = path.open("rb")
    file.seek(0, os.SEEK_END)
    try:
        while True:
            chunk = file.readline()
            if chunk:
                typer.echo(chunk.decode("utf-8", "replace").rstrip("\n"))
                continue
            time.sleep(0.3)
            try:
                rotated = os.stat(path).st_ino != os.fstat(file.fileno()).st_ino
            except FileNotFoundError:
                continue
            if rotated:
                file.close()
                file = path.open("rb")
    except KeyboardInterrupt:
        pass
    finally:
        file.close()


def _print_version() -> None:
    from ahpcore.protocol.versions import SUPPORTED_VERSIONS

    typer.echo(f"ahp {__version__} (protocol {', '.join(SUPPORTED_VERSIONS)})")


def version() -> None:
    """Print the host's version and the protocol versions it speaks."""
    _print_version()


#: ``ahp serve``'s options as ``_plain_serve_options`` reads them: option ->
#: (parameter of ``serve``, kind, environment variable). A test holds it to typer's.
SERVE_OPTIONS: dict[str, tuple[str, str, str]] = {
    "--host": ("host", "str", "AHP_HOST"),
    "--port": ("port", "int", "AHP_PORT"),
    "--plugins": ("plugins", "str", "AHP_PLUGINS"),
    "--no-plugins": ("no_plugins", "flag", "AHP_NO_PLUGINS"),
    "--sessions": ("sessions", "str", "AHP_SESSIONS"),
    "--token": ("token", "str", "AHP_TOKEN"),
    "--token-file": ("token_file", "path", "AHP_TOKEN_FILE"),
    "--no-token": ("no_token", "flag", "AHP_NO_TOKEN"),
    "--allow-origin": ("allow_origin", "multiple", "AHP_ALLOW_ORIGINS"),
    "--stdio": ("stdio", "flag", "AHP_STDIO"),
    "--socket": ("socket_path", "path", "AHP_SOCKET"),
    "--inspector": ("inspector", "flag", "AHP_INSPECTOR"),
    "--max-frame-bytes": ("max_frame_bytes", "int", "AHP_MAX_FRAME_BYTES"),
    "--compression": ("compression", "flag", "AHP_COMPRESSION"),
    "--no-compression": ("compression", "flag-off", "AHP_COMPRESSION"),
    "--inbound-frames": ("inbound_frames", "float", "AHP_INBOUND_FRAMES"),
    "--host-queue-bytes": ("host_queue_bytes", "int", "AHP_HOST_QUEUE_BYTES"),
    "--max-connections-per-address": (
        "max_connections_per_address",
        "int",
        "AHP_MAX_CONNECTIONS_PER_ADDRESS",
    ),
    "--state-dir": ("state_dir", "path", "AHP_STATE_DIR"),
    "--log-level": ("log_level", "str", "AHP_LOG_LEVEL"),
    "--log-file": ("log_file", "path", "AHP_LOG_FILE"),
    "--worktrees-root": ("worktrees_root", "path", "AHP_WORKTREES_ROOT"),
    "--otlp-endpoint": ("otlp_endpoint", "str", "AHP_OTLP_ENDPOINT"),
    "--stop-timeout": ("stop_timeout", "float", "AHP_STOP_TIMEOUT"),
    "--tls-cert": ("tls_cert", "path", "AHP_TLS_CERT"),
    "--tls-key": ("tls_key", "path", "AHP_TLS_KEY"),
    "--config": ("config", "path", CONFIG_ENV),
}
_BOOLEANS = {"1": True, "true": True, "0": False, "false": False}


def _plain_value(kind: str, text: str) -> Any:
    """``text`` as typer would pass it, or None when only typer should judge it."""
    if not text:
        return None
    if kind == "int":
        return (
            int(text)
            if text == "0" or (text.isascii() and text.isdigit() and text[0] != "0")
            else None
        )
    if kind == "float":
        whole, dot, part = text.partition(".")
        plain = _plain_value("int", whole) is not None and (
            not dot or (part.isascii() and part.isdigit())
        )
        return float(text) if plain else None
    if kind == "path":
        return Path(text)
    if kind in ("flag", "flag-off"):
        return _BOOLEANS.get(text)
    return text  # str, multiple


def _plain_serve_options(args: list[str]) -> dict[str, Any] | None:
    """``serve``'s arguments for the common case, read without typer; None for anything
    else (help, a mistake, an unusual spelling), which typer then reads and reports."""
    given: dict[str, Any] = {}
    index = 0
    while index < len(args):
        name, eq, inline = args[index].partition("=")
        spec = SERVE_OPTIONS.get(name)
        if spec is None:
            return None
        param, kind, _ = spec
        index += 1
        if kind in ("flag", "flag-off"):
            if eq:
                return None
            given[param] = kind == "flag"
            continue
        if not eq:
            if index >= len(args):
                return None
            inline, index = args[index], index + 1
        value = _plain_value(kind, inline)
        if value is None or inline.startswith("-"):
            return None
        if kind == "multiple":
            given.setdefault(param, []).append(value)
        else:
            given[param] = value
    for param, kind, envvar in SERVE_OPTIONS.values():
        text = os.environ.get(envvar)
        if param in given or text is None:
            continue
        value = None if kind == "multiple" else _plain_value(kind, text)
        if value is None:
            return None
        given[param] = value
    return given


def _usage_message(exc: Any, args: list[str]) -> str:
    """One line for a usage error typer raised, naming the command or option at fault."""
    ctx = getattr(exc, "ctx", None)
    hint = f"; see {ctx.command_path} --help" if ctx is not None else ""
    param = getattr(exc, "param", None)
    commands = getattr(getattr(ctx, "command", None), "commands", None)
    if ctx is not None and param is None and isinstance(commands, dict):
        # An unknown command: the first word after the group's own path.
        words = [arg for arg in args[len(ctx.command_path.split()) - 1 :] if arg[:1] != "-"]
        if words and words[0] not in commands:
            shown = [name for name, cmd in commands.items() if not getattr(cmd, "hidden", False)]
            where = f" in {ctx.command_path}" if ctx.parent is not None else ""
            return f"no command named {words[0]!r}{where} (commands: {', '.join(shown)}){hint}"
    envvar = getattr(param, "envvar", None)
    if (
        ctx is not None
        and param is not None
        and isinstance(envvar, str)
        and hasattr(exc, "param_hint")
    ):
        # typer names both the option and its variable: name the one the value came from.
        source = getattr(ctx.get_parameter_source(param.name), "name", None)
        exc.param_hint = (
            f"environment variable {envvar}"
            if source == "ENVIRONMENT"
            else " / ".join(f"'{opt}'" for opt in param.opts)
        )
    return f"{exc.format_message().rstrip('.')}{hint}"


def main() -> None:
    """Run the command; a usage error is one line ``ahp: ...`` and exit code 2."""
    args = sys.argv[1:]
    if args[:1] == ["serve"] and (options := _plain_serve_options(args[1:])) is not None:
        try:
            try:
                options = {**read_config(options.get("config")).serve_params(), **options}
            except ConfigError as exc:
                _echo(f"ahp: {exc}", err=True)
                sys.exit(2)
            serve(**options)
        except KeyboardInterrupt:
            _echo("", err=True)
            _echo("ahp: stopped", err=True)
            sys.exit(130)
        sys.exit(0)
    import typer

    app = globals().get("app") or __getattr__("app")
    try:
        code = app(prog_name="ahp", standalone_mode=False)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("ahp: stopped", err=True)
        sys.exit(130)
    except Exception as exc:
        # Click's exceptions (vendored by newer typer, imported by older): duck-typed.
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            sys.exit(0)
        message, exit_code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if not callable(message) or not isinstance(exit_code, int):
            raise
        typer.echo(f"ahp: {_usage_message(exc, args)}", err=True)
        sys.exit(exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
