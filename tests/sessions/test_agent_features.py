"""What contract v2 lets a backend do, over real sockets: capabilities, renaming a chat,
subagents as child chats, richer approvals, live configuration, stable turn ids, usage."""

from __future__ import annotations

from typing import Any

import pytest

from ahp_scripted import Meta, Rule, Say, Subagent, Tool, Usage
from ahpcore.sessions.reporter import subagent_chat_uri
from tests.sessions.conftest import is_action, open_session, script, start_turn, turn_end
from tests.sessions.live_rebuilt import assert_rebuilt_equals_live, snapshot

pytestmark = pytest.mark.anyio


def refused(frame: dict[str, Any]) -> str | None:
    return frame.get("rejectionReason") or frame.get("params", {}).get("rejectionReason")


async def test_agents_advertise_what_their_backend_can_do(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        root = await snapshot(client, "ahp-root://")
        (agent,) = root["agents"]
        assert agent["capabilities"] == {"multipleChats": {"fork": True, "sideChat": True}}


async def test_a_session_in_two_folders_is_refused_by_a_one_folder_backend(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        frame = await client.request_frame(
            "createSession",
            {
                "channel": "scripted:/00000000-0000-4000-8000-000000000009",
                "provider": "scripted",
                "workingDirectories": ["file:///a", "file:///b"],
            },
        )
        assert "one directory per session" in frame["error"]["message"]


async def test_renaming_one_chat_leaves_the_session_title(session_host):
    async with session_host() as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "first words", "t1")
        await turn_end(client, chat)
        seq = await client.dispatch(chat, {"type": "session/titleChanged", "title": "  Renamed "})
        answer = await client.answer_to(seq)
        assert "rejectionReason" not in answer
        # The chat was named after its first message; the rename renames it.
        update = await client.recv_until(
            lambda f: (
                is_action("session/chatUpdated", session)(f)
                and f["params"]["action"]["changes"].get("title") == "Renamed"
            )
        )
        assert update["params"]["action"]["changes"] == {"title": "Renamed"}
        state = await snapshot(client, session)
        assert state["title"] == "first words"
        (row,) = state["chats"]
        assert row["title"] == "Renamed"
        kept = next(iter(backend.store.all()))
        assert kept.title() == "Renamed"  # the backend heard of it
        seq = await client.dispatch(chat, {"type": "session/titleChanged", "title": "  "})
        assert "blank" in (await client.answer_to(seq))["rejectionReason"]
    async with session_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        state = await snapshot(client, session)
        assert state["chats"][0]["title"] == "Renamed"


SUB = Rule(
    exact="delegate",
    steps=[
        Say("Asking a helper."),
        Subagent(
            "explorer",
            "Find the config files",
            steps=[Say("Looking around."), Tool("ls", {"path": "."}, result="a.toml")],
            result="found a.toml",
            progress=["listing the tree"],
        ),
        Say("Done."),
    ],
)


async def test_a_subagent_runs_in_a_child_chat_live_and_rebuilt(session_host):
    async with session_host(script(SUB)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "delegate", "t1")
        added = await client.recv_until(is_action("session/chatAdded", session))
        child = added["params"]["action"]["summary"]["resource"]
        await client.request("subscribe", {"channel": child})
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await client.sync()
        parent_state = await snapshot(client, chat)
        child_state = await snapshot(client, child)
        (turn,) = parent_state["turns"]
        call = next(p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall")
        assert (
            call["_meta"]["subagentChatUri"] == child == subagent_chat_uri(chat, call["toolCallId"])
        )
        assert {"type": "subagent", "resource": child}.items() <= call["content"][-1].items()
        # The subagent and progress lines set the call's _meta whole: what it started with
        # stays, and the progress line goes when the call completes.
        assert call["_meta"]["toolKind"] == "subagent"
        assert "progressMessage" not in call["_meta"]
        assert child_state["origin"] == {
            "kind": "tool",
            "chat": chat,
            "toolCallId": call["toolCallId"],
        }
        (sub_turn,) = child_state["turns"]
        assert sub_turn["state"] == "complete"
        assert sub_turn["responseParts"][0]["content"] == "Looking around."
        # A subagent's chat takes no turns from clients.
        seq = await client.dispatch(
            child,
            {
                "type": "chat/turnStarted",
                "turnId": "x",
                "startedAt": "2026-01-01T00:00:00.000Z",
                "message": {"text": "hi", "origin": {"kind": "user"}},
            },
        )
        assert "subagent" in (await client.answer_to(seq))["rejectionReason"]
    rebuilt = await assert_rebuilt_equals_live(
        session_host,
        script(SUB),
        session,
        chat,
        child,
        live={chat: parent_state, child: child_state},
    )
    assert rebuilt[child]["origin"]["kind"] == "tool"


APPROVE = Rule(
    exact="edit",
    steps=[
        Tool(
            "write",
            {"path": "a.txt"},
            approval=True,
            result="written",
            options=[
                {"id": "once", "label": "Allow once", "kind": "approve"},
                {"id": "session", "label": "Allow for this session", "kind": "approve"},
                {"id": "no", "label": "Deny", "kind": "deny"},
            ],
            edits=[{"path": "file:///w/a.txt", "before": "old\n", "after": "new\n"}],
        ),
        Say("Picked ${option}."),
    ],
)


async def test_an_approval_offers_options_and_serves_its_edit_until_answered(session_host):
    async with session_host(script(APPROVE)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "edit", "t1")
        ready = (await client.recv_until(is_action("chat/toolCallReady", chat)))["params"]["action"]
        assert [o["id"] for o in ready["options"]] == ["once", "session", "no"]
        (edit,) = ready["edits"]["items"]
        after = edit["after"]["content"]["uri"]
        read = await client.request("resourceRead", {"uri": after})
        assert read["data"] == "new\n"
        before = await client.request("resourceRead", {"uri": edit["before"]["content"]["uri"]})
        assert before["data"] == "old\n"
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": ready["toolCallId"],
                "approved": True,
                "confirmed": "user-action",
                "selectedOptionId": "session",
            },
        )
        await turn_end(client, chat)
        frame = await client.request_frame("resourceRead", {"uri": after})
        assert "settled" in frame["error"]["message"]
        await client.sync()
        live = await snapshot(client, chat)
        (turn,) = live["turns"]
        call = next(p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall")
        assert call["selectedOption"]["id"] == "session"
        assert turn["responseParts"][-1]["content"] == "Picked session."
    await assert_rebuilt_equals_live(
        session_host, script(APPROVE), session, chat, live={chat: live}
    )


async def test_config_changes_reach_the_live_agent_which_may_refuse(session_host):
    async with session_host(refuse_config={"verbosity": "long"}) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, _ = await open_session(client)
        seq = await client.dispatch(
            session, {"type": "session/configChanged", "config": {"verbosity": "long"}}
        )
        assert "will not switch verbosity" in (await client.answer_to(seq))["rejectionReason"]
        (agent,) = backend.agents_by_id.values()
        assert agent.heard == []
        seq = await client.dispatch(
            session, {"type": "session/configChanged", "config": {"verbosity": "short"}}
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        seq = await client.dispatch(
            session,
            {
                "type": "session/customizationToggled",
                "id": "skill-1",
                "enablement": [{"kind": "session", "enabled": False}],
            },
        )
        await client.answer_to(seq)
        seq = await client.dispatch(
            session, {"type": "session/mcpServerStartRequested", "id": "m1"}
        )
        await client.answer_to(seq)
        assert agent.heard == [
            ("configure", {"verbosity": "short"}),
            ("toggle", "skill-1", False),
            ("mcp_start", "m1"),
        ]
        state = await snapshot(client, session)
        assert state["config"]["values"]["verbosity"] == "short"


async def test_turns_keep_their_backend_references_and_truncate_through_the_agent(session_host):
    usage = Rule(
        exact="count",
        steps=[
            Say("counted"),
            Usage(
                input_tokens=10,
                output_tokens=2,
                cache_write_tokens=5,
                reasoning_tokens=1,
                context_used=100,
                context_size=1000,
                cost=0.5,
                currency="EUR",
            ),
        ],
    )
    async with session_host(script(usage), late_models=["scripted-large"]) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        changed = await client.recv_until(is_action("root/agentsChanged"))
        models = changed["params"]["action"]["agents"][0]["models"]
        assert [m["id"] for m in models] == ["scripted", "scripted-large"]
        for n in (1, 2):
            await start_turn(client, chat, "count", f"t{n}")
            await turn_end(client, chat)
        await client.sync()
        state = await snapshot(client, chat)
        meta = state["turns"][0]["usage"]["_meta"]
        assert meta == {
            "ahp.cacheWriteTokens": 5,
            "ahp.reasoningTokens": 1,
            "ahp.context": {"used": 100, "size": 1000},
            "ahp.cost": {"amount": 0.5, "currency": "EUR"},
        }
    async with session_host(script(usage)) as (running, backend):
        client = await running.connect("c2")
        await client.initialize()
        await snapshot(client, session)
        await snapshot(client, chat)
        await start_turn(client, chat, "count", "t3")  # starts the agent, resumed
        await turn_end(client, chat)
        seq = await client.dispatch(chat, {"type": "chat/truncated", "turnId": "t1"})
        assert "rejectionReason" not in await client.answer_to(seq)
        (agent,) = backend.agents_by_id.values()
        uuid = agent.heard[-1][2]
        assert agent.heard[-1][:2] == ("truncate", "t1")
        assert uuid is not None and uuid.startswith("scripted:")  # kept across the restart
        kept = next(iter(backend.store.all()))
        assert [turn.id for turn in kept.turns] == ["t1"]


SUB_EDIT = Rule(
    exact="delegate an edit",
    steps=[
        Subagent(
            "writer",
            "Write the file",
            steps=[
                Tool(
                    "write",
                    {"path": "a.txt"},
                    approval=True,
                    result="written",
                    edits=[{"path": "file:///w/a.txt", "before": "old\n", "after": "new\n"}],
                )
            ],
            result="wrote a.txt",
        ),
    ],
)


async def test_a_subagents_approval_serves_its_edit_until_answered(session_host):
    async with session_host(script(SUB_EDIT)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "delegate an edit", "t1")
        added = await client.recv_until(is_action("session/chatAdded", session))
        child = added["params"]["action"]["summary"]["resource"]
        state = (await client.request("subscribe", {"channel": child}))["snapshot"]["state"]
        # The call may have asked before the subscription: the snapshot holds it then.
        calls = [
            p["toolCall"]
            for p in (state.get("activeTurn") or {}).get("responseParts", [])
            if p["kind"] == "toolCall" and p["toolCall"].get("edits")
        ]
        if calls:
            (call,) = calls
        else:
            frame = await client.recv_until(is_action("chat/toolCallReady", child))
            call = frame["params"]["action"]
        (edit,) = call["edits"]["items"]
        after = edit["after"]["content"]["uri"]
        assert (await client.request("resourceRead", {"uri": after}))["data"] == "new\n"
        await client.dispatch(
            child,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": state["activeTurn"]["id"],
                "toolCallId": call["toolCallId"],
                "approved": True,
                "confirmed": "user-action",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        frame = await client.request_frame("resourceRead", {"uri": after})
        assert "settled" in frame["error"]["message"]


async def test_an_agent_merges_facts_into_the_session_meta(session_host):
    facts = Rule(
        exact="facts",
        steps=[
            Meta({"ahp.model": "m-1", "ahp.tier": "fast"}),
            Meta({"ahp.model": "m-1"}),  # nothing changes: nothing goes out
            Say("noted"),
            Meta({"ahp.model": "m-2", "ahp.tier": None}),  # None takes a key away
        ],
    )
    async with session_host(script(facts)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        # Keys another source set before the agent spoke survive its reports.
        running.host.engine_or_fail.apply(
            session, {"type": "session/metaChanged", "_meta": {"git": {"x": 1}}}
        )
        await start_turn(client, chat, "facts", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await client.sync()
        sent = [
            a["action"]["_meta"]
            for a in client.actions_for(session)
            if a["action"]["type"] == "session/metaChanged"
        ]
        assert sent == [
            {"git": {"x": 1}},
            {"git": {"x": 1}, "ahp.model": "m-1", "ahp.tier": "fast"},
            {"git": {"x": 1}, "ahp.model": "m-2"},
        ]
        assert (await snapshot(client, session))["_meta"] == {"git": {"x": 1}, "ahp.model": "m-2"}
