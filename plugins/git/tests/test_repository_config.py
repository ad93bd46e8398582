"""A repository's own config names programs; the host's git commands run none of them.

A client that can write ``.git/config`` or ``.git/hooks`` could otherwise have
the host run a program of its choice whenever it reads a changeset. Each test
makes a repository whose config or hooks point at a script leaving a marker
file, drives a real host over a real connection, and looks for the marker.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import anyio
import pytest
from git_harness import SESSION, Repo, by_id, open_session, subscribe

from ahp_scripted import Script

pytestmark = pytest.mark.anyio

SAY_OK = Script(default=[{"say": "ok"}])


def spy(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A script that leaves ``<name>.ran`` behind when run: (script, marker)."""
    marker = tmp_path / f"{name}.ran"
    script = tmp_path / f"{name}.sh"
    script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{marker}'\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, marker


def hook(repo: Repo, name: str, tmp_path: Path) -> Path:
    script, marker = spy(tmp_path, name)
    hooks = repo.root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / name).write_text(f"#!/bin/sh\n'{script}'\nexit 0\n")
    (hooks / name).chmod(0o755)
    return marker


def is_action(kind: str, channel: str) -> Any:
    return lambda f: (
        f.get("method") == "action"
        and f["params"]["channel"] == channel
        and f["params"]["action"]["type"] == kind
    )


async def a_turn(client: Any, repo: Repo, chat: str, turn_id: str) -> None:
    """Run one turn and wait until the marks of its start and end are kept."""
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-29T00:00:00.000Z",
            "message": {"text": "hello", "origin": {"kind": "user"}},
        },
    )
    await client.answer_to(seq)
    await subscribe(client, f"turn/{turn_id}")  # waits for the mark of the turn's start
    await client.recv_until(is_action("chat/turnComplete", chat))
    with anyio.fail_after(5):
        while len(repo.git("for-each-ref", "refs/ahp/marks").splitlines()) < 3:
            await anyio.sleep(0.02)  # start, first and end


async def facts_published(client: Any) -> None:
    """Wait until the session's ``_meta.git`` is out: its ``git status`` has run."""
    state = (await client.request("subscribe", {"channel": SESSION}))["snapshot"]["state"]
    if "git" not in (state.get("_meta") or {}):
        await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["action"]["type"] == "session/metaChanged"
            )
        )


async def test_core_fsmonitor_is_not_run(git_host, repo: Repo, tmp_path: Path) -> None:
    repo.write("file.txt", "one\n")
    repo.commit()
    repo.write("file.txt", "two\n")
    script, marker = spy(tmp_path, "fsmonitor")
    repo.git("config", "core.fsmonitor", str(script))
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        rows = by_id(await subscribe(client, "uncommitted"))
        assert set(rows) == {repo.uri("file.txt")}
        await facts_published(client)
    assert not marker.exists(), marker.read_text()


async def test_housekeeping_runs_no_hooks_and_a_users_commit_does(
    git_host, repo: Repo, tmp_path: Path
) -> None:
    repo.write("file.txt", "one\n")
    repo.commit()
    # Marks are kept with update-ref, which runs this hook on every ref it moves.
    housekeeping = hook(repo, "reference-transaction", tmp_path)
    pre_commit = hook(repo, "pre-commit", tmp_path)
    async with git_host(SAY_OK) as (running, _):
        client = await running.connect()
        await client.initialize()
        _, chat = await open_session(client, repo)
        await a_turn(client, repo, chat, "t1")
        repo.write("file.txt", "two\n")
        await subscribe(client, "session")  # compares with the mark kept as the turn began
        assert not housekeeping.exists(), housekeeping.read_text()
        assert not pre_commit.exists()
        # A commit the user asks for runs the user's hooks, as git would.
        state = await subscribe(client, "uncommitted")
        assert by_id(state)
        await client.request(
            "invokeChangesetOperation",
            {
                "channel": f"{SESSION}/changeset/uncommitted",
                "operationId": "commit",
                "_meta": {"ahp.commit": {"message": "by the user"}},
            },
        )
        with anyio.fail_after(5):
            while not pre_commit.exists():
                await anyio.sleep(0.02)
        assert repo.git("log", "-1", "--format=%s").strip() == b"by the user"


async def test_external_diff_and_textconv_are_not_run(git_host, repo: Repo, tmp_path: Path) -> None:
    repo.write(".gitattributes", "*.txt diff=spy\n")
    repo.write("file.txt", "one\n")
    repo.commit()
    external, external_ran = spy(tmp_path, "external")
    textconv, textconv_ran = spy(tmp_path, "textconv")
    repo.git("config", "diff.external", str(external))
    repo.git("config", "diff.spy.command", str(external))
    repo.git("config", "diff.spy.textconv", str(textconv))
    repo.git("config", "core.pager", str(external))
    async with git_host(SAY_OK) as (running, _):
        client = await running.connect()
        await client.initialize()
        _, chat = await open_session(client, repo)
        await a_turn(client, repo, chat, "t1")
        repo.write("file.txt", "two\n")
        rows = by_id(await subscribe(client, "session"))
        assert rows[repo.uri("file.txt")]["edit"]["diff"] == {"added": 1, "removed": 1}
        before = rows[repo.uri("file.txt")]["edit"]["before"]["content"]["uri"]
        read = await client.request("resourceRead", {"channel": "ahp-root://", "uri": before})
        assert read == {"data": "one\n", "encoding": "utf-8"}
    assert not external_ran.exists(), external_ran.read_text()
    assert not textconv_ran.exists(), textconv_ran.read_text()


async def test_a_folder_made_to_look_like_a_bare_repository_is_not_one(tmp_path: Path) -> None:
    """A client can write HEAD, config and objects/ into any folder of a session; a
    session made there must not have the host's git read that config as a repository's."""
    from ahp_git.git import GitError, run

    fake = tmp_path / "fake"
    assert (await run(["init", "--bare", str(fake)], tmp_path)).returncode == 0
    with pytest.raises(GitError, match=r"bare repository|not a git repository"):
        await run(["rev-parse", "--git-dir"], fake)
