"""The backend over a real host and a real WebSocket client (``ahpcore.testing``).

Every frame the test client receives is checked against the protocol's schema,
and the actions it received are replayed through the reducers when the host
shuts down, so a test passes only if what the host sent is valid and coherent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from ahpcore.host import HostSettings
from ahpcore.testing import BackendUnderTest, backend_checks, running_host

from {{ cookiecutter.__package }} import PROVIDER
from {{ cookiecutter.__package }} import plugin as this_plugin

pytestmark = pytest.mark.anyio
SESSION = f"{PROVIDER}:/00000000-0000-4000-8000-000000000001"
PLUGINS = [(PROVIDER, this_plugin)]


def host_with_this_backend(state_dir: Any) -> Any:
    settings = HostSettings(sessions="file", port=0, state_dir=state_dir)
    return running_host(PLUGINS, settings=settings)


#: What the conformance suite needs to know of this backend: it answers any message.
THIS_BACKEND = BackendUnderTest(provider=PROVIDER, host=host_with_this_backend, prompt="hello")


@backend_checks()
async def test_the_backend_conformance_suite(check: Any, tmp_path: Any) -> None:
    """The checks every backend passes (ahpcore.testing): turns, dispose, reopen, refusals."""
    await check(THIS_BACKEND, tmp_path)


async def test_ahp_check_finds_no_fault_in_a_host_with_this_backend(tmp_path: Any) -> None:
    """``ahp check``, the conformance kit any AHP host can be run against, from Python."""
    from ahpcore.check import Options, run_checks

    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path)
    token = "template-check-token-3b9e"
    async with running_host(PLUGINS, settings=settings, token=token) as running:
        options = Options(url=running.url, token=token, agent=PROVIDER, turn_timeout=30.0)
        results = await run_checks(options)
    assert {r.name: r.detail for r in results if r.status == "fail"} == {}
    assert any(r.name == "agent.turn" and r.status == "pass" for r in results)


def action_of(frame: dict[str, Any]) -> dict[str, Any]:
    params = frame.get("params")
    action = params.get("action") if isinstance(params, dict) else None
    return action if isinstance(action, dict) and "rejectionReason" not in params else {}


def is_action(kind: str):
    return lambda frame: action_of(frame).get("type") == kind


async def run_turn(client: Any, chat: str, text: str, *, approve: bool) -> None:
    started = {
        "type": "chat/turnStarted",
        "turnId": "t1",
        "startedAt": "2026-01-01T00:00:00.000Z",
        "message": {"text": text, "origin": {"kind": "user"}},
    }
    await client.answer_to(await client.dispatch(chat, started))
    ready = await client.recv_until(is_action("chat/toolCallReady"))
    decision: dict[str, Any] = {
        "type": "chat/toolCallConfirmed",
        "turnId": "t1",
        "toolCallId": action_of(ready)["toolCallId"],
        "approved": approve,
    }
    decision.update({"confirmed": "user-action"} if approve else {"reason": "denied"})
    await client.answer_to(await client.dispatch(chat, decision))
    await client.recv_until(is_action("chat/turnComplete"))


async def open_session(client: Any) -> str:
    session = await client.request("subscribe", {"channel": SESSION})
    chat = session["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return chat


async def test_a_turn_streams_asks_approval_and_is_reopened_after_a_restart(ahp_host):
    settings = HostSettings(sessions="file", port=0)
    async with ahp_host(PLUGINS, settings=settings) as running:
        client = await running.connect()
        result = await client.initialize()
        [agent] = result["snapshots"][0]["state"]["agents"]
        assert agent["provider"] == PROVIDER
        await client.request("createSession", {"channel": SESSION, "provider": PROVIDER})
        chat = await open_session(client)
        await run_turn(client, chat, "hello there", approve=True)
        kinds = [action_of(frame).get("type") for frame in client.frames]
        # Streamed: the reply arrived as a part and then deltas, before the tool call.
        assert kinds.count("chat/delta") >= 2
        assert kinds.index("chat/delta") < kinds.index("chat/toolCallStart")

    settings = HostSettings(sessions="file", port=0)
    async with ahp_host(PLUGINS, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        [item] = (await client.request("listSessions"))["items"]
        assert item["resource"] == SESSION
        assert item["title"] == "hello there"
        chat = await open_session(client)
        state = client.snapshots[chat][1]
        [turn] = state["turns"]
        assert turn["state"] == "complete"
        parts = turn["responseParts"]
        assert parts[0]["content"] == "You said: hello there "
        call = parts[1]["toolCall"]
        assert (call["toolName"], call["status"], call["confirmed"]) == (
            "shout",
            "completed",
            "user-action",
        )
        assert parts[-1]["content"] == "\n\nHELLO THERE"


async def test_a_denied_call_is_not_run(ahp_host):
    async with ahp_host(PLUGINS) as running:
        client = await running.connect()
        await client.initialize()
        await client.request("createSession", {"channel": SESSION, "provider": PROVIDER})
        chat = await open_session(client)
        await run_turn(client, chat, "psst", approve=False)
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        parts = state["turns"][0]["responseParts"]
        assert parts[1]["toolCall"]["status"] == "cancelled"
        assert parts[-1]["content"].endswith("Fine, I'll keep my voice down.")


async def test_a_turn_cancelled_while_it_waits_is_kept_as_cancelled(ahp_host):
    settings = HostSettings(sessions="file", port=0)
    async with ahp_host(PLUGINS, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        await client.request("createSession", {"channel": SESSION, "provider": PROVIDER})
        chat = await open_session(client)
        started = {
            "type": "chat/turnStarted",
            "turnId": "t1",
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": "never mind", "origin": {"kind": "user"}},
        }
        await client.answer_to(await client.dispatch(chat, started))
        await client.recv_until(is_action("chat/toolCallReady"))
        cancel = {"type": "chat/turnCancelled", "turnId": "t1", "duration": 0}
        answer = await client.answer_to(await client.dispatch(chat, cancel))
        assert "rejectionReason" not in answer

    settings = HostSettings(sessions="file", port=0)
    async with ahp_host(PLUGINS, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        chat = await open_session(client)
        [turn] = client.snapshots[chat][1]["turns"]
        assert turn["state"] == "cancelled"
        assert turn["responseParts"][1]["toolCall"]["status"] == "cancelled"


def test_ahp_plugins_lists_this_plugin():
    env = {k: v for k, v in os.environ.items() if k not in ("AHP_PLUGINS", "AHP_DISABLE_PLUGINS")}
    shown = subprocess.run(
        [sys.executable, "-m", "ahpcore.cli", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    listed = json.loads(shown.stdout)
    [mine] = [p for p in listed["plugins"] if p["name"] == PROVIDER]
    assert mine["distribution"] == "{{ cookiecutter.__distribution }}"
    assert "ahp_backends" in mine["hooks"]
    assert not listed["failed"]
