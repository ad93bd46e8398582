"""What a session may be given as a working directory: a folder of this machine, named
plainly (no encoded dot segments, no other host or scheme), and not the machine itself.

A session's folders are the fence of what its clients reach through the host's file
services, so each refusal here is a reach the fence never grants.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from ahp_git.worktrees import GitWorktrees
from ahp_scripted import ScriptedBackend
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.protocol.errors import INVALID_PARAMS, PERMISSION_DENIED
from ahpcore.testing import AhpTestClient, running_host
from tests.reliability.conftest import live_session
from tests.sessions.conftest import ScriptedPlugin, open_session, script, session_uri

pytestmark = pytest.mark.anyio


async def create(client: AhpTestClient, n: int, directories: list[str]) -> dict[str, Any]:
    return await client.request_frame(
        "createSession",
        {"channel": session_uri(n), "provider": "scripted", "workingDirectories": directories},
    )


@pytest.mark.parametrize(
    ("directory", "code", "why"),
    [
        ("file:///tmp/%2e%2e/etc", INVALID_PARAMS, "'..'"),
        ("file:///tmp/%2E%2E/etc", INVALID_PARAMS, "'..'"),
        ("file:///tmp/x/%2e/y", INVALID_PARAMS, "'.'"),
        ("file:///tmp/a%2F..%2Fb", INVALID_PARAMS, "'..'"),
        ("file:///tmp//etc", INVALID_PARAMS, "empty segment"),
        ("file:///tmp/a%00b", INVALID_PARAMS, "NUL"),
        ("file:///tmp/x?query", INVALID_PARAMS, "query"),
        ("file:///tmp/x#top", INVALID_PARAMS, "fragment"),
        ("file://", INVALID_PARAMS, "names no folder"),
        ("file:/tmp/x", INVALID_PARAMS, "file:///"),
        ("/tmp/plain/path", INVALID_PARAMS, "not a URI"),
        ("http://example.com/repo", INVALID_PARAMS, "not a file: URI"),
        ("vscode-remote://ssh-remote+box/home/me", INVALID_PARAMS, "not a file: URI"),
        ("c:/Users/me", INVALID_PARAMS, "not a file: URI"),
        ("file://otherhost/home/me", PERMISSION_DENIED, "another machine (otherhost)"),
        ("file://127.0.0.1/home/me", PERMISSION_DENIED, "another machine (127.0.0.1)"),
    ],
)
async def test_create_session_refuses_folders_that_are_not_plain_local_paths(
    session_host, directory, code, why
):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        frame = await create(client, 1, [directory])
        error = frame["error"]
        assert error["code"] == code, error
        assert error["message"].startswith(f"params.workingDirectories[0]: {directory!r}"), error
        assert why in error["message"], error
        assert live_session(running.host, session_uri(1)) is None
        # The host goes on, and a plain folder is taken.
        await open_session(client, 2, workingDirectories=["file:///work/repo"])


async def test_plain_spellings_of_a_local_folder_are_taken(session_host, tmp_path: Path):
    folder = tmp_path / "a b%c"
    folder.mkdir()
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        named = [
            folder.as_uri(),  # file:///…/a%20b%25c
            "file://localhost" + folder.as_uri()[len("file://") :],
            folder.as_uri() + "/",
        ]
        for n, directory in enumerate(named, start=1):
            frame = await create(client, n, [directory])
            assert "error" not in frame, frame
            assert live_session(running.host, session_uri(n)) is not None


@pytest.mark.parametrize(
    "directory",
    [
        "file:///",
        "file:///etc",
        "file:///etc/",
        "file:///usr",
        "file:///var",
        "file:///proc/self",
        "file:///home",
        "file:///dev/pts",
    ],
)
async def test_create_session_refuses_the_machine_and_its_system_folders(
    session_host, directory, monkeypatch
):
    monkeypatch.delenv("AHP_FILES_REACH", raising=False)
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        frame = await create(client, 1, [directory])
        error = frame["error"]
        assert error["code"] == PERMISSION_DENIED, error
        assert error["message"].startswith(f"params.workingDirectories[0]: {directory!r}")
        assert "system folder" in error["message"]
        assert "AHP_FILES_REACH=machine" in error["message"]
        assert live_session(running.host, session_uri(1)) is None


async def test_a_link_to_a_system_folder_is_refused_like_the_folder(
    session_host, tmp_path: Path, monkeypatch
):
    monkeypatch.delenv("AHP_FILES_REACH", raising=False)
    to_root = tmp_path / "link-to-root"
    to_root.symlink_to("/")
    to_etc = tmp_path / "link-to-etc"
    to_etc.symlink_to("/etc")
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        for n, link in enumerate((to_root, to_etc), start=1):
            frame = await create(client, n, [link.as_uri()])
            error = frame["error"]
            assert error["code"] == PERMISSION_DENIED, error
            assert "leads to a system folder" in error["message"], error
            assert live_session(running.host, session_uri(n)) is None


async def test_a_folder_holding_the_users_home_is_refused_and_the_home_is_taken(
    session_host, tmp_path: Path, monkeypatch
):
    monkeypatch.delenv("AHP_FILES_REACH", raising=False)
    home = tmp_path / "people" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        frame = await create(client, 1, [(tmp_path / "people").as_uri()])
        assert frame["error"]["code"] == PERMISSION_DENIED, frame
        assert "system folder" in frame["error"]["message"]
        assert "error" not in await create(client, 2, [home.as_uri()])


async def test_machine_reach_allows_system_folders(session_host, monkeypatch):
    monkeypatch.setenv("AHP_FILES_REACH", "machine")
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        frame = await create(client, 1, ["file:///"])
        assert "error" not in frame, frame
        # Machine reach widens where a session may work, not how a folder may be spelled.
        frame = await create(client, 2, ["file:///tmp/%2e%2e/etc"])
        assert frame["error"]["code"] == INVALID_PARAMS


async def test_a_session_cannot_take_such_folders_later(session_host, tmp_path: Path, monkeypatch):
    monkeypatch.delenv("AHP_FILES_REACH", raising=False)
    to_root = tmp_path / "link-to-root"
    to_root.symlink_to("/")
    start = "file:///work/repo"
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, _ = await open_session(client, workingDirectories=[start])
        refused = {
            "file:///": "system folder",
            to_root.as_uri(): "leads to a system folder",
            "file:///work/%2e%2e/etc": "'..'",
            "file://otherhost/srv": "another machine",
            "http://example.com/x": "not a file: URI",
        }
        for directory, why in refused.items():
            for action in (
                {"type": "session/workingDirectorySet", "directory": directory},
                {
                    "type": "session/workingDirectoryReplaced",
                    "directory": start,
                    "replacement": directory,
                },
            ):
                seq = await client.dispatch(session, action)
                reason = (await client.answer_to(seq)).get("rejectionReason", "")
                assert why in reason, (action, reason)
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state["workingDirectories"] == [start]
        assert live_session(running.host, session).working_directories == (start,)
        # createChat names only the session's folders, and in a checked spelling.
        frame = await client.request_frame(
            "createChat",
            {"channel": session, "chat": "ahp-chat:/side", "workingDirectories": ["file:///"]},
        )
        assert frame["error"]["code"] in (INVALID_PARAMS, PERMISSION_DENIED)
        assert "ahp-chat:/side" not in running.host.engine_or_fail.channels


class Worktrees:
    """The git plugin's worktrees, gathered under one root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @hookimpl
    def ahp_worktrees(self, host: Any) -> GitWorktrees:
        return GitWorktrees(root=str(self.root))


