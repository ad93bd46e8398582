"""People, their tokens and roles, over real sockets, with the people file changed by `ahp users`."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

import ahp_users.plugin as users_plugin
from ahp_scripted import ScriptedBackend
from ahpcore.host import HostSettings
from ahpcore.logs import redact
from ahpcore.testing import running_host
from tests.sessions.conftest import ScriptedPlugin, open_session, script, start_turn

pytestmark = pytest.mark.anyio

DEPLOYMENT = "deployment-token-0123456789abcdef"
AHP = [sys.executable, "-m", "ahpcore.cli"]


def ahp_users(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AHP_STATE_DIR": str(state)}
    return subprocess.run(
        [*AHP, "users", *args], capture_output=True, text=True, timeout=60, env=env
    )


def add(state: Path, name: str, role: str) -> str:
    done = ahp_users(state, "add", name, "--role", role)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip().splitlines()[-1]
    assert token.startswith("ahpu-")
    return token


class ForgetfulReader:
    """A transcript reader that loses a message's ``_meta``, as an agent's own files do."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def turn(self, turn_id: str, message: dict[str, Any], **kwargs: Any) -> Any:
        said = {k: v for k, v in message.items() if k != "_meta"}
        return self.reader.turn(turn_id, said, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reader, name)


class ForgetfulBackend(ScriptedBackend):
    """The scripted agent, keeping what was said but not the ``_meta`` it came with."""

    async def read_transcript(self, backend_id: str, reader: Any) -> bool:
        return await super().read_transcript(backend_id, ForgetfulReader(reader))


def host_with_people(tmp_path: Path, sessions: str = "memory", *extra: Any):  # type: ignore[no-untyped-def]
    backend = ForgetfulBackend(tmp_path / "scripted", script())
    settings = HostSettings(sessions=sessions, port=0, state_dir=tmp_path / "state")
    return running_host(
        [("scripted", ScriptedPlugin(backend)), ("users", users_plugin), *extra],
        settings=settings,
        token=DEPLOYMENT,
    )


async def refused(url: str) -> int:
    with pytest.raises(InvalidStatus) as caught:
        async with connect(url):
            pass
    return caught.value.response.status_code


async def test_the_cli_keeps_only_hashes_and_prints_the_token_once(tmp_path):
    state = tmp_path / "state"
    token = add(state, "alice", "viewer")
    people = state / "users" / "people.json"
    assert stat.S_IMODE(people.stat().st_mode) == 0o600
    for path in (state / "users").iterdir():
        assert token not in path.read_text()
        assert token.split(".")[1] not in path.read_text()
    listed = json.loads(ahp_users(state, "list", "--json").stdout)
    assert [(p["name"], p["role"], p["lastSeen"]) for p in listed] == [("alice", "viewer", None)]
    assert ahp_users(state, "role", "alice", "member").returncode == 0
    rotated = ahp_users(state, "token", "alice")
    assert rotated.stdout.strip().splitlines()[-1] != token
    assert ahp_users(state, "add", "alice").returncode == 1
    assert ahp_users(state, "role", "alice", "boss").returncode == 1
    assert ahp_users(state, "remove", "alice").returncode == 0
    assert json.loads(ahp_users(state, "list", "--json").stdout) == []
    assert redact(f"connected with {token} now") == "connected with [redacted] now"


