"""``ahp_session_rows``: plugins add to listSessions rows, and a failing one costs only itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ahp_scripted import ScriptedBackend
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.testing import running_host

from .conftest import ScriptedPlugin, script, session_uri

pytestmark = pytest.mark.anyio


class Tagging:
    """Marks every row with the folder it names, as a row-decorating plugin would."""

    def __init__(self) -> None:
        self.pages: list[int] = []

    @hookimpl
    def ahp_session_rows(self, rows: list[dict[str, Any]]) -> None:
        self.pages.append(len(rows))
        for row in rows:
            folders = row.get("workingDirectories") or ["none"]
            row["_meta"] = {**(row.get("_meta") or {}), "test.folder": folders[0]}


class Broken:
    @hookimpl
    def ahp_session_rows(self, host: Any, rows: list[dict[str, Any]]) -> None:
        raise RuntimeError("this plugin is broken")


async def test_plugins_add_to_rows_and_a_broken_one_does_not_stop_the_list(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    backend = ScriptedBackend(tmp_path / "scripted", script())
    tagging = Tagging()
    plugins = [("scripted", ScriptedPlugin(backend)), ("tagging", tagging)]
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        for n in (1, 2):
            await client.request(
                "createSession",
                {
                    "channel": session_uri(n),
                    "provider": "scripted",
                    "workingDirectories": [folder.as_uri()],
                },
            )
        first = await client.request("listSessions", {"limit": 1})
        assert tagging.pages == [1]
        assert first["items"][0]["_meta"]["test.folder"] == folder.as_uri()
        rest = await client.request("listSessions", {"limit": 1, "cursor": first["nextCursor"]})
        assert rest["items"][0]["_meta"]["test.folder"] == folder.as_uri()

    broken = [("scripted", ScriptedPlugin(backend)), ("broken", Broken())]
    async with running_host(broken, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        listed = await client.request("listSessions", {})
        assert {row["resource"] for row in listed["items"]} == {session_uri(1), session_uri(2)}
        # The host runs on: the next request is answered too.
        assert len((await client.request("listSessions", {}))["items"]) == 2
