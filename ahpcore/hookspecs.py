"""The hooks a plugin implements, all prefixed ``ahp_``.

A plugin is a module or object with functions decorated by
``ahpcore.hookimpl``. Implementations stay synchronous and may return a value
or an awaitable; the host resolves both. Two kinds:

* startup hooks (a port, backends, root config keys, extra methods): they
  receive ``host``, the plugin's view of the host (``ahpcore.api.PluginHost``),
  and are called once, when the host starts;
* lifecycle hooks (``ahp_session_creating`` and the rest, see
  ``ahpcore.lifecycle``): called at each moment of a session's life, one
  implementation after another, each awaited before the next begins.

Hooks are called through pluggy, so ``@hookimpl(tryfirst=True)`` and
``trylast=True`` order them, and ``AHP_TRACE_PLUGINS=1`` logs every call.
Otherwise they run in the order plugins load: the core's own first, then
plugins handed over explicitly, then installed ones by name.

A startup hook that cannot go on as the plugin is configured (a variable it
reads is malformed, say) raises ``ahpcore.hookspecs.PluginError`` with a message
naming what is wrong: ``ahp serve`` stops with that one line, exit code 2, and
no traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ahpcore.markers import PROJECT, hookimpl, hookspec

if TYPE_CHECKING:
    import typer
    from pydantic import BaseModel

    from ahpcore.api import PluginHost
    from ahpcore.findings import Check
    from ahpcore.lifecycle import SessionCreation, ToolConfirmation, TurnStart
    from ahpcore.ports import (
        AutomationsPort,
        Backend,
        ChangesPort,
        ResourcesPort,
        RpcHandler,
        SessionStore,
        TerminalsPort,
        UsersPort,
        WorktreesPort,
    )

__all__ = ["PROJECT", "PluginError", "hookimpl", "hookspec"]


class PluginError(Exception):
    """A plugin set the host cannot start with; the message names the plugin, or the
    setting of its that is wrong."""


@hookspec
def ahp_backends(host: PluginHost, register: Callable[[Backend], None]) -> None:
    """Offer agent backends.

    Receives ``register``; call it once per backend (an object implementing
    ``ahpcore.ports.Backend``). Returns nothing. Two plugins registering one
    provider name is an error naming both. Fires when the host starts.
    """


@hookspec(firstresult=True)
def ahp_terminals(host: PluginHost) -> TerminalsPort | None:
    """Return the terminals port (``createTerminal``/``disposeTerminal``, the pty side).

    First non-None answer wins. Without one, terminal commands are refused
    naming the missing port. Fires when the host starts.
    """


@hookspec(firstresult=True)
def ahp_resources(host: PluginHost) -> ResourcesPort | None:
    """Return the resources port (``resource*`` commands and resource watches).

    First non-None answer wins. Without one, those commands on the host's own
    URIs (``file:``) are refused naming the missing port; resources a client
    publishes are routed by the core either way. Fires when the host starts.
    """


@hookspec(firstresult=True)
def ahp_changes(host: PluginHost) -> ChangesPort | None:
    """Return the changes port: changesets and ``invokeChangesetOperation``.

    First non-None answer wins. Fires when the host starts.
    """


@hookspec(firstresult=True)
def ahp_worktrees(host: PluginHost) -> WorktreesPort | None:
    """Return the worktrees port: isolated trees for sessions asking for one.

    First non-None answer wins. Fires when the host starts.
    """


@hookspec(firstresult=True)
def ahp_automations(host: PluginHost) -> AutomationsPort | None:
    """Return the automations port: definitions and runs kept durably, and schedules fired.

    First non-None answer wins. With one, the core serves ``ahp-automations://``,
    the run channels, ``runAutomation``, ``fetchAutomationRuns`` and
    ``listAutomationTriggerDefinitions``, and advertises ``automations`` on
    ``initialize``. Fires when the host starts.
    """


@hookspec(firstresult=True)
def ahp_users(host: PluginHost) -> UsersPort | None:
    """Return the users port: people, each with a connection token and a role.

    First non-None answer wins. With one, a person's token opens a connection as
    that person (``user:<name>``), the deployment token as the host itself
    (``root:<hostname>``); roles limit what each may do, and sessions record who
    owns them. Without one, whoever holds the deployment token may do
    everything. Fires when the host starts.
    """


@hookspec
def ahp_automation_triggers(query: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Offer event trigger types for automations (``AutomationTriggerDefinition`` each).

    ``query`` holds what ``listAutomationTriggerDefinitions`` was asked about
    (``provider``, ``workingDirectories``, ``sessionConfig``; any may be absent,
    and an empty query asks for everything the plugin could offer). Every
    plugin's answer is listed. A plugin fires its events with
    ``host.automation_event(type, event, folder=..., details=...)``. Called on
    the event loop whenever a client asks and whenever a definition is checked:
    answer from what is known, without waiting. An exception is logged and
    leaves that plugin's triggers out.
    """


