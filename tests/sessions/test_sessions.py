"""Session and chat commands over real sockets, driven by the scripted backend."""

from __future__ import annotations

import pytest

from ahp_scripted import Rule, Say, Tool
from ahpcore.protocol import uris
from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    PROVIDER_NOT_FOUND,
    SESSION_ALREADY_EXISTS,
    SESSION_NOT_FOUND,
)
from tests.sessions.conftest import (
    SID,
    is_action,
    message,
    open_session,
    script,
    session_uri,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def test_create_session_announces_it_and_reports_progress(session_host):
    async with session_host() as (running, _):
        watcher = await running.connect("watcher")
        client = await running.connect("creator")
        await watcher.initialize()
        await client.initialize()
        uri = session_uri(1)
        result = await client.request(
            "createSession",
            {
                "channel": uri,
                "provider": "scripted",
                "progressToken": "p1",
                "activeClient": {"clientId": "spoofed", "displayName": "Me", "tools": []},
            },
        )
        assert result is None
        added = await watcher.recv_until(lambda f: f.get("method") == "root/sessionAdded")
        summary = added["params"]["summary"]
        assert summary["resource"] == uri and summary["provider"] == "scripted"
        assert summary["defaultChat"] == uris.default_chat_uri(uri)
        progress = [f["params"] for f in client.frames if f.get("method") == "root/progress"]
        assert [p["progress"] for p in progress] == [0, 2] and progress[-1]["total"] == 2
        assert not [f for f in watcher.frames if f.get("method") == "root/progress"]
        state = (await client.request("subscribe", {"channel": uri}))["snapshot"]["state"]
        assert state["lifecycle"] == "ready"
        # Put in under the id it introduced itself with, not the payload's.
        assert [c["clientId"] for c in state["activeClients"]] == ["creator"]
        root = running.host.engine_or_fail.root.state
        assert root["activeSessions"] == 1


async def test_create_session_refusals(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        await client.request("createSession", {"channel": session_uri(1)})
        frame = await client.request_frame(
            "createSession", {"channel": f"ahp-session:/{SID.format(1)}"}
        )
        assert frame["error"]["code"] == SESSION_ALREADY_EXISTS  # one id, any scheme
        frame = await client.request_frame(
            "createSession", {"channel": session_uri(2), "provider": "nobody"}
        )
        assert (
            frame["error"]["code"] == PROVIDER_NOT_FOUND and "scripted" in frame["error"]["message"]
        )
        frame = await client.request_frame("createSession", {"channel": "no-scheme"})
        assert frame["error"]["code"] == INVALID_PARAMS


async def test_a_session_answered_under_an_alias_is_spelt_from_it(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        held = session_uri(1)
        await client.request("createSession", {"channel": held})
        alias = uris.alias_uri(SID.format(1))
        state = (await client.request("subscribe", {"channel": alias}))["snapshot"]
        assert state["resource"] == alias
        assert state["state"]["defaultChat"] == uris.default_chat_uri(alias)
        assert [c["resource"] for c in state["state"]["chats"]] == [uris.default_chat_uri(alias)]
        chat = (await client.request("subscribe", {"channel": uris.default_chat_uri(alias)}))[
            "snapshot"
        ]
        assert chat["state"]["resource"] == uris.default_chat_uri(alias)
        older = await running.connect("older-client")
        await older.initialize()
        legacy = f"ahp-chat:/{SID.format(1)}"
        snapshot = (await older.request("subscribe", {"channel": legacy}))["snapshot"]
        assert snapshot["state"]["resource"] == legacy  # the older spelling resolves to it too
        await start_turn(client, uris.default_chat_uri(alias), "hello", "t1")
        ending = await client.recv_until(is_action("chat/turnComplete"))
        assert ending["params"]["channel"] == uris.default_chat_uri(alias)
        ending = await older.recv_until(is_action("chat/turnComplete"))
        assert ending["params"]["channel"] == legacy


async def test_dispose_session_closes_everything_and_deletes_the_conversation(
    session_host, tmp_path
):
    async with session_host() as (running, backend):
        watcher = await running.connect("watcher")
        client = await running.connect("c1")
        await watcher.initialize()
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "hello", "t1")
        await turn_end(client, chat)
        assert backend.conversation(SID.format(1)) is not None
        await client.request("disposeSession", {"channel": session})
        removed = await watcher.recv_until(lambda f: f.get("method") == "root/sessionRemoved")
        assert removed["params"]["session"] == session
        engine = running.host.engine_or_fail
        assert session not in engine.channels and chat not in engine.channels
        assert backend.conversation(SID.format(1)) is None
        assert (await client.request("listSessions"))["items"] == []
        frame = await client.request_frame("disposeSession", {"channel": session})
        assert frame["error"]["code"] == SESSION_NOT_FOUND


async def test_chats_create_fork_side_and_dispose(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "first question", "t1")
        await turn_end(client, chat)
        await start_turn(client, chat, "second question", "t2")
        await turn_end(client, chat)
        fork = "ahp-chat:/fork"
        await client.request(
            "createChat",
            {
                "channel": session,
                "chat": fork,
                "source": {"kind": "fork", "chat": chat, "turnId": "t1"},
            },
        )
        added = await client.recv_until(is_action("session/chatAdded", session))
        assert added["params"]["action"]["summary"]["origin"] == {
            "kind": "fork",
            "chat": chat,
            "turnId": "t1",
        }
        forked = (await client.request("subscribe", {"channel": fork}))["snapshot"]["state"]
        assert [t["id"] for t in forked["turns"]] == ["t1"]  # carried through as visible history
        side = "ahp-chat:/side"
        await client.request(
            "createChat",
            {
                "channel": session,
                "chat": side,
                "source": {"kind": "sideChat", "chat": chat, "turnId": "t2"},
            },
        )
        sided = (await client.request("subscribe", {"channel": side}))["snapshot"]["state"]
        assert sided["turns"] == [] and sided["origin"]["kind"] == "sideChat"
        frame = await client.request_frame(
            "createChat",
            {
                "channel": session,
                "chat": "ahp-chat:/x",
                "source": {"kind": "fork", "chat": chat, "turnId": "nope"},
            },
        )
        assert frame["error"]["code"] == INVALID_PARAMS and "nope" in frame["error"]["message"]
        await client.request("disposeChat", {"channel": fork})
        await client.request("disposeChat", {"channel": side})
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert [c["resource"] for c in state["chats"]] == [chat]
        frame = await client.request_frame("disposeChat", {"channel": chat})
        assert frame["error"]["code"] == INVALID_PARAMS
        assert "dispose the session instead" in frame["error"]["message"]


async def test_disposing_the_default_chat_hands_the_role_on(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await client.request("createChat", {"channel": session, "chat": "ahp-chat:/two"})
        await client.request("disposeChat", {"channel": chat})
        changed = await client.recv_until(is_action("session/defaultChatChanged", session))
        assert changed["params"]["action"]["defaultChat"] == "ahp-chat:/two"
        # Default is a role: the name this client computed now opens the successor.
        client.snapshots.pop(chat)
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert state["origin"] == {"kind": "user"} and state["resource"] == chat


async def test_list_sessions_most_recent_first_and_paged_on_demand(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        for n in (1, 2, 3):
            await client.request("createSession", {"channel": session_uri(n)})
        _, chat = await open_session(client, 4)
        await start_turn(client, chat, "bump", "t1")
        await turn_end(client, chat)
        whole = (await client.request("listSessions"))["items"]
        assert len(whole) == 4 and "nextCursor" not in (await client.request("listSessions"))
        assert whole[0]["resource"] == session_uri(4)
        stamps = [item["modifiedAt"] for item in whole]
        assert stamps == sorted(stamps, reverse=True)
        first = await client.request("listSessions", {"limit": 3})
        assert len(first["items"]) == 3 and "nextCursor" in first
        rest = await client.request("listSessions", {"limit": 3, "cursor": first["nextCursor"]})
        assert len(rest["items"]) == 1 and "nextCursor" not in rest
        assert [i["resource"] for i in first["items"] + rest["items"]] == [
            i["resource"] for i in whole
        ]
        frame = await client.request_frame(
            "listSessions", {"limit": 2, "cursor": "3.deadbeefdeadbeef"}
        )
        assert frame["error"]["code"] == INVALID_PARAMS


async def test_fetch_turns_pages_older_turns_onto_the_channel(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        for n in range(55):
            await start_turn(client, chat, f"message {n}", f"t{n}")
            await turn_end(client, chat)
    # A fresh host reopens the conversation from the backend: newest 50 and a cursor.
    async with session_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert len(state["turns"]) == 50 and state["turns"][0]["id"] == "t5"
        cursor = state["turnsNextCursor"]
        assert await client.request("fetchTurns", {"channel": chat, "cursor": cursor}) == {}
        loaded = await client.recv_until(is_action("chat/turnsLoaded", chat))
        assert [t["id"] for t in loaded["params"]["action"]["turns"]] == [f"t{n}" for n in range(5)]
        frame = await client.request_frame("fetchTurns", {"channel": chat, "cursor": "bogus"})
        assert frame["error"]["code"] == INVALID_PARAMS


async def test_two_clients_on_one_chat_see_each_others_drafts(session_host):
    async with session_host() as (running, _):
        one = await running.connect("one")
        two = await running.connect("two")
        await one.initialize()
        await two.initialize()
        _, chat = await open_session(one)
        await two.request("subscribe", {"channel": chat})
        seq = await one.dispatch(
            chat, {"type": "chat/draftChanged", "draft": message("half a tho")}
        )
        await one.answer_to(seq)
        seen = await two.recv_until(is_action("chat/draftChanged", chat))
        assert seen["params"]["action"]["draft"]["text"] == "half a tho"
        seq = await two.dispatch(
            chat, {"type": "chat/draftChanged", "draft": message("half a thought")}
        )
        seen = await one.recv_until(is_action("chat/draftChanged", chat))
        assert seen["params"]["origin"] == {"clientId": "two", "clientSeq": seq}


async def test_read_and_archived_bits(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        watcher = await running.connect("w")
        await client.initialize()
        await watcher.initialize()
        session, chat = await open_session(client)
        seq = await client.dispatch(session, {"type": "session/isReadChanged", "isRead": False})
        assert "rejectionReason" not in await client.answer_to(seq)
        changed = await watcher.recv_until(
            lambda f: f.get("method") == "root/sessionSummaryChanged"
        )
        assert not changed["params"]["changes"]["status"] & 32
        # Archiving the default chat archives the session, on the session channel.
        await client.dispatch(chat, {"type": "chat/isArchivedChanged", "isArchived": True})
        archived = await client.recv_until(is_action("session/isArchivedChanged", session))
        assert archived["params"]["action"]["isArchived"] is True
        await client.sync()
        assert not [
            a for a in client.actions_for(chat) if a["action"]["type"] == "chat/isArchivedChanged"
        ]
        # Setting what is already set sends nothing to anybody else.
        seq = await client.dispatch(session, {"type": "session/isReadChanged", "isRead": False})
        echo = await client.answer_to(seq)
        assert echo["serverSeq"] == running.host.engine_or_fail.server_seq


async def test_blank_titles_are_refused(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, _ = await open_session(client)
        seq = await client.dispatch(session, {"type": "session/titleChanged", "title": "   "})
        assert "blank" in (await client.answer_to(seq))["rejectionReason"]
        seq = await client.dispatch(session, {"type": "session/titleChanged", "title": "Renamed"})
        assert (await client.answer_to(seq))["action"]["title"] == "Renamed"


async def test_active_clients_come_and_go(session_host):
    async with session_host(grace=0.2) as (running, _):
        stays = await running.connect("stays")
        leaves = await running.connect("leaves")
        await stays.initialize()
        await leaves.initialize()
        session, _ = await open_session(stays)
        await leaves.request("subscribe", {"channel": session})
        for client in (stays, leaves):
            seq = await client.dispatch(
                session,
                {
                    "type": "session/activeClientSet",
                    "activeClient": {"clientId": client.client_id, "tools": []},
                },
            )
            await client.answer_to(seq)
        await leaves.notify("unsubscribe", {"channel": session})
        removed = await stays.recv_until(is_action("session/activeClientRemoved", session))
        assert removed["params"]["action"]["clientId"] == "leaves"
        # A second window of one client keeps it active while the first goes.
        window = await running.connect("stays")
        await window.initialize(subscriptions=["ahp-root://", session])
        await stays.close()
        await window.sync()
        state = (await window.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert [c["clientId"] for c in state["activeClients"]] == ["stays"]


async def test_a_dropped_client_is_removed_once_the_grace_runs_out(session_host):
    async with session_host(grace=0.1) as (running, _):
        watcher = await running.connect("watcher")
        gone = await running.connect("gone")
        await watcher.initialize()
        await gone.initialize()
        session, _ = await open_session(watcher)
        await gone.request("subscribe", {"channel": session})
        await gone.dispatch(
            session,
            {"type": "session/activeClientSet", "activeClient": {"clientId": "gone", "tools": []}},
        )
        await watcher.recv_until(is_action("session/activeClientSet", session))
        await gone.close()
        removed = await watcher.recv_until(is_action("session/activeClientRemoved", session))
        assert removed["params"]["action"]["clientId"] == "gone"


async def test_client_tools_are_run_by_the_client_that_provides_them(session_host):
    rules = Rule(
        exact="open", steps=[Tool("openFile", {"path": "a.txt"}, client=True), Say("done")]
    )
    async with session_host(script(rules)) as (running, _):
        owner = await running.connect("owner")
        other = await running.connect("other")
        await owner.initialize()
        await other.initialize()
        session, chat = await open_session(owner)
        await other.request("subscribe", {"channel": chat})
        tool = {"name": "openFile", "inputSchema": {"type": "object"}}
        await owner.dispatch(
            session,
            {
                "type": "session/activeClientSet",
                "activeClient": {"clientId": "owner", "tools": [tool]},
            },
        )
        await owner.recv_until(is_action("session/activeClientSet", session))
        await start_turn(owner, chat, "open", "t1")
        needed = await owner.recv_until(is_action("session/inputNeededSet", session))
        request = needed["params"]["action"]["request"]
        assert request["kind"] == "toolClientExecution" and request["clientId"] == "owner"
        call = request["toolCall"]["toolCallId"]
        assert request["toolCall"]["toolName"] == "owner__openFile"
        progress = {
            "type": "chat/toolCallContentChanged",
            "turnId": "t1",
            "toolCallId": call,
            "content": [{"type": "text", "text": "opening..."}],
        }
        refusal = await other.answer_to(await other.dispatch(chat, progress))
        assert "only client owner" in refusal["rejectionReason"]
        streamed = await owner.answer_to(await owner.dispatch(chat, progress))
        assert "rejectionReason" not in streamed
        result = {"success": True, "pastTenseMessage": "Opened a.txt"}
        complete = {
            "type": "chat/toolCallComplete",
            "turnId": "t1",
            "toolCallId": call,
            "result": result,
        }
        refusal = await other.answer_to(await other.dispatch(chat, complete))
        assert "only client owner" in refusal["rejectionReason"]
        answer = await owner.answer_to(await owner.dispatch(chat, complete))
        assert "rejectionReason" not in answer
        assert (await turn_end(owner, chat))["type"] == "chat/turnComplete"


async def test_a_client_leaving_mid_call_fails_the_call_and_the_turn_still_ends(session_host):
    rules = Rule(
        exact="open", steps=[Tool("openFile", {"path": "a.txt"}, client=True), Say("after")]
    )
    async with session_host(script(rules)) as (running, _):
        watcher = await running.connect("watcher")
        owner = await running.connect("owner")
        await watcher.initialize()
        await owner.initialize()
        session, chat = await open_session(watcher)
        await owner.request("subscribe", {"channel": session})
        tool = {"name": "openFile"}
        await owner.dispatch(
            session,
            {
                "type": "session/activeClientSet",
                "activeClient": {"clientId": "owner", "tools": [tool]},
            },
        )
        await watcher.recv_until(is_action("session/activeClientSet", session))
        await start_turn(watcher, chat, "open", "t1")
        await watcher.recv_until(is_action("session/inputNeededSet", session))
        await owner.close()
        ending = await turn_end(watcher, chat)
        assert ending["type"] in ("chat/turnComplete", "chat/error")
        await watcher.sync()
        state = (await watcher.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        call = next(
            p["toolCall"] for p in state["turns"][0]["responseParts"] if p["kind"] == "toolCall"
        )
        assert call["status"] == "completed" and call["success"] is False


async def test_completions_offer_other_chats_and_carry_command_meta(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await client.request("createChat", {"channel": session, "chat": "ahp-chat:/notes"})
        result = await client.request(
            "completions",
            {"channel": chat, "kind": "userMessage", "text": "see #chat:", "offset": 10},
        )
        (item,) = result["items"]
        assert item["attachment"]["type"] == "chat"
        assert item["attachment"]["resource"] == "ahp-chat:/notes"
        assert item["attachment"]["_meta"]["command"]
        assert (item["rangeStart"], item["rangeEnd"]) == (4, 10)
        nothing = await client.request(
            "completions", {"channel": chat, "kind": "userMessage", "text": "plain", "offset": 5}
        )
        assert nothing == {"items": []}


async def test_authenticate_refuses_a_resource_no_agent_asked_for(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        frame = await client.request_frame(
            "authenticate", {"resource": "https://example.invalid", "token": "t"}
        )
        assert frame["error"]["code"] == INVALID_PARAMS
        assert "https://example.invalid" in frame["error"]["message"]


async def test_a_host_without_backends_names_the_missing_port(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize()
        frame = await client.request_frame("createSession", {"channel": session_uri(1)})
        assert frame["error"]["code"] == METHOD_NOT_FOUND
        assert "backends" in frame["error"]["message"]
        assert await client.request("listSessions") == {"items": []}


async def test_restart_keeps_what_the_store_keeps(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "remember me", "t1")
        await turn_end(client, chat)
        await client.dispatch(session, {"type": "session/isReadChanged", "isRead": False})
        await client.dispatch(session, {"type": "session/titleChanged", "title": "Kept title"})
        seq = await client.dispatch(chat, {"type": "chat/draftChanged", "draft": message("unsent")})
        await client.answer_to(seq)
        await client.sync()
    async with session_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        (row,) = (await client.request("listSessions"))["items"]
        assert row["resource"] == session and row["title"] == "Kept title"
        assert not row["status"] & 32  # still unread
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert [t["message"]["text"] for t in state["turns"]] == ["remember me"]
        assert state["draft"]["text"] == "unsent"
        await start_turn(client, chat, "and go on", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"


async def test_the_store_keeps_who_made_a_session(session_host):
    async with session_host() as (running, _):
        client = await running.connect("maker")
        await client.initialize()
        await client.request("createSession", {"channel": session_uri(1)})
        record = await running.host.session_store.get(SID.format(1))
        assert record["owner"] == "maker"


async def test_a_client_back_without_the_session_is_no_longer_active_there(session_host):
    async with session_host(grace=30) as (running, _):
        watcher = await running.connect("watcher")
        await watcher.initialize()
        session, _ = await open_session(watcher)
        first = await running.connect("roamer")
        await first.initialize()
        await first.request("subscribe", {"channel": session})
        await first.dispatch(
            session,
            {
                "type": "session/activeClientSet",
                "activeClient": {"clientId": "roamer", "tools": []},
            },
        )
        await watcher.recv_until(is_action("session/activeClientSet", session))
        last_seen = running.host.engine_or_fail.server_seq
        await first.close()
        back = await running.connect("roamer")
        await back.request(
            "reconnect",
            {
                "channel": "ahp-root://",
                "clientId": "roamer",
                "lastSeenServerSeq": last_seen,
                "subscriptions": ["ahp-root://"],
            },
        )
        # Long before the grace runs out: coming back without it is leaving it.
        removed = await watcher.recv_until(
            is_action("session/activeClientRemoved", session), timeout=5
        )
        assert removed["params"]["action"]["clientId"] == "roamer"
