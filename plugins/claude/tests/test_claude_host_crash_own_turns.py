"""Turns the host did not start, cut off by a host killed mid-way (kill -9): the CLI's answer
to background work that ended, and a background subagent's chat. After a restart each reads
as interrupted, with what the transcript kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic_server import AnthropicServer, Hold, ToolUse, reply
from conftest import SID, confirm, is_action, start_turn, turn_end
from test_claude_host_crash import STOPPED, client_of, serve, texts

from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio

SESSION = SID.format(1)
SAID = "What the CLI said of the ended work, streamed before the crash."


async def opened(client: AhpTestClient, workdir: Path) -> tuple[str, str]:
    session = f"claude:/{SESSION}"
    await client.request(
        "createSession",
        {"channel": session, "provider": "claude", "workingDirectories": [workdir.as_uri()]},
    )
    snapshot = await client.request("subscribe", {"channel": session})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return session, chat


async def reopened(url: str, session: str, *chats: str) -> list[dict[str, Any]]:
    client = await client_of(url)
    await client.request("subscribe", {"channel": session})
    states = [
        (await client.request("subscribe", {"channel": c}))["snapshot"]["state"] for c in chats
    ]
    await client.close()
    return states


async def test_a_turn_the_cli_began_itself_reads_interrupted_after_a_killed_host(
    tmp_path, anthropic: AnthropicServer, claude_env, workdir: Path
):
    gate = workdir / "gate"
    command = f"for i in $(seq 300); do [ -e {gate} ] && break; sleep 0.1; done; echo waited"
    bash = {"command": command, "description": "Wait for the gate", "run_in_background": True}
    hold = Hold()
    anthropic.script(
        reply(ToolUse("Bash", bash, id="toolu_bg_shell")),
        reply("Started it."),
        reply(SAID, hold),  # the CLI's own turn: its answer stops after a finished block
    )
    state = tmp_path / "state"
    with serve(state, claude_env) as host:
        client = await client_of(host.url)
        session, chat = await opened(client, workdir)
        await start_turn(client, chat, "wait in the background", "t1")
        ready = await client.recv_until(is_action("chat/toolCallReady", chat), timeout=30)
        if "confirmed" not in ready["params"]["action"]:
            await confirm(client, chat, "t1", "toolu_bg_shell", True)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        gate.touch()
        started = await client.recv_until(is_action("chat/turnStarted", chat), timeout=30)
        own = started["params"]["action"]
        assert own["message"]["origin"] == {"kind": "systemNotification"}
        assert await anyio.to_thread.run_sync(hold.reached.wait, 30)
        await client.recv_until(lambda f: SAID[-20:] in json.dumps(f), timeout=30)
        await anyio.sleep(0.5)  # the CLI's transcript entry for the turn is written by now
        host.process.kill()
        host.process.wait()
        await client.close()
    hold.release.set()

    with serve(state, claude_env) as host:
        [chat_state] = await reopened(host.url, session, chat)
        first, cut = chat_state["turns"]
        assert first["state"] == "complete"
        assert cut["state"] == "error", cut
        assert STOPPED in texts(cut) and SAID in texts(cut)
        assert (cut["id"], cut["message"]) == (own["turnId"], own["message"])


async def test_a_background_subagent_reads_interrupted_after_a_killed_host(
    tmp_path, anthropic: AnthropicServer, claude_env, workdir: Path
):
    hold = Hold()
    task = {
        "description": "Look around",
        "prompt": "Find the answer",
        "subagent_type": "general-purpose",
        "run_in_background": True,
    }
    anthropic.script(
        reply(ToolUse("Agent", task, id="toolu_bg_agent")),
        reply(SAID, hold, match="Find the answer"),  # the subagent stops after its first words
        reply("My helper is on it."),
    )
    state = tmp_path / "state"
    with serve(state, claude_env) as host:
        client = await client_of(host.url)
        session, chat = await opened(client, workdir)
        await start_turn(client, chat, "delegate", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert await anyio.to_thread.run_sync(hold.reached.wait, 30)
        snapshot = await client.request("subscribe", {"channel": chat})
        (work,) = snapshot["snapshot"]["state"]["backgroundWork"]
        child = work["chat"]
        child_state = (await client.request("subscribe", {"channel": child}))["snapshot"]
        if SAID not in json.dumps(child_state):
            await client.recv_until(lambda f: SAID[-20:] in json.dumps(f), timeout=30)
        host.process.kill()
        host.process.wait()
        await client.close()
    hold.release.set()

    with serve(state, claude_env) as host:
        parent, child_chat = await reopened(host.url, session, chat, child)
        assert [t["state"] for t in parent["turns"]] == ["complete"]
        [cut] = child_chat["turns"]
        assert cut["state"] == "error", cut
        assert STOPPED in texts(cut) and SAID in texts(cut)
