"""The machines a host reaches: ``[remote.machines.NAME]`` in the config file, and
``AHP_REMOTE_MACHINES`` (whose machine of a name replaces the file's).

The variable holds a JSON object, one key per machine, each saying how to reach
an AHP host there::

    {"buildbox": {"ssh": "me@buildbox"},
     "box2": {"ssh": "me@box2", "command": "~/.local/bin/ahp serve --stdio"},
     "sandbox": {"docker": "agents-sandbox"},
     "lab": {"url": "wss://lab.example:8787/", "tokenFile": "~/.config/ahp/lab.token"},
     "farm": {"ssh": "me@farm", "url": "ws://127.0.0.1:8765/", "tokenFile": "~/.ahp-farm"},
     "local2": {"command": ["ahp", "serve", "--stdio", "--state-dir", "/srv/ahp2"]}}

The key names the machine in each provider it brings (``remote-<name>-<provider>``),
so it is a lowercase letter, then lowercase letters, digits or ``-``. Besides
the one way to reach it, a machine may have ``displayName`` (how people see it
named; the key by default), ``providers`` (remote providers to offer even before
the machine was ever reached) and, for ``ssh``, ``sshOptions`` (more arguments
for ``ssh`` before the destination, such as ``["-p", "2222"]``).

A machine naming both ``ssh`` and ``url`` is reached through an SSH tunnel: a
long-running ``ahp serve`` listens there (on the ``url``'s host and port, as the
remote machine sees them), and this host forwards a free local port to it with
``ssh -N -L`` and speaks WebSocket through it, as to a ``url`` machine. That host
outlives the link, so a turn survives a dropped one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from ahpcore.hookspecs import PluginError

if TYPE_CHECKING:
    from pydantic import BaseModel

ENV = "AHP_REMOTE_MACHINES"
#: What a machine reached by ``ssh`` or ``docker`` runs when its config names nothing else.
DEFAULT_REMOTE_COMMAND = "ahp serve --stdio"

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
#: A remote provider name, as it will sit inside this host's provider name (a URI scheme).
_PROVIDER = re.compile(r"^[a-z][a-z0-9+.-]{0,62}$")
_WAYS = ("command", "url", "ssh", "docker", "ssh with url")
_COMMON = {"displayName", "providers"}
_KEYS: dict[str, set[str]] = {
    "command": {"command"},
    "url": {"url", "token", "tokenFile"},
    "ssh": {"ssh", "command", "sshOptions"},
    "docker": {"docker", "command"},
    "tunnel": {"ssh", "url", "token", "tokenFile", "sshOptions"},
}
#: How often a tunnel's ssh asks the server whether it is still there (ServerAliveInterval).
TUNNEL_ALIVE_SECONDS = 15

Kind = Literal["command", "url", "ssh", "docker", "tunnel"]


class ConfigError(PluginError, ValueError):
    """The machines configured cannot be used; the message says which key and why.

    Raised as the host starts, it stops ``ahp serve`` with that line alone."""


@dataclass(frozen=True)
class MachineSpec:
    """How to reach one machine's AHP host."""

    name: str
    kind: Kind
    #: The program and its arguments, for every kind but ``url``; for ``tunnel``, ``ssh`` and
    #: its options, to which the forward (``-L``) and the destination are added at each start.
    argv: tuple[str, ...] = ()
    url: str = ""
    #: The ssh destination of a ``tunnel`` machine.
    destination: str = ""
    #: The connection token of a ``url`` machine: a secret, never logged nor shown.
    token: str | None = field(default=None, repr=False)
    display_name: str = ""
    providers: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return self.display_name or self.name

    @property
    def reach(self) -> str:
        """How the machine is reached, in words a person reads (no secret in it)."""
        if self.kind == "url":
            return self.url
        if self.kind == "tunnel":
            return f"{self.url} through ssh {shlex.quote(self.destination)}"
        return " ".join(shlex.quote(part) for part in self.argv)


def provider_name(machine: str, remote_provider: str) -> str:
    """The provider this host offers for ``remote_provider`` on ``machine``."""
    return f"remote-{machine}-{remote_provider}"


def machine_provider(machine: str) -> str:
    """The provider standing for the machine itself (its state; sessions of its only agent)."""
    return f"remote-{machine}"


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{where} must be a list of non-empty strings")
    return tuple(value)


def _command_line(value: Any, where: str) -> str:
    if value is None:
        return DEFAULT_REMOTE_COMMAND
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be the command line that serves AHP on stdio there")
    return value


