"""Commands, skills and MCP servers a real CLI reports, and the switches on them, over websockets."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import anyio
import pytest
from anthropic_server import ToolUse, reply
from conftest import (
    agent_of,
    chat_state,
    confirm,
    connect_and_open,
    is_action,
    open_session,
    start_turn,
    turn_end,
)
from oauth_server import OAuthServer

from ahp_claude.plugin import backend_for
from ahpcore import reducers
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.testing import running_host

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent


@pytest.fixture
def oauth() -> Iterator[OAuthServer]:
    server = OAuthServer().start()
    yield server
    server.close()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def project(workdir: Path, oauth: OAuthServer) -> None:
    """A folder with a command, a skill and three MCP servers: one up, one broken, one locked."""
    write(
        workdir / ".claude" / "commands" / "shout.md",
        "---\ndescription: Shout the words back\nargument-hint: <words>\n---\n"
        "Please shout: $ARGUMENTS\n",
    )
    write(
        workdir / ".claude" / "skills" / "greeter" / "SKILL.md",
        "---\nname: greeter\ndescription: Greets people warmly\nargument-hint: <name>\n---\n"
        "Greet the person by name.\n",
    )
    servers = {
        "echo": {"command": sys.executable, "args": [str(HERE / "mcp_echo.py")]},
        "broken": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]},
        "locked": {"type": "http", "url": oauth.url},
    }
    write(workdir / ".mcp.json", json.dumps({"mcpServers": servers}))


def customizations(client: Any, session: str) -> list[dict[str, Any]]:
    """The session's customizations as the actions received so far leave them, folded onto
    the snapshot by the reducer a client runs."""
    from_seq, state = client.snapshots[session]
    seen: set[int] = set()
    for envelope in client.actions_for(session):
        seq = envelope["serverSeq"]
        if seq > from_seq and seq not in seen:
            seen.add(seq)
            state = reducers.reduce("session", state, envelope["action"])
    return [dict(c) for c in state.get("customizations") or ()]


def customization_actions(client: Any, session: str, since: int = 0) -> list[dict[str, Any]]:
    """The customization actions on ``session`` among the frames from index ``since`` on."""
    return [
        f["params"]["action"]
        for f in client.frames[since:]
        if f.get("method") == "action"
        and f["params"]["channel"] == session
        and f["params"]["action"]["type"].startswith(("session/customization", "session/mcp"))
    ]


def servers(client: Any, session: str) -> dict[str, str]:
    return {
        c["id"]: c["state"]["kind"]
        for c in customizations(client, session)
        if c["type"] == "mcpServer"
    }


async def servers_reach(client: Any, session: str, **want: str) -> dict[str, str]:
    """Wait, on the actions as they arrive, until the named servers are in these states."""

    def done() -> bool:
        now = servers(client, session)
        return all(now.get(name) == kind for name, kind in want.items())

    with anyio.fail_after(40):
        while not done():
            await client.recv_until(
                lambda f: f.get("method") == "action" and f["params"]["channel"] == session
            )
    return servers(client, session)


async def test_commands_skills_and_mcp_servers_of_the_cli_are_the_sessions_customizations(
    claude_host, anthropic, workdir, oauth
):
    project(workdir, oauth)
    anthropic.script(
        reply("HELLO THERE"),
        reply(ToolUse("mcp__echo__echo", {"text": "ping"})),
        reply("Echoed."),
    )
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        # Switched off before any CLI runs: the switch is made when one starts.
        seq = await client.dispatch(
            session,
            {
                "type": "session/customizationToggled",
                "id": "echo",
                "enablement": [{"kind": "session", "enabled": False}],
            },
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        # A slash command is an ordinary message: the CLI expands it from the folder's file.
        await start_turn(client, chat, "/shout hello there", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        sent = json.dumps(anthropic.main_requests()[-1].body["messages"])
        assert "Please shout: hello there" in sent

        states = await servers_reach(
            client, session, echo="stopped", broken="error", locked="authRequired"
        )
        await client.dispatch(session, {"type": "session/mcpServerStartRequested", "id": "echo"})
        await servers_reach(client, session, echo="ready")
        assert "ahp" not in states  # the host's own in-process server is not the user's
        found = {c["id"]: c for c in customizations(client, session)}
        locked = found["locked"]["state"]
        assert locked["reason"] == "required" and locked["resource"]["resource"] == oauth.url
        assert found["broken"]["state"]["error"]["message"]

        # One container per kind, each command a child with its argument hint in _meta.
        skills, commands = found["dir:skills"], found["dir:commands"]
        assert (skills["type"], skills["contents"]) == ("directory", "skill")
        assert (commands["type"], commands["contents"]) == ("directory", "prompt")
        assert skills["uri"] == (workdir / ".claude" / "skills").as_uri()
        shout = next(c for c in commands["children"] if c["name"] == "shout")
        assert shout["type"] == "prompt" and shout["_meta"]["ahp.argumentHint"] == "<words>"
        greeter = next(c for c in skills["children"] if c["name"] == "greeter")
        assert greeter["type"] == "skill" and greeter["_meta"]["ahp.argumentHint"] == "<name>"
        # The CLI's own commands are there too, as prompts.
        assert "compact" in [c["name"] for c in commands["children"]]

        # The composer offers them behind a slash, hint and all.
        answer = await client.request(
            "completions",
            {"channel": chat, "kind": "userMessage", "text": "/sh", "offset": 3},
        )
        [item] = [i for i in answer["items"] if i["attachment"]["_meta"]["command"] == "shout"]
        assert item["attachment"]["_meta"]["argumentHint"] == "<words>"
        assert "Shout the words back" in item["attachment"]["_meta"]["description"]

        # A call to the server's tool names the server's customization as its contributor.
        await start_turn(client, chat, "echo ping", "t2")
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        call = needed["params"]["action"]["request"]["toolCall"]
        assert call["contributor"] == {"kind": "mcp", "customizationId": "echo"}
        await confirm(client, chat, "t2", call["toolCallId"], True)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        [part] = [
            p
            for p in (await chat_state(client, chat))["turns"][1]["responseParts"]
            if p["kind"] == "toolCall"
        ]
        assert part["toolCall"]["status"] == "completed"
        assert "ping" in json.dumps(part["toolCall"]["content"])

        # A skill has no switch in the CLI: refused, saying why.
        seq = await client.dispatch(
            session,
            {
                "type": "session/customizationToggled",
                "id": "skill:greeter",
                "enablement": [{"kind": "session", "enabled": False}],
            },
        )
        refused = await client.answer_to(seq)
        assert "cannot switch" in refused["rejectionReason"]

        # An MCP server is switched through the CLI and read back from it.
        seq = await client.dispatch(
            session,
            {
                "type": "session/customizationToggled",
                "id": "echo",
                "enablement": [{"kind": "session", "enabled": False}],
            },
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        await servers_reach(client, session, echo="stopped")
        await client.dispatch(session, {"type": "session/mcpServerStartRequested", "id": "echo"})
        await servers_reach(client, session, echo="ready")
        await client.dispatch(session, {"type": "session/mcpServerStopRequested", "id": "echo"})
        await servers_reach(client, session, echo="stopped")

        # A plugin is switched through the CLI's settings, reloaded and read back: switched
        # off it is no longer loaded, and it stays listed with the session's switch.
        [plugin, *_] = [c for c in customizations(client, session) if c["type"] == "plugin"]
        assert plugin["load"] == {"kind": "loaded"}
        for enabled in (False, True):
            seq = await client.dispatch(
                session,
                {
                    "type": "session/customizationToggled",
                    "id": plugin["id"],
                    "enablement": [{"kind": "session", "enabled": enabled}],
                },
            )
            assert "rejectionReason" not in await client.answer_to(seq)
            # The plugin's entry alone, not the whole list again.
            await client.recv_until(
                lambda f: (
                    is_action("session/customizationUpdated", session)(f)
                    and f["params"]["action"]["customization"]["id"] == plugin["id"]
                )
            )
            [now] = [c for c in customizations(client, session) if c["id"] == plugin["id"]]
            assert now["enablement"] == [{"kind": "session", "enabled": enabled}]
            assert ("load" in now) is enabled

        # A server that does not exist is refused by name.
        seq = await client.dispatch(
            session, {"type": "session/mcpServerStartRequested", "id": "nowhere"}
        )
        assert "no MCP server nowhere" in (await client.answer_to(seq))["rejectionReason"]


async def test_a_server_that_moves_or_leaves_is_said_alone_not_in_the_whole_list(
    claude_host, anthropic, workdir
):
    echo = {"command": sys.executable, "args": [str(HERE / "mcp_echo.py")]}
    broken = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}
    write(workdir / ".mcp.json", json.dumps({"mcpServers": {"echo": echo, "broken": broken}}))
    anthropic.script(reply("one"), reply("two"))
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hi", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await servers_reach(client, session, echo="ready", broken="error")
        assert any(
            a["type"] == "session/customizationsChanged"
            for a in customization_actions(client, session)
        ), "the whole list goes out once"

        # Switched off and on again: the server's own entry each time.
        mark = len(client.frames)
        seq = await client.dispatch(
            session,
            {
                "type": "session/customizationToggled",
                "id": "echo",
                "enablement": [{"kind": "session", "enabled": False}],
            },
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        await servers_reach(client, session, echo="stopped")
        await client.dispatch(session, {"type": "session/mcpServerStartRequested", "id": "echo"})
        await servers_reach(client, session, echo="ready")
        moved = customization_actions(client, session, mark)
        assert "session/customizationsChanged" not in [a["type"] for a in moved]
        updated = [a["customization"] for a in moved if a["type"] == "session/customizationUpdated"]
        assert updated and {c["id"] for c in updated} == {"echo"}
        assert updated[0]["enablement"] == [{"kind": "session", "enabled": False}]

        # A server gone from the configuration when the CLI starts again is removed alone.
        write(workdir / ".mcp.json", json.dumps({"mcpServers": {"echo": echo}}))
        await agent_of(running, chat).rest()
        mark = len(client.frames)
        await start_turn(client, chat, "again", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        removed = await client.recv_until(is_action("session/customizationRemoved", session), 40)
        assert removed["params"]["action"]["id"] == "broken"
        moved = customization_actions(client, session, mark)
        assert "session/customizationsChanged" not in [a["type"] for a in moved]
        assert "broken" not in servers(client, session)
        await client.assert_replay_agrees([session])


def _children_cmdlines() -> list[str]:
    """The command lines of this process's child processes (Linux)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                found.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "))
            except OSError:
                continue  # gone meanwhile
    return found


