"""pi's session files as the catalogue: reopened after a restart, and sessions pi ran alone."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from pi_support import (
    PROVIDER,
    AnthropicServer,
    ToolUse,
    backend_of,
    chat_state,
    connect_and_open,
    find_pi,
    parts,
    pi_host,
    reply,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def test_a_session_reopens_after_a_restart_from_pis_own_file(
    pi: Path, api: AnthropicServer, tmp_path: Path, workdir: Path
):
    api.script(
        reply("First answer."),
        reply(ToolUse("read", {"path": "notes.txt"})),
        reply("Read it."),
    )
    (workdir / "notes.txt").write_text("a note\n")
    state_dir = tmp_path / "state"
    async with pi_host(state_dir) as running:
        client, session, chat = await connect_and_open(running, workdir)
        for n, text in enumerate(["first thing", "read the notes"], 1):
            await start_turn(client, chat, text, f"turn-{n}")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        live = await chat_state(client, chat)
        link = backend_of(running).records.links[session.split(":/")[1]]
    # The conversation is pi's own file, where pi keeps its sessions.
    assert Path(link.file).is_relative_to(pi / "sessions")
    kept = state_dir / "pi" / "links.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600

    api.script(reply("Third answer."))
    async with pi_host(state_dir) as running:
        client = await running.connect("c2")
        await client.initialize()
        listed = await client.request("listSessions", {})
        rows = [item for item in listed["items"] if item["resource"] == session]
        assert [row["title"] for row in rows] == ["first thing"]
        await client.request("subscribe", {"channel": session})
        rebuilt = await chat_state(client, chat)
        assert [t["id"] for t in rebuilt["turns"]] == ["turn-1", "turn-2"]
        assert [t["message"]["text"] for t in rebuilt["turns"]] == ["first thing", "read the notes"]
        assert [parts({"turns": [t]}) for t in rebuilt["turns"]] == [
            parts({"turns": [t]}) for t in live["turns"]
        ]
        # The conversation goes on in the same file, pi knowing what was said.
        await start_turn(client, chat, "third thing", "turn-3")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert parts(await chat_state(client, chat))[-1]["content"] == "Third answer."
        sent = api.main_requests()[-1].body["messages"]
        said = str(sent)
        assert "first thing" in said and "a note" in said and "third thing" in said


async def test_a_session_pi_ran_on_its_own_is_listed_and_opens(
    pi: Path, api: AnthropicServer, tmp_path: Path, workdir: Path
):
    command, _ = find_pi()
    assert command is not None
    api.script(reply("Answered in a terminal."))
    # pi in print mode, as a person would run it, writing its session where it keeps them.
    ran = subprocess.run(
        [
            *command,
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "-p",
            "from the shell",
        ],
        cwd=workdir,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    [file] = list((pi / "sessions").glob("*/*.jsonl"))
    pi_id = file.stem.split("_", 1)[1]
    async with pi_host(tmp_path / "state") as running:
        client = await running.connect("c1")
        await client.initialize()
        listed = await client.request("listSessions", {})
        [row] = [item for item in listed["items"] if item["resource"].endswith(pi_id)]
        assert row["title"] == "from the shell"
        assert row["workingDirectories"] == [workdir.resolve().as_uri()] or row.get(
            "workingDirectories"
        ) == [workdir.as_uri()]
        session = row["resource"]
        snapshot = await client.request("subscribe", {"channel": session})
        chat = snapshot["snapshot"]["state"]["defaultChat"]
        state = await chat_state(client, chat)
        [turn] = state["turns"]
        assert turn["message"]["text"] == "from the shell"
        assert parts(state)[-1]["content"] == "Answered in a terminal."


def test_without_pi_the_plugin_registers_nothing_and_loads_nothing(tmp_path: Path):
    code = (
        "import sys\n"
        "import ahp_pi.plugin as p\n"
        "found = []\n"
        "class Host:\n"
        "    class settings: state_dir = None\n"
        "    config_table = staticmethod(lambda name: None)\n"
        "p.ahp_backends(host=Host, register=found.append)\n"
        "assert found == [], found\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('ahp_pi'))\n"
        "assert loaded == ['ahp_pi', 'ahp_pi.command', 'ahp_pi.plugin'], loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "AHP_PI_COMMAND"}
    env["PATH"] = str(tmp_path)  # no pi here
    ran = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr


async def test_a_pi_that_cannot_start_is_listed_with_why_and_refused(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AHP_PI_COMMAND", str(tmp_path / "no-such-pi"))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "pi-agent"))
    async with pi_host(tmp_path / "state") as running:
        client = await running.connect("c1")
        await client.initialize()
        backend = backend_of(running)
        with anyio.fail_after(20):
            while not backend.error:
                await anyio.sleep(0.05)
        assert backend.error and "no-such-pi" in backend.error
        [agent] = [a for a in backend.agents() if a["provider"] == PROVIDER]
        assert "Not available" in agent["description"]
        frame = await client.request_frame(
            "createSession",
            {
                "channel": f"{PROVIDER}:/00000000-0000-4000-8000-000000000009",
                "provider": PROVIDER,
                "workingDirectories": [workdir.as_uri()],
            },
        )
        assert "error" in frame and "no-such-pi" in frame["error"]["message"]


async def test_models_are_pis_and_a_disposed_session_takes_its_file_along(
    pi: Path, api: AnthropicServer, tmp_path: Path, workdir: Path
):
    api.script(reply("Short answer."))
    async with pi_host(tmp_path / "state") as running:
        client, session, chat = await connect_and_open(running, workdir)
        backend = backend_of(running)
        with anyio.fail_after(30):
            while not backend.records.learned.get("models"):
                await anyio.sleep(0.05)
        root = (await client.request("subscribe", {"channel": "ahp-root://"}))["snapshot"]
        [agent] = [a for a in root["state"]["agents"] if a["provider"] == PROVIDER]
        # What pi offers, the one it runs on first.
        assert agent["models"][0]["id"] == "anthropic/claude-sonnet-4-5"
        await start_turn(client, chat, "quick one", "turn-1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state["_meta"]["ahp.model"] == "anthropic/claude-sonnet-4-5"
        file = Path(backend.records.links[session.split(":/")[1]].file)
        assert file.exists()
        await client.request("disposeSession", {"channel": session})
        assert not file.exists()
        listed = await client.request("listSessions", {})
        assert [item for item in listed["items"] if item["resource"] == session] == []
