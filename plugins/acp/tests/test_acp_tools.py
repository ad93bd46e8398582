"""What an ACP agent asks of its client: permission, files, terminals; and cancels."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from acp_support import (
    acp_host,
    chat_of,
    chat_state,
    connect_and_open,
    is_action,
    parts,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def _asked(client, session: str) -> dict:
    needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
    return dict(needed["params"]["action"]["request"])


async def test_a_write_asks_with_the_agents_options_and_writes_once_allowed(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "write notes.txt hi there", "t1")
        request = await _asked(client, session)
        assert request["kind"] == "toolConfirmation"
        call = request["toolCall"]
        assert [(o["id"], o["kind"]) for o in call["options"]] == [
            ("once", "approve"),
            ("always", "approve"),
            ("no", "deny"),
        ]
        # The edit the call would make is shown before anybody allows it.
        [edit] = call["edits"]["items"]
        assert edit["after"]["uri"] == (workdir / "notes.txt").as_uri()
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": call["toolCallId"],
                "approved": True,
                "confirmed": "user-action",
                "selectedOptionId": "always",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert (workdir / "notes.txt").read_text() == "hi there"
        state = await chat_state(client, chat)
        [tool] = [p["toolCall"] for p in parts(state) if p["kind"] == "toolCall"]
        assert (tool["status"], tool["confirmed"]) == ("completed", "user-action")
        assert json.loads(tool["toolInput"])["content"] == "hi there"
        assert parts(state)[-1]["content"] == "wrote notes.txt (always)"


async def test_a_denied_write_is_not_made(fake_agent, tmp_path: Path, workdir: Path):
    async with acp_host(tmp_path / "state") as running:
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "write notes.txt hi", "t1")
        call = (await _asked(client, session))["toolCall"]
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": call["toolCallId"],
                "approved": False,
                "reason": "denied",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert not (workdir / "notes.txt").exists()
        state = await chat_state(client, chat)
        assert parts(state)[-1]["content"] == "not written (selected)"


async def test_files_outside_the_folder_are_refused_links_and_dots_too(
    fake_agent, tmp_path: Path, workdir: Path
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")
    os.symlink(outside, workdir / "escape")
    (workdir / "mine.txt").write_text("yours")
    async with acp_host(tmp_path / "state") as running:
        client, _, chat = await connect_and_open(running, workdir)
        said = []
        for n, path in enumerate(
            [
                workdir / "mine.txt",
                outside / "secret.txt",
                workdir / "escape" / "secret.txt",
                workdir / ".." / "outside" / "secret.txt",
            ]
        ):
            await start_turn(client, chat, f"read {path}", f"t{n}")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
            said.append(parts(await chat_state(client, chat))[-1]["content"])
        assert said[0] == "read: yours"
        for refused in said[1:]:
            assert refused.startswith("refused:") and "outside the session" in refused
            assert "not yours" not in refused
        # A write through the link is refused the same way.
        await start_turn(client, chat, f"write {workdir / 'escape' / 'new.txt'} x", "tw")
        request = await client.recv_until(is_action("session/inputNeededSet"), timeout=30)
        call = request["params"]["action"]["request"]["toolCall"]["toolCallId"]
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "tw",
                "toolCallId": call,
                "approved": True,
                "confirmed": "user-action",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert not (outside / "new.txt").exists()


async def test_a_terminal_runs_a_real_process_in_the_folder(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "run pwd; echo made > made.txt; exit 3", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert (workdir / "made.txt").read_text() == "made\n"
        state = await chat_state(client, chat)
        assert parts(state)[-1]["content"] == f"exit 3: {workdir}"
        [tool] = [p["toolCall"] for p in parts(state) if p["kind"] == "toolCall"]
        assert tool["status"] == "completed"
        assert tool["content"] == [{"type": "text", "text": f"{workdir}\n"}]
        start = next(
            a["action"]
            for a in client.actions_for(chat)
            if a["action"]["type"] == "chat/toolCallStart"
        )
        assert start["_meta"]["toolKind"] == "terminal"


async def test_a_cancelled_turn_reaches_the_agent_and_the_next_runs(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "slow", "t1")
        await client.recv_until(is_action("chat/responsePart", chat), timeout=30)
        await client.dispatch(chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 0})
        assert (await turn_end(client, chat))["type"] == "chat/turnCancelled"
        await start_turn(client, chat, "again", "t2")
        # Within the time a cancel the agent never heard of would still be draining.
        assert (await turn_end(client, chat, timeout=8))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        assert parts(state)[-1]["content"] == "You said: again"
        live = chat_of(running, chat)
        assert [(n.id, n.state) for n in live.record.turns] == [
            ("t1", "cancelled"),
            ("t2", "complete"),
        ]


async def test_an_agent_that_dies_mid_turn_ends_it_in_an_error_that_says_why(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "crash", "t1")
        end = await turn_end(client, chat)
        assert end["type"] == "chat/error"
        message = end["part"]["error"]["message"]
        assert "exited with code 3" in message and "fell over on purpose" in message


async def test_an_agents_terminal_is_a_host_terminal_a_client_watches(
    fake_agent, tmp_path: Path, workdir: Path
):
    import ahp_terminals.plugin

    terminals = [("terminals", ahp_terminals.plugin)]
    async with acp_host(tmp_path / "state", also=terminals) as running:
        client, session, chat = await connect_and_open(running, workdir)
        command = "echo started; sleep 1; echo done-$((2+3)); exit 3"
        await start_turn(client, chat, f"run {command}", "t1")
        listed = await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["action"]["type"] == "root/terminalsChanged"
                and bool(f["params"]["action"]["terminals"])
            ),
            timeout=30,
        )
        [info] = listed["params"]["action"]["terminals"]
        terminal = info["resource"]
        assert terminal.startswith("ahp-terminal:")
        assert info["claim"] == {"kind": "session", "session": session, "chat": chat}
        watched = (await client.request("subscribe", {"channel": terminal}))["snapshot"]
        assert watched["state"]["cwd"] == workdir.as_uri()
        exited = await client.recv_until(is_action("terminal/exited", terminal), timeout=30)
        assert exited["params"]["action"]["exitCode"] == 3
        seen = "".join(part.get("value", "") for part in watched["state"]["content"])
        seen += "".join(
            a["action"]["data"]
            for a in client.actions_for(terminal)
            if a["action"]["type"] == "terminal/data"
        )
        assert "started" in seen and "done-5" in seen
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        assert parts(state)[-1]["content"] == "exit 3: started\ndone-5"
        [tool] = [p["toolCall"] for p in parts(state) if p["kind"] == "toolCall"]
        [shown] = tool["content"]
        assert shown["type"] == "terminal" and shown["resource"] == terminal
        assert shown["result"]["exitCode"] == 3
        assert "done-5" in shown["result"]["preview"]
        # Released by the agent, the terminal stays for the tool call until the session goes.
        assert terminal in running.host.terminals.terminals
        await client.request("disposeSession", {"channel": session})
        assert terminal not in running.host.terminals.terminals
