"""The five detached-worktree methods, on real repositories, over real sockets."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from ahp_git import plugin as git_plugin
from ahp_scripted import Script, ScriptedBackend
from ahp_vscode.plugin import DETACHED_WORKTREES_FLAG, VSCodePlugin
from ahpcore.api import file_uri, path_of_file_uri
from ahpcore.hookspecs import hookimpl
from ahpcore.protocol.errors import INVALID_PARAMS, NOT_FOUND, SESSION_NOT_FOUND
from ahpcore.settings import HostSettings
from ahpcore.testing import AhpTestClient, RunningHost, running_host

pytestmark = pytest.mark.anyio

SESSION = "scripted:/00000000-0000-4000-8000-000000000001"
CREATE = "vscode/createAgentHostDetachedWorktree"
CLAIM = "vscode/claimAgentHostDetachedWorktree"
ARCHIVE = "vscode/setAgentHostDetachedWorktreeArchived"
DELETE = "vscode/deleteAgentHostDetachedWorktree"
RECONCILE = "vscode/reconcileAgentHostDetachedWorktrees"


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test")
    git(root, "config", "user.email", "test@example.com")
    git(root, "config", "commit.gpgsign", "false")
    (root / ".gitignore").write_text(".env\n*.log\n")
    (root / "app.txt").write_text("app\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    (root / ".env").write_text("SECRET=1\n")  # ignored: copied when asked for
    (root / "debug.log").write_text("log\n")  # ignored, not asked for
    (root / "notes.txt").write_text("untracked\n")  # untracked, not ignored: never copied
    (root / ".git/info/exclude").write_text("excluded.cfg\n")
    (root / "excluded.cfg").write_text("x\n")
    return root


class Scripted:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(self.backend)


@asynccontextmanager
async def vscode_host(tmp_path: Path) -> AsyncIterator[RunningHost]:
    backend = ScriptedBackend(tmp_path / "scripted", Script(default=[{"say": "ok"}]))
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    plugins = [("scripted", Scripted(backend)), ("git", git_plugin), ("vscode", VSCodePlugin())]
    async with running_host(plugins, settings=settings) as running:
        yield running


async def draft(client: AhpTestClient, repo: Path, *, isolated: bool = True) -> None:
    config = {"isolation": "worktree", "worktreeIncludeFiles": ".env, excluded.cfg"}
    await client.request(
        "createSession",
        {
            "channel": SESSION,
            "provider": "scripted",
            "workingDirectories": [file_uri(str(repo))],
            **({"config": config} if isolated else {}),
        },
    )


async def error_of(client: AhpTestClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    frame = await client.request_frame(method, params)
    assert "error" in frame, frame
    return dict(frame["error"])


async def test_create_claim_archive_unarchive_delete(tmp_path: Path, repo: Path) -> None:
    async with vscode_host(tmp_path) as running:
        client = await running.connect()
        result = await client.initialize()
        assert result["_meta"][DETACHED_WORKTREES_FLAG] is True
        assert "vscode.agentHost" not in result["_meta"]
        await draft(client, repo)
        made = await client.request(CREATE, {"session": SESSION, "prompt": "Fix the login bug!"})
        assert uuid.UUID(made["handle"])
        tree = Path(path_of_file_uri(made["resource"]) or "")
        assert tree.parent == Path(f"{repo}.worktrees")
        branch = git(tree, "branch", "--show-current")
        assert branch.startswith("agents/fix-the-login-bug-")
        assert git(tree, "rev-parse", "--git-common-dir") == str(repo / ".git")
        assert (tree / "app.txt").read_text() == "app\n"
        assert (tree / ".env").read_text() == "SECRET=1\n"
        assert (tree / "excluded.cfg").exists()  # .git/info/exclude makes it ignored too
        assert not (tree / "notes.txt").exists() and not (tree / "debug.log").exists()

        assert await client.request(CLAIM, {"handle": made["handle"]}) is None
        unknown = await error_of(client, CLAIM, {"handle": str(uuid.uuid4())})
        assert unknown["code"] == NOT_FOUND
        assert "Unknown detached worktree handle" in unknown["message"]
        assert unknown["message"].startswith(CLAIM)

        # Work in the tree: an edit and a new file survive archiving.
        (tree / "app.txt").write_text("changed\n")
        (tree / "new.txt").write_text("new\n")
        assert await client.request(ARCHIVE, {"handle": made["handle"], "archived": True}) is None
        assert not tree.exists()
        assert str(tree) not in git(repo, "worktree", "list")
        assert git(repo, "show", f"{branch}:new.txt") == "new"
        assert await client.request(ARCHIVE, {"handle": made["handle"], "archived": True}) is None

        assert await client.request(ARCHIVE, {"handle": made["handle"], "archived": False}) is None
        assert git(tree, "branch", "--show-current") == branch
        assert (tree / "app.txt").read_text() == "changed\n"
        assert (tree / "new.txt").read_text() == "new\n"
        # Back as the edits they were, not as a commit the user never made.
        assert git(tree, "status", "--porcelain") == "M app.txt\n?? new.txt"

        assert await client.request(DELETE, {"handle": made["handle"]}) is None
        assert not tree.exists()
        assert await client.request(DELETE, {"handle": made["handle"]}) is None  # idempotent
        # The work is on the branch, which stays.
        assert git(repo, "show", f"{branch}:app.txt") == "changed"
        gone = await error_of(client, CLAIM, {"handle": made["handle"]})
        assert "Unknown detached worktree handle" in gone["message"]


async def test_a_tree_with_no_work_goes_with_its_branch(tmp_path: Path, repo: Path) -> None:
    async with vscode_host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        await draft(client, repo)
        made = await client.request(CREATE, {"session": SESSION, "prompt": ""})
        tree = Path(path_of_file_uri(made["resource"]) or "")
        branch = git(tree, "branch", "--show-current")
        assert branch.startswith("agents/session-")
        # Removed behind the host's back: delete still works.
        subprocess.run(["rm", "-rf", str(tree)], check=True)
        assert await client.request(DELETE, {"handle": made["handle"]}) is None
        assert git(repo, "branch", "--list", branch) == ""
        assert str(tree) not in git(repo, "worktree", "list")


async def test_handles_survive_a_restart_in_an_owner_only_file(tmp_path: Path, repo: Path) -> None:
    async with vscode_host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        await draft(client, repo)
        made = await client.request(CREATE, {"session": SESSION, "prompt": "keep me"})
    kept = tmp_path / "state" / "vscode" / "worktrees.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert made["handle"] in json.loads(kept.read_text())["handles"]
    async with vscode_host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        assert await client.request(CLAIM, {"handle": made["handle"]}) is None
        assert await client.request(ARCHIVE, {"handle": made["handle"], "archived": True}) is None
    async with vscode_host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        assert await client.request(ARCHIVE, {"handle": made["handle"], "archived": False}) is None
        tree = Path(path_of_file_uri(made["resource"]) or "")
        assert tree.is_dir()
        assert await client.request(DELETE, {"handle": made["handle"]}) is None


async def test_reconcile_keeps_unlisted_handles_claimable(tmp_path: Path, repo: Path) -> None:
    async with vscode_host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        await draft(client, repo)
        listed = await client.request(CREATE, {"session": SESSION, "prompt": "a"})
        unlisted = await client.request(CREATE, {"session": SESSION, "prompt": "b"})
        scope = file_uri(str(repo))
        params = {"scope": scope, "activeHandles": [listed["handle"]]}
        assert await client.request(RECONCILE, params) is None
        assert await client.request(CLAIM, {"handle": unlisted["handle"]}) is None
        assert Path(path_of_file_uri(unlisted["resource"]) or "").is_dir()
        bad = await error_of(client, RECONCILE, {"scope": scope, "activeHandles": "x"})
        assert bad["code"] == INVALID_PARAMS and bad["message"].startswith(RECONCILE)


async def test_refusals_name_the_method_and_what_is_missing(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    async with vscode_host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        missing = await error_of(client, CREATE, {"session": SESSION, "prompt": "x"})
        assert missing["code"] == SESSION_NOT_FOUND and missing["message"].startswith(CREATE)
        await draft(client, plain, isolated=False)
        no_repo = await error_of(client, CREATE, {"session": SESSION, "prompt": "x"})
        assert no_repo["code"] == INVALID_PARAMS
        assert "not in a git repository" in no_repo["message"]
        bad = await error_of(client, ARCHIVE, {"handle": "h", "archived": "yes"})
        assert bad["code"] == INVALID_PARAMS and bad["message"].startswith(ARCHIVE)
        # A handle is looked up, never read as a path.
        assert await client.request(DELETE, {"handle": os.fspath(tmp_path)}) is None
        assert (tmp_path / "plain").is_dir()


async def test_unlisted_past_retention_goes_and_its_work_stays(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ahp_vscode import worktrees

    monkeypatch.setattr(worktrees, "RETENTION_SECONDS", 0)
    async with vscode_host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        await draft(client, repo)
        made = await client.request(CREATE, {"session": SESSION, "prompt": "old"})
        tree = Path(path_of_file_uri(made["resource"]) or "")
        branch = git(tree, "branch", "--show-current")
        (tree / "draft.txt").write_text("half done\n")
        # Another window's scope judges nothing of this repository's handles.
        other = {"scope": file_uri(str(tmp_path / "elsewhere")), "activeHandles": []}
        assert await client.request(RECONCILE, other) is None
        assert tree.is_dir()
        mine = {"scope": file_uri(str(repo)), "activeHandles": []}
        assert await client.request(RECONCILE, mine) is None
        assert not tree.exists()
        assert git(repo, "show", f"{branch}:draft.txt") == "half done"
        gone = await error_of(client, CLAIM, {"handle": made["handle"]})
        assert gone["code"] == NOT_FOUND
