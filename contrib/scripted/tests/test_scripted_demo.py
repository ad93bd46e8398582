"""The demo agent a newcomer meets, and the plugin that offers it."""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from scripted_harness import Chat, chat_start, fixed_clock

import ahp_scripted.plugin
from ahp_scripted import ScriptedBackend, demo_script
from ahp_scripted.demo import DEMO_DESCRIPTION, DEMO_NAME, DEMO_SOURCE, demo_text
from ahp_scripted.loader import loads_script
from ahp_scripted.script import ScriptError
from ahpcore.host import Host, HostSettings
from ahpcore.plugins import PluginManager, Selection
from ahpcore.ports.backend import Approval, InputAnswer

pytestmark = pytest.mark.anyio


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    plugins = PluginManager(plugins=[("scripted", ahp_scripted.plugin)], entry_points=False)
    started = await Host(plugins, HostSettings(state_dir=tmp_path)).start()
    yield started
    await started.aclose()


async def demo_chat(host: Host, **kwargs: object) -> Chat:
    scripted = host.backends["scripted"]
    assert isinstance(scripted, ScriptedBackend)
    scripted.clock = fixed_clock
    return Chat(await scripted.start(chat_start()), **kwargs)  # type: ignore[arg-type]


async def test_the_plugin_registers_the_demo_with_its_state_under_the_host(
    host: Host, tmp_path: Path
) -> None:
    scripted = host.backends["scripted"]
    assert isinstance(scripted, ScriptedBackend)
    assert scripted.store.directory == tmp_path / "scripted"
    agents = host.engine_or_fail.root.state["agents"]
    assert [agent["displayName"] for agent in agents] == ["Demo agent"]
    chat = await demo_chat(host)
    await chat.turn("hi")
    assert (tmp_path / "scripted" / "conv-1.jsonl").exists()


async def test_help_explains_itself_and_lists_the_hosts_commands(host: Host) -> None:
    chat = await demo_chat(host)
    await chat.turn("Help")
    said = chat.text()
    assert said.startswith("Hi! I'm the **demo agent**")
    for command in ("echo <text>", "think", "ask", "slow"):
        assert f"`{command}`" in said
    # Read from the host itself: its methods and its plugins.
    assert "`listSessions`" in said and "`subscribe`" in said
    assert "`scripted`" in said
    assert "${" not in said


async def test_anything_else_gets_help_too(host: Host) -> None:
    chat = await demo_chat(host)
    await chat.turn("what is this?")
    assert chat.text().startswith("I'm only a scripted demo, so I don't know what to do with")
    assert "“what is this?”" in chat.text()
    assert "`echo <text>`" in chat.text()


async def test_echo_asks_before_it_echoes(host: Host) -> None:
    chat = await demo_chat(host, approvals=[Approval(True)])
    await chat.turn("echo hello there")
    [call] = chat.tool_calls()
    assert (call["toolName"], call["displayName"], call["status"]) == ("echo", "Echo", "completed")
    assert call["confirmed"] == "user-action"
    assert call["invocationMessage"] == "Echo “hello there”"
    assert call["pastTenseMessage"] == "Echoed “hello there”"
    assert chat.parts()[-1]["content"] == "hello there"


async def test_a_denied_echo_says_so(host: Host) -> None:
    chat = await demo_chat(host, approvals=[Approval(False, reason="denied")])
    await chat.turn("echo secret")
    assert chat.tool_calls()[0]["status"] == "cancelled"
    assert chat.parts()[-1]["content"] == "Okay, I won't echo that."


async def test_echo_without_text_says_how(host: Host) -> None:
    chat = await demo_chat(host)
    await chat.turn("echo")
    assert chat.text() == "Tell me what to echo, like `echo hello`."


async def test_think_shows_reasoning(host: Host) -> None:
    chat = await demo_chat(host)
    await chat.turn("think")
    assert [p["kind"] for p in chat.parts()] == ["reasoning", "markdown"]


async def test_ask_uses_the_answer(host: Host) -> None:
    value = {"state": "submitted", "value": {"kind": "text", "value": "Ada"}}
    chat = await demo_chat(host, answers=[InputAnswer("accept", {"name": value})])
    await chat.turn("ask")
    assert chat.parts()[0]["kind"] == "inputRequest"
    assert chat.text() == "Nice to meet you, Ada!"


