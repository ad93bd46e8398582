"""A remote session's folders are the other machine's: this host's files fence and
terminals never reach the same paths here, whatever the remote says its folders are."""

from __future__ import annotations

from pathlib import Path

import pytest
from remote_support import (
    MACHINE,
    TOKEN,
    client_of,
    free_port,
    inner_host,
    machines_env,
    open_session,
    outer_host,
)

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


async def test_this_hosts_files_and_terminals_stay_out_of_a_remote_sessions_folder(
    port: int, inner_state: Path, outer_state: Path, workdir: Path
) -> None:
    (workdir / "secret.txt").write_text("a file of this machine")
    async with (
        inner_host(inner_state, port, terminals=True),
        outer_host(outer_state, terminals=True, files=True) as running,
    ):
        client = await client_of(running)
        session, _ = await open_session(client, workdir)
        # The path is the remote machine's; here (the same machine, in this test) it is
        # not in reach: no local session has it.
        frame = await client.request_frame(
            "resourceRead", {"channel": "ahp-root://", "uri": (workdir / "secret.txt").as_uri()}
        )
        assert "error" in frame, frame
        frame = await client.request_frame(
            "createTerminal",
            {
                "channel": "ahp-terminal:/here",
                "claim": {"kind": "session", "session": session, "chat": default_chat_uri(session)},
            },
        )
        assert frame["error"]["code"] == -32602
        assert "runs on another machine" in frame["error"]["message"]
        frame = await client.request_frame(
            "createTerminal",
            {
                "channel": "ahp-terminal:/mine",
                "claim": {"kind": "client", "clientId": client.client_id},
                "cwd": workdir.as_uri(),
            },
        )
        assert frame["error"]["code"] == -32009, frame
