"""A real third-party ACP agent: ``@zed-industries/claude-agent-acp`` from npm, its Claude
Code answering from the scripted Anthropic Messages API the Claude backend's tests use.

The adapter is found in ``.venv/node``, where ``.ci/run`` installs it, or as
``claude-agent-acp`` on ``PATH``; it starts the Claude Code CLI its own npm
dependency bundles. Where node or the adapter is missing the tests skip and say so.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from acp_support import acp_host, chat_state, is_action, parts, start_turn, turn_end

from ahpcore.testing import AhpTestClient, BackendUnderTest, RunningHost, backend_checks

ROOT = Path(__file__).resolve().parents[3]
CLAUDE_TESTS = ROOT / "plugins" / "claude" / "tests"
if str(CLAUDE_TESTS) not in sys.path:
    sys.path.append(str(CLAUDE_TESTS))

from anthropic_server import AnthropicServer, Hold, Text, ToolUse, reply  # noqa: E402

pytestmark = pytest.mark.anyio

PROVIDER = "claude-acp"
INSTALLED = ROOT / ".venv" / "node" / "node_modules" / ".bin" / "claude-agent-acp"


def find_adapter() -> tuple[str | None, str]:
    """The adapter's command, or None and why it is not here."""
    if shutil.which("node") is None:
        return None, "node is not installed (claude-agent-acp runs on Node.js)"
    if INSTALLED.exists():
        return str(INSTALLED), ""
    found = shutil.which("claude-agent-acp")
    if found is not None:
        return found, ""
    return None, (
        "claude-agent-acp is not installed: `npm install --prefix .venv/node "
        "@zed-industries/claude-agent-acp` (as .ci/run does)"
    )


@pytest.fixture
def api() -> Any:
    server = AnthropicServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def claude_acp(tmp_path: Path, api: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter configured as the ACP agent ``claude-acp``, on the scripted API."""
    command, why = find_adapter()
    if command is None:
        pytest.skip(why)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    env = {
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        # Set, the adapter asks the CLI to skip permissions, which it refuses as root.
        "IS_SANDBOX": "",
    }
    agents = {PROVIDER: {"command": command, "env": env, "displayName": "Claude (ACP)"}}
    monkeypatch.setenv("AHP_ACP_AGENTS", json.dumps(agents))
    monkeypatch.setenv("AHP_ACP_PROBE", "0")  # one agent process per test is enough


async def _open(running: RunningHost, workdir: Path) -> tuple[AhpTestClient, str, str]:
    client = await running.connect("c1")
    await client.initialize()
    session = f"{PROVIDER}:/00000000-0000-4000-8000-000000000001"
    await client.request(
        "createSession",
        {"channel": session, "provider": PROVIDER, "workingDirectories": [workdir.as_uri()]},
    )
    snapshot = await client.request("subscribe", {"channel": session})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return client, session, chat


async def test_the_claude_adapter_answers_a_turn_with_the_scripted_text(
    claude_acp: None, api: AnthropicServer, tmp_path: Path, workdir: Path
) -> None:
    api.script(reply("Hello over ACP"))
    async with acp_host(tmp_path / "state") as running:
        client, _, chat = await _open(running, workdir)
        await start_turn(client, chat, "say hello", "t1")
        end = await turn_end(client, chat, timeout=90)
        assert end["type"] == "chat/turnComplete", end
        state = await chat_state(client, chat)
        text = "".join(p["content"] for p in parts(state) if p["kind"] == "markdown")
        assert text == "Hello over ACP"
        assert "say hello" in api.main_requests()[0].tail_text()


async def test_the_claude_adapter_asks_before_a_shell_command_and_runs_it_once_allowed(
    claude_acp: None, api: AnthropicServer, tmp_path: Path, workdir: Path
) -> None:
    api.script(
        reply(ToolUse("Bash", {"command": "touch made && echo done", "description": "Make it"})),
        reply("Made it."),
    )
    async with acp_host(tmp_path / "state") as running:
        client, session, chat = await _open(running, workdir)
        await start_turn(client, chat, "make a file", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=90)
        request = needed["params"]["action"]["request"]
        assert request["kind"] == "toolConfirmation"
        call = request["toolCall"]
        # The adapter's own choices are offered as they are.
        assert {o["kind"] for o in call["options"]} >= {"approve", "deny"}
        assert not (workdir / "made").exists()
        once = next(
            o["id"] for o in call["options"] if o["kind"] == "approve" and "always" not in o["id"]
        )
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": call["toolCallId"],
                "approved": True,
                "confirmed": "user-action",
                "selectedOptionId": once,
            },
        )
        end = await turn_end(client, chat, timeout=90)
        assert end["type"] == "chat/turnComplete", end
        assert (workdir / "made").exists()
        state = await chat_state(client, chat)
        [tool] = [p["toolCall"] for p in parts(state) if p["kind"] == "toolCall"]
        assert (tool["status"], tool["confirmed"]) == ("completed", "user-action")
        assert parts(state)[-1]["content"] == "Made it."
        # The command's output went back to the model as the tool's result.
        [result] = api.main_requests()[-1].tool_results()
        assert "done" in json.dumps(result["content"])


#: The adapter through the backend conformance suite: any message is answered with
#: text, "slow" streams until the turn is cancelled.
CLAUDE_ACP = BackendUnderTest(provider=PROVIDER, host=acp_host, prompt="hello", slow_prompt="slow")


@backend_checks()
async def test_the_claude_adapter_passes_the_conformance_suite(
    check: Any, claude_acp: None, api: AnthropicServer, tmp_path: Path
) -> None:
    api.script(reply(Text("Working on it, slowly", hold=Hold()), match="slow"))
    await check(CLAUDE_ACP, tmp_path)