class ProbingClaude:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.backend: Any = None

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        self.backend = backend_for(host, self.env, probe=True, watch=False)
        register(self.backend)


async def test_the_boot_probe_gives_the_agent_and_a_new_session_the_clis_commands(
    claude_env, tmp_path, workdir
):
    home = Path(claude_env["HOME"])
    write(
        home / ".claude" / "commands" / "standup.md",
        "---\ndescription: Write the standup\nargument-hint: <day>\n---\nFor $ARGUMENTS\n",
    )
    write(
        home / ".claude" / "agents" / "reviewer.md",
        "---\nname: reviewer\ndescription: Reviews code changes\nmodel: haiku\n---\nReview.\n",
    )
    # A user-scope MCP server: the CLI's own settings file, where `claude mcp add` puts it.
    echo = {"command": sys.executable, "args": [str(HERE / "mcp_echo.py")]}
    write(
        Path(claude_env["CLAUDE_CONFIG_DIR"]) / ".claude.json",
        json.dumps({"mcpServers": {"echo": echo}}),
    )
    write(workdir / ".mcp.json", json.dumps({"mcpServers": {"local": echo}}))
    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")
    async with running_host([("claude", ProbingClaude(claude_env))], settings=settings) as running:
        client = await running.connect("c1")
        result = await client.initialize()
        # The host's start and its first client are served before the probe's CLI starts.
        assert not [cmd for cmd in _children_cmdlines() if "ahp_claude.probe" in cmd]
        [agent] = result["snapshots"][0]["state"]["agents"]
        if "customizations" not in agent:
            # Sent again when the probe answers, carrying what the CLI offers in any folder.
            frame = await client.recv_until(is_action("root/agentsChanged"), timeout=40)
            [agent] = frame["params"]["action"]["agents"]
        found = {c["id"]: c for c in agent["customizations"]}
        assert "standup" in [c["name"] for c in found["dir:commands"]["children"]]
        # The MCP servers and subagents too, before any session exists.
        assert found["echo"]["type"] == "mcpServer"
        assert found["echo"]["state"] == {"kind": "ready"}  # the probe waits out "pending"
        assert found["echo"]["_meta"] == {"ahp.scope": "user"}
        agents = {c["name"]: c for c in found["dir:agents"]["children"]}
        reviewer = agents["reviewer"]
        assert (reviewer["type"], reviewer["model"]) == ("agent", "haiku")
        assert reviewer["description"] == "Reviews code changes"
        assert reviewer["uri"] == (home / ".claude" / "agents" / "reviewer.md").as_uri()
        assert "general-purpose" in agents  # the CLI's built-in ones are offered as well
        # A session starts with them before its own CLI has said anything.
        session, _ = await open_session(client, workdir)
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        [commands] = [c for c in state["customizations"] if c["id"] == "dir:commands"]
        [standup] = [c for c in commands["children"] if c["name"] == "standup"]
        assert standup["_meta"]["ahp.argumentHint"] == "<day>"
        assert commands["uri"] == (workdir / ".claude" / "commands").as_uri()
        seeded = {c["id"]: c for c in state["customizations"]}
        assert seeded["echo"]["type"] == "mcpServer"
        assert "agent:reviewer" in [c["id"] for c in seeded["dir:agents"]["children"]]
        # The probe ran in the home folder: a project's own server, not among those seeded,
        # can still be switched before the session's CLI runs (it is applied when one starts).
        seq = await client.dispatch(
            session,
            {
                "type": "session/customizationToggled",
                "id": "local",
                "enablement": [{"kind": "session", "enabled": False}],
            },
        )
        assert "rejectionReason" not in await client.answer_to(seq)


