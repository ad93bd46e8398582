"""``!command`` on a session: run in a terminal the session claims, reported into the chat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from terminal_harness import SESSION, BackendPlugin, is_action, open_session, output_of

from ahp_scripted import Script, ScriptedBackend

pytestmark = pytest.mark.anyio


class RanAgent:
    """The scripted agent, plus ``ran``: it keeps what the person ran for the conversation."""

    def __init__(self, agent: Any, log: list[dict[str, Any]]) -> None:
        self.agent = agent
        self.log = log

    async def run_turn(self, turn: Any, report: Any) -> None:
        await self.agent.run_turn(turn, report)

    async def close(self) -> None:
        await self.agent.close()

    async def ran(self, *, command: str, output: str, exit_code: int | None) -> None:
        self.log.append({"command": command, "output": output, "exit_code": exit_code})


class RanBackend:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend
        self.ran: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    async def start(self, start: Any) -> RanAgent:
        return RanAgent(await self.backend.start(start), self.ran)


def message(text: str) -> dict[str, Any]:
    return {"text": text, "origin": {"kind": "user"}}


async def run(client: Any, chat: str, text: str, turn_id: str) -> dict[str, Any]:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-30T00:00:00.000Z",
            "message": message(text),
        },
    )
    assert "rejectionReason" not in await client.answer_to(seq)
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"]["type"]
            in ("chat/turnComplete", "chat/error", "chat/turnCancelled")
        )
    )
    return frame["params"]["action"]


async def test_bang_ls_runs_in_the_session_directory(
    terminal_host, workdir: Path, tmp_path: Path
) -> None:
    (workdir / "alpha.txt").write_text("a")
    (workdir / "beta.txt").write_text("b")
    backend = RanBackend(ScriptedBackend(tmp_path / "scripted", Script(rules=[], default=[])))
    async with terminal_host(backend) as running:
        client = await running.connect()
        answer = await client.initialize()
        assert answer["terminalCommandPrefix"] == "!"
        _, chat = await open_session(client, workdir)

        end = await run(client, chat, "!ls", "turn-1")
        assert end["type"] == "chat/turnComplete"
        complete = next(
            e["action"]
            for e in client.actions_for(chat)
            if e["action"]["type"] == "chat/toolCallComplete"
        )
        content = complete["result"]["content"][0]
        assert complete["result"]["success"] is True
        assert content["type"] == "terminal"
        assert content["result"]["exitCode"] == 0
        assert "alpha.txt" in content["result"]["preview"]
        assert backend.ran == [
            {"command": "ls", "output": backend.ran[0]["output"], "exit_code": 0}
        ]
        assert "alpha.txt" in backend.ran[0]["output"] and "beta.txt" in backend.ran[0]["output"]
        assert "\r" not in backend.ran[0]["output"]

        # The terminal is the session's, and stays readable after the command exits.
        terminal = content["resource"]
        state = (await client.request("subscribe", {"channel": terminal}))["snapshot"]["state"]
        assert state["claim"]["kind"] == "session" and state["claim"]["session"] == SESSION
        assert state["lifecycle"] == {"status": "exited", "exitCode": 0}
        assert "beta.txt" in output_of(client, terminal)

        end = await run(client, chat, "!ls no-such-file", "turn-2")
        assert end["type"] == "chat/turnComplete"
        failed = [
            e["action"]
            for e in client.actions_for(chat)
            if e["action"]["type"] == "chat/toolCallComplete"
        ][-1]
        assert failed["result"]["success"] is False
        assert failed["result"]["content"][0]["result"]["exitCode"] == 2
        assert backend.ran[-1]["exit_code"] == 2

        # Disposing the session disposes the terminals it claimed.
        await client.request("disposeSession", {"channel": SESSION})
        await client.recv_until(
            lambda f: (
                is_action("root/terminalsChanged")(f) and f["params"]["action"]["terminals"] == []
            )
        )


async def test_a_backend_that_cannot_take_the_result_is_refused(
    terminal_host, workdir: Path
) -> None:
    marker = workdir / "ran"
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        _, chat = await open_session(client, workdir)
        end = await run(client, chat, "!touch ran", "turn-1")
        assert end["type"] == "chat/error"
        assert "cannot take the result" in end["part"]["error"]["message"]
        assert not marker.exists()


async def test_without_the_plugin_a_bang_goes_to_the_agent(workdir: Path, tmp_path: Path) -> None:
    from ahpcore.host import HostSettings
    from ahpcore.testing import running_host

    backend = RanBackend(ScriptedBackend(tmp_path / "scripted", Script(rules=[], default=[])))
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    async with running_host([("scripted", BackendPlugin(backend))], settings=settings) as running:
        client = await running.connect()
        answer = await client.initialize()
        assert "terminalCommandPrefix" not in answer
        _, chat = await open_session(client, workdir)
        frame = await client.request_frame(
            "createTerminal",
            {
                "channel": "ahp-terminal:/x",
                "claim": {"kind": "client", "clientId": client.client_id},
                "cwd": workdir.as_uri(),
            },
        )
        assert "terminals port" in frame["error"]["message"]
        end = await run(client, chat, "!touch ran", "turn-1")
        assert end["type"] == "chat/turnComplete"
        assert backend.ran == [] and not (workdir / "ran").exists()


async def test_cancelling_a_bang_command_stops_what_it_started(
    terminal_host, workdir: Path, tmp_path: Path
) -> None:
    import anyio

    backend = RanBackend(ScriptedBackend(tmp_path / "scripted", Script(rules=[], default=[])))
    async with terminal_host(backend) as running:
        client = await running.connect()
        await client.initialize()
        _, chat = await open_session(client, workdir)
        seq = await client.dispatch(
            chat,
            {
                "type": "chat/turnStarted",
                "turnId": "turn-1",
                "startedAt": "2026-11-30T00:00:00.000Z",
                "message": message("!sleep 27"),
            },
        )
        await client.answer_to(seq)
        start = await client.recv_until(is_action("chat/toolCallReady", chat))
        assert start["params"]["action"]["invocationMessage"] == "Running `sleep 27`"
        service = running.host.terminals
        with anyio.fail_after(5):
            while not service.terminals:
                await anyio.sleep(0.02)
        (terminal,) = service.terminals.values()
        seq = await client.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": "turn-1", "duration": 0}
        )
        cancelled = await client.answer_to(seq)
        assert "rejectionReason" not in cancelled, cancelled["rejectionReason"]
        assert cancelled["action"]["type"] == "chat/turnCancelled"
        with anyio.fail_after(5):  # well before the 27 s the command asked for
            await terminal.feed.done.wait()
        assert backend.ran == []
