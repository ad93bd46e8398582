"""``ahp config show``: every setting ``ahp serve`` would start with, and where each
came from (flag, environment, file, default)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ahpcore.config import (
    CONFIG_ENV,
    SERVE_PARAMS,
    ConfigError,
    ConfigFile,
    default_config_path,
    default_map,
)
from ahpcore.config import read as read_config
from ahpcore.operate.options import FLAG, JsonOption

#: Values never printed, whatever their source.
SECRET_PARAMS = frozenset({"token"})
_KEYS = {param: key for key, param in SERVE_PARAMS.items()}


def _source(ctx: Any, name: str, config: ConfigFile, envvar: str | None) -> tuple[str, str]:
    """(source, where) of one of ``serve``'s parameters as click resolved it."""
    kind = getattr(ctx.get_parameter_source(name), "name", "DEFAULT")
    if kind == "COMMANDLINE":
        return "flag", ""
    if kind == "ENVIRONMENT":
        return "environment", envvar or ""
    if kind == "DEFAULT_MAP":
        return "file", config.where(_KEYS.get(name, name))
    return "default", ""


def _shown(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_shown(item) for item in value]
    return value


def _flatten(value: Any, prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict) and value:
        rows: list[tuple[tuple[str, ...], Any]] = []
        for key, item in value.items():
            rows.extend(_flatten(item, (*prefix, str(key))))
        return rows
    return [(prefix, value)]


def _has(table: Any, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(table, dict) or key not in table:
            return False
        table = table[key]
    return True


def _serve_rows(ctx: typer.Context, config: ConfigFile, args: list[str]) -> list[dict[str, Any]]:
    root = ctx.find_root().command
    serve = root.commands["serve"]  # type: ignore[attr-defined]
    serve_ctx = serve.make_context(
        "serve", list(args), default_map=default_map(serve, config, every_key=True)
    )
    rows = []
    for param in serve.params:
        name = param.name
        if name is None or name == "config":
            continue
        value = serve_ctx.params.get(name)
        envvar = param.envvar if isinstance(param.envvar, str) else None
        source, where = _source(serve_ctx, name, config, envvar)
        if name in SECRET_PARAMS and value:
            value = "<hidden>"
        rows.append(
            {"key": _KEYS.get(name, name), "value": _shown(value), "source": source, "where": where}
        )
    return rows


def _table_rows(
    config: ConfigFile, plugins: str | None, no_plugins: bool
) -> dict[str, list[dict[str, Any]]]:
    from ahpcore.plugins import PluginManager, Selection

    manager = PluginManager(selection=Selection.from_options(plugins, no_plugins)).load()
    unloaded = manager.installed_names() - set(manager.names())
    checked = config.check_tables(manager.config_tables(), unloaded)
    tables: dict[str, list[dict[str, Any]]] = {}
    for name, model in sorted(checked.items()):
        dumped = model.model_dump(mode="json")
        raw = config.tables.get(name, {})
        rows = []
        for path, value in _flatten(dumped, ()):
            given = _has(raw, path)
            rows.append(
                {
                    "key": ".".join(path),
                    "value": value,
                    "source": "file" if given else "default",
                    "where": config.where(name, *path) if given else "",
                }
            )
        tables[name] = rows
    return tables


def _line(row: dict[str, Any]) -> str:
    source = row["source"] + (f" {row['where']}" if row["where"] else "")
    return f"{row['key']} = {json.dumps(row['value'])}  # {source}"


def show_command(
    ctx: typer.Context,
    as_json: JsonOption = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar=CONFIG_ENV,
            help="The config file to read, as ahp serve --config.",
            show_default=str(default_config_path()),
        ),
    ] = None,
    tables: Annotated[
        bool,
        typer.Option(
            "--tables/--no-tables",
            help="Also show each loaded plugin's table (loads the plugins).",
            show_default="on",
            **FLAG,
        ),
    ] = True,
) -> None:
    """Print the settings ahp serve would start with, each with where it came from
    (flag, environment, file, default); serve's own options may follow, as
    `ahp config show -- --port 9000`."""
    try:
        file = read_config(config)
        serve = _serve_rows(ctx, file, ctx.args)
        params = {row["key"]: row["value"] for row in serve}
        plugin_tables = (
            _table_rows(file, params.get("plugins"), bool(params.get("no_plugins")))
            if tables
            else {}
        )
    except ConfigError as exc:
        typer.echo(f"ahp: {exc}", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:  # a plugin that cannot load, an option click refused
        message = getattr(exc, "format_message", None)
        typer.echo(f"ahp: {message() if callable(message) else exc}", err=True)
        raise typer.Exit(2) from None
    path = str(file.path) if file.path is not None else None
    if as_json:
        payload = {"file": path, "serve": serve, "tables": plugin_tables}
        typer.echo(json.dumps(payload, indent=2))
        return
    typer.echo(f"# config file: {path or f'none ({default_config_path()} is not there)'}")
    typer.echo("# each value: flag > environment > file > default")
    for row in serve:
        typer.echo(_line(row))
    for name, rows in plugin_tables.items():
        typer.echo("")
        typer.echo(f"[{name}]")
        for row in rows:
            typer.echo(_line(row))


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="config",
        help="What ahp serve is configured with: config.toml, environment and flags.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
    )
    app.command(
        "show", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
    )(show_command)
    return app
