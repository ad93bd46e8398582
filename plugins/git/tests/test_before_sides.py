"""Before sides (``ahp-git:`` URIs) are served only as the host issued them.

A before side names a path and an object id; without a fence, ``resourceRead``
of one would read any file of any repository on the machine. These tests read
through a real host over a real connection, with real repositories.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes

import pytest
from git_harness import SESSION, Repo, by_id, init_repo, open_session, subscribe

pytestmark = pytest.mark.anyio

PERMISSION_DENIED = -32009
INVALID_PARAMS = -32602


def blob(path: str | bytes | Path, ref: str) -> str:
    raw = os.fsencode(path)
    return f"ahp-git:{quote_from_bytes(raw, safe='/')}?ref={ref}"


async def read(client: Any, uri: str) -> dict[str, Any]:
    return dict(await client.request_frame("resourceRead", {"channel": "ahp-root://", "uri": uri}))


def head(repo: Repo, rev: str = "HEAD") -> str:
    return repo.git("rev-parse", rev).decode().strip()


def two_commits(repo: Repo) -> None:
    repo.write("file.txt", "first\n")
    repo.write("sub/inner.txt", "inner\n")
    repo.commit("one")
    repo.write("file.txt", "second\n")
    repo.commit("two")
    repo.write("file.txt", "uncommitted\n")


async def test_a_before_side_of_the_sessions_changeset_reads(git_host, repo: Repo) -> None:
    two_commits(repo)
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        rows = by_id(await subscribe(client, "uncommitted"))
        side = rows[repo.uri("file.txt")]["edit"]["before"]["content"]["uri"]
        assert side == blob(repo.root / "file.txt", head(repo))  # the full id, as issued
        answer = await read(client, side)
        assert answer["result"] == {"data": "second\n", "encoding": "utf-8"}
        # Another file of the same repository at the issued commit reads too.
        inner = await read(client, blob(repo.root / "sub/inner.txt", head(repo)))
        assert inner["result"] == {"data": "inner\n", "encoding": "utf-8"}


async def test_a_repository_no_session_serves_cannot_be_read(
    git_host, repo: Repo, tmp_path: Path
) -> None:
    two_commits(repo)
    other = init_repo(tmp_path / "other")
    other.write("secret.txt", "not yours\n")
    other.commit()
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        await subscribe(client, "uncommitted")
        for ref in (head(other), head(repo)):
            answer = await read(client, blob(other.root / "secret.txt", ref))
            assert answer["error"]["code"] == PERMISSION_DENIED, answer
            assert "not yours" not in str(answer)
        # A path that is no repository at all is refused the same way.
        answer = await read(client, blob("/etc/passwd", head(repo)))
        assert answer["error"]["code"] == PERMISSION_DENIED


async def test_only_full_object_ids_the_host_issued_are_served(git_host, repo: Repo) -> None:
    two_commits(repo)
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        await subscribe(client, "uncommitted")
        path = repo.root / "file.txt"
        # An abbreviation of the issued commit: git would resolve it, the host does not.
        short = await read(client, blob(path, head(repo)[:4]))
        assert short["error"]["code"] == INVALID_PARAMS
        assert "full" in short["error"]["message"]
        # A full id of a real commit of this repository that no changeset named.
        older = await read(client, blob(path, head(repo, "HEAD~1")))
        assert older["error"]["code"] == PERMISSION_DENIED, older
        assert "first" not in str(older)
        for ref in ("HEAD", "HEAD~1", "-p", f"{head(repo)}..", head(repo).upper()):
            answer = await read(client, blob(path, ref))
            assert answer["error"]["code"] == INVALID_PARAMS, (ref, answer)


async def test_paths_that_leave_the_repository_are_refused(
    git_host, repo: Repo, tmp_path: Path
) -> None:
    two_commits(repo)
    other = init_repo(tmp_path / "other")
    other.write("secret.txt", "not yours\n")
    other.commit()
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        await subscribe(client, "uncommitted")
        issued = head(repo)
        top = bytes(repo.bytes)
        for path in (
            top + b"/../other/secret.txt",
            top + b"/sub/../file.txt",
            top + b"/./file.txt",
            top + b"//file.txt",
            top + b"/sub/",
        ):
            answer = await read(client, blob(path, issued))
            assert answer["error"]["code"] == PERMISSION_DENIED, (path, answer)
        assert "not yours" not in str(answer)
        relative = await read(client, f"ahp-git:file.txt?ref={issued}")
        assert relative["error"]["code"] == INVALID_PARAMS


async def test_a_disposed_sessions_before_sides_are_no_longer_served(git_host, repo: Repo) -> None:
    two_commits(repo)
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        rows = by_id(await subscribe(client, "uncommitted"))
        side = rows[repo.uri("file.txt")]["edit"]["before"]["content"]["uri"]
        assert "result" in await read(client, side)
        await client.request("disposeSession", {"channel": SESSION})
        answer = await read(client, side)
        assert answer["error"]["code"] == PERMISSION_DENIED