async def test_a_worktree_is_never_made_from_a_refused_folder(tmp_path: Path):
    repo = tmp_path / "repos" / "repo"
    repo.mkdir(parents=True)
    for args in (("init", "-q"), ("commit", "-q", "--allow-empty", "-m", "start")):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True
        )
    (tmp_path / "repos" / "other").mkdir()
    sneaked = (tmp_path / "repos" / "other").as_uri() + "/%2e%2e/repo"
    trees = tmp_path / "trees"
    backend = ScriptedBackend(tmp_path / "scripted", script())
    settings = HostSettings(port=0, state_dir=tmp_path / "state")
    plugins = [("scripted", ScriptedPlugin(backend)), ("worktrees", Worktrees(trees))]
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect("c1")
        await client.initialize()
        frame = await client.request_frame(
            "createSession",
            {
                "channel": session_uri(1),
                "provider": "scripted",
                "workingDirectories": [sneaked],
                "config": {"isolation": "worktree"},
            },
        )
        assert frame["error"]["code"] == INVALID_PARAMS, frame
        assert "'..'" in frame["error"]["message"]
        assert not trees.exists()
        # The same repository, named plainly, gets its tree.
        frame = await client.request_frame(
            "createSession",
            {
                "channel": session_uri(2),
                "provider": "scripted",
                "workingDirectories": [repo.as_uri()],
                "config": {"isolation": "worktree"},
            },
        )
        assert "error" not in frame, frame
        assert trees.exists()
