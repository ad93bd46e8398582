"""``ahp_tool_confirming``: plugins answer a tool confirmation before the person is asked;
the first to decide wins, one that fails decides nothing, and undecided calls are asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ahp_scripted import Rule, Say, ScriptedBackend, Subagent, Tool
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.lifecycle import ToolConfirmation, command_of
from ahpcore.testing import AhpTestClient, running_host

from .conftest import ScriptedPlugin, script, session_uri

pytestmark = pytest.mark.anyio

SHELL = Tool(
    "Bash",
    input={"command": "${rest}"},
    kind="terminal",
    approval=True,
    result="ran",
    on_deny=[Say("told: ${suggestion}")],
)


class Broken:
    def __init__(self) -> None:
        self.seen: list[ToolConfirmation] = []

    @hookimpl(tryfirst=True)
    def ahp_tool_confirming(self, confirmation: ToolConfirmation) -> None:
        self.seen.append(confirmation)
        raise RuntimeError("this plugin is broken")


class Judge:
    """Approves ``ok ...`` commands and denies ``no ...`` ones; says nothing of the rest."""

    @hookimpl
    async def ahp_tool_confirming(self, confirmation: ToolConfirmation) -> None:
        command = confirmation.command or ""
        if command.startswith("ok"):
            confirmation.approve("ok is fine")
        elif command.startswith("no"):
            confirmation.deny("no is never fine")


class Late:
    """Comes after Judge: what it says counts only where Judge said nothing."""

    @hookimpl(trylast=True)
    def ahp_tool_confirming(self, confirmation: ToolConfirmation) -> None:
        confirmation.deny("late")
        confirmation.approve("a second word does not change the first")


async def _turn(client: AhpTestClient, chat: str, text: str, turn_id: str) -> dict[str, Any]:
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
    await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["action"]["type"] == "chat/turnComplete"
            and f["params"]["action"].get("turnId") == turn_id
        ),
        20,
    )
    await client.sync()
    state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
    turn: dict[str, Any] = state["turns"][-1]
    return turn


def _call(turn: dict[str, Any]) -> dict[str, Any]:
    [call] = [p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall"]
    return dict(call)


async def test_the_first_plugin_to_decide_wins_and_a_broken_one_is_passed_over(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    backend = ScriptedBackend(
        tmp_path / "scripted",
        script(
            Rule(prefix="sh ", steps=[SHELL, Say("${result}")]),
            Rule(
                prefix="sub ",
                steps=[Subagent("helper", description="helps", steps=[SHELL], result="done")],
            ),
        ),
    )
    broken = Broken()
    plugins = [
        ("scripted", ScriptedPlugin(backend)),
        ("broken", broken),
        ("judge", Judge()),
        ("late", Late()),
    ]
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        await client.request(
            "createSession",
            {
                "channel": session_uri(1),
                "provider": "scripted",
                "workingDirectories": [folder.as_uri()],
            },
        )
        state = (await client.request("subscribe", {"channel": session_uri(1)}))["snapshot"]
        chat = state["state"]["defaultChat"]
        await client.request("subscribe", {"channel": chat})

        call = _call(await _turn(client, chat, "sh ok go", "t1"))
        assert (call["status"], call["confirmed"]) == ("completed", "setting")
        assert call["_meta"] == {"toolKind": "terminal", "ahp.confirmedBy": "ok is fine"}
        [seen] = broken.seen
        assert (seen.session, seen.chat, seen.provider) == (session_uri(1), chat, "scripted")
        assert (seen.turn_id, seen.call_id, seen.tool_name) == ("t1", "t1.call1", "Bash")
        assert (seen.tool_kind, seen.command) == ("terminal", "ok go")
        assert seen.decided_by == "judge" and seen.reason == "ok is fine"

        turn = await _turn(client, chat, "sh no go", "t2")
        call = _call(turn)
        assert (call["status"], call["reason"]) == ("cancelled", "denied")
        assert call["reasonMessage"] == "no is never fine"
        # The agent hears why, as it would hear a person's words.
        assert any(p.get("content") == "told: no is never fine" for p in turn["responseParts"])

        # Judge says nothing: the next plugin's first word stands.
        call = _call(await _turn(client, chat, "sh maybe", "t3"))
        assert (call["status"], call["reasonMessage"]) == ("cancelled", "late")

        # A subagent's shell command is offered too, from its own chat.
        await _turn(client, chat, "sub ok sub", "t4")
        child = broken.seen[-1]
        assert child.chat != chat and child.session == session_uri(1)
        assert child.command == "ok sub" and child.approved is True


def test_the_command_is_read_from_a_terminal_tools_input() -> None:
    assert command_of("terminal", '{"command": "ls -la"}') == "ls -la"
    assert command_of("terminal", '{"command": ["git", "commit", "-m", "a b"]}') == (
        "git commit -m 'a b'"
    )
    assert command_of("terminal", "make test") == "make test"
    assert command_of("terminal", '{"path": "x"}') is None
    assert command_of("read", '{"command": "ls"}') is None
    assert command_of(None, '{"command": "ls"}') is None


async def test_a_reopened_session_says_who_decided_as_the_live_one_did(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    the_script = script(Rule(prefix="sh ", steps=[SHELL, Say("${result}")]))

    def plugins() -> list[tuple[str, object]]:
        backend = ScriptedBackend(tmp_path / "scripted", the_script)
        return [("scripted", ScriptedPlugin(backend)), ("judge", Judge())]

    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")
    async with running_host(plugins(), settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        await client.request(
            "createSession",
            {
                "channel": session_uri(1),
                "provider": "scripted",
                "workingDirectories": [folder.as_uri()],
            },
        )
        state = (await client.request("subscribe", {"channel": session_uri(1)}))["snapshot"]
        chat = state["state"]["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        await _turn(client, chat, "sh ok go", "t1")
        await _turn(client, chat, "sh no go", "t2")

    async with running_host(plugins(), settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        await client.request("subscribe", {"channel": session_uri(1)})
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        approved, denied = (_call(turn) for turn in state["turns"])
        assert (approved["status"], approved["confirmed"]) == ("completed", "setting")
        assert (denied["status"], denied["reasonMessage"]) == ("cancelled", "no is never fine")
