"""The agents a host runs, read from ``AHP_ACP_AGENTS``.

The variable holds a JSON object, one key per agent::

    {"gemini": {"command": "gemini", "args": ["--experimental-acp"],
                "env": {"GEMINI_API_KEY": "..."}, "displayName": "Gemini CLI"}}

The key is the provider name clients see (a session of it is ``gemini:/<id>``),
so it is spelled as a URI scheme: a lowercase letter, then lowercase letters,
digits, ``+``, ``-`` or ``.``. ``command`` is required; the rest is optional.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ahpcore.hookspecs import PluginError

ENV = "AHP_ACP_AGENTS"

_NAME = re.compile(r"^[a-z][a-z0-9+.-]{0,62}$")


class ConfigError(PluginError, ValueError):
    """``AHP_ACP_AGENTS`` says something that cannot be run; the message says what.

    Raised as the host starts, it stops ``ahp serve`` with that line alone."""


@dataclass(frozen=True)
class AgentSpec:
    """How to start one ACP agent."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    display_name: str = ""
    description: str = ""

    @property
    def title(self) -> str:
        return self.display_name or self.name

    @property
    def command_line(self) -> str:
        return " ".join((self.command, *self.args))


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where} must be a list of strings")
    return tuple(value)


def _spec(name: Any, body: Any) -> AgentSpec:
    where = f"{ENV}[{name!r}]"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{where}: an agent's name is its provider name and a URI scheme: a lowercase "
            "letter, then lowercase letters, digits, '+', '-' or '.'"
        )
    if not isinstance(body, Mapping):
        raise ConfigError(f"{where} must be an object with at least a command")
    command = body.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}.command must name the program that speaks ACP on stdio")
    env = body.get("env") or {}
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ConfigError(f"{where}.env must be an object of strings")
    display = body.get("displayName") or ""
    description = body.get("description") or ""
    if not isinstance(display, str) or not isinstance(description, str):
        raise ConfigError(f"{where}.displayName and .description must be strings")
    unknown = set(body) - {"command", "args", "env", "displayName", "description"}
    if unknown:
        raise ConfigError(f"{where} has keys this host does not know: {', '.join(sorted(unknown))}")
    return AgentSpec(
        name=name,
        command=command,
        args=_strings(body.get("args") or [], f"{where}.args"),
        env=dict(env),
        display_name=display,
        description=description,
    )


def parse_agents(text: str | None) -> list[AgentSpec]:
    """The agents ``text`` (the variable's value) configures; none for an empty value."""
    if text is None or not text.strip():
        return []
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{ENV} is not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{ENV} must be a JSON object: agent name -> how to start it")
    return [_spec(name, body) for name, body in data.items()]