async def test_slow_can_be_cancelled(host: Host) -> None:
    chat = await demo_chat(host)
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat.turn, "slow")
        with anyio.fail_after(5):
            while len(chat.of_type("chat/delta")) < 1:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert chat.last_turn["state"] == "cancelled"
    assert chat.text().startswith("One, two")
    assert not chat.text().endswith("Done!")


def test_the_demo_script_is_valid_and_has_a_default() -> None:
    script = demo_script()
    assert script.default is not None
    assert script.name == "Demo agent"
    # Start-up skips the schema check of the demo's questions; this is where it runs.
    checked = loads_script(demo_text(), format="yaml", source=DEMO_SOURCE)
    assert checked == script


def test_the_demo_is_listed_before_it_is_read_and_the_same_after(tmp_path: Path) -> None:
    backend = ScriptedBackend(tmp_path)
    before = backend.agents()
    assert backend._script is None  # listing the agent did not parse the demo
    assert before[0]["displayName"] == demo_script().name == DEMO_NAME
    assert before[0]["description"] == demo_script().description == DEMO_DESCRIPTION
    assert backend.script == demo_script()  # read on first use
    assert backend.agents() == before


def test_a_question_shape_is_checked_unless_told_otherwise() -> None:
    text = "default: [{ask: [{id: q, kind: text, title: T, bogus: 1}]}]"
    with pytest.raises(ScriptError, match="bogus"):
        loads_script(text, format="yaml")
    assert loads_script(text, format="yaml", check_shapes=False).default is not None


def test_the_entry_point_is_installed() -> None:
    [entry] = [e for e in importlib.metadata.entry_points(group="ahp") if e.name == "scripted"]
    assert entry.value == "ahp_scripted.plugin"
    assert entry.load() is ahp_scripted.plugin


async def test_a_host_finds_it_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "mine.yaml"
    script.write_text("name: Mine\ndefault: [{say: mine}]\n")
    monkeypatch.setenv("AHP_SCRIPTED_SCRIPT", str(script))
    plugins = PluginManager(selection=Selection(allow={"scripted"}))
    host = await Host(plugins, HostSettings(state_dir=tmp_path)).start()
    try:
        assert "scripted" in plugins.names()
        scripted = host.backends["scripted"]
        assert [a["displayName"] for a in scripted.agents()] == ["Mine"]
    finally:
        await host.aclose()


async def test_a_newcomers_demo_session_over_a_real_host_survives_a_restart(
    tmp_path: Path,
) -> None:
    """The whole path: ahp serve with only this plugin, a client, a restart."""
    from ahpcore.testing import running_host

    uri = "scripted:/00000000-0000-4000-8000-000000000001"
    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path)
    plugins = [("scripted", ahp_scripted.plugin)]

    def ended(frame: dict[str, object]) -> bool:
        params = frame.get("params")
        action = params.get("action") if isinstance(params, dict) else None
        return isinstance(action, dict) and action.get("type") == "chat/turnComplete"

    async with running_host(plugins, settings=settings) as running:
        client = await running.connect("newcomer")
        await client.initialize()
        await client.request("createSession", {"channel": uri, "provider": "scripted"})
        session = await client.request("subscribe", {"channel": uri})
        chat = session["snapshot"]["state"]["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        started = {
            "type": "chat/turnStarted",
            "turnId": "t1",
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": "echo hi there", "origin": {"kind": "user"}},
        }
        await client.answer_to(await client.dispatch(chat, started))
        ready = await client.recv_until(
            lambda f: (
                isinstance(f.get("params"), dict)
                and f["params"].get("action", {}).get("type") == "chat/toolCallReady"
            )
        )
        call = ready["params"]["action"]["toolCallId"]
        confirm = {
            "type": "chat/toolCallConfirmed",
            "turnId": "t1",
            "toolCallId": call,
            "approved": True,
            "confirmed": "user-action",
        }
        await client.answer_to(await client.dispatch(chat, confirm))
        await client.recv_until(ended)

    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path)
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect("newcomer")
        await client.initialize()
        [item] = (await client.request("listSessions"))["items"]
        assert item["resource"] == uri
        session = await client.request("subscribe", {"channel": uri})
        chat = session["snapshot"]["state"]["defaultChat"]
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        [turn] = state["turns"]
        assert turn["state"] == "complete"
        parts = turn["responseParts"]
        assert parts[1]["toolCall"]["status"] == "completed"
        assert parts[-1]["content"] == "hi there"
