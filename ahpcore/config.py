"""The config file, ``config.toml``: ``ahp serve``'s options and one table per plugin.

Where it is: ``--config PATH``, else ``AHP_CONFIG``, else ``config.toml`` in the
platform's config folder (``~/.config/ahp`` on Linux) when that file exists. A file
named by ``--config`` or ``AHP_CONFIG`` must exist; the default one may not.

What wins: a flag, then an environment variable, then the file, then the default —
the command line reads the file into click's ``default_map``, which sits exactly
there in click's order. Top-level keys are ``serve``'s options spelled with
underscores (``max_frame_bytes = 1048576``); a table is a plugin's own
(``[acp.agents.gemini]``), declared through ``ahp_config_tables`` with a pydantic
model. A key nobody declared is an error naming the file and its line, because a
misspelt key silently ignored is a setting the user believes in and does not have.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import platformdirs

if TYPE_CHECKING:
    from pydantic import BaseModel

#: The environment variable naming the config file.
CONFIG_ENV = "AHP_CONFIG"
CONFIG_NAME = "config.toml"


def default_config_path() -> Path:
    """``config.toml`` in the platform's config folder for ``ahp``."""
    return platformdirs.user_config_path("ahp") / CONFIG_NAME


class ConfigError(Exception):
    """The config file cannot be used; the message names the file and, where it can,
    the line."""


def serve_model() -> type[BaseModel]:
    """The keys a config file may set for ``ahp serve``, one per option (a test holds
    them to the command's own). Built on first use: pydantic is not needed to say
    ``--help``."""
    global _SERVE_MODEL
    if _SERVE_MODEL is None:
        _SERVE_MODEL = _build_serve_model()
    return _SERVE_MODEL


_SERVE_MODEL: type[BaseModel] | None = None


def _build_serve_model() -> type[BaseModel]:
    from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

    number = StrictInt | StrictFloat
    path = Annotated[str, Field(min_length=1)]

    class ServeKeys(BaseModel):
        """``ahp serve``'s options as a config file spells them."""

        model_config = ConfigDict(extra="forbid")

        host: str | None = None
        port: Annotated[StrictInt, Field(ge=0, le=65535)] | None = None
        plugins: str | list[str] | None = None
        no_plugins: StrictBool | None = None
        sessions: Literal["file", "memory"] | None = None
        token: str | None = None
        token_file: path | None = None
        no_token: StrictBool | None = None
        allow_origin: str | list[str] | None = None
        stdio: StrictBool | None = None
        socket: path | None = None
        inspector: StrictBool | None = None
        max_frame_bytes: StrictInt | None = None
        compression: StrictBool | None = None
        inbound_frames: number | None = None
        host_queue_bytes: StrictInt | None = None
        max_connections_per_address: StrictInt | None = None
        state_dir: path | None = None
        log_level: str | None = None
        log_file: path | None = None
        worktrees_root: path | None = None
        otlp_endpoint: str | None = None
        stop_timeout: number | None = None
        tls_cert: path | None = None
        tls_key: path | None = None

    return ServeKeys


#: Config keys whose ``serve`` parameter is named otherwise.
SERVE_PARAMS = {"socket": "socket_path"}
#: Keys that are file paths: relative ones are read from the config file's folder.
PATH_KEYS = frozenset(
    {"token_file", "socket", "state_dir", "log_file", "worktrees_root", "tls_cert", "tls_key"}
)
#: Keys every command taking the same option reads from the file (``ahp users add``
#: must find the people of the state folder ``ahp serve`` uses).
SHARED_KEYS = frozenset({"state_dir", "plugins", "no_plugins"})


@dataclass(frozen=True)
class ConfigFile:
    """A config file read and checked: its ``serve`` keys and its plugins' tables."""

    path: Path | None = None
    #: ``serve``'s keys the file sets, as the file spells them.
    serve: Mapping[str, Any] = field(default_factory=dict)
    #: Each plugin table the file has, not yet checked against its plugin's model.
    tables: Mapping[str, Any] = field(default_factory=dict)
    text: str = ""

    def where(self, *keys: str | int) -> str:
        """``file:line`` for a key path (``("acp", "agents", "x", "command")``), as
        near as the file's text says."""
        name = str(self.path) if self.path is not None else CONFIG_NAME
        line = line_of(self.text, [str(key) for key in keys])
        return f"{name}:{line}" if line else name

    def serve_params(self) -> dict[str, Any]:
        """The file's ``serve`` keys as ``serve``'s parameters take them."""
        params: dict[str, Any] = {}
        for key, value in self.serve.items():
            if key in PATH_KEYS:
                value = self._path(value)
            elif key == "plugins" and isinstance(value, list):
                value = ",".join(value)
            elif key == "allow_origin" and isinstance(value, str):
                value = [value]
            params[SERVE_PARAMS.get(key, key)] = value
        return params

    def _path(self, value: str) -> Path:
        path = Path(value).expanduser()
        if not path.is_absolute() and self.path is not None:
            path = self.path.parent / path
        return path

    def check_tables(
        self, declared: Mapping[str, type[BaseModel]], installed: set[str] | frozenset[str]
    ) -> dict[str, BaseModel]:
        """Each table of the file checked by the model its plugin declares; a table no
        loaded plugin declares is an error unless it belongs to a plugin installed but
        not loaded this time (``--plugins``): ``installed`` names those."""
        if not self.tables:
            return {}  # pydantic stays unloaded until something needs it
        from pydantic import ValidationError

        for name in self.tables:
            if name not in declared and name not in installed:
                known = ", ".join(f"[{n}]" for n in sorted(declared)) or "none"
                raise ConfigError(
                    f"{self.where(name)}: no plugin has a table [{name}] "
                    f"(tables of the loaded plugins: {known})"
                )
        checked: dict[str, BaseModel] = {}
        for name, model in declared.items():
            if name not in self.tables:
                continue
            try:
                checked[name] = model.model_validate(self.tables[name])
            except ValidationError as exc:
                raise ConfigError(self._explain(exc, prefix=(name,))) from None
            if _holds_secret(checked[name]) and self._others_may_read():
                raise ConfigError(
                    f"{self.where(name)}: [{name}] holds a secret and others may read the "
                    f"file: chmod 600 {self.path}"
                )
        return checked

    def _others_may_read(self) -> bool:
        try:
            return self.path is not None and bool(
                self.path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO)
            )
        except OSError:
            return False

    def _explain(self, exc: Any, prefix: tuple[str, ...] = ()) -> str:
        first = exc.errors()[0]
        loc = (*prefix, *(str(part) for part in first["loc"]))
        message = (
            "unknown key (a misspelling, or a setting this version does not have)"
            if first["type"] == "extra_forbidden"
            else first["msg"]
        )
        more = len(exc.errors()) - 1
        tail = f" (and {more} more)" if more else ""
        return f"{self.where(*loc)}: {'.'.join(loc)}: {message}{tail}"