def _token(body: Mapping[str, Any], where: str) -> str | None:
    token, token_file = body.get("token"), body.get("tokenFile")
    if token is not None and token_file is not None:
        raise ConfigError(f"{where}: give token or tokenFile, not both")
    if token is not None:
        if not isinstance(token, str) or not token.strip():
            raise ConfigError(f"{where}.token must be a non-empty string")
        return token.strip()
    if token_file is None:
        return None
    if not isinstance(token_file, str) or not token_file:
        raise ConfigError(f"{where}.tokenFile must name a file")
    path = Path(os.path.expanduser(token_file))
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{where}.tokenFile: cannot read {path} ({exc.strerror})") from None
    if not text:
        raise ConfigError(f"{where}.tokenFile: {path} is empty")
    return text


def _spec(name: Any, body: Any, where: str) -> MachineSpec:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{where}: a machine's name goes into provider names: a lowercase letter, then "
            "lowercase letters, digits or '-' (at most 32)"
        )
    if not isinstance(body, Mapping):
        raise ConfigError(f"{where} must be an object naming one of {', '.join(_WAYS)}")
    ways = [way for way in ("url", "ssh", "docker") if way in body]
    if ways == ["url", "ssh"]:
        ways = ["tunnel"]  # a host listening there, reached through an SSH port forward
    if not ways and "command" in body:
        ways = ["command"]
    if len(ways) != 1:
        said = " and ".join(ways) if ways else "none"
        raise ConfigError(
            f"{where} must name exactly one way to reach it ({', '.join(_WAYS)}), not {said}"
        )
    kind: Kind = ways[0]  # type: ignore[assignment]
    unknown = set(body) - _KEYS[kind] - _COMMON
    if unknown:
        what = "an ssh tunnel (ssh with url)" if kind == "tunnel" else f"a {kind}"
        raise ConfigError(
            f"{where} has keys {what} machine does not take: {', '.join(sorted(unknown))}"
        )
    display = body.get("displayName") or ""
    if not isinstance(display, str):
        raise ConfigError(f"{where}.displayName must be a string")
    providers = _strings(body.get("providers") or [], f"{where}.providers")
    for provider in providers:
        if not _PROVIDER.match(provider):
            raise ConfigError(f"{where}.providers: {provider!r} is not a provider name")
    common: dict[str, Any] = {"name": name, "display_name": display, "providers": providers}
    if kind == "command":
        argv = _strings(body["command"], f"{where}.command")
        return MachineSpec(kind="command", argv=argv, **common)
    if kind == "url":
        url = body["url"]
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise ConfigError(f"{where}.url must be a ws:// or wss:// URL")
        if "token=" in url or "tkn=" in url:
            raise ConfigError(f"{where}.url: give the token as token or tokenFile, not in the URL")
        return MachineSpec(kind="url", url=url, token=_token(body, where), **common)
    if kind == "tunnel":
        return _tunnel(body, where, common)
    if kind == "ssh":
        destination = body["ssh"]
        if not isinstance(destination, str) or not destination or destination.startswith("-"):
            raise ConfigError(f"{where}.ssh must be a destination such as user@host")
        options = _strings(body.get("sshOptions") or [], f"{where}.sshOptions")
        command = _command_line(body.get("command"), f"{where}.command")
        # -T: no terminal (the link is JSON lines); BatchMode: never wait on a password
        # prompt nobody can answer. The user's own ssh config does the rest.
        argv = ("ssh", "-T", "-o", "BatchMode=yes", *options, "--", destination, command)
        return MachineSpec(kind="ssh", argv=argv, **common)
    container = body["docker"]
    if not isinstance(container, str) or not container or container.startswith("-"):
        raise ConfigError(f"{where}.docker must name a container")
    command = _command_line(body.get("command"), f"{where}.command")
    argv = ("docker", "exec", "-i", container, *shlex.split(command))
    return MachineSpec(kind="docker", argv=argv, **common)


