"""Worktrees for isolated sessions, on real repositories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from git_harness import Repo

from ahp_git.worktrees import GitWorktrees, patterns_of

pytestmark = pytest.mark.anyio


def prepared(repo: Repo) -> Repo:
    repo.write(".gitignore", ".env\nnode_modules/\n*.log\nbuild/\n")
    repo.write("src/app.txt", "app\n")
    repo.commit()
    repo.write(".env", "SECRET=1\n")
    repo.write("node_modules/dep/index.js", "x\n")
    repo.write("debug.log", "log\n")
    repo.write("build/out.bin", "o\n")
    repo.write("notes.txt", "untracked, not ignored\n")
    return repo


async def test_a_tree_beside_the_repository_with_includes_and_links(repo: Repo) -> None:
    prepared(repo)
    said: list[str] = []
    trees = GitWorktrees()
    made = await trees.create(
        str(repo.root),
        "feature",
        include=".env, notes.txt, missing.cfg",
        symlink=["node_modules", "src"],
        progress=said.append,
    )
    tree = Path(made)
    assert tree == Path(str(repo.root) + ".worktrees") / "feature"
    assert (tree / "src/app.txt").read_text() == "app\n"
    assert (tree / ".env").read_text() == "SECRET=1\n"
    assert not (tree / "notes.txt").exists()  # not git-ignored: never copied
    assert not (tree / "debug.log").exists()  # ignored but not asked for
    assert os.path.islink(tree / "node_modules")
    assert (tree / "node_modules/dep/index.js").read_text() == "x\n"
    assert not os.path.islink(tree / "src")  # tracked: never linked
    assert said[0].startswith("creating") and said[-1] == "worktree ready"
    assert (
        repo.git("branch", "--list", "--format=%(refname:short)", "feature").strip() == b"feature"
    )

    # Clean (the links do not count): removed, branch kept.
    assert await trees.remove(made) is True
    assert not tree.exists()
    assert (repo.root / "node_modules/dep/index.js").exists()  # the link, not its target, went
    assert (
        repo.git("branch", "--list", "--format=%(refname:short)", "feature").strip() == b"feature"
    )


async def test_a_dirty_tree_is_kept_and_a_root_gathers_trees(repo: Repo, tmp_path: Path) -> None:
    prepared(repo)
    trees = GitWorktrees(root=str(tmp_path / "trees"))
    made = await trees.create(str(repo.root), "work")
    assert Path(made) == tmp_path / "trees" / repo.root.name / "work"
    (Path(made) / "src/app.txt").write_text("somebody's work\n")
    assert await trees.remove(made) is False
    assert Path(made).exists()
    with pytest.raises(ValueError, match="already exists"):
        await trees.create(str(repo.root), "work")
    with pytest.raises(ValueError, match="cannot name"):
        await trees.create(str(repo.root), "../escape")
    assert await trees.remove(made, force=True) is True


def test_patterns_read_as_lists() -> None:
    assert patterns_of(".env, .npmrc,,") == [".env", ".npmrc"]
    assert patterns_of([".env", " x "]) == [".env", "x"]
    assert patterns_of(None) == []


async def test_a_session_asking_for_isolation_runs_in_its_own_tree(git_host, repo: Repo) -> None:
    from git_harness import SESSION

    prepared(repo)
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await client.request(
            "createSession",
            {
                "channel": SESSION,
                "provider": "scripted",
                "workingDirectories": [repo.uri()],
                "config": {
                    "isolation": "worktree",
                    "worktreeIncludeFiles": ".env",
                    "worktreeSymlinkFolders": ["node_modules"],
                },
                "progressToken": "made",
            },
        )
        progress = await client.recv_until(
            lambda f: (
                f.get("method") == "root/progress"
                and f["params"]["progressToken"] == "made"
                and "worktree" in f["params"].get("message", "")
            )
        )
        assert progress["params"]["message"].startswith("creating a worktree")
        state = (await client.request("subscribe", {"channel": SESSION}))["snapshot"]["state"]
        tree = Path(str(repo.root) + ".worktrees") / "session-00000000"
        assert state["workingDirectories"] == [repo.uri(str(tree))]
        assert (tree / ".env").read_text() == "SECRET=1\n"
        facts = state.get("_meta", {}).get("git")
        if facts is None:
            frame = await client.recv_until(
                lambda f: (
                    f.get("method") == "action"
                    and f["params"]["action"]["type"] == "session/metaChanged"
                )
            )
            facts = frame["params"]["action"]["_meta"]["git"]
        assert facts["branchName"] == "session-00000000"
        assert facts["baseBranchName"] == "main"
        # The changesets read the session's own tree.
        (tree / "src/app.txt").write_text("in the tree\n")
        rows = await client.request("subscribe", {"channel": f"{SESSION}/changeset/uncommitted"})
        files = rows["snapshot"]["state"]["files"]
        assert [row["id"] for row in files] == [repo.uri(str(tree / "src/app.txt"))]
        # The linked folder is no change, and the tree's before side reads.
        before = await client.request(
            "resourceRead",
            {"channel": "ahp-root://", "uri": files[0]["edit"]["before"]["content"]["uri"]},
        )
        assert before == {"data": "app\n", "encoding": "utf-8"}
        # Work in it: the tree stays when the session goes.
        await client.request("disposeSession", {"channel": SESSION})
        assert tree.exists()
        assert f"{SESSION}/changeset/uncommitted" not in running.host.engine.channels


def leftovers(repo: Repo) -> tuple[list[bytes], list[bytes], bool]:
    """(the worktrees git knows, the session branches, whether the trees' folder has any)."""
    trees = [
        line
        for line in repo.git("worktree", "list", "--porcelain").splitlines()
        if line.startswith(b"worktree ")
    ]
    branches = repo.git("branch", "--list", "--format=%(refname:short)", "session-*").split()
    folder = Path(str(repo.root) + ".worktrees")
    return trees, branches, folder.exists() and any(folder.iterdir())


async def create_isolated(client, repo: Repo, provider: str = "scripted") -> dict:
    from git_harness import SESSION

    return dict(
        await client.request_frame(
            "createSession",
            {
                "channel": SESSION,
                "provider": provider,
                "workingDirectories": [repo.uri()],
                "config": {"isolation": "worktree"},
            },
        )
    )


async def test_a_session_refused_after_its_tree_was_made_leaves_nothing(
    git_host, repo: Repo
) -> None:
    prepared(repo)
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        # The provider is looked up after the tree is made: the refusal comes later.
        refused = await create_isolated(client, repo, provider="nobody")
        assert "error" in refused and "nobody" in refused["error"]["message"]
        trees, branches, anything = leftovers(repo)
        assert trees == [b"worktree " + repo.bytes] and branches == [] and not anything
        assert "session-00000000" not in repo.git("config", "--list").decode()
        # The same session then starts, in a tree made afresh.
        made = await create_isolated(client, repo)
        assert "result" in made, made
        tree = Path(str(repo.root) + ".worktrees") / "session-00000000"
        assert (tree / "src/app.txt").exists()
        # Creating it again is refused, and the live session's tree is not taken back.
        again = await create_isolated(client, repo)
        assert "error" in again
        assert (tree / "src/app.txt").exists()
        assert repo.git("branch", "--list", "session-*").strip()


async def test_a_branch_that_was_there_before_is_kept_when_the_session_fails(
    git_host, repo: Repo
) -> None:
    prepared(repo)
    repo.git("branch", "session-00000000")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        refused = await create_isolated(client, repo, provider="nobody")
        assert "error" in refused
        trees, branches, anything = leftovers(repo)
        assert trees == [b"worktree " + repo.bytes] and not anything
        assert branches == [b"session-00000000"]  # not the host's to delete


async def test_a_tree_whose_making_fails_half_way_is_taken_back(git_host, repo: Repo) -> None:
    prepared(repo)
    # git config cannot write while its lock is held: the step after `worktree add` fails.
    lock = repo.root / ".git" / "config.lock"
    lock.write_text("")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        refused = await create_isolated(client, repo)
        assert refused["error"]["code"] == -32602, refused
        assert "worktree" in refused["error"]["message"]
        trees, branches, anything = leftovers(repo)
        assert trees == [b"worktree " + repo.bytes] and branches == [] and not anything
        lock.unlink()
        made = await create_isolated(client, repo)
        assert "result" in made, made
