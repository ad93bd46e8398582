"""The uncommitted changeset of real repositories, over a real connection."""

from __future__ import annotations

import anyio
import pytest
from git_harness import Repo, by_id, open_session, subscribe

pytestmark = pytest.mark.anyio


async def test_rows_carry_index_and_tree_letters(git_host, repo: Repo) -> None:
    repo.write("kept.txt", "one\n")
    repo.write("gone.txt", "bye\n")
    repo.write("moved.txt", "a longer body so rename detection has something to hold\n" * 5)
    repo.write("image.bin", b"\x00\x01\x02binary")
    repo.commit()
    repo.write("kept.txt", "two\n")  # unstaged
    repo.git("add", "kept.txt")
    repo.write("kept.txt", "three\n")  # then changed again: MM
    repo.git("rm", "-q", "gone.txt")
    repo.git("mv", "moved.txt", "renamed.txt")
    repo.write("image.bin", b"\x00\x03binary")
    repo.write("new file.txt", "fresh\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        state = await subscribe(client, "uncommitted")
        assert state["status"] == "ready"
        rows = by_id(state)
        kept = rows[repo.uri("kept.txt")]
        assert kept["_meta"]["ahp.staged"] == "M" and kept["_meta"]["ahp.unstaged"] == "M"
        assert kept["edit"]["before"]["content"]["uri"].startswith("ahp-git:")
        gone = rows[repo.uri("gone.txt")]
        assert "after" not in gone["edit"] and gone["_meta"]["ahp.staged"] == "D"
        renamed = rows[repo.uri("renamed.txt")]
        assert renamed["edit"]["before"]["uri"] == repo.uri("moved.txt")
        assert repo.uri("moved.txt") not in rows  # one row for the rename
        assert rows[repo.uri("image.bin")]["_meta"]["ahp.binary"] is True
        new = rows[repo.uri("new file.txt")]
        assert "before" not in new["edit"] and new["_meta"]["ahp.untracked"] is True
        # The before side reads back what HEAD holds.
        read = await client.request(
            "resourceRead",
            {"channel": "ahp-root://", "uri": kept["edit"]["before"]["content"]["uri"]},
        )
        assert read == {"data": "one\n", "encoding": "utf-8"}
        moved = await client.request(
            "resourceRead",
            {"channel": "ahp-root://", "uri": renamed["edit"]["before"]["content"]["uri"]},
        )
        assert moved["data"].startswith("a longer body")


async def test_odd_names_and_no_commit(git_host, repo: Repo) -> None:
    odd = b"caf\xe9 with spaces.txt"  # not UTF-8
    repo.write(odd, "bytes\n")
    repo.write("sub/inner.txt", "x\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        state = await subscribe(client, "uncommitted")
        rows = by_id(state)
        assert set(rows) == {repo.uri(odd), repo.uri("sub/inner.txt")}
        ops = {op["id"]: op for op in state["operations"]}
        assert "discard" not in ops  # no commit: discarding would delete everything
        frame = await client.request_frame(
            "invokeChangesetOperation",
            {"channel": f"{running_session()}/changeset/uncommitted", "operationId": "discard"},
        )
        assert frame["error"]["code"] == -32602 and "discard" in frame["error"]["message"]
        assert repo.exists(odd)


def running_session() -> str:
    from git_harness import SESSION

    return SESSION


async def test_git_add_outside_moves_rows_within_a_second(git_host, repo: Repo) -> None:
    repo.write("a.txt", "a\n")
    repo.commit()
    repo.write("a.txt", "b\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        state = await subscribe(client, "uncommitted")
        assert by_id(state)[repo.uri("a.txt")]["_meta"]["ahp.staged"] == "."
        await anyio.to_thread.run_sync(repo.git, "add", "a.txt")
        uri = f"{running_session()}/changeset/uncommitted"
        frame = await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["channel"] == uri
                and f["params"]["action"]["type"]
                in ("changeset/fileSet", "changeset/contentChanged")
            ),
            timeout=1.0,
        )
        action = frame["params"]["action"]
        row = action["file"] if action["type"] == "changeset/fileSet" else action["files"][0]
        assert row["_meta"]["ahp.staged"] == "M"


async def test_git_facts_on_the_session(git_host, repo: Repo) -> None:
    repo.write("a.txt", "a\n")
    repo.commit()
    repo.write("a.txt", "b\n")
    repo.write("b.txt", "new\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, chat = await open_session(client, repo)
        # The chat offers its changesets as soon as the session is ready.
        held = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        if "changesets" not in held:
            frame = await client.recv_until(
                lambda f: (
                    f.get("method") == "action"
                    and f["params"]["action"]["type"] == "chat/changesetsChanged"
                )
            )
            held = {"changesets": frame["params"]["action"]["changesets"]}
        assert {c["changeKind"] for c in held["changesets"]} == {
            "uncommitted",
            "session",
            "turn",
            "compare",
        }

        def facts_of(frame: dict) -> bool:
            return (
                frame.get("method") == "action"
                and frame["params"]["channel"] == session
                and frame["params"]["action"]["type"] == "session/metaChanged"
            )

        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        meta = state.get("_meta", {}).get("git")
        if meta is None:
            meta = (await client.recv_until(facts_of))["params"]["action"]["_meta"]["git"]
        assert meta == {"branchName": "main", "uncommittedChanges": 2}
        # The session list's row says the same, on the notifications and on listSessions:
        # on root/sessionAdded when the facts were read first, else on a change after it,
        # and never a change to a row nobody has been told of yet.
        about = [
            f
            for f in client.frames
            if f.get("method") in ("root/sessionAdded", "root/sessionSummaryChanged")
            and session
            in (f["params"].get("session"), f["params"].get("summary", {}).get("resource"))
        ]
        assert about[0]["method"] == "root/sessionAdded", about
        row_facts = (about[0]["params"]["summary"].get("_meta") or {}).get("git")
        if row_facts is None:
            changed = await client.recv_until(
                lambda f: (
                    f.get("method") == "root/sessionSummaryChanged"
                    and "_meta" in f["params"]["changes"]
                )
            )
            row_facts = changed["params"]["changes"]["_meta"]["git"]
        assert row_facts == meta
        listed = await client.request("listSessions", {"channel": "ahp-root://"})
        row = next(item for item in listed["items"] if item["resource"] == session)
        assert row["_meta"]["git"] == meta


async def test_without_git_nothing_is_offered_and_the_host_runs_on(
    git_host, repo: Repo, monkeypatch, tmp_path
) -> None:
    repo.write("a.txt", "a\n")
    empty = tmp_path / "no-git-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, _ = await open_session(client, repo)
        frame = await client.request_frame(
            "subscribe", {"channel": f"{session}/changeset/uncommitted"}
        )
        assert "error" in frame and "git is not installed" in frame["error"]["message"]
        assert await client.request("ping", {"channel": "ahp-root://"}) is None


async def test_nothing_is_watched_without_a_subscriber(git_host, repo: Repo) -> None:
    repo.write("a.txt", "a\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, _ = await open_session(client, repo)
        service = running.host.changesets
        assert service._watchers == {}
        await subscribe(client, "uncommitted")
        assert list(service._watchers) == [str(repo.root)]
        await client.notify("unsubscribe", {"channel": f"{session}/changeset/uncommitted"})
        await client.sync()
        assert service._watchers == {}
        # Nobody reads while nobody looks; a new subscriber gets the tree as it is now.
        repo.write("b.txt", "b\n")
        await anyio.to_thread.run_sync(repo.git, "add", "b.txt")
        state = await subscribe(client, "uncommitted")
        assert by_id(state)[repo.uri("b.txt")]["_meta"]["ahp.staged"] == "A"
        assert list(service._watchers) == [str(repo.root)]


async def test_a_terminal_exiting_in_the_folder_rereads_it(git_host, repo: Repo) -> None:
    repo.write("a.txt", "a\n")
    repo.commit()
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, _ = await open_session(client, repo)
        assert (await subscribe(client, "uncommitted"))["files"] == []
        uri = f"{session}/changeset/uncommitted"
        # First see the watcher live (a staged file moves the rows) and every read done,
        # so what follows can only be the terminal's doing.
        repo.write("staged.txt", "s\n")
        await anyio.to_thread.run_sync(repo.git, "add", "staged.txt")
        await client.recv_until(
            lambda f: f.get("method") == "action" and f["params"]["channel"] == uri
        )
        service = running.host.changesets
        with anyio.fail_after(5):
            while service._reading:
                await anyio.sleep(0.01)
        # A command in a terminal changes the tree without touching git's index.
        repo.write("a.txt", "changed by a command\n")
        engine = running.host.engine
        terminal = "ahp-terminal://t1"
        engine.add_channel(
            terminal,
            "terminal",
            {
                "title": "sh",
                "cwd": repo.uri(),
                "cols": 80,
                "rows": 24,
                "content": [],
                "lifecycle": {"status": "running"},
            },
        )
        engine.apply(terminal, {"type": "terminal/exited", "exitCode": 0})
        frame = await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["channel"] == uri
                and f["params"]["action"]["type"]
                in ("changeset/fileSet", "changeset/contentChanged")
            )
        )
        assert repo.uri("a.txt") in str(frame["params"]["action"])


async def test_review_marks_survive_until_the_row_moves(git_host, repo: Repo) -> None:
    repo.write("a.txt", "a\n")
    repo.write("b.txt", "b\n")
    repo.commit()
    repo.write("a.txt", "a2\n")
    repo.write("b.txt", "b2\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        session, _ = await open_session(client, repo)
        uri = f"{session}/changeset/uncommitted"
        await subscribe(client, "uncommitted")
        ids = [repo.uri("a.txt"), repo.uri("b.txt")]
        seq = await client.dispatch(
            uri, {"type": "changeset/filesReviewChanged", "files": ids, "reviewed": True}
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        await anyio.to_thread.run_sync(repo.git, "add", "a.txt")
        frame = await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["channel"] == uri
                and f["params"]["action"]["type"].startswith("changeset/file")
                and f["params"]["action"]["type"] != "changeset/filesReviewChanged"
            )
        )
        # One row moved of two: sent per file, and its review mark reset.
        action = frame["params"]["action"]
        assert action["type"] == "changeset/fileSet"
        assert action["file"]["id"] == repo.uri("a.txt") and "reviewed" not in action["file"]
        rows = by_id(await subscribe(client, "uncommitted"))
        assert rows[repo.uri("b.txt")]["reviewed"] is True
        assert "reviewed" not in rows[repo.uri("a.txt")]


async def test_before_sides_of_odd_names_and_binary_files(git_host, repo: Repo) -> None:
    odd = b"dir with space/na\xefve\nname.txt"  # a newline and a byte that is not UTF-8
    repo.write(odd, "was\n")
    repo.write("blob.bin", b"\x00\xff\x00")
    repo.commit()
    repo.write(odd, "is\n")
    repo.write("blob.bin", b"\x00\xfe")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        rows = by_id(await subscribe(client, "uncommitted"))
        assert set(rows) == {repo.uri(odd), repo.uri("blob.bin")}

        async def before(uri: str) -> dict:
            side = rows[uri]["edit"]["before"]["content"]["uri"]
            return await client.request("resourceRead", {"channel": "ahp-root://", "uri": side})

        assert await before(repo.uri(odd)) == {"data": "was\n", "encoding": "utf-8"}
        assert await before(repo.uri("blob.bin")) == {"data": "AP8A", "encoding": "base64"}
        bad = await client.request_frame(
            "resourceRead", {"channel": "ahp-root://", "uri": "ahp-git:/nowhere?ref=zz"}
        )
        assert bad["error"]["code"] == -32602 and "ref" in bad["error"]["message"]
        # Nothing serves file: URIs on this host: the refusal names the missing port.
        plain = await client.request_frame(
            "resourceRead", {"channel": "ahp-root://", "uri": repo.uri("blob.bin")}
        )
        assert plain["error"]["code"] == -32601 and "resources port" in plain["error"]["message"]
