"""Idle CLIs are stopped to give their memory back, and their chat's next turn resumes
the conversation in a new one: after a quiet spell, or when too many run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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

pytestmark = pytest.mark.anyio


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


async def gone(running: Any, chat: str, pid: int, within: float = 10) -> None:
    with anyio.fail_after(within):
        while agent_of(running, chat).pid is not None or alive(pid):
            await anyio.sleep(0.05)


def sent(anthropic: Any) -> str:
    return json.dumps(anthropic.main_requests()[-1].body["messages"])


async def test_an_idle_cli_stops_and_the_next_turn_resumes_in_a_new_one(
    claude_host, anthropic, workdir: Path
):
    gate = workdir / "gate"
    command = f"for i in $(seq 300); do [ -e {gate} ] && break; sleep 0.1; done; echo waited"
    bash = {"command": command, "description": "Wait for the gate", "run_in_background": True}
    anthropic.script(
        reply(ToolUse("Bash", bash, id="toolu_bg_shell")),
        reply("Started it."),
        reply("The wait is over."),
        reply("Still here."),
    )
    async with claude_host() as (running, backend):
        backend.idle_seconds = 0.3
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "wait in the background", "t1")
        ready = await client.recv_until(is_action("chat/toolCallReady", chat))
        if "confirmed" not in ready["params"]["action"]:
            await confirm(client, chat, "t1", "toolu_bg_shell", True)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        first = agent_of(running, chat).pid
        assert first is not None and alive(first)
        # Work runs in the background: the CLI is not idle, however long the turn is over.
        await anyio.sleep(1.2)
        assert agent_of(running, chat).pid == first and alive(first)
        gate.touch()
        started = await client.recv_until(is_action("chat/turnStarted", chat))
        assert started["params"]["action"]["message"]["origin"]["kind"] == "systemNotification"
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        # Nothing left to do: the CLI stops a moment later, and nobody is told of it.
        await gone(running, chat, first)
        state = await chat_state(client, chat)
        assert [t["state"] for t in state["turns"]] == ["complete", "complete"]
        await start_turn(client, chat, "are you there", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        # A new CLI took up the conversation where it was.
        second = agent_of(running, chat).pid
        assert second is not None and second != first
        assert "The wait is over." in sent(anthropic) and "are you there" in sent(anthropic)
        state = await chat_state(client, chat)
        assert state["turns"][-1]["responseParts"][-1]["content"] == "Still here."


async def test_what_allow_always_granted_outlives_an_idle_stop(
    claude_host, anthropic, workdir: Path
):
    target = workdir / "notes.txt"
    target.write_text("one\n")
    edit = {"file_path": str(target), "old_string": "one", "new_string": "two"}
    again = {"file_path": str(target), "old_string": "two", "new_string": "three"}
    anthropic.script(
        reply(ToolUse("Edit", edit, id="toolu_edit_1")),
        reply("Edited."),
        reply(ToolUse("Edit", again, id="toolu_edit_2")),
        reply("Edited again."),
    )
    async with claude_host() as (running, backend):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "edit it", "t1")
        await client.recv_until(is_action("chat/toolCallReady", chat), 30)
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": "toolu_edit_1",
                "approved": True,
                "confirmed": "user-action",
                "selectedOptionId": "allow-always",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        first = agent_of(running, chat).pid
        assert first is not None
        backend.idle_seconds = 0.2
        backend.watch_idle()
        await gone(running, chat, first)
        # The new CLI edits without asking, as the one the person answered would have.
        await start_turn(client, chat, "edit it again", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert target.read_text() == "three\n"
        parts = (await chat_state(client, chat))["turns"][-1]["responseParts"]
        [call] = [p["toolCall"] for p in parts if p["kind"] == "toolCall"]
        assert (call["status"], call["confirmed"]) == ("completed", "not-needed")


async def test_beyond_the_limit_of_live_clis_the_longest_idle_one_stops(
    claude_host, anthropic, workdir: Path
):
    anthropic.script(*(reply(f"Answer {n}.") for n in range(1, 5)))
    async with claude_host() as (running, backend):
        backend.max_clis = 2
        client, _, one = await connect_and_open(running, workdir, 1)
        _, two = await open_session(client, workdir, 2)
        _, three = await open_session(client, workdir, 3)
        pids: dict[str, int] = {}
        for chat, text in ((one, "first"), (two, "second"), (three, "third")):
            await start_turn(client, chat, text, f"{text}-turn")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
            pid = agent_of(running, chat).pid
            assert pid is not None
            pids[chat] = pid
        # The third CLI made room by stopping the one idle longest: the first.
        await gone(running, one, pids[one], within=1)
        assert alive(pids[two]) and alive(pids[three])
        # The first chat goes on; now the second has been idle longest.
        await start_turn(client, one, "first again", "again-turn")
        assert (await turn_end(client, one))["type"] == "chat/turnComplete"
        assert "Answer 1." in sent(anthropic) and "first again" in sent(anthropic)
        await gone(running, two, pids[two], within=1)
        assert alive(pids[three])
        assert sum(agent.cli_running for agent in backend.live.values()) == 2


async def test_the_idle_period_and_the_limit_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, claude_env: dict[str, str], tmp_path: Path
):
    from ahp_claude import plugin
    from ahpcore.host import HostSettings
    from ahpcore.testing import running_host

    for name, value in {**claude_env, "AHP_CLAUDE_PROBE": "0", "AHP_CLAUDE_WATCH": "0"}.items():
        monkeypatch.setenv(name, value)
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    monkeypatch.setenv("AHP_CLAUDE_IDLE_SECONDS", "90")
    monkeypatch.setenv("AHP_CLAUDE_MAX_CLIS", "3")
    async with running_host([("claude", plugin)], settings=settings) as running:
        backend = running.host.backends["claude"]
        assert (backend.idle_seconds, backend.max_clis) == (90.0, 3)
    monkeypatch.setenv("AHP_CLAUDE_IDLE_SECONDS", "soon")
    with pytest.raises(Exception, match="AHP_CLAUDE_IDLE_SECONDS must be a number"):
        async with running_host([("claude", plugin)], settings=settings):
            pass