@hookspec
def ahp_rpc_methods(host: PluginHost, register: Callable[[str, RpcHandler], None]) -> None:
    """Add JSON-RPC methods outside the protocol (the VS Code window's own requests).

    Receives ``register(method, handler)``; ``handler(connection, params)``
    returns the result or an awaitable of it and raises
    ``ahpcore.protocol.ProtocolError`` to refuse. A protocol method cannot be
    replaced, and two plugins registering one method is an error naming both.
    Fires when the host starts.
    """


@hookspec
def ahp_host_started(host: PluginHost) -> None:
    """Take part in the host once every part of it is built, before any client connects.

    Called once, after every other startup hook, with the engine, the router and
    the services in place: what a plugin that watches the whole host (telemetry)
    needs. Serve stateless channels (``host.open_stream``), add ``initialize``
    fields (``host.advertise``), watch requests and changes (``host.on_request``,
    ``host.on_change``), and say what to do when the host stops
    (``host.at_stop``). An exception stops the host from starting.
    """


@hookspec
def ahp_root_config(host: PluginHost) -> dict[str, Any] | None:
    """Return root config schema properties this plugin contributes.

    A mapping of key -> JSON Schema property (``ConfigPropertySchema``).
    Every plugin's answer is merged into the root channel's config schema; two
    plugins declaring one key is an error naming both. Fires when the host
    starts.

    Any client may set root config, so a ``"number"`` property should carry
    ``"minimum"`` and ``"maximum"``: the host refuses a value outside them (and
    a value that is not a finite number), and logs a warning at start for a
    number with no maximum. The host keeps these two words for itself; clients
    do not see them in the schema.
    """


@hookspec
def ahp_config_tables() -> dict[str, type[BaseModel]] | None:
    """Return the config file tables this plugin reads: table name -> pydantic model.

    ``{"acp": AcpConfig}`` lets a config file hold ``[acp]`` and
    ``[acp.agents.NAME]``; the host checks the file's table against the model when it
    starts (a wrong or unknown key stops it with the file and line named, so give the
    model ``extra="forbid"``) and the plugin reads the result with
    ``host.config_table("acp")``. Field descriptions become the configuration
    reference (``docs/configuration.md``); a ``SecretStr`` field is never printed by
    ``ahp config show``. Two plugins declaring one table is an error naming both.
    Called before the host starts, and only when the file has tables, with no host:
    declare, do not act, and import pydantic inside the implementation so a host
    without a config file starts without it.
    """


@hookspec(firstresult=True)
def ahp_session_store(host: PluginHost) -> SessionStore | None:
    """Return the session store: what the host keeps on top of a backend.

    First non-None answer wins; the core's own plugin answers last with the
    store ``--sessions`` chose. Fires when the host starts.
    """


@hookspec
def ahp_session_rows(host: PluginHost, rows: list[dict[str, Any]]) -> None:
    """Add to the rows of a ``listSessions`` page before it is answered.

    Called on every page, on the event loop, with the page's ``SessionSummary``
    rows (open sessions and past ones) as plain dicts. Change them in place,
    usually under ``_meta``, by setting keys on a row rather than changing the
    values it holds (those may be shared with a session's state). Returns
    nothing. A long page comes in parts of 2,000 rows, one call each, the loop
    serving other clients between them. It must not wait: a page may hold ten
    thousand rows, so give a row
    what is already known and leave what takes time (files, subprocesses) to
    ``host.spawn``, telling it later with ``host.change_row_meta(row, key,
    value)``, which keeps the rest of the row's ``_meta``. An exception is
    logged and the page goes out without that plugin's additions.
    """


