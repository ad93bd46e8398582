"""vscode/getAgentHostSessionStateFile: the backend's own record of a session, per chat."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from ahp_scripted import Script, ScriptedBackend
from ahp_vscode.plugin import STATE_FILE, STATE_FILE_CHAT_FLAG, VSCodePlugin
from ahpcore.api import path_of_file_uri
from ahpcore.hookspecs import hookimpl
from ahpcore.protocol.errors import INVALID_PARAMS, SESSION_NOT_FOUND
from ahpcore.settings import HostSettings
from ahpcore.testing import AhpTestClient, running_host

pytestmark = pytest.mark.anyio


class Scripted:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(self.backend)


def turn_over(chat: str) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        params = frame.get("params") or {}
        return (
            frame.get("method") == "action"
            and params.get("channel") == chat
            and params["action"].get("type") in ("chat/turnComplete", "chat/error")
        )

    return match


async def one_turn(client: AhpTestClient, chat: str) -> None:
    await client.request("subscribe", {"channel": chat})
    await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": str(uuid.uuid4()),
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": "hello", "origin": {"kind": "user"}},
        },
    )
    with anyio.fail_after(20):
        await client.recv_until(turn_over(chat))


async def test_the_scripted_store_file_of_each_chat(tmp_path: Path) -> None:
    store = tmp_path / "scripted"
    backend = ScriptedBackend(store, Script(default=[{"say": "ok"}]))
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    plugins = [("scripted", Scripted(backend)), ("vscode", VSCodePlugin())]
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect()
        result = await client.initialize()
        assert result["_meta"][STATE_FILE_CHAT_FLAG] is True
        session = f"scripted:/{uuid.uuid4()}"
        await client.request("createSession", {"channel": session, "provider": "scripted"})
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        default = state["defaultChat"]
        await one_turn(client, default)
        answer = await client.request(STATE_FILE, {"session": session})
        path = Path(path_of_file_uri(answer["resource"]) or "")
        assert path.is_file() and path.parent == store
        assert "hello" in path.read_text("utf-8")
        # The window opens it with resourceRead, though it lies in no session's folder.
        read = await client.request("resourceRead", {"uri": answer["resource"]})
        assert read["encoding"] == "utf-8" and read["data"] == path.read_text("utf-8")
        # A file beside it that was never handed out is not read through this door.
        beside = store / "other.jsonl"
        beside.write_text("private\n")
        refused = await client.request_frame("resourceRead", {"uri": beside.as_uri()})
        assert "error" in refused and "private" not in str(refused)
        # Naming the default chat is the same as naming none.
        same = await client.request(STATE_FILE, {"session": session, "chat": default})
        assert same == answer

        other = f"ahp-chat:/{uuid.uuid4()}"
        await client.request("createChat", {"channel": session, "chat": other})
        await one_turn(client, other)
        side = await client.request(STATE_FILE, {"session": session, "chat": other})
        side_path = Path(path_of_file_uri(side["resource"]) or "")
        assert side_path.is_file() and side_path.parent == store and side_path != path

        missing = await client.request_frame(STATE_FILE, {"session": "scripted:/nobody"})
        assert missing["error"]["code"] == SESSION_NOT_FOUND
        assert missing["error"]["message"].startswith(STATE_FILE)
        stranger = await client.request_frame(
            STATE_FILE, {"session": session, "chat": "ahp-chat:/nobody-else"}
        )
        assert stranger["error"]["code"] == SESSION_NOT_FOUND
        bad = await client.request_frame(STATE_FILE, {"session": 3})
        assert bad["error"]["code"] == INVALID_PARAMS


async def test_a_backend_that_keeps_nothing_on_disk_answers_no_resource(tmp_path: Path) -> None:
    backend = ScriptedBackend(None, Script(default=[{"say": "ok"}]))
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    plugins = [("scripted", Scripted(backend)), ("vscode", VSCodePlugin())]
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        session = f"scripted:/{uuid.uuid4()}"
        await client.request("createSession", {"channel": session, "provider": "scripted"})
        assert await client.request(STATE_FILE, {"session": session}) == {}


async def test_a_link_in_the_store_is_not_answered(tmp_path: Path) -> None:
    """Whatever the backend names, only a regular file is handed out, never a link."""
    store = tmp_path / "scripted"
    backend = ScriptedBackend(store, Script(default=[{"say": "ok"}]))
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    plugins = [("scripted", Scripted(backend)), ("vscode", VSCodePlugin())]
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        session_id = str(uuid.uuid4())
        session = f"scripted:/{session_id}"
        await client.request("createSession", {"channel": session, "provider": "scripted"})
        secret = tmp_path / "elsewhere.txt"
        secret.write_text("not the backend's")
        kept = backend.store.path(session_id)
        kept.unlink(missing_ok=True)
        kept.symlink_to(secret)
        assert await client.request(STATE_FILE, {"session": session}) == {}
