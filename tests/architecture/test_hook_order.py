"""Hooks run through pluggy: ``tryfirst``/``trylast`` and hookwrappers hold, tracing works,
and the lifecycle moments reach services and plugins alike."""

from __future__ import annotations

import logging
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ahp_scripted import ScriptedBackend
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.lifecycle import SessionCreation
from ahpcore.plugins import PluginManager
from ahpcore.testing import running_host
from tests.sessions.conftest import ScriptedPlugin, script, session_uri

pytestmark = pytest.mark.anyio


class Recorder:
    """Notes each lifecycle moment it is told of, under its own name."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name = name
        self.seen = seen

    @hookimpl
    def ahp_session_created(self, session: str) -> None:
        self.seen.append(f"{self.name} created")

    @hookimpl
    async def ahp_session_disposed(self, session: str, folder: str | None) -> None:
        self.seen.append(f"{self.name} disposed")


class First(Recorder):
    @hookimpl(tryfirst=True)
    def ahp_session_created(self, session: str) -> None:
        self.seen.append(f"{self.name} created")


class Last(Recorder):
    @hookimpl(trylast=True)
    def ahp_session_created(self, session: str) -> None:
        self.seen.append(f"{self.name} created")


class Wrapping:
    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    @hookimpl(wrapper=True)
    def ahp_session_created(self, session: str) -> Generator[None, Any, Any]:
        self.seen.append("wrapper before")
        answer = yield
        self.seen.append("wrapper after")
        return answer


class Isolating:
    """Moves a session into another folder at ``session_creating``, as worktrees do."""

    def __init__(self, elsewhere: Path) -> None:
        self.elsewhere = elsewhere
        self.undone: list[str] = []

    @hookimpl
    def ahp_session_creating(self, creation: SessionCreation) -> None:
        creation.params["workingDirectories"] = [self.elsewhere.as_uri()]

        async def undo() -> None:
            self.undone.append(creation.session)

        creation.undo(undo)


def _settings(tmp_path: Path) -> HostSettings:
    return HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")


async def _create_and_dispose(running: Any, folder: Path, n: int = 1) -> dict[str, Any]:
    client = await running.connect()
    await client.initialize()
    await client.request(
        "createSession",
        {
            "channel": session_uri(n),
            "provider": "scripted",
            "workingDirectories": [folder.as_uri()],
        },
    )
    snapshot = (await client.request("subscribe", {"channel": session_uri(n)}))["snapshot"]
    await client.request("disposeSession", {"channel": session_uri(n)})
    return dict(snapshot["state"])


async def test_tryfirst_and_trylast_order_the_lifecycle_hooks(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    seen: list[str] = []
    backend = ScriptedBackend(tmp_path / "scripted", script())
    # Listed so that load order alone would run them plain, last, first.
    plugins = [
        ("scripted", ScriptedPlugin(backend)),
        ("plain", Recorder("plain", seen)),
        ("last", Last("last", seen)),
        ("first", First("first", seen)),
        ("wrapping", Wrapping(seen)),
    ]
    async with running_host(plugins, settings=_settings(tmp_path)) as running:
        await _create_and_dispose(running, folder)
    created = [entry for entry in seen if "created" in entry]
    assert created == ["first created", "plain created", "last created"]
    # The wrapper wraps each implementation's call, around it.
    assert seen[:3] == ["wrapper before", "first created", "wrapper after"]
    assert [entry for entry in seen if "disposed" in entry] == [
        "plain disposed",
        "last disposed",
        "first disposed",
    ]


async def test_a_plugin_may_move_a_new_session_and_is_told_when_it_is_refused(
    tmp_path: Path,
) -> None:
    folder, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    backend = ScriptedBackend(tmp_path / "scripted", script())
    isolating = Isolating(elsewhere)
    plugins = [("scripted", ScriptedPlugin(backend)), ("isolating", isolating)]
    async with running_host(plugins, settings=_settings(tmp_path)) as running:
        state = await _create_and_dispose(running, folder)
        assert state["workingDirectories"] == [elsewhere.as_uri()]
        assert isolating.undone == []
        client = await running.connect()
        await client.initialize()
        frame = await client.request_frame(
            "createSession",
            {"channel": session_uri(2), "provider": "nobody", "workingDirectories": []},
        )
        assert "error" in frame  # refused before the moment: nothing to undo
        assert isolating.undone == []
        isolating.elsewhere = Path("/")  # a folder no session may have: refused after it
        frame = await client.request_frame(
            "createSession",
            {
                "channel": session_uri(3),
                "provider": "scripted",
                "workingDirectories": [folder.as_uri()],
            },
        )
        assert "error" in frame and "file:///" in frame["error"]["message"]
        assert isolating.undone == [session_uri(3)]


def test_plugin_tracing_logs_each_hook_call(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AHP_TRACE_PLUGINS", "1")
    caplog.set_level(logging.INFO, logger="ahpcore.plugins.trace")
    seen: list[str] = []
    manager = PluginManager(plugins=[("plain", Recorder("plain", seen))], entry_points=False)
    manager.load()
    for impl in manager.implementations("ahp_session_created"):
        impl(session="scripted:/x")
    assert seen == ["plain created"]
    assert any("ahp_session_created" in record.getMessage() for record in caplog.records)
