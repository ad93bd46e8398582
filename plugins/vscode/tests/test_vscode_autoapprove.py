"""The window's terminal auto-approve rules: as VS Code reads them, and held against a
``!command`` over real sockets, with real terminals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ahp_scripted import Script, ScriptedBackend
from ahp_terminals import plugin as terminals_plugin
from ahp_vscode.autoapprove import judge, split_commands
from ahp_vscode.plugin import VSCodePlugin
from ahpcore.hookspecs import hookimpl
from ahpcore.settings import HostSettings
from ahpcore.testing import AhpTestClient, running_host

SESSION = "scripted:/00000000-0000-4000-8000-00000000c001"
RULES = {
    "rm": False,
    "git status": True,
    "echo": True,
    "/^ls(\\s|$)/": True,
    "scripts/build": True,
    "/danger/i": {"approve": False, "matchCommandLine": True},
    "/^make test && make lint$/": {"approve": True, "matchCommandLine": True},
    "cat": None,
}


@pytest.mark.parametrize(
    ("line", "result"),
    [
        ("git status --short", "approved"),
        ("git statusx", "noMatch"),  # whole words only
        ("ls -la", "approved"),
        ("echo hi && ls", "approved"),
        ("echo hi && rm -rf build", "denied"),
        ("echo 'a; rm -rf /'", "approved"),  # quoted: one command
        ("rm -rf build", "denied"),
        ("scripts/build --fast", "approved"),
        ("./scripts/build", "approved"),
        ("cat notes.txt", "noMatch"),  # null: no opinion
        ("echo DANGER", "denied"),  # a whole-line deny
        ("make test && make lint", "approved"),  # a whole-line approval
        ("make test", "noMatch"),
        ("FOO=1 echo hi", "noMatch"),  # sets a variable for itself
        ("echo hi | grep h", "noMatch"),
    ],
)
def test_rules_read_as_vscode_reads_them(line: str, result: str) -> None:
    assert judge(line, RULES).result == result


def test_the_reason_names_the_rule_and_odd_rules_decide_nothing() -> None:
    verdict = judge("npm test; rm x", RULES)
    assert verdict.result == "denied" and verdict.rule == "rm" and "`rm x`" in verdict.reason
    odd = {"/(unclosed/": False, "": True, "/(?<name>ls)/": True, 3: True, "x": "yes"}
    assert judge("ls", odd).result == "approved"  # a JavaScript named group still reads
    assert judge("anything", odd).result == "noMatch"
    assert judge("ls", None).result == "noMatch"
    assert split_commands("a && b || c; d | e & f\n(g)") == ["a", "b", "c", "d", "e", "f", "g)"]


class RanAgent:
    def __init__(self, agent: Any, log: list[str]) -> None:
        self.agent = agent
        self.log = log

    async def run_turn(self, turn: Any, report: Any) -> None:
        await self.agent.run_turn(turn, report)

    async def close(self) -> None:
        await self.agent.close()

    async def ran(self, *, command: str, output: str, exit_code: int | None) -> None:
        self.log.append(command)


class RanBackend:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend
        self.ran: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    async def start(self, start: Any) -> RanAgent:
        return RanAgent(await self.backend.start(start), self.ran)


class Backends:
    def __init__(self, backend: Any) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(self.backend)


async def run(client: AhpTestClient, chat: str, text: str, turn_id: str) -> dict[str, Any]:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-12-01T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    assert "rejectionReason" not in await client.answer_to(seq)
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"]["type"] in ("chat/turnComplete", "chat/error")
            and f["params"]["action"].get("turnId") == turn_id
        ),
        20,
    )
    action: dict[str, Any] = frame["params"]["action"]
    return action


@pytest.mark.anyio
async def test_a_bang_command_a_deny_rule_names_is_refused_and_others_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHELL", "/bin/bash")
    monkeypatch.setenv("HOME", str(tmp_path))
    work = tmp_path / "project"
    work.mkdir()
    (work / "keep.txt").write_text("kept")
    backend = RanBackend(ScriptedBackend(tmp_path / "scripted", Script(rules=[], default=[])))
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    plugins = [
        ("terminals", terminals_plugin),
        ("scripted", Backends(backend)),
        ("vscode", VSCodePlugin()),
    ]
    async with running_host(plugins, settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        await client.request(
            "createSession",
            {"channel": SESSION, "provider": "scripted", "workingDirectories": [work.as_uri()]},
        )
        state = (await client.request("subscribe", {"channel": SESSION}))["snapshot"]["state"]
        chat = state["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        push = {"terminalAutoApproveEnabled": True, "terminalAutoApproveRules": RULES}
        seq = await client.dispatch("ahp-root://", {"type": "root/configChanged", "config": push})
        assert "rejectionReason" not in await client.answer_to(seq)

        end = await run(client, chat, "!echo before && rm keep.txt", "t1")
        assert end["type"] == "chat/error"
        message = end["part"]["error"]["message"]
        assert "denied by the rule rm" in message and "`rm keep.txt`" in message
        assert (work / "keep.txt").exists() and backend.ran == []

        end = await run(client, chat, "!echo hello > made.txt", "t2")
        assert end["type"] == "chat/turnComplete"
        assert (work / "made.txt").read_text().strip() == "hello"
        end = await run(client, chat, "!touch untold.txt", "t3")  # no rule: typed, so it runs
        assert end["type"] == "chat/turnComplete" and (work / "untold.txt").exists()

        # Switched off in VS Code: the rules say nothing.
        off = {"terminalAutoApproveEnabled": False}
        seq = await client.dispatch("ahp-root://", {"type": "root/configChanged", "config": off})
        assert "rejectionReason" not in await client.answer_to(seq)
        end = await run(client, chat, "!rm keep.txt", "t4")
        assert end["type"] == "chat/turnComplete"
        assert not (work / "keep.txt").exists()
        assert backend.ran == ["echo hello > made.txt", "touch untold.txt", "rm keep.txt"]
