"""VS Code's terminal auto-approve rules answer an agent's shell command before the person
is asked: over a real host and socket, with the scripted agent asking to run commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ahp_scripted import Rule, Say, Script, ScriptedBackend, Tool
from ahp_vscode.plugin import VSCodePlugin
from ahpcore.hookspecs import hookimpl
from ahpcore.settings import HostSettings
from ahpcore.testing import AhpTestClient, running_host

SESSION = "scripted:/00000000-0000-4000-8000-00000000c101"
RULES = {"echo": True, "rm": False, "git status": True}

SCRIPT = Script(
    rules=[
        Rule(
            prefix="run ",
            steps=[
                Tool(
                    "bash",
                    input={"command": "${rest}"},
                    kind="terminal",
                    approval=True,
                    result="ran ${input.command}",
                    on_deny=[Say("refused: ${suggestion}")],
                ),
                Say("${result}"),
            ],
        ),
        Rule(
            prefix="read ",
            steps=[
                Tool("read", input={"command": "${rest}"}, kind="read", approval=True),
                Say("read it"),
            ],
        ),
    ],
    default=[Say("?")],
)


class Backends:
    def __init__(self, backend: Any) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(self.backend)


async def _start(client: AhpTestClient, chat: str, text: str, turn_id: str) -> None:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-12-03T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    assert "rejectionReason" not in await client.answer_to(seq)


async def _end(client: AhpTestClient, chat: str, turn_id: str) -> dict[str, Any]:
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"]["type"] in ("chat/turnComplete", "chat/error")
            and f["params"]["action"].get("turnId") == turn_id
        ),
        20,
    )
    action: dict[str, Any] = frame["params"]["action"]
    return action


def _asked(client: AhpTestClient, chat: str, call_id: str) -> bool:
    """Whether the call was put to a person: a ready with no ``confirmed``."""
    return any(
        a["action"]["type"] == "chat/toolCallReady"
        and a["action"]["toolCallId"] == call_id
        and "confirmed" not in a["action"]
        for a in client.actions_for(chat)
    )


async def _turn(client: AhpTestClient, chat: str, index: int) -> dict[str, Any]:
    await client.sync()
    state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
    turn: dict[str, Any] = state["turns"][index]
    return turn


def _call(turn: dict[str, Any]) -> dict[str, Any]:
    [call] = [p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall"]
    return dict(call)


def _said(turn: dict[str, Any]) -> str:
    return "".join(p["content"] for p in turn["responseParts"] if p["kind"] == "markdown")


async def _push(client: AhpTestClient, config: dict[str, Any]) -> None:
    seq = await client.dispatch("ahp-root://", {"type": "root/configChanged", "config": config})
    assert "rejectionReason" not in await client.answer_to(seq)


@pytest.mark.anyio
async def test_the_rules_answer_an_agents_shell_command_before_the_person(tmp_path: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    backend = ScriptedBackend(tmp_path / "scripted", SCRIPT)
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    plugins = [("scripted", Backends(backend)), ("vscode", VSCodePlugin())]
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        await client.request(
            "createSession",
            {"channel": SESSION, "provider": "scripted", "workingDirectories": [work.as_uri()]},
        )
        state = (await client.request("subscribe", {"channel": SESSION}))["snapshot"]["state"]
        chat = state["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        await _push(client, {"terminalAutoApproveEnabled": True, "terminalAutoApproveRules": RULES})

        # Approved by a rule: it runs, nobody asked, and the call says a setting confirmed it.
        await _start(client, chat, "run echo hi && git status", "t1")
        assert (await _end(client, chat, "t1"))["type"] == "chat/turnComplete"
        turn = await _turn(client, chat, 0)
        call = _call(turn)
        assert call["status"] == "completed" and call["confirmed"] == "setting"
        assert "rule echo" in call["_meta"]["ahp.confirmedBy"]
        assert "rule git status" in call["_meta"]["ahp.confirmedBy"]
        assert not _asked(client, chat, "t1.call1")
        assert _said(turn) == "ran echo hi && git status"

        # Denied by a rule: refused, the rule named to clients and to the agent.
        await _start(client, chat, "run echo x; rm -rf build", "t2")
        assert (await _end(client, chat, "t2"))["type"] == "chat/turnComplete"
        turn = await _turn(client, chat, 1)
        call = _call(turn)
        assert call["status"] == "cancelled" and call["reason"] == "denied"
        assert "`rm -rf build` is denied by the rule rm" in call["reasonMessage"]
        assert "denied by the rule rm" in _said(turn)

        # No rule decides: the person is asked, as before, and answers.
        await _start(client, chat, "run make", "t3")
        await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["action"]["type"] == "chat/toolCallReady"
                and f["params"]["action"]["toolCallId"] == "t3.call1"
            ),
            20,
        )
        assert _asked(client, chat, "t3.call1")
        seq = await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t3",
                "toolCallId": "t3.call1",
                "approved": True,
                "confirmed": "user-action",
            },
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        assert (await _end(client, chat, "t3"))["type"] == "chat/turnComplete"
        assert _call(await _turn(client, chat, 2))["confirmed"] == "user-action"

        # A tool that runs no shell command is never the rules' to answer.
        await _start(client, chat, "read echo", "t4")
        await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["action"]["type"] == "chat/toolCallReady"
                and f["params"]["action"]["toolCallId"] == "t4.call1"
            ),
            20,
        )
        assert _asked(client, chat, "t4.call1")
        seq = await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t4",
                "toolCallId": "t4.call1",
                "approved": False,
                "reason": "denied",
            },
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        assert (await _end(client, chat, "t4"))["type"] == "chat/turnComplete"

        # Switched off in VS Code: the rules say nothing, the person is asked.
        await _push(client, {"terminalAutoApproveEnabled": False})
        await _start(client, chat, "run echo off", "t5")
        await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["action"]["type"] == "chat/toolCallReady"
                and f["params"]["action"]["toolCallId"] == "t5.call1"
            ),
            20,
        )
        assert _asked(client, chat, "t5.call1")