@hookspec
def ahp_doctor_checks(state_dir: Path) -> list[Check] | None:
    """Check what this plugin needs, for ``ahp doctor``: a sign-in, a program, a setting.

    Receives the state folder, not a host: ``ahp doctor`` starts none, and a
    running host never calls this. Returns a list of
    ``ahpcore.operate.checks.Check(name, ok, said, fix)``, one a line of the
    report, ``fix`` saying what to do when ``ok`` is false (a failed check makes
    ``ahp doctor`` exit 1). Keep it quick and quiet: look, do not start
    anything, and never print a secret. An exception is reported as a failed
    check naming the plugin.
    """


@hookspec
def ahp_cli_commands(app: typer.Typer) -> None:
    """Add commands to the ``ahp`` command line, such as ``ahp claude login``.

    Receives the ``typer.Typer`` application, not a host: no host runs. Add a
    group named after the plugin (``app.add_typer(group, name="claude")``) or a
    command (``app.command("name")(function)``); a name already taken shadows or
    is shadowed, so keep to your own. Called whenever ``ahp`` builds its
    command line (every command but a plain ``ahp serve``), for the plugins
    the environment admits (``AHP_PLUGINS``, ``AHP_DISABLE_PLUGINS``,
    ``AHP_NO_PLUGINS``; the command's own ``--plugins`` is not parsed yet):
    import what a command needs inside it, not here. An exception is logged
    and leaves that plugin's commands out.
    """


# -- lifecycle ---------------------------------------------------------------------------
@hookspec
def ahp_session_creating(creation: SessionCreation) -> None:
    """A session is about to be created: its request passed the host's checks.

    May replace ``creation.params["workingDirectories"]`` (a tree of its own for
    the session) and report steps with ``creation.progress(message)``. Whatever
    it makes, it registers a way to take back with ``creation.undo(async_fn)``,
    run if the session is refused later. Raising ``ProtocolError`` refuses the
    session with that error; the undos registered so far run.
    """


@hookspec
def ahp_session_created(session: str) -> None:
    """A session was created, saved and announced (``root/sessionAdded``).

    Receives its URI. Failures are logged; they cannot undo the session.
    """


@hookspec
def ahp_channel_subscribing(channel: str) -> None:
    """A client is about to subscribe to ``channel`` (as it sent it): bring what
    you keep of it up to date first. Failures are logged and the subscription goes on.
    """


@hookspec
def ahp_turn_starting(start: TurnStart) -> bool | None:
    """A turn is about to go to its chat's agent.

    Return True (or an awaitable of it) when this implementation ran the turn
    itself, reporting through ``start.report``: the agent never sees it, and no
    later implementation is asked. Raising fails the turn with that message.
    """


@hookspec
def ahp_tool_confirming(confirmation: ToolConfirmation) -> None:
    """An agent asks to confirm a tool call; the person has not been asked yet.

    ``confirmation`` names the session, chat, provider, turn, call, tool name, its
    ``tool_kind`` (``_meta.toolKind``), its input and, for a tool that runs a shell
    command line, the ``command``. Call ``confirmation.approve(reason)`` to let it run
    unasked (clients see it ``confirmed: "setting"``) or ``confirmation.deny(reason)``
    to refuse it (clients and the agent see ``reason``). Implementations are asked in
    turn until one decides; when none does, the person is asked as before. An
    implementation that raises is logged and decides nothing. A rebuilt turn asks
    nobody, so this is called for live turns only.
    """


@hookspec
def ahp_resource_written(uri: str) -> None:
    """A client wrote ``uri`` through ``resourceWrite`` (answered already).
    Failures are logged."""


@hookspec
def ahp_session_disposing(session: str) -> None:
    """``disposeSession``: the session's chats have stopped; its backend has not
    deleted it yet. Release what belongs to it (terminals it claimed).
    Failures are logged and the disposal goes on.
    """


@hookspec
def ahp_session_disposed(session: str, folder: str | None) -> None:
    """The session is gone from the host, its store and the listing.

    ``folder`` is the local path of its first working directory (None when it
    had none). Failures are logged.
    """