async def test_a_person_connects_with_their_token_and_the_roles_hold(tmp_path):
    state = tmp_path / "state"
    admin, bob, carol, vic = (
        add(state, "ann", "admin"),
        add(state, "bob", "member"),
        add(state, "carol", "member"),
        add(state, "vic", "viewer"),
    )
    async with host_with_people(tmp_path) as running:
        assert await refused(running.url + "?token=ahpu-00000000.nottherighttokenatall") == 401
        root = await running.connect("root")
        await root.initialize()
        b = await running.connect("bob", token=bob)
        await b.initialize()
        session, chat = await open_session(b, 1)
        state_now = (await b.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state_now["_meta"]["ahp.owner"] == "user:bob"

        # who sent a turn
        echoed = await start_turn(b, chat, "hello", "t1")
        assert echoed["action"]["_meta"]["ahp.sender"] == "user:bob"

        # another member sees nothing of bob's session and may not touch it
        c = await running.connect("carol", token=carol)
        await c.initialize()
        rows = (await c.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert session not in [row["resource"] for row in rows]
        frame = await c.request_frame("subscribe", {"channel": session})
        assert frame["error"]["code"] == -32009
        assert "belongs to user:bob" in frame["error"]["message"]
        seq = await c.dispatch(session, {"type": "session/titleChanged", "title": "mine"})
        assert "belongs to user:bob" in (await c.answer_to(seq))["rejectionReason"]
        seq = await c.dispatch("ahp-root://", {"type": "root/configChanged", "config": {}})
        assert "admin role" in (await c.answer_to(seq))["rejectionReason"]

        # a viewer watches everything and changes nothing
        v = await running.connect("vic", token=vic)
        await v.initialize()
        rows = (await v.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert session in [row["resource"] for row in rows]
        assert "result" in await v.request_frame("subscribe", {"channel": session})
        frame = await v.request_frame(
            "createSession", {"channel": "ahp-session:/v1", "provider": "scripted"}
        )
        assert frame["error"]["code"] == -32009 and "viewer" in frame["error"]["message"]
        seq = await v.dispatch(session, {"type": "session/titleChanged", "title": "no"})
        assert "viewer" in (await v.answer_to(seq))["rejectionReason"]

        # an admin may do everything, the host's own token too
        a = await running.connect("ann", token=admin)
        await a.initialize()
        seq = await a.dispatch(session, {"type": "session/titleChanged", "title": "by ann"})
        assert "rejectionReason" not in await a.answer_to(seq)
        root_session, _ = await open_session(root, 2)
        meta = (await root.request("subscribe", {"channel": root_session}))["snapshot"]
        assert meta["state"]["_meta"]["ahp.owner"] == f"root:{socket.gethostname()}"

        # a role changed on the command line holds within a few seconds, without a restart
        assert ahp_users(state, "role", "vic", "member").returncode == 0
        await anyio.sleep(0.1)
        frame = await v.request_frame(
            "createSession", {"channel": "ahp-session:/v2", "provider": "scripted"}
        )
        assert "result" in frame, frame
        await running.aclose(check=False)


async def test_a_removed_person_is_closed_and_their_token_refused(tmp_path):
    state = tmp_path / "state"
    bob = add(state, "bob", "member")
    async with host_with_people(tmp_path) as running:
        b = await running.connect("bob", token=bob)
        await b.initialize()
        assert ahp_users(state, "remove", "bob").returncode == 0
        with anyio.fail_after(10):
            await b.connection.wait_closed()
        assert await refused(running.url + f"?token={bob}") == 401
        root = await running.connect("root")
        await root.initialize()
        seen = json.loads(ahp_users(state, "list", "--json").stdout)
        assert seen == []
        await running.aclose(check=False)


async def test_a_corrupt_people_file_lets_nobody_in_but_the_deployment_token(tmp_path, caplog):
    state = tmp_path / "state"
    bob = add(state, "bob", "member")
    people = state / "users" / "people.json"
    people.write_text("{not json")
    async with host_with_people(tmp_path) as running:
        assert await refused(running.url + f"?token={bob}") == 401
        root = await running.connect("root")
        await root.initialize()
        assert any("no person may connect" in r.getMessage() for r in caplog.records)
        await running.aclose(check=False)


async def test_without_the_plugin_the_deployment_token_opens_everything(tmp_path):
    backend = ScriptedBackend(tmp_path / "scripted", script())
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    async with running_host(
        [("scripted", ScriptedPlugin(backend))], settings=settings, token=DEPLOYMENT
    ) as running:
        client = await running.connect("c")
        await client.initialize()
        session, _ = await open_session(client, 1)
        state_now = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert "ahp.owner" not in (state_now.get("_meta") or {})
        assert await refused(running.url + "?token=ahpu-00000000.nottherighttokenatall") == 401
        await running.aclose(check=False)


async def test_ahp_serve_admits_a_person_added_while_it_runs(tmp_path):
    from tests.operate.running import serve

    state = tmp_path / "state"
    serving = serve(state)
    try:
        assert await refused(serving.url + "?token=ahpu-00000000.nottherighttokenatall") == 401
        token = add(state, "bob", "viewer")
        with anyio.fail_after(20):
            async with connect(serving.url + f"?token={token}") as ws:
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
                assert json.loads(await ws.recv())["id"] == 1
        seen = json.loads(ahp_users(state, "list", "--json").stdout)
        assert seen[0]["lastSeen"] is not None
    finally:
        log = serving.stop()
    assert token not in log


def heard(client, method: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The sessions ``client`` was told of by ``method`` on the root channel."""
    found = []
    for frame in client.frames:
        if frame.get("method") != method:
            continue
        params = frame["params"]
        found.append(params["summary"]["resource"] if "summary" in params else params["session"])
    return found


def owners(rows: list[dict]) -> dict[str, str | None]:  # type: ignore[type-arg]
    return {row["resource"]: (row.get("_meta") or {}).get("ahp.owner") for row in rows}


async def test_owners_outlive_a_restart_and_members_hear_only_of_their_own(tmp_path):
    state = tmp_path / "state"
    bob, carol, vic = (
        add(state, "bob", "member"),
        add(state, "carol", "member"),
        add(state, "vic", "viewer"),
    )
    async with host_with_people(tmp_path, "file") as running:
        b = await running.connect("bob", token=bob)
        c = await running.connect("carol", token=carol)
        v = await running.connect("vic", token=vic)
        for client in (b, c, v):
            await client.initialize()
        mine, chat = await open_session(b, 1)
        echoed = await start_turn(b, chat, "hello", "t1")
        assert echoed["action"]["message"]["_meta"]["ahp.sender"] == "user:bob"
        await b.recv_until(
            lambda f: (
                f.get("method") == "action" and f["params"]["action"]["type"] == "chat/turnComplete"
            )
        )
        hers, _ = await open_session(c, 2)
        gone, _ = await open_session(b, 3)
        await b.request("disposeSession", {"channel": gone})
        seq = await b.dispatch(mine, {"type": "session/titleChanged", "title": "bob's"})
        await b.answer_to(seq)
        for client in (b, c, v):
            await client.sync()

        added = next(
            f["params"]["summary"] for f in b.frames if f.get("method") == "root/sessionAdded"
        )
        assert added["_meta"]["ahp.owner"] == "user:bob"
        assert heard(b, "root/sessionAdded") == [mine, gone]
        assert heard(c, "root/sessionAdded") == [hers]
        assert heard(v, "root/sessionAdded") == [mine, hers, gone]
        assert heard(c, "root/sessionRemoved") == [] and heard(v, "root/sessionRemoved") == [gone]
        assert mine in heard(b, "root/sessionSummaryChanged")
        assert mine not in heard(c, "root/sessionSummaryChanged")
        assert mine in heard(v, "root/sessionSummaryChanged")
        rows = (await b.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert owners(rows) == {mine: "user:bob"}
        await running.aclose(check=False)

    async with host_with_people(tmp_path, "file") as running:
        b = await running.connect("bob", token=bob)
        c = await running.connect("carol", token=carol)
        v = await running.connect("vic", token=vic)
        for client in (b, c, v):
            await client.initialize()
        rows = (await v.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert owners(rows) == {mine: "user:bob", hers: "user:carol"}
        rows = (await b.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert owners(rows) == {mine: "user:bob"}
        rows = (await c.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert owners(rows) == {hers: "user:carol"}
        # a past session opened again still knows whose it is, and stays theirs
        frame = await c.request_frame("subscribe", {"channel": mine})
        assert frame["error"]["code"] == -32009, frame
        snapshot = (await b.request("subscribe", {"channel": mine}))["snapshot"]
        assert snapshot["state"]["_meta"]["ahp.owner"] == "user:bob"
        # and who sent each turn of its rebuilt chat
        turns = (await b.request("subscribe", {"channel": chat}))["snapshot"]["state"]["turns"]
        assert [t["message"]["_meta"]["ahp.sender"] for t in turns] == ["user:bob"]
        frame = await c.request_frame("subscribe", {"channel": mine})
        assert frame["error"]["code"] == -32009, frame
        await running.aclose(check=False)


async def test_a_members_terminals_changesets_and_files_are_theirs(tmp_path, monkeypatch):
    from ahp_files import plugin as files_plugin
    from ahp_terminals import plugin as terminals_plugin

    monkeypatch.setenv("SHELL", "/bin/sh")
    state = tmp_path / "state"
    bob, carol, vic = (
        add(state, "bob", "member"),
        add(state, "carol", "member"),
        add(state, "vic", "viewer"),
    )
    folder = (tmp_path / "bobs").resolve()
    folder.mkdir()
    (folder / "notes.txt").write_text("bob's")
    notes = (folder / "notes.txt").as_uri()
    extra = (("terminals", terminals_plugin), ("files", files_plugin))
    async with host_with_people(tmp_path, "memory", *extra) as running:
        b = await running.connect("bob", token=bob)
        c = await running.connect("carol", token=carol)
        v = await running.connect("vic", token=vic)
        for client in (b, c, v):
            await client.initialize()
        session, chat = await open_session(b, 1, workingDirectories=[folder.as_uri()])
        claim = {"kind": "session", "session": session, "chat": chat}
        terminal = "ahp-terminal:/bobs"
        await b.request("createTerminal", {"channel": terminal, "claim": claim})
        await b.request("subscribe", {"channel": terminal})
        changes = f"{session}/changeset/session"

        # the owner reaches all of it
        assert await b.request("resourceRead", {"channel": "ahp-root://", "uri": notes})
        # another member reaches none of it
        refusals = [
            await c.request_frame("resourceRead", {"channel": "ahp-root://", "uri": notes}),
            await c.request_frame(
                "resourceWrite",
                {"channel": "ahp-root://", "uri": (folder / "x").as_uri(), "data": "eA=="},
            ),
            await c.request_frame(
                "createTerminal", {"channel": "ahp-terminal:/c1", "claim": claim}
            ),
            await c.request_frame(
                "createTerminal",
                {
                    "channel": "ahp-terminal:/c2",
                    "claim": {"kind": "client", "clientId": c.client_id},
                    "cwd": folder.as_uri(),
                },
            ),
            await c.request_frame("subscribe", {"channel": terminal}),
            await c.request_frame("subscribe", {"channel": changes}),
        ]
        for frame in refusals:
            assert frame["error"]["code"] == -32009, frame
            assert "belongs to user:bob" in frame["error"]["message"]
        seq = await c.dispatch(terminal, {"type": "terminal/input", "data": "echo hi\n"})
        assert "belongs to user:bob" in (await c.answer_to(seq))["rejectionReason"]
        assert not (folder / "x").exists()

        # a viewer reads and watches, and writes nothing
        assert await v.request("resourceRead", {"channel": "ahp-root://", "uri": notes})
        assert "result" in await v.request_frame("subscribe", {"channel": terminal})
        frame = await v.request_frame(
            "resourceWrite",
            {"channel": "ahp-root://", "uri": (folder / "x").as_uri(), "data": "eA=="},
        )
        assert frame["error"]["code"] == -32009
        await running.aclose(check=False)


async def test_authenticate_switches_an_open_connection_to_another_person(tmp_path):
    state = tmp_path / "state"
    bob, carol = add(state, "bob", "member"), add(state, "carol", "member")
    async with host_with_people(tmp_path) as running:
        b = await running.connect("bob", token=bob)
        await b.initialize()
        bobs, _ = await open_session(b, 1)
        root = await running.connect("root")
        init = await root.initialize()
        agents = next(
            s["state"]["agents"] for s in init["snapshots"] if s["resource"] == "ahp-root://"
        )
        offered = [r for a in agents for r in a.get("protectedResources") or []]
        assert offered and all(
            r == {**r, "resource": "ahp://users", "required": False} for r in offered
        )
        assert (await root.request("subscribe", {"channel": bobs}))["snapshot"]

        # the host's own connection becomes carol: bob's session leaves its reach
        await root.request("authenticate", {"resource": "ahp://users", "token": carol})
        rows = (await root.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert bobs not in [row["resource"] for row in rows]
        frame = await root.request_frame("subscribe", {"channel": bobs})
        assert frame["error"]["code"] == -32009
        carols, _ = await open_session(root, 2)
        meta = (await root.request("subscribe", {"channel": carols}))["snapshot"]["state"]
        assert meta["_meta"]["ahp.owner"] == "user:carol"

        # an unknown token is -32007 naming the resource, and changes nobody
        frame = await root.request_frame(
            "authenticate", {"resource": "ahp://users", "token": "ahpu-00000000.wrong"}
        )
        assert frame["error"]["code"] == -32007
        assert frame["error"]["data"]["resources"][0]["resource"] == "ahp://users"
        assert "error" in await root.request_frame("subscribe", {"channel": bobs})

        # an empty token goes back to the handshake's identity
        await root.request("authenticate", {"resource": "ahp://users", "token": ""})
        assert "result" in await root.request_frame("subscribe", {"channel": bobs})
        await running.aclose(check=False)


async def test_a_chat_moved_to_a_new_session_stays_its_owners(tmp_path):
    state = tmp_path / "state"
    bob, carol = add(state, "bob", "member"), add(state, "carol", "member")
    async with host_with_people(tmp_path) as running:
        b = await running.connect("bob", token=bob)
        c = await running.connect("carol", token=carol)
        for client in (b, c):
            await client.initialize()
        session, _ = await open_session(b, 1)
        await b.request("createChat", {"channel": session, "chat": "ahp-chat:/side"})
        moved = await b.request(
            "moveChat", {"channel": "ahp-chat:/side", "destination": {"kind": "newSession"}}
        )
        await c.sync()
        await b.sync()
        assert moved["session"] in heard(b, "root/sessionAdded")
        assert moved["session"] not in heard(c, "root/sessionAdded")
        rows = (await b.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert owners(rows)[moved["session"]] == "user:bob"
        await running.aclose(check=False)


async def test_initial_subscriptions_leave_out_other_peoples_sessions(tmp_path):
    state = tmp_path / "state"
    bob, carol = add(state, "bob", "member"), add(state, "carol", "member")
    async with host_with_people(tmp_path) as running:
        b = await running.connect("bob", token=bob)
        await b.initialize()
        session, chat = await open_session(b, 1)
        c = await running.connect("carol", token=carol)
        init = await c.initialize(subscriptions=("ahp-root://", session, chat))
        assert [s["resource"] for s in init["snapshots"]] == ["ahp-root://"]
        # nothing of bob's session reaches carol afterwards either
        seq = await b.dispatch(session, {"type": "session/titleChanged", "title": "still bob's"})
        await b.answer_to(seq)
        await c.sync()
        assert not any(
            f.get("method") == "action" and f["params"]["channel"] in (session, chat)
            for f in c.frames
        )
        await running.aclose(check=False)


async def test_a_client_id_in_use_is_not_anothers_to_take(tmp_path):
    state = tmp_path / "state"
    bob, carol = add(state, "bob", "member"), add(state, "carol", "member")
    async with host_with_people(tmp_path) as running:
        b = await running.connect("shared-id", token=bob)
        await b.initialize()
        bobs, _ = await open_session(b, 1)
        c = await running.connect("shared-id", token=carol, conformance=False)
        frame = await c.request_frame(
            "initialize", {"protocolVersions": ["1.0.0"], "clientId": "shared-id"}
        )
        assert frame["error"]["code"] == -32010
        assert "another person" in frame["error"]["message"]
        frame = await c.request_frame(
            "reconnect",
            {"clientId": "shared-id", "lastSeenServerSeq": 0, "subscriptions": [bobs]},
        )
        assert frame["error"]["code"] == -32010
        # bob's connection is untouched and still his
        assert await b.request("ping") is None
        assert "result" in await b.request_frame("subscribe", {"channel": bobs})
        # the same person on a new link takes the id over
        b2 = await running.connect("shared-id", token=bob)
        await b2.initialize()
        assert "result" in await b2.request_frame("subscribe", {"channel": bobs})
        await running.aclose(check=False)


async def test_a_past_sessions_changes_are_its_owners_after_a_restart(tmp_path):
    from ahp_git import plugin as git_plugin

    state = tmp_path / "state"
    bob, carol = add(state, "bob", "member"), add(state, "carol", "member")
    repo = (tmp_path / "repo").resolve()
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("one")
    extra = (("git", git_plugin),)
    async with host_with_people(tmp_path, "file", *extra) as running:
        b = await running.connect("bob", token=bob)
        await b.initialize()
        session, _ = await open_session(b, 1, workingDirectories=[repo.as_uri()])
        changes = f"{session}/changeset/session"
        assert "result" in await b.request_frame("subscribe", {"channel": changes})
        await running.aclose(check=False)
    async with host_with_people(tmp_path, "file", *extra) as running:
        c = await running.connect("carol", token=carol, conformance=False)
        await c.initialize()
        for channel in (changes, session):
            frame = await c.request_frame("subscribe", {"channel": channel})
            assert frame.get("error", {}).get("code") == -32009, frame
            assert "belongs to user:bob" in frame["error"]["message"]
        b = await running.connect("bob", token=bob)
        await b.initialize()
        assert "result" in await b.request_frame("subscribe", {"channel": changes})
        await running.aclose(check=False)


async def test_a_past_session_is_not_another_members_to_dispose(tmp_path):
    state = tmp_path / "state"
    bob, carol = add(state, "bob", "member"), add(state, "carol", "member")
    async with host_with_people(tmp_path, "file") as running:
        b = await running.connect("bob", token=bob)
        await b.initialize()
        session, _ = await open_session(b, 1)
        await running.aclose(check=False)
    async with host_with_people(tmp_path, "file") as running:
        c = await running.connect("carol", token=carol, conformance=False)
        await c.initialize()
        for method in ("disposeSession", "subscribe"):
            frame = await c.request_frame(method, {"channel": session})
            assert frame["error"]["code"] == -32009, frame
            assert "belongs to user:bob" in frame["error"]["message"]
        # refused before anything opened it, and nothing was deleted
        assert session not in running.host.engine_or_fail.channels
        b = await running.connect("bob", token=bob)
        await b.initialize()
        rows = (await b.request("listSessions", {"channel": "ahp-root://"}))["items"]
        assert session in [row["resource"] for row in rows]
        assert "result" in await b.request_frame("disposeSession", {"channel": session})
        await running.aclose(check=False)