def _holds_secret(value: Any) -> bool:
    """Whether a checked table holds a ``SecretStr`` with something in it."""
    from pydantic import BaseModel, SecretStr

    if isinstance(value, SecretStr):
        return bool(value.get_secret_value())
    if isinstance(value, BaseModel):
        return any(_holds_secret(getattr(value, key)) for key in type(value).model_fields)
    if isinstance(value, Mapping):
        return any(_holds_secret(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_secret(item) for item in value)
    return False


def locate(explicit: Path | None = None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file to read, or None when there is none to read.

    Raises ConfigError when ``--config`` or ``AHP_CONFIG`` names a file that is not there.
    """
    environ = os.environ if environ is None else environ
    if explicit is not None:
        # Option parsers hand the variable's value over as the option's: name it right.
        from_env = str(explicit) == environ.get(CONFIG_ENV)
        chosen, source = explicit, CONFIG_ENV if from_env else "--config"
    elif environ.get(CONFIG_ENV):
        chosen, source = Path(environ[CONFIG_ENV]), CONFIG_ENV
    else:
        default = default_config_path()
        return default if default.is_file() else None
    chosen = chosen.expanduser().absolute()
    if not chosen.is_file():
        raise ConfigError(f"{source} names {chosen}, which is not a file")
    return chosen


def read(explicit: Path | None = None, environ: Mapping[str, str] | None = None) -> ConfigFile:
    """The config file found by ``locate``, parsed and its ``serve`` keys checked; an
    empty ConfigFile when there is none."""
    path = locate(explicit, environ)
    if path is None:
        return ConfigFile()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path} ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    serve = {key: value for key, value in data.items() if not isinstance(value, dict)}
    tables = {key: value for key, value in data.items() if isinstance(value, dict)}
    config = ConfigFile(path=path, serve=serve, tables=tables, text=text)
    from pydantic import ValidationError

    try:
        serve_model().model_validate(serve)
    except ValidationError as exc:
        raise ConfigError(config._explain(exc)) from None
    if "token" in serve and config._others_may_read():
        raise ConfigError(
            f"{config.where('token')}: the file holds a connection token and others may read "
            f"it: chmod 600 {path}, or use token_file"
        )
    return config


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*(?:\.|=)""")


def _split_dotted(text: str) -> list[str]:
    parts = re.findall(r""""[^"]*"|'[^']*'|[^.\s]+""", text)
    return [part.strip("\"'") for part in parts]


def line_of(text: str, keys: list[str]) -> int | None:
    """The line (1-based) where a key path is written: the deepest of its table
    headers and keys found, which is the line to look at even when the key itself
    sits inside an inline table."""
    best: tuple[int, int] | None = None  # (depth matched, line)
    table: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _split_dotted(header.group(1))
            if table == keys[: len(table)] and (best is None or len(table) > best[0]):
                best = (len(table), number)
            continue
        key = _KEY.match(line)
        if key is None or table != keys[: len(table)]:
            continue
        dotted = _split_dotted(line.split("=", 1)[0])
        path = table + dotted
        depth = 0
        while depth < min(len(path), len(keys)) and path[depth] == keys[depth]:
            depth += 1
        if depth > len(table) and (best is None or depth > best[0]):
            best = (depth, number)
    return best[1] if best else None


def default_map(command: Any, config: ConfigFile, *, every_key: bool) -> dict[str, Any]:
    """Click's ``default_map`` for ``command`` and the commands under it: the file's
    value for each parameter it has. ``every_key`` for ``serve``; other commands take
    only the keys they share with it (``state_dir``, ``plugins``), because an option
    of the same name may mean something else there (``ahp chat --port``)."""
    params = config.serve_params()
    shared = {SERVE_PARAMS.get(key, key) for key in SHARED_KEYS}
    mapping: dict[str, Any] = {
        param.name: params[param.name]
        for param in getattr(command, "params", ())
        if param.name in params and (every_key or param.name in shared)
    }
    for name, sub in (getattr(command, "commands", None) or {}).items():
        # ``ahp doctor`` checks what a host started here would find: serve's settings.
        mapping[name] = default_map(sub, config, every_key=name in ("serve", "doctor"))
    return mapping


def scan_config_option(args: list[str]) -> Path | None:
    """The ``--config`` a command line gives, read before click parses it (the file
    sets the defaults click parses against)."""
    for index, arg in enumerate(args):
        if arg == "--":
            return None
        if arg.startswith("--config="):
            return Path(arg.partition("=")[2])
        if arg == "--config" and index + 1 < len(args):
            return Path(args[index + 1])
    return None
