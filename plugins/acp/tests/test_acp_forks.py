"""A chat forked from an ACP agent's chat, where the agent advertises session/fork."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp_support import (
    acp_host,
    agents_env,
    chat_state,
    connect_and_open,
    parts,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def _said(client, chat: str, text: str, turn_id: str) -> str:
    await start_turn(client, chat, text, turn_id)
    assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
    state = await chat_state(client, chat)
    return "".join(p["content"] for p in parts(state) if p["kind"] == "markdown")


async def _fork(client, session: str, chat: str, turn_id: str, name: str) -> dict:
    return await client.request_frame(
        "createChat",
        {
            "channel": session,
            "chat": f"ahp-chat:/{name}",
            "source": {"kind": "fork", "chat": chat, "turnId": turn_id},
        },
    )


async def test_a_fork_from_the_last_turn_goes_on_with_what_was_said(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    state = tmp_path / "fake-state"
    state.mkdir()
    monkeypatch.setenv("AHP_ACP_AGENTS", agents_env(state, FAKE_ACP_FORK="1"))
    async with acp_host(tmp_path / "state") as running:
        client, session, chat = await connect_and_open(running, workdir)
        await _said(client, chat, "hello", "t1")
        await _said(client, chat, "remember blue", "t2")

        # session/fork copies the whole conversation: from an earlier turn it is refused.
        frame = await _fork(client, session, chat, "t1", "early")
        assert "forked from its last turn only" in frame["error"]["message"], frame

        assert "result" in await _fork(client, session, chat, "t2", "fork")
        fork = "ahp-chat:/fork"
        await client.request("subscribe", {"channel": fork})
        copied = await chat_state(client, fork)
        assert [t["id"] for t in copied["turns"]] == ["t1", "t2"]
        recalled = await _said(client, fork, "recall", "f1")
        assert recalled.endswith("earlier: hello | remember blue")
        await _said(client, fork, "only in the fork", "f2")
        # The source chat's agent session is its own: the fork's words are not in it.
        recalled = await _said(client, chat, "recall", "t3")
        assert recalled.endswith("earlier: hello | remember blue")


async def test_an_agent_without_session_fork_is_not_offered_forks(
    fake_agent, tmp_path: Path, workdir: Path
):
    async with acp_host(tmp_path / "state") as running:
        client, session, chat = await connect_and_open(running, workdir)
        await _said(client, chat, "hello", "t1")
        frame = await _fork(client, session, chat, "t1", "fork")
        assert frame["error"]["code"] == -32602
        assert "cannot fork" in frame["error"]["message"]