def _tunnel(body: Mapping[str, Any], where: str, common: dict[str, Any]) -> MachineSpec:
    destination = body["ssh"]
    if not isinstance(destination, str) or not destination or destination.startswith("-"):
        raise ConfigError(f"{where}.ssh must be a destination such as user@host")
    url = body["url"]
    # ws:// only: ssh already encrypts the way, and a certificate would not name 127.0.0.1.
    if not isinstance(url, str) or not url.startswith("ws://"):
        raise ConfigError(
            f"{where}.url must be a ws:// URL of the host as that machine reaches it "
            "(ws://127.0.0.1:8765/); ssh encrypts the way"
        )
    if "token=" in url or "tkn=" in url:
        raise ConfigError(f"{where}.url: give the token as token or tokenFile, not in the URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{where}.url: {exc}") from None
    if not parts.hostname or port is None:
        raise ConfigError(f"{where}.url must name a host and a port (ws://127.0.0.1:8765/)")
    options = _strings(body.get("sshOptions") or [], f"{where}.sshOptions")
    # -N: no command, only the forward; BatchMode: never wait on a prompt nobody can answer;
    # ExitOnForwardFailure: a forward that cannot be made ends ssh (and says why) rather
    # than leaving a link that forwards nothing; no ControlMaster, so this ssh process
    # is the tunnel and ends with it. The user's options come after ours for what
    # the options before them leave open (ServerAliveInterval may be changed there).
    argv = (
        "ssh", "-N", "-T",
        "-o", "BatchMode=yes",
        "-o", "ExitOnForwardFailure=yes",
        "-o", "ControlMaster=no",
        "-o", "ControlPath=none",
        *options,
        "-o", f"ServerAliveInterval={TUNNEL_ALIVE_SECONDS}",
    )  # fmt: skip
    token = _token(body, where)
    return MachineSpec(
        kind="tunnel", argv=argv, url=url, destination=destination, token=token, **common
    )


def tunnel_target(url: str) -> tuple[str, int]:
    """The host and port a tunnel forwards to, as the remote machine names them."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None  # checked by _tunnel
    return parts.hostname, parts.port


def parse_machines(text: str | None) -> list[MachineSpec]:
    """The machines ``text`` (the variable's value) configures; none for an empty value."""
    if text is None or not text.strip():
        return []
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{ENV} is not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{ENV} must be a JSON object: machine name -> how to reach it")
    return [_spec(name, body, f"{ENV}[{name!r}]") for name, body in data.items()]


# -- the config file's [remote] table ------------------------------------------------------------
_TABLE: type[BaseModel] | None = None


def table_model() -> type[BaseModel]:
    """The ``[remote]`` table's model, built on first use."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _build_table()
    return _TABLE


def _build_table() -> type[BaseModel]:
    from pydantic import BaseModel, ConfigDict, Field, SecretStr

    class RemoteMachine(BaseModel):
        """One machine, spelled as in ``AHP_REMOTE_MACHINES``: exactly one of ``command``
        (a list), ``url``, ``ssh`` or ``docker``; or ``ssh`` with ``url``, a host listening
        there reached through an SSH tunnel."""

        model_config = ConfigDict(extra="forbid")

        command: list[str] | str | None = Field(
            default=None,
            description="A program and its arguments that serve AHP on stdio; with ssh or "
            f"docker, the command line run there (`{DEFAULT_REMOTE_COMMAND}` when left out).",
        )
        url: str | None = Field(
            default=None,
            description="A ws:// or wss:// URL of its host; with ssh, the ws:// URL of a host "
            "listening there, as that machine reaches it (reached through an SSH tunnel).",
        )
        token: SecretStr | None = Field(
            default=None, description="The connection token of a url (or ssh tunnel) machine."
        )
        tokenFile: str | None = Field(
            default=None, description="A file holding the token of a url (or tunnel) machine."
        )
        ssh: str | None = Field(
            default=None,
            description="The ssh destination (user@host), with your ssh config; with url, "
            "the machine whose listening host is reached through an SSH port forward.",
        )
        sshOptions: list[str] = Field(
            default=[], description="More arguments for ssh, before the destination."
        )
        docker: str | None = Field(
            default=None, description="A container to run `docker exec -i` in."
        )
        displayName: str = Field(
            default="", description="How people see the machine named (its name when empty)."
        )
        providers: list[str] = Field(
            default=[], description="Remote providers to offer before it was ever reached."
        )

    class RemoteTable(BaseModel):
        """``[remote]``: other machines' AHP hosts whose providers this host offers."""

        model_config = ConfigDict(extra="forbid")

        machines: dict[str, RemoteMachine] = Field(
            default={},
            description="One table per machine; its name goes into the provider names "
            f"(`remote-<machine>-<provider>`). A machine of the same name in `{ENV}` replaces it.",
        )

    return RemoteTable


def table_machines(table: Any) -> list[MachineSpec]:
    """The machines a checked ``[remote]`` table configures."""
    if table is None:
        return []
    found = []
    for name, machine in table.machines.items():
        body = {
            key: value
            for key, value in machine.model_dump(exclude_defaults=True).items()
            if value is not None
        }
        if machine.token is not None:
            body["token"] = machine.token.get_secret_value()
        found.append(_spec(name, body, f"[remote.machines.{name}]"))
    return found


def merge_machines(from_file: list[MachineSpec], from_env: list[MachineSpec]) -> list[MachineSpec]:
    """The file's machines, each replaced whole by the variable's machine of its name."""
    merged = {spec.name: spec for spec in from_file}
    merged.update((spec.name, spec) for spec in from_env)
    return list(merged.values())
