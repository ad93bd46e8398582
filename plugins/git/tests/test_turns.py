"""A turn of the scripted agent: what it changed, per turn, per session and between turns."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from git_harness import SESSION, Repo, by_id, open_session, subscribe

from ahp_scripted import Rule, Script

pytestmark = pytest.mark.anyio

EDIT = Script(
    rules=[
        Rule(
            prefix="edit",
            steps=[
                {"wait": "agent-writes"},
                {"tool": "write", "input": {"path": "${rest}"}, "result": "written"},
                {"say": "done"},
            ],
        )
    ],
    default=[{"say": "ok"}],
)


async def start_turn(client: Any, chat: str, text: str, turn_id: str) -> None:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-29T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    await client.answer_to(seq)


def is_action(kind: str, channel: str) -> Any:
    return lambda f: (
        f.get("method") == "action"
        and f["params"]["channel"] == channel
        and f["params"]["action"]["type"] == kind
    )


async def agent_turn(
    client: Any, backend: Any, chat: str, repo: Repo, turn: str, name: str, body: str
) -> dict[str, Any]:
    """Run one turn in which the agent writes ``name``; the turn's changeset once it ended."""
    await start_turn(client, chat, f"edit {name}", turn)
    with anyio.fail_after(10):
        await backend.reached("agent-writes")
    await subscribe(client, f"turn/{turn}")  # waits for the mark taken as the turn started
    repo.write(name, body)
    backend.release("agent-writes")
    uri = f"{SESSION}/changeset/turn/{turn}"
    await client.recv_until(is_action("chat/turnComplete", chat))
    await client.recv_until(
        lambda f: (
            is_action("changeset/statusChanged", uri)(f)
            and f["params"]["action"]["status"] == "ready"
        )
    )
    return await subscribe(client, f"turn/{turn}")


async def test_a_turn_shows_what_the_agent_wrote(git_host, repo: Repo) -> None:
    repo.write("base.txt", "base\n")
    repo.write("untouched.txt", "same\n")
    repo.commit()
    repo.write("untouched.txt", "changed before the turn\n")
    async with git_host(EDIT) as (running, backend):
        client = await running.connect()
        await client.initialize()
        _, chat = await open_session(client, repo)
        await agent_turn(client, backend, chat, repo, "t1", "base.txt", "by the agent\n")
        turn = await subscribe(client, "turn/t1")
        rows = by_id(turn)
        assert set(rows) == {repo.uri("base.txt")}  # not the file changed before the turn
        row = rows[repo.uri("base.txt")]
        assert row["edit"]["diff"] == {"added": 1, "removed": 1}
        before = await client.request(
            "resourceRead",
            {"channel": "ahp-root://", "uri": row["edit"]["before"]["content"]["uri"]},
        )
        after = await client.request(
            "resourceRead",
            {"channel": "ahp-root://", "uri": row["edit"]["after"]["content"]["uri"]},
        )
        assert before["data"] == "base\n" and after["data"] == "by the agent\n"
        uncommitted = by_id(await subscribe(client, "uncommitted"))
        assert repo.uri("base.txt") in uncommitted and repo.uri("untouched.txt") in uncommitted
        chat_state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        templates = {c["uriTemplate"] for c in chat_state["changesets"]}
        assert f"{SESSION}/changeset/turn/{{turnId}}" in templates
        assert f"{SESSION}/changeset/uncommitted" in templates

        # A second turn: the session scope holds both, compare only the second.
        await agent_turn(client, backend, chat, repo, "t2", "second.txt", "two\n")
        session = by_id(await subscribe(client, "session"))
        assert set(session) == {repo.uri("base.txt"), repo.uri("second.txt")}
        compare = by_id(await subscribe(client, "compare/t1/t2"))
        assert set(compare) == {repo.uri("second.txt")}
        assert "before" not in compare[repo.uri("second.txt")]["edit"]

        # revert puts the file back the way the agent found it, and the turn's rows follow.
        result = await client.request(
            "invokeChangesetOperation",
            {
                "channel": f"{SESSION}/changeset/session",
                "operationId": "revert",
                "target": {"kind": "resource", "resource": repo.uri("base.txt")},
            },
        )
        assert "Reverted" in result["message"]
        assert repo.read("base.txt") == b"base\n"
        await client.request(
            "invokeChangesetOperation",
            {
                "channel": f"{SESSION}/changeset/session",
                "operationId": "revert",
                "target": {"kind": "resource", "resource": repo.uri("second.txt")},
            },
        )
        assert not repo.exists("second.txt")
        session_now = await subscribe(client, "session")
        assert session_now["files"] == []


async def test_operations_are_disabled_while_a_turn_runs(git_host, repo: Repo) -> None:
    repo.write("a.txt", "a\n")
    repo.commit()
    repo.write("a.txt", "b\n")
    async with git_host(EDIT) as (running, backend):
        client = await running.connect()
        await client.initialize()
        _, chat = await open_session(client, repo)
        state = await subscribe(client, "uncommitted")
        assert {op["status"] for op in state["operations"]} == {"idle"}
        assert "checkout" in {op["id"] for op in state["operations"]}
        await start_turn(client, chat, "edit a.txt", "t1")
        uri = f"{SESSION}/changeset/uncommitted"
        frame = await client.recv_until(is_action("changeset/operationsChanged", uri))
        ops = frame["params"]["action"]["operations"]
        assert {op["status"] for op in ops} == {"disabled"}
        refused = await client.request_frame(
            "invokeChangesetOperation", {"channel": uri, "operationId": "stage"}
        )
        assert refused["error"]["code"] == -32004
        backend.release("agent-writes")
        await client.recv_until(is_action("chat/turnComplete", chat))
        frame = await client.recv_until(
            lambda f: (
                is_action("changeset/operationsChanged", uri)(f)
                and {op["status"] for op in f["params"]["action"]["operations"]} == {"idle"}
            )
        )
        # Spoken in now: checkout is no longer offered.
        assert "checkout" not in {op["id"] for op in frame["params"]["action"]["operations"]}


async def test_a_turn_outlives_the_host_and_goes_with_its_session(git_host, repo: Repo) -> None:
    repo.write("base.txt", "base\n")
    repo.commit()
    async with git_host(EDIT) as (running, backend):
        client = await running.connect()
        await client.initialize()
        _, chat = await open_session(client, repo)
        await agent_turn(client, backend, chat, repo, "t1", "base.txt", "by the agent\n")
    assert repo.git("for-each-ref", "refs/ahp/") != b""  # kept where git will not prune them
    async with git_host(EDIT) as (running, _):
        client = await running.connect()
        await client.initialize()
        reopened = await client.request("subscribe", {"channel": SESSION})
        assert reopened["snapshot"]["state"]["workingDirectories"] == [repo.uri()]
        rows = by_id(await subscribe(client, "turn/t1"))
        assert set(rows) == {repo.uri("base.txt")}
        assert set(by_id(await subscribe(client, "session"))) == {repo.uri("base.txt")}
        missing = await client.request_frame(
            "subscribe", {"channel": f"{SESSION}/changeset/turn/never"}
        )
        assert missing["error"]["code"] == -32008
        await client.request("disposeSession", {"channel": SESSION})
    assert repo.git("for-each-ref", "refs/ahp/") == b""
