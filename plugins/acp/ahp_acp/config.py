"""The agents a host runs: ``[acp.agents.NAME]`` in the config file, and ``AHP_ACP_AGENTS``.

The variable holds a JSON object, one key per agent::

    {"gemini": {"command": "gemini", "args": ["--experimental-acp"],
                "env": {"GEMINI_API_KEY": "..."}, "displayName": "Gemini CLI"}}

The key is the provider name clients see (a session of it is ``gemini:/<id>``),
so it is spelled as a URI scheme: a lowercase letter, then lowercase letters,
digits, ``+``, ``-`` or ``.``. ``command`` is required; the rest is optional.

The config file's ``[acp.agents.NAME]`` tables take the same keys. Both are read and
an agent the variable names replaces the file's agent of that name whole, as the
environment wins over the file everywhere else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ahpcore.hookspecs import PluginError

if TYPE_CHECKING:
    from pydantic import BaseModel

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


_NAME_RULE = (
    "an agent's name is its provider name and a URI scheme: a lowercase "
    "letter, then lowercase letters, digits, '+', '-' or '.'"
)


def _spec(name: Any, body: Any) -> AgentSpec:
    where = f"{ENV}[{name!r}]"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: {_NAME_RULE}")
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


_TABLE: type[BaseModel] | None = None


def table_model() -> type[BaseModel]:
    """The ``[acp]`` table's model, built on first use (pydantic loads only for a file
    that has tables)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _build_table()
    return _TABLE


def _build_table() -> type[BaseModel]:
    from typing import Annotated

    from pydantic import AfterValidator, BaseModel, ConfigDict, Field

    def agent_name(name: str) -> str:
        if not _NAME.match(name):
            raise ValueError(_NAME_RULE)
        return name

    class AcpAgent(BaseModel):
        """One agent, spelled as in ``AHP_ACP_AGENTS``."""

        model_config = ConfigDict(extra="forbid")

        command: str = Field(
            pattern=r"\S", description="The program that speaks ACP on its stdin and stdout."
        )
        args: list[str] = Field(default=[], description="Its arguments.")
        env: dict[str, str] = Field(
            default={}, description="Variables set on top of the host's own environment."
        )
        displayName: str = Field(
            default="", description="The name clients show (the agent's name when empty)."
        )
        description: str = Field(
            default="",
            description="A line about the agent (else what it says of itself in `initialize`).",
        )

    class AcpTable(BaseModel):
        """``[acp]``: the ACP agents this host runs."""

        model_config = ConfigDict(extra="forbid")

        agents: dict[Annotated[str, AfterValidator(agent_name)], AcpAgent] = Field(
            default={},
            description="One table per agent; its name is the provider name clients see. "
            f"An agent of the same name in `{ENV}` replaces it.",
        )
        probe: bool | None = Field(
            default=None,
            description="Start each agent at startup to ask what it can do "
            "(`AHP_ACP_PROBE` wins; on when unset).",
        )

    return AcpTable


def table_agents(table: Any) -> list[AgentSpec]:
    """The agents a checked ``[acp]`` table configures."""
    if table is None:
        return []
    return [
        AgentSpec(
            name=name,
            command=agent.command,
            args=tuple(agent.args),
            env=dict(agent.env),
            display_name=agent.displayName,
            description=agent.description,
        )
        for name, agent in table.agents.items()
    ]


def merge_agents(from_file: list[AgentSpec], from_env: list[AgentSpec]) -> list[AgentSpec]:
    """The file's agents, each replaced whole by the variable's agent of its name, then
    the variable's others."""
    merged = {spec.name: spec for spec in from_file}
    merged.update((spec.name, spec) for spec in from_env)
    return list(merged.values())
