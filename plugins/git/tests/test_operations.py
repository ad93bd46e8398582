"""Every operation of the uncommitted changeset, and each refusal, on real repositories."""

from __future__ import annotations

import subprocess
from typing import Any

import anyio
import pytest
from git_harness import SESSION, Repo, by_id, open_session, subscribe

from ahpcore.services.changeset_marks import directory_of

pytestmark = pytest.mark.anyio

UNCOMMITTED = f"{SESSION}/changeset/uncommitted"


async def invoke(client: Any, op: str, resource: str | None = None, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"channel": UNCOMMITTED, "operationId": op}
    if resource is not None:
        params["target"] = {"kind": "resource", "resource": resource}
    if meta:
        params["_meta"] = meta
    return dict(await client.request_frame("invokeChangesetOperation", params))


def staged(repo: Repo) -> bytes:
    return repo.git("diff", "--cached", "--name-only")


async def test_stage_unstage_commit_and_their_confirmation(git_host, repo: Repo) -> None:
    repo.write("src/one.txt", "1\n")
    repo.write("src/two.txt", "2\n")
    repo.write("top.txt", "t\n")
    repo.commit()
    repo.write("src/one.txt", "1b\n")
    repo.write("src/two.txt", "2b\n")
    repo.write("top.txt", "tb\n")
    repo.write("src/new.txt", "n\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        state = await subscribe(client, "uncommitted")
        ops = {op["id"]: op for op in state["operations"]}
        assert ops["commit"]["confirmation"] == (
            "Commit as '(no message)'? The whole changeset takes 4 files, 1 of them untracked."
        )
        assert "cannot be undone" in ops["discard"]["confirmation"]
        assert "confirmation" not in ops["stage"]

        # A folder, then one file back out, then everything.
        answer = await invoke(client, "stage", repo.uri("src"))
        assert "result" in answer, answer
        assert sorted(staged(repo).split()) == [b"src/new.txt", b"src/one.txt", b"src/two.txt"]
        await invoke(client, "unstage", repo.uri("src/two.txt"))
        assert sorted(staged(repo).split()) == [b"src/new.txt", b"src/one.txt"]
        rows = by_id(await subscribe(client, "uncommitted"))
        assert rows[repo.uri("src/one.txt")]["_meta"]["ahp.staged"] == "M"
        assert rows[repo.uri("src/two.txt")]["_meta"]["ahp.staged"] == "."

        # The operation ran through running to idle, and the rows moved after it.
        statuses = [
            f["params"]["action"]["status"]
            for f in client.frames
            if f.get("method") == "action"
            and f["params"]["action"]["type"] == "changeset/operationStatusChanged"
        ]
        assert statuses[:2] == ["running", "idle"]

        # A commit with no title and no message is refused by name, and says so on the button.
        refused = await invoke(client, "commit")
        assert refused["error"]["code"] == -32602 and "message" in refused["error"]["message"]
        state = await subscribe(client, "uncommitted")
        commit = next(op for op in state["operations"] if op["id"] == "commit")
        assert commit["status"] == "error" and "message" in commit["error"]["message"]
        assert commit["confirmation"] == (
            "Commit as '(no message)'? The whole changeset takes 2 staged files."
        )

        # The index holds two: the whole changeset commits those and leaves the rest.
        answer = await invoke(client, "commit", **{"ahp.commit": {"message": "Staged ones"}})
        assert "result" in answer, answer
        assert repo.git("log", "-1", "--format=%s").strip() == b"Staged ones"
        assert sorted(repo.git("show", "--name-only", "--format=", "HEAD").split()) == [
            b"src/new.txt",
            b"src/one.txt",
        ]
        # One file, as the tree has it, leaving the index alone.
        repo.git("add", "top.txt")
        answer = await invoke(
            client, "commit", repo.uri("src/two.txt"), **{"ahp.commit": {"message": "Two"}}
        )
        assert "result" in answer, answer
        assert repo.git("show", "--name-only", "--format=", "HEAD").split() == [b"src/two.txt"]
        assert staged(repo).split() == [b"top.txt"]
        # Nothing staged: the whole tree goes in.
        repo.git("reset", "-q")
        repo.write("last.txt", "l\n")
        await invoke(client, "commit", **{"ahp.commit": {"message": "All"}})
        assert repo.git("status", "--porcelain") == b""
        assert (await subscribe(client, "uncommitted"))["files"] == []


async def test_targets_above_the_session_folder_are_refused(git_host, repo: Repo) -> None:
    repo.write("inside/a.txt", "a\n")
    repo.write("outside.txt", "o\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo, folder="inside")
        rows = by_id(await subscribe(client, "uncommitted"))
        assert set(rows) == {repo.uri("inside/a.txt")}  # only the session's folder
        for op in ("stage", "unstage", "commit", "discard"):
            answer = await invoke(client, op, repo.uri("outside.txt"))
            assert answer["error"]["code"] == -32602
        answer = await invoke(client, "stage", repo.uri(""))
        assert answer["error"]["code"] == -32602 and "outside" in answer["error"]["message"]
        # The folder itself is everything under it.
        assert "result" in await invoke(client, "stage", repo.uri("inside"))
        assert staged(repo).split() == [b"inside/a.txt"]


async def test_discard_and_rename_commit(git_host, repo: Repo) -> None:
    body = "a body long enough for git to see the rename\n" * 4
    repo.write("old.txt", body)
    repo.write("edit.txt", "e\n")
    repo.commit()
    repo.git("mv", "old.txt", "new.txt")
    repo.write("edit.txt", "e2\n")
    repo.write("junk/untracked.txt", "u\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        await subscribe(client, "uncommitted")
        assert "result" in await invoke(client, "discard", repo.uri("edit.txt"))
        assert repo.read("edit.txt") == b"e\n"
        assert "result" in await invoke(client, "discard", repo.uri("junk/untracked.txt"))
        assert not repo.exists("junk/untracked.txt")
        # A rename committed from its row is one rename in git.
        answer = await invoke(
            client, "commit", repo.uri("new.txt"), **{"ahp.commit": {"message": "mv"}}
        )
        assert "result" in answer, answer
        shown = repo.git("show", "-M", "--name-status", "--format=", "HEAD")
        assert shown.split() == [b"R100", b"old.txt", b"new.txt"]
        # Discarding everything takes untracked files too.
        repo.write("edit.txt", "again\n")
        repo.write("stray.txt", "s\n")
        assert "result" in await invoke(client, "discard")
        assert repo.git("status", "--porcelain") == b""


async def test_checkout_refuses_a_dirty_tree_and_stashes_on_request(git_host, repo: Repo) -> None:
    repo.write("a.txt", "a\n")
    repo.commit()
    repo.git("branch", "other")
    repo.write("a.txt", "dirty\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        await subscribe(client, "uncommitted")
        refused = await invoke(client, "checkout", treeish="other")
        assert refused["error"]["code"] == -32602
        assert refused["error"]["data"] == {"reason": "dirtyWorkingTree"}
        assert "result" in await invoke(
            client, "checkout", treeish="other", preCheckoutAction="stash"
        )
        assert repo.git("branch", "--show-current").strip() == b"other"
        assert repo.git("stash", "list") != b""
        bad = await invoke(client, "checkout", treeish="--orphan")
        assert bad["error"]["code"] == -32602
        unknown = await invoke(client, "rebase")
        assert unknown["error"]["code"] == -32602 and "not offered" in unknown["error"]["message"]


async def test_conflicts_and_copies_are_rows(git_host, repo: Repo) -> None:
    repo.write("c.txt", "base\n")
    repo.write("src.txt", "copied content that is long enough to be detected\n" * 4)
    repo.commit()
    repo.git("checkout", "-q", "-b", "side")
    repo.write("c.txt", "side\n")
    repo.commit("side")
    repo.git("checkout", "-q", "main")
    repo.write("c.txt", "main\n")
    repo.commit("main")
    merged = subprocess.run(["git", "merge", "-q", "side"], cwd=repo.root, capture_output=True)
    assert merged.returncode != 0
    repo.write("copy.txt", repo.read("src.txt"))
    repo.git("add", "copy.txt")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        rows = by_id(await subscribe(client, "uncommitted"))
        conflict = rows[repo.uri("c.txt")]
        assert conflict["_meta"]["ahp.conflict"] is True
        assert conflict["_meta"]["ahp.staged"] == "U"
        copy = rows[repo.uri("copy.txt")]
        # Status only reports a copy when told to; a plain add reads as added.
        assert copy["_meta"]["ahp.staged"] in ("A", "C")


async def test_commit_one_staged_deletion(git_host, repo: Repo) -> None:
    repo.write("gone.txt", "g\n")
    repo.write("stays.txt", "s\n")
    repo.commit()
    repo.git("rm", "-q", "gone.txt")
    repo.write("stays.txt", "changed\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        await subscribe(client, "uncommitted")
        answer = await invoke(
            client, "commit", repo.uri("gone.txt"), **{"ahp.commit": {"message": "rm"}}
        )
        assert "result" in answer, answer
        assert repo.git("show", "--name-status", "--format=", "HEAD").split() == [b"D", b"gone.txt"]
        rows = by_id(await subscribe(client, "uncommitted"))
        assert set(rows) == {repo.uri("stays.txt")}


def hold_operations(running: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any, Any]:
    """Make the git port wait before each operation.

    Returns the changeset service, the engine, and the (started, release) events."""
    service = running.host.changesets
    port_invoke, started, release = service.port.invoke, anyio.Event(), anyio.Event()

    async def held_invoke(*args: Any) -> Any:
        started.set()
        await release.wait()
        return await port_invoke(*args)

    monkeypatch.setattr(service.port, "invoke", held_invoke)
    return service, running.host.engine_or_fail, started, release


def status_of(engine: Any, op_id: str) -> str:
    ops = engine.channels[UNCOMMITTED].state["operations"]
    return next(str(op["status"]) for op in ops if op["id"] == op_id)


async def uncommitted_watcher(running: Any, repo: Repo, *, opens: bool = True) -> Any:
    """A client subscribed to the uncommitted changeset (opening the session first)."""
    client = await running.connect()
    await client.initialize()
    if opens:
        await open_session(client, repo)
    await subscribe(client, "uncommitted")
    return client


def a_change_to_stage(repo: Repo) -> None:
    repo.write("a.txt", "1\n")
    repo.commit()
    repo.write("a.txt", "2\n")


async def test_an_operation_stays_running_through_a_re_read_while_it_runs(
    git_host, repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_change_to_stage(repo)
    async with git_host() as (running, _):
        client = await uncommitted_watcher(running, repo)
        service, engine, started, release = hold_operations(running, monkeypatch)
        async with anyio.create_task_group() as tg:
            tg.start_soon(invoke, client, "stage", repo.uri("a.txt"))
            with anyio.fail_after(10):
                await started.wait()
            # A change seen while the operation runs, as its own writes would wake it.
            repo.write("b.txt", "new\n")
            await service.refresh(directory_of(engine.channels[SESSION].state))
            assert status_of(engine, "stage") == "running"
            release.set()
        assert status_of(engine, "stage") == "idle"
        assert b"a.txt" in staged(repo)


async def test_an_operation_whose_client_leaves_is_no_longer_running(
    git_host, repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_change_to_stage(repo)
    async with git_host() as (running, _):
        watcher = await uncommitted_watcher(running, repo)
        leaver = await uncommitted_watcher(running, repo, opens=False)
        _, engine, started, _ = hold_operations(running, monkeypatch)
        await leaver.send(
            {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "invokeChangesetOperation",
                "params": {"channel": UNCOMMITTED, "operationId": "stage"},
            }
        )
        with anyio.fail_after(10):
            await started.wait()
        assert status_of(engine, "stage") == "running"
        await leaver.close()
        frame = await watcher.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["action"]["type"] == "changeset/operationStatusChanged"
                and f["params"]["action"]["status"] == "idle"
            )
        )
        assert frame["params"]["action"]["operationId"] == "stage"
        assert status_of(engine, "stage") == "idle"
