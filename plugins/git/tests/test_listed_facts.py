"""``_meta.git`` on the listSessions rows of past sessions, after the host restarts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from git_harness import Repo, init_repo

from ahp_git import facts as facts_module
from ahp_git.uris import file_uri
from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio

ROOT = "scripted:/00000000-0000-4000-8000-000000000011"
SUB = "scripted:/00000000-0000-4000-8000-000000000012"
PLAIN = "scripted:/00000000-0000-4000-8000-000000000013"
GONE = "scripted:/00000000-0000-4000-8000-000000000014"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def diverged(tmp_path: Path) -> Repo:
    """A repository 2 commits ahead of origin/main and 1 behind, with 3 files changed."""
    remote = tmp_path / "remote.git"
    remote.mkdir()
    git(remote, "init", "-q", "--bare", "-b", "main")
    repo = init_repo(tmp_path / "my repo")
    repo.write("a.txt", "a\n")
    repo.write("sub/b.txt", "b\n")
    repo.commit("first")
    repo.git("remote", "add", "origin", str(remote))
    repo.git("push", "-q", "-u", "origin", "main")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(remote), str(other))
    git(other, "-c", "user.name=O", "-c", "user.email=o@example.com", "commit", "-q",
        "--allow-empty", "-m", "theirs")  # fmt: skip
    git(other, "push", "-q", "origin", "main")
    repo.git("fetch", "-q", "origin")
    for n in range(2):
        repo.write(f"mine{n}.txt", "mine\n")
        repo.commit(f"mine {n}")
    repo.write("a.txt", "changed\n")
    repo.write("sub/b.txt", "changed\n")
    repo.write("sub/new.txt", "new\n")
    return repo


async def create(client: AhpTestClient, session: str, folder: str) -> None:
    await client.request(
        "createSession",
        {"channel": session, "provider": "scripted", "workingDirectories": [folder]},
    )


async def listed(client: AhpTestClient) -> dict[str, dict[str, Any]]:
    answer = await client.request("listSessions", {"channel": "ahp-root://"})
    return {row["resource"]: row for row in answer["items"]}


async def told(
    client: AhpTestClient, sessions: set[str], until: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """The ``_meta`` each session's row was last given by root/sessionSummaryChanged
    (once every one of ``sessions`` was told, with ``git`` equal to ``until`` if given)."""
    found: dict[str, dict[str, Any]] = {}

    def done() -> bool:
        if not sessions <= found.keys():
            return False
        return until is None or all(found[s].get("git") == until for s in sessions)

    with anyio.fail_after(20):  # a loaded machine reads slowly; a hang still fails
        while not done():
            frame = await client.recv_until(
                lambda f: (
                    f.get("method") == "root/sessionSummaryChanged"
                    and "_meta" in f["params"]["changes"]
                ),
                timeout=20,
            )
            found[frame["params"]["session"]] = frame["params"]["changes"]["_meta"]
    return found


async def test_past_rows_carry_git_facts_after_a_restart(
    git_host, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(facts_module, "FRESH", 0.0)  # every listing reads again
    repo = diverged(tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    gone = tmp_path / "gone"
    gone.mkdir()
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await create(client, ROOT, repo.uri())
        await create(client, SUB, repo.uri("sub"))
        await create(client, PLAIN, file_uri(bytes(plain)))
        await create(client, GONE, file_uri(bytes(gone)))
    shutil.rmtree(gone)

    async with git_host() as (running, _):  # the host again: nobody has opened anything
        client = await running.connect()
        await client.initialize()
        rows = await listed(client)
        assert {ROOT, SUB, PLAIN, GONE} <= rows.keys()  # a missing folder breaks nothing
        assert not any("git" in (rows[s].get("_meta") or {}) for s in (ROOT, SUB, PLAIN, GONE))

        meta = await told(client, {ROOT, SUB})
        expected = {
            "branchName": "main",
            "upstreamBranchName": "origin/main",
            "outgoingChanges": 2,
            "incomingChanges": 1,
            "uncommittedChanges": 3,
        }
        assert meta[ROOT]["git"] == expected
        # The session in sub/ shares the repository's reading and counts its own files.
        assert meta[SUB]["git"] == {**expected, "uncommittedChanges": 2}

        rows = await listed(client)
        assert rows[ROOT]["_meta"]["git"] == expected
        assert rows[SUB]["_meta"]["git"] == meta[SUB]["git"]
        assert "git" not in (rows[PLAIN].get("_meta") or {})
        assert "git" not in (rows[GONE].get("_meta") or {})

        # A later listing answers with what was known, and tells what moved behind it.
        repo.commit()
        repo.git("checkout", "-q", "--detach")
        assert (await listed(client))[ROOT]["_meta"]["git"] == expected
        # (A reading that raced the commit may be told first: what counts is what it ends as.)
        detached = {"isDetachedHead": True, "uncommittedChanges": 0}
        await told(client, {ROOT, SUB}, until=detached)
        rows = await listed(client)
        assert rows[ROOT]["_meta"]["git"] == rows[SUB]["_meta"]["git"] == detached
