"""What a Claude Code CLI offers a session, as protocol customizations, and the switches on them.

The CLI reports its commands and subagents (``get_server_info``: name,
description, argument hint; an agent's pinned model), which of them are skills and which of those sit behind a slash (the
``init`` message), the plugins it loaded and its MCP servers
(``get_mcp_status``). Skills and prompts are children of one directory
container per kind: the protocol's ``contents`` names a single child type, and
the CLI never says where a command came from, so the container names the folder
a person would add one to. Subagents are children of a third container, the
agents folder. MCP servers are top-level entries named by the
server's own name, which is what a ``mcp__<server>__<tool>`` call names too.

MCP servers are switched through the CLI and plugins through its
``enabledPlugins`` (then reloaded), each read back; a skill or a prompt has no
switch in the CLI and is refused with the reason.

The whole list goes out once; after that only what moved does: a server's state
alone (``session/mcpServerStateChanged``), an entry that changed otherwise or
came (``session/customizationUpdated``), one that left
(``session/customizationRemoved``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio

from ahp_claude.names import Spawn
from ahp_claude.tools import CLIENT_SERVER
from ahpcore.ports.backend import AgentRefused, SessionReporter

if TYPE_CHECKING:
    from claude_agent_sdk import ClaudeSDKClient

log = logging.getLogger(__name__)

SKILLS = "dir:skills"
COMMANDS = "dir:commands"
AGENTS = "dir:agents"
SKILL, PROMPT, PLUGIN, AGENT = "skill:", "prompt:", "plugin:", "agent:"

#: The protocol's words for the CLI's MCP connection statuses.
MCP_KINDS = {
    "connected": "ready",
    "pending": "starting",
    "failed": "error",
    "needs-auth": "authRequired",
    "disabled": "stopped",
}

#: How long a server may stay pending before this stops asking (it is reported as starting).
SETTLE_SECONDS = 30.0
POLL_SECONDS = 0.3


def _skill_on_disk(name: str, folders: Iterable[Path]) -> bool:
    return any((folder / name / "SKILL.md").is_file() for folder in folders)


def _source_uri(files: Iterable[Path], kind: str, name: str, description: Any) -> str:
    """The first of ``files`` that exists, as a file URI; else a data: URI saying what it is.

    The CLI says a command's name, never its file, and the ones it has built in have
    none: a path where no file is would be one a client cannot open.
    """
    found = next((f for f in files if f.is_file()), None)
    if found is not None:
        return found.as_uri()
    text = f"# {name}\n\n"
    if description:
        text += f"{description}\n\n"
    text += f"A {kind} Claude Code offers without a file in this folder or the home folder.\n"
    return "data:text/markdown;charset=utf-8," + quote(text, safe="")


def containers(
    commands: Sequence[Mapping[str, Any]],
    directory: Path,
    *,
    skills: Iterable[str] | None = None,
    slash: Iterable[str] | None = None,
    home: Path | None = None,
) -> list[dict[str, Any]]:
    """The skills and the prompts the CLI reported, each kind under one directory container.

    ``skills`` and ``slash`` come from the ``init`` message; before it, a command is
    taken for a skill when a ``SKILL.md`` for it is where the CLI looks for skills.
    """
    skill_dir = directory / ".claude" / "skills"
    command_dir = directory / ".claude" / "commands"
    skill_folders = [skill_dir] + ([home / ".claude" / "skills"] if home else [])
    command_folders = [command_dir] + ([home / ".claude" / "commands"] if home else [])
    known_skills = set(skills) if skills is not None else None
    behind_slash = set(slash) if slash is not None else None
    found: dict[str, dict[str, Any]] = {}
    for command in commands:
        name = str(command.get("name") or "")
        if name and name not in found:
            found[name] = dict(command)
    # A skill the CLI keeps for the agent alone is not among its commands.
    for name in known_skills or ():
        found.setdefault(name, {"name": name})
    # Commands built into the CLI (compact, clear, ...) arrive by name alone.
    for name in behind_slash or ():
        found.setdefault(name, {"name": name, "builtin": True})
    skill_children: list[dict[str, Any]] = []
    prompt_children: list[dict[str, Any]] = []
    for name, command in found.items():
        is_skill = (
            name in known_skills
            if known_skills is not None
            else _skill_on_disk(name, skill_folders)
        )
        meta: dict[str, Any] = {}
        if command.get("argumentHint"):
            meta["ahp.argumentHint"] = str(command["argumentHint"])
        if command.get("builtin"):
            meta["ahp.builtin"] = True
        description = command.get("description")
        if is_skill:
            files = [folder / name / "SKILL.md" for folder in skill_folders]
            child: dict[str, Any] = {
                "id": SKILL + name,
                "uri": _source_uri(files, "skill", name, description),
                "name": name,
                "type": "skill",
            }
            if behind_slash is not None and name not in behind_slash:
                child["disableUserInvocation"] = True
        else:
            files = [folder / f"{name}.md" for folder in command_folders]
            child = {
                "id": PROMPT + name,
                "uri": _source_uri(files, "command", f"/{name}", description),
                "name": name,
                "type": "prompt",
            }
        if command.get("description"):
            child["description"] = str(command["description"])
        if meta:
            child["_meta"] = meta
        (skill_children if is_skill else prompt_children).append(child)
    return [
        _directory(SKILLS, "Skills", skill_dir, "skill", skill_children),
        _directory(COMMANDS, "Commands", command_dir, "prompt", prompt_children),
    ]


def _directory(
    ident: str, name: str, folder: Path, contents: str, children: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "id": ident,
        "uri": folder.as_uri(),
        "name": name,
        "type": "directory",
        "enabled": True,
        "contents": contents,
        "writable": False,
        "load": {"kind": "loaded"},
        "children": children,
    }


def agents(
    reported: Sequence[Mapping[str, Any]], directory: Path, home: Path | None = None
) -> dict[str, Any]:
    """The subagents the CLI offers (``get_server_info``'s ``agents``) under the agents folder.

    An agent's file is the folder's own, else the home one's; a built-in agent has none,
    and is described in a data: URI instead.
    """
    agent_dir = directory / ".claude" / "agents"
    folders = [agent_dir] + ([home / ".claude" / "agents"] if home else [])
    children: list[dict[str, Any]] = []
    seen: set[str] = set()
    for agent in reported:
        name = str(agent.get("name") or "")
        if not name or name in seen:
            continue
        seen.add(name)
        files = [folder / f"{name}.md" for folder in folders]
        child: dict[str, Any] = {
            "id": AGENT + name,
            "uri": _source_uri(files, "subagent", name, agent.get("description")),
            "name": name,
            "type": "agent",
        }
        if agent.get("description"):
            child["description"] = str(agent["description"])
        # "inherit" is the CLI's word for what the protocol says by leaving the model out.
        if agent.get("model") and agent["model"] != "inherit":
            child["model"] = str(agent["model"])
        children.append(child)
    return _directory(AGENTS, "Agents", agent_dir, "agent", children)


def plugins(
    known: Mapping[str, Mapping[str, Any]],
    loaded: Iterable[str],
    switches: Mapping[str, bool],
) -> list[dict[str, Any]]:
    """Every plugin the CLI has reported (``init`` / ``reload_plugins``: name, path, source).

    A plugin switched off is no longer among those the CLI loads, so it stays listed
    from what was seen of it, with the session's switch; one switched on that the CLI
    did not load says so.
    """
    on_now = set(loaded)
    made = []
    for source, plugin in known.items():
        name = str(plugin.get("name") or source)
        path = str(plugin.get("path") or "")
        uri = Path(path).as_uri() if path.startswith("/") else f"claude-plugin:{source}"
        entry: dict[str, Any] = {"id": PLUGIN + source, "uri": uri, "name": name, "type": "plugin"}
        switch = switches.get(source)
        if switch is not None:
            entry["enablement"] = [{"kind": "session", "enabled": switch}]
        if source in on_now:
            entry["load"] = {"kind": "loaded"}
        elif switch is not False:
            entry["load"] = {"kind": "error", "message": "Claude Code did not load this plugin"}
        if path == "builtin":
            entry["_meta"] = {"ahp.builtin": True}
        made.append(entry)
    return made


def mcp_state(status: Mapping[str, Any]) -> dict[str, Any]:
    """An ``McpServerState`` from one entry of the CLI's ``get_mcp_status``."""
    kind = MCP_KINDS.get(str(status.get("status")), "error")
    if kind == "error":
        said = str(status.get("error") or f"the MCP server is {status.get('status')}")
        return {"kind": "error", "error": {"errorType": "mcpServerFailed", "message": said}}
    if kind == "authRequired":
        url = (status.get("config") or {}).get("url")
        if not url:
            return {
                "kind": "error",
                "error": {"errorType": "mcpServerAuthRequired", "message": "needs a sign-in"},
            }
        return {
            "kind": "authRequired",
            "reason": "required",
            "resource": {"resource": str(url), "resource_name": str(status.get("name"))},
        }
    return {"kind": kind}


def mcp_server(status: Mapping[str, Any], directory: Path, home: Path) -> dict[str, Any]:
    """An ``McpServerCustomization`` for one server the CLI knows."""
    config = status.get("config") or {}
    scope = status.get("scope")
    if config.get("url"):
        uri = str(config["url"])
    elif scope == "project":
        uri = (directory / ".mcp.json").as_uri()
    else:
        uri = (home / ".claude.json").as_uri()
    entry: dict[str, Any] = {
        "id": str(status["name"]),
        "uri": uri,
        "name": str(status["name"]),
        "type": "mcpServer",
        "state": mcp_state(status),
    }
    if status.get("status") == "disabled":
        entry["enablement"] = [{"kind": "session", "enabled": False}]
    if scope:
        entry["_meta"] = {"ahp.scope": str(scope)}
    return entry


def _shown(status: Mapping[str, Any]) -> bool:
    # The in-process server client and server tools ride on is this host's plumbing, not
    # the user's: the CLI does not always say it is an sdk server, so its name counts too.
    name = status.get("name")
    if not name or name == CLIENT_SERVER:
        return False
    return (status.get("config") or {}).get("type") != "sdk"


class Customizations:
    """One agent's view of what its CLI offers, published on the session as it learns more."""

    def __init__(
        self,
        report: SessionReporter | None,
        probed: Mapping[str, Any],
        *,
        directory: Path,
        home: Path,
        client: Callable[[], ClaudeSDKClient | None],
        spawn: Spawn,
    ) -> None:
        self._report = report
        #: The session's first working directory (the home folder when it has none): where
        #: a person would add a command, a skill or an agent of this session's own.
        self.directory = directory
        self._home = home
        #: The SDK client of the CLI running now (None while none runs).
        self._client = client
        self._spawn = spawn
        # What the boot probe learned stands until this session's own CLI answers.
        self.commands: list[dict[str, Any]] = list(probed.get("commands") or ())
        self.agents: list[dict[str, Any]] = list(probed.get("agents") or ())
        self.skills: list[str] | None = None
        self.slash: list[str] | None = None
        #: Every plugin seen, by its source (``name@marketplace``), and those loaded now.
        self.plugins: dict[str, dict[str, Any]] = {}
        self.loaded: list[str] = []
        #: Plugins a client switched in this session, by source: kept, because a plugin
        #: switched off is not among those the CLI reports.
        self.plugin_switches: dict[str, bool] = {}
        #: The CLI's MCP servers by name (``get_mcp_status`` entries).
        self.servers: dict[str, dict[str, Any]] = {
            str(s["name"]): dict(s) for s in probed.get("mcpServers") or () if _shown(s)
        }
        #: Whether the servers are this session's CLI's own, not the probe's (which ran in
        #: the home folder, so it knows none of a project's servers).
        self.servers_heard = False
        #: MCP servers a client switched while no CLI ran, applied when one starts.
        self.wanted: dict[str, bool] = {}
        self._settling = False
        #: The entries last reported, in order (None until the first whole list went out).
        self._published: list[dict[str, Any]] | None = None

    def items(self) -> list[dict[str, Any]]:
        home = self._home
        made = containers(
            self.commands, self.directory, skills=self.skills, slash=self.slash, home=home
        )
        if self.agents:
            made.append(agents(self.agents, self.directory, home))
        made += plugins(self.plugins, self.loaded, self.plugin_switches)
        made += [mcp_server(s, self.directory, home) for s in self.servers.values()]
        return made

    def publish(self, *, again: Collection[str] = ()) -> None:
        """Report what moved since the last report (the whole list the first time).

        ``again``: entries to report even if this side saw no change, because a
        client's own action (a switch, a start) moved them in the session's state.
        """
        report = self._report
        if report is None:
            return
        items = self.items()
        try:
            if self._published is None or not self._report_moves(report, items, again):
                report.customizations(items)
            self._published = items
        except Exception:  # a session gone away: nothing to show it to
            log.debug("customizations not published", exc_info=True)

    def _report_moves(
        self, report: SessionReporter, items: list[dict[str, Any]], again: Collection[str]
    ) -> bool:
        """Report ``items`` as single moves from the last report; False when they cannot say it.

        An entry that is new goes last, so only a list that keeps the old order and
        adds at its end is said in moves; any other is said whole.
        """
        old = {str(item["id"]): item for item in self._published or ()}
        new = {str(item["id"]): item for item in items}
        kept = [ident for ident in old if ident in new]
        if list(new) != kept + [ident for ident in new if ident not in old]:
            return False
        for ident in old:
            if ident not in new:
                report.customization_removed(ident)
        for ident, item in new.items():
            before = old.get(ident)
            if before == item and ident not in again:
                continue
            if (
                before is not None
                and ident not in again
                and item.get("type") == "mcpServer"
                and {**before, "state": None} == {**item, "state": None}
            ):
                report.mcp_server_state(ident, item["state"])
            else:
                report.customization_updated(item)
        return True

    # -- what the CLI says -------------------------------------------------------------
    async def connected(self, client: ClaudeSDKClient) -> None:
        """A CLI started: read what it offers, apply switches made before it ran, then publish."""
        try:
            await self._connected(client)
        except Exception as exc:  # the CLI went away meanwhile: its next start asks again
            log.info("could not read what Claude Code offers: %s", exc)

    async def _connected(self, client: ClaudeSDKClient) -> None:
        info = await client.get_server_info() or {}
        if info.get("commands"):
            self.commands = list(info["commands"])
        if info.get("agents"):
            self.agents = list(info["agents"])
        if self.wanted:
            answer = await client.get_mcp_status()
            known = {str(s.get("name")) for s in answer.get("mcpServers") or ()}
            for name, enabled in self.wanted.items():
                if name in known:  # a switch for a server this CLI does not have is dropped
                    await self._switch(client, name, enabled)
            self.wanted.clear()
        if self.plugin_switches:
            await self._apply_plugins(client)
        await self._read_servers(client)
        await self.settle(client)

    def init(self, data: Mapping[str, Any]) -> None:
        """The CLI's ``init`` message: which commands are skills, which sit behind a slash."""
        self.skills = [str(s) for s in data.get("skills") or ()]
        self.slash = [str(s) for s in data.get("slash_commands") or ()]
        self._plugins_loaded(data.get("plugins") or ())
        self.publish()

    def _plugins_loaded(self, reported: Iterable[Any]) -> None:
        loaded = [dict(p) for p in reported if isinstance(p, Mapping) and p.get("name")]
        for plugin in loaded:
            self.plugins[str(plugin.get("source") or plugin["name"])] = plugin
        self.loaded = [str(p.get("source") or p["name"]) for p in loaded]

    async def _read_servers(self, client: ClaudeSDKClient, *, again: Collection[str] = ()) -> None:
        """Ask the CLI for its servers' states; report what moved."""
        answer = await client.get_mcp_status()
        self.servers = {
            str(s["name"]): dict(s) for s in answer.get("mcpServers") or () if _shown(s)
        }
        self.servers_heard = True
        self.publish(again=again)

    async def settle(self, client: ClaudeSDKClient) -> None:
        """Follow servers that are still starting until each is up, failed or waiting on a sign-in."""
        if self._settling:
            return
        self._settling = True
        try:
            with anyio.move_on_after(SETTLE_SECONDS):
                while any(s.get("status") == "pending" for s in self.servers.values()):
                    await anyio.sleep(POLL_SECONDS)
                    await self._read_servers(client)
        except Exception as exc:  # the CLI went away: its next start asks again
            log.info("stopped following MCP servers: %s", exc)
        finally:
            self._settling = False

    # -- switches a client made -----------------------------------------------------------
    async def toggle(self, customization_id: str, enabled: bool) -> None:
        if customization_id.startswith((SKILL, PROMPT, AGENT)) or customization_id in (
            SKILLS,
            COMMANDS,
            AGENTS,
        ):
            raise AgentRefused(
                f"Claude Code cannot switch {customization_id} on or off while it runs: it loads "
                "every skill, command and agent it finds. Move the file out of the folder to "
                "remove it."
            )
        if customization_id.startswith(PLUGIN):
            await self.plugin(customization_id[len(PLUGIN) :], enabled)
            return
        await self.mcp(customization_id, enabled)

    async def plugin(self, source: str, enabled: bool) -> None:
        """Switch a plugin through the CLI's ``enabledPlugins``, reload, and publish what loaded."""
        if self.plugins and source not in self.plugins:
            raise AgentRefused(f"this Claude session has no plugin {source}")
        before = self.plugin_switches.get(source)
        self.plugin_switches[source] = enabled
        client = self._client()
        if client is None:
            return  # applied when a CLI starts
        try:
            await self._apply_plugins(client)
        except Exception as exc:
            if before is None:
                self.plugin_switches.pop(source)
            else:
                self.plugin_switches[source] = before
            raise AgentRefused(f"Claude Code could not switch plugin {source}: {exc}") from None
        self.publish()

    async def _apply_plugins(self, client: ClaudeSDKClient) -> None:
        # The SDK has no method for these control requests; the CLI's protocol has them.
        query: Any = getattr(client, "_query", None)
        if query is None:
            raise RuntimeError("Claude Code is not connected")
        control = query._send_control_request
        # Flag settings merge shallowly: enabledPlugins goes whole, every switch in it.
        await control(
            {"subtype": "apply_flag_settings", "settings": {"enabledPlugins": self.plugin_switches}}
        )
        answer = await control({"subtype": "reload_plugins"})
        self._plugins_loaded((answer or {}).get("plugins") or ())
        if (answer or {}).get("commands"):
            self.commands = list(answer["commands"])

    async def mcp(self, name: str, enabled: bool) -> None:
        """Switch an MCP server through the CLI, then report the state the CLI reads back."""
        client = self._client()
        if self.servers_heard and name not in self.servers:
            raise AgentRefused(f"this Claude session has no MCP server {name}")
        if client is None:
            # No CLI runs now: the switch is made when one starts.
            self.wanted[name] = enabled
            return
        if name not in self.servers:
            raise AgentRefused(f"this Claude session has no MCP server {name}")
        try:
            await self._switch(client, name, enabled)
        except Exception as exc:  # the CLI went away meanwhile
            raise AgentRefused(f"Claude Code could not switch MCP server {name}: {exc}") from None
        # Read back once the client's own action is applied: it moved the server's entry in
        # the session (a switch, "starting"), and what the CLI says must come after it.
        self._spawn(self._switched, client, name, name="claude mcp servers")

    async def _switched(self, client: ClaudeSDKClient, name: str) -> None:
        try:
            await self._read_servers(client, again=(name,))
        except Exception as exc:  # the CLI went away: its next start asks again
            log.info("could not read MCP server %s back: %s", name, exc)
            return
        # A server still starting is followed until it is up, failed or waiting on a sign-in.
        await self.settle(client)

    async def _switch(self, client: ClaudeSDKClient, name: str, enabled: bool) -> None:
        status = (self.servers.get(name) or {}).get("status")
        try:
            if not enabled:
                await client.toggle_mcp_server(name, False)
            elif status in ("failed", "needs-auth"):
                # On but not up: reconnecting is how a server is retried, and signed into.
                await client.reconnect_mcp_server(name)
            else:
                await client.toggle_mcp_server(name, True)
        except Exception as exc:
            # The CLI says why it could not (a server that still wants a sign-in); the state
            # read back afterwards is what clients see.
            log.info("Claude Code could not switch MCP server %s: %s", name, exc)


def for_agent(server_info: Mapping[str, Any], home: Path) -> dict[str, Any]:
    """``AgentInfo.customizations`` from the boot probe: what the CLI offers in any folder."""
    commands = server_info.get("commands")
    reported = server_info.get("agents")
    servers = [s for s in server_info.get("mcpServers") or () if _shown(s)]
    made = containers(commands, home, home=home) if commands else []
    if reported:
        made.append(agents(reported, home, home))
    made += [mcp_server(s, home, home) for s in servers]
    return {"customizations": made} if made else {}
