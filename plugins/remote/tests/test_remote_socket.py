"""A remote machine reached over a WebSocket with a token: a dropped link, a restart of either side."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from remote_support import (
    MACHINE,
    PROVIDER,
    TOKEN,
    InnerRunner,
    approve,
    chat_state,
    client_of,
    free_port,
    inner_host,
    is_action,
    machine_of,
    machines_env,
    open_session,
    outer_host,
    root_agents,
    said,
    start_turn,
    subscribe,
    turn_end,
)

from ahp_remote.link import SocketLink
from ahpcore.protocol import default_chat_uri

pytestmark = pytest.mark.anyio


@pytest.fixture
def port(monkeypatch: pytest.MonkeyPatch) -> int:
    chosen = free_port()
    monkeypatch.setenv(
        "AHP_REMOTE_MACHINES",
        machines_env(**{MACHINE: {"url": f"ws://127.0.0.1:{chosen}/", "token": TOKEN}}),
    )
    return chosen


async def until(check: Callable[[], Any], timeout: float = 20) -> None:
    with anyio.fail_after(timeout):
        while not await check():
            await anyio.sleep(0.1)


async def test_a_turn_over_a_websocket(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with inner_host(inner_state, port), outer_host(outer_state) as running:
        client = await client_of(running)
        assert PROVIDER in await root_agents(client)
        _, chat = await open_session(client, workdir)
        await start_turn(client, chat, "echo over the wire")
        await approve(client, chat)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert said(await chat_state(client, chat)) == "I will echo it. echo: over the wire"


async def test_a_dropped_link_mid_turn_is_replayed(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with inner_host(inner_state, port), outer_host(outer_state) as running:
        client = await client_of(running)
        _, chat = await open_session(client, workdir)
        machine = machine_of(running)
        await start_turn(client, chat, "gap")
        await client.recv_until(is_action("chat/responsePart", chat))
        link = machine.link
        assert isinstance(link, SocketLink)
        link.drop()  # as a network failing would: no close handshake
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert machine.link is not link and machine.relinked_by == "replay"
        assert said(await chat_state(client, chat)) == "before the gap. after the gap."

        # A question asked before the drop is answered after it, and reaches the remote.
        await start_turn(client, chat, "echo later")
        ready = await client.recv_until(
            lambda f: (
                is_action("chat/toolCallReady", chat)(f)
                and "confirmed" not in f["params"]["action"]
            )
        )
        client._backlog.insert(0, ready)  # approve() finds it again
        link = machine.link
        assert isinstance(link, SocketLink)
        link.drop()
        await until(lambda: _relinked(machine, link))
        await approve(client, chat)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert said(await chat_state(client, chat)) == "I will echo it. echo: later"


async def _relinked(machine: Any, old: Any) -> bool:
    return bool(machine.up.is_set() and machine.link is not old)


async def test_the_inner_host_restarts(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with anyio.create_task_group() as group:
        first = InnerRunner(inner_state, port)
        await group.start(first.run)
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            _, chat = await open_session(client, workdir)
            await start_turn(client, chat, "hello")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"

            await first.stop()  # the machine goes away

            async def down() -> bool:
                return "Not available" in (await root_agents(client))[PROVIDER]["description"]

            await until(down)
            second = InnerRunner(inner_state, port)
            await group.start(second.run)

            async def up() -> bool:
                return "Not available" not in (await root_agents(client))[PROVIDER]["description"]

            await until(up)
            await start_turn(client, chat, "hello again")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
            state = await chat_state(client, chat)
            assert [said(state, 0), said(state, 1)] == ["hello from the inner host"] * 2
            await second.stop()


async def test_the_outer_host_restarts(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with inner_host(inner_state, port):
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            session, chat = await open_session(client, workdir)
            await start_turn(client, chat, "echo kept")
            await approve(client, chat)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            listed = await client.request("listSessions", {"channel": "ahp-root://"})
            assert session in [row["resource"] for row in listed["items"]]
            chat = await subscribe(client, session)
            state = await chat_state(client, chat)
            assert said(state) == "I will echo it. echo: kept"
            await start_turn(client, chat, "hello")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
            assert said(await chat_state(client, chat)) == "hello from the inner host"


async def test_the_remote_catalogue_is_listed_and_opened(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with inner_host(inner_state, port) as inner:
        # A session made on the machine itself, by a client of its own.
        there = await client_of(inner, "there")
        remote_session, remote_chat = await open_session(there, workdir, provider="scripted")
        await start_turn(there, remote_chat, "hello")
        assert (await turn_end(there, remote_chat))["type"] == "chat/turnComplete"
        session_id = remote_session.split(":/", 1)[1]
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            listed = await client.request("listSessions", {"channel": "ahp-root://"})
            rows = {row["resource"]: row for row in listed["items"]}
            here = f"{PROVIDER}:/{session_id}"
            assert here in rows, rows
            assert rows[here]["provider"] == PROVIDER
            chat = await subscribe(client, here)
            assert said(await chat_state(client, chat)) == "hello from the inner host"
            await start_turn(client, chat, "hello")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"


async def test_a_remote_terminal_is_mirrored_here(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with (
        inner_host(inner_state, port, terminals=True) as inner,
        outer_host(outer_state, terminals=True) as running,
    ):
        client = await client_of(running)
        session, _ = await open_session(client, workdir)
        remote_session = "scripted:/" + session.split(":/", 1)[1]
        # A terminal the session claims on the machine (opened there by a client of its own).
        there = await client_of(inner, "there")
        await there.request(
            "createTerminal",
            {
                "channel": "ahp-terminal:/remote-shell",
                "claim": {
                    "kind": "session",
                    "session": remote_session,
                    "chat": default_chat_uri(remote_session),
                },
                "name": "build shell",
            },
        )
        listed = await client.recv_until(
            lambda f: (
                is_action("root/terminalsChanged")(f)
                and any(
                    t["claim"].get("session") == session for t in f["params"]["action"]["terminals"]
                )
            )
        )
        (mirror,) = [
            t
            for t in listed["params"]["action"]["terminals"]
            if t["claim"].get("session") == session
        ]
        assert mirror["title"] == f"build shell (on {MACHINE})"
        terminal = mirror["resource"]
        snapshot = await client.request("subscribe", {"channel": terminal})
        # Typed here, run there, shown here.
        await client.dispatch(
            terminal, {"type": "terminal/input", "data": "echo mirrored-$((40+2))\r"}
        )
        seen = ""
        with anyio.move_on_after(20):
            while "mirrored-42" not in seen:
                frame = await client.recv_until(is_action("terminal/data", terminal), timeout=20)
                seen += frame["params"]["action"]["data"]
        assert "mirrored-42" in seen, (seen, snapshot)
        # The shell there ends: so does its mirror here.
        await client.dispatch(terminal, {"type": "terminal/input", "data": "exit\r"})
        await client.recv_until(is_action("terminal/exited", terminal), timeout=20)


async def test_a_command_typed_here_is_the_remotes_to_run(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    """``!command`` on a remote session never runs on this machine: the remote host decides
    (its scripted agent cannot take a command's output, so it refuses, naming itself)."""
    async with (
        inner_host(inner_state, port, terminals=True),
        outer_host(outer_state, terminals=True) as running,
    ):
        client = await client_of(running)
        _, chat = await open_session(client, workdir)
        await start_turn(client, chat, "!touch made-here")
        end = await turn_end(client, chat)
        assert end["type"] == "chat/error"
        message = end["part"]["error"]["message"]
        assert "the scripted backend cannot take the result" in message
        assert not (workdir / "made-here").exists()
        assert running.host.terminals is not None and not running.host.terminals.terminals


async def test_more_chats_forks_and_side_chats_run_there(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with inner_host(inner_state, port) as inner, outer_host(outer_state) as running:
        client = await client_of(running)
        agent = (await root_agents(client))[PROVIDER]
        assert agent["capabilities"]["multipleChats"] == {"fork": True, "sideChat": True}
        session, chat = await open_session(client, workdir)
        first = await start_turn(client, chat, "echo one")
        await approve(client, chat)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"

        fork = "ahp-chat:/a-fork"
        await client.request(
            "createChat",
            {
                "channel": session,
                "chat": fork,
                "source": {"kind": "fork", "chat": chat, "turnId": first},
            },
        )
        await client.request("subscribe", {"channel": fork})
        await start_turn(client, fork, "hello")
        assert (await turn_end(client, fork))["type"] == "chat/turnComplete"
        state = await chat_state(client, fork)
        assert [said(state, 0), said(state, 1)] == [
            "I will echo it. echo: one",
            "hello from the inner host",
        ]

        # There: the session has both chats, the fork holding the turn it was forked at.
        there = await client_of(inner, "there")
        remote_session = "scripted:/" + session.split(":/", 1)[1]
        remote = (await there.request("subscribe", {"channel": remote_session}))["snapshot"]
        chats = [row["resource"] for row in remote["state"]["chats"]]
        (remote_fork,) = [uri for uri in chats if uri != default_chat_uri(remote_session)]
        remote_state = (await there.request("subscribe", {"channel": remote_fork}))["snapshot"]
        assert remote_state["state"]["turns"][0]["id"] == first

        await client.request("disposeChat", {"channel": fork})

        async def gone() -> bool:
            await there.sync()
            state = (await there.request("subscribe", {"channel": remote_session}))["snapshot"]
            return remote_fork not in [row["resource"] for row in state["state"]["chats"]]

        await until(gone)


async def test_truncating_and_steering_reach_the_remote_chat(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with inner_host(inner_state, port) as inner, outer_host(outer_state) as running:
        client = await client_of(running)
        session, chat = await open_session(client, workdir)
        first = await start_turn(client, chat, "hello")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"

        # Steering: the running turn there takes it at its next step.
        await start_turn(client, chat, "gap")
        await client.recv_until(is_action("chat/responsePart", chat))
        await client.dispatch(
            chat,
            {
                "type": "chat/pendingMessageSet",
                "kind": "steering",
                "id": "steer-1",
                "message": {"text": "hello", "origin": {"kind": "user"}},
            },
        )
        await client.recv_until(is_action("chat/pendingMessageRemoved", chat))
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        text = said(await chat_state(client, chat))
        assert "hello from the inner host" in text and "after the gap" not in text

        # Truncating: the turns after the first go, here and there.
        seq = await client.dispatch(chat, {"type": "chat/truncated", "turnId": first})
        answer = await client.answer_to(seq)
        assert "rejectionReason" not in answer, answer
        assert [t["id"] for t in (await chat_state(client, chat))["turns"]] == [first]
        there = await client_of(inner, "there")
        remote_chat = default_chat_uri("scripted:/" + session.split(":/", 1)[1])
        remote = (await there.request("subscribe", {"channel": remote_chat}))["snapshot"]
        assert [t["id"] for t in remote["state"]["turns"]] == [first]

        # A turn the remote does not know is refused with its reason.
        seq = await client.dispatch(chat, {"type": "chat/truncated", "turnId": "nope"})
        assert "rejectionReason" in await client.answer_to(seq)


async def test_the_edits_an_approval_shows_are_read_from_the_remote(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    async with inner_host(inner_state, port), outer_host(outer_state) as running:
        client = await client_of(running)
        _, chat = await open_session(client, workdir)
        await start_turn(client, chat, "edit")
        ready = await client.recv_until(
            lambda f: (
                is_action("chat/toolCallReady", chat)(f)
                and "confirmed" not in f["params"]["action"]
            )
        )
        (edit,) = ready["params"]["action"]["edits"]["items"]
        assert edit["after"]["uri"] == "file:///srv/project/notes.txt"
        # Served here while the approval is pending, as any backend's edits are.
        read = {}
        for side in ("before", "after"):
            answer = await client.request(
                "resourceRead", {"channel": "ahp-root://", "uri": edit[side]["content"]["uri"]}
            )
            read[side] = answer["data"]
        assert read == {"before": "old line", "after": "new line"}
        client._backlog.insert(0, ready)
        await approve(client, chat)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert said(await chat_state(client, chat)) == "edited."