async def test_a_host_stopped_before_its_boot_probe_starts_never_starts_it(claude_env, tmp_path):
    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")
    plugin = ProbingClaude(claude_env)
    async with running_host([("claude", plugin)], settings=settings) as running:
        client = await running.connect("c1")
        await client.initialize()
    backend = plugin.backend
    assert backend.stopped.is_set()
    # Stopped within the probe's delay: its thread ends without starting a CLI.
    await anyio.to_thread.run_sync(backend.probe_thread.join, 10)
    assert not backend.probe_thread.is_alive()
    assert not backend.probed.is_set()


def _opens(uri: str) -> str:
    """What a client opening ``uri`` reads: a file that exists, or a data: URI's text."""
    if uri.startswith("data:"):
        header, _, body = uri.partition(",")
        assert header.startswith("data:text/markdown"), uri
        return unquote(body)
    path = Path(unquote(urlsplit(uri).path))
    assert uri.startswith("file:") and path.is_file(), f"{uri} names no file"
    return path.read_text()


async def test_every_skill_prompt_and_agent_names_something_a_client_can_open(
    claude_host, claude_env, anthropic, workdir
):
    home = Path(claude_env["HOME"])
    write(
        workdir / ".claude" / "skills" / "greeter" / "SKILL.md",
        "---\nname: greeter\ndescription: Greets people warmly\n---\nGreet them.\n",
    )
    write(
        home / ".claude" / "skills" / "tidier" / "SKILL.md",
        "---\nname: tidier\ndescription: Tidies the desk\n---\nTidy up.\n",
    )
    write(
        home / ".claude" / "commands" / "standup.md",
        "---\ndescription: Write the standup\n---\nFor today.\n",
    )
    anthropic.script(reply("hello"))
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hi", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await client.sync()
        found = {c["id"]: c for c in customizations(client, session)}
        children = {
            c["id"]: c
            for container in ("dir:skills", "dir:commands", "dir:agents")
            for c in found[container]["children"]
        }
        # Each where it is: the folder's own, the home's, none for what the CLI has built in.
        assert (
            children["skill:greeter"]["uri"]
            == (workdir / ".claude" / "skills" / "greeter" / "SKILL.md").as_uri()
        )
        assert (
            children["skill:tidier"]["uri"]
            == (home / ".claude" / "skills" / "tidier" / "SKILL.md").as_uri()
        )
        assert (
            children["prompt:standup"]["uri"]
            == (home / ".claude" / "commands" / "standup.md").as_uri()
        )
        assert "compact" in _opens(children["prompt:compact"]["uri"])
        assert "general-purpose" in _opens(children["agent:general-purpose"]["uri"])
        for child in children.values():
            _opens(child["uri"])
