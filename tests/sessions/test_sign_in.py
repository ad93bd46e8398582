"""The fourth kind of question: a tool call blocked on an MCP server's sign-in."""

from __future__ import annotations

import pytest

from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.ports.backend import Abilities
from ahpcore.testing import running_host
from tests.sessions.conftest import is_action, start_turn, turn_end

pytestmark = pytest.mark.anyio
RESOURCE = "https://mcp.example.test"


class SignInAgent:
    """Calls a tool of an MCP server that wants a sign-in, then uses the token it got."""

    async def run_turn(self, turn, report):
        report.tool_start("call-1", "search", mcp_server="mcp-docs")
        report.tool_running("call-1", tool_input="{}", invocation_message="Searching the docs")
        requirement = {"reason": "required", "resource": {"resource": RESOURCE}}
        token = await report.tool_auth("call-1", requirement)
        report.tool_complete("call-1", success=True, past_tense_message=f"Searched with {token}")

    async def close(self):
        pass


class SignInBackend:
    provider = "signin"
    abilities = Abilities()

    def agents(self):
        return [
            {"provider": "signin", "displayName": "Sign-in", "description": "asks", "models": []}
        ]

    async def start(self, start):
        return SignInAgent()

    async def catalogue(self):
        return []

    async def read_transcript(self, backend_id, reader):
        return False

    async def delete(self, backend_id):
        pass

    async def truncate(self, backend_id, turn_id):
        pass


class Plugin:
    @hookimpl
    def ahp_backends(self, host, register):
        register(SignInBackend())


async def test_a_blocked_tool_call_waits_for_authenticate_and_goes_on(tmp_path):
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path)
    async with running_host([("signin", Plugin())], settings=settings) as running:
        client = await running.connect("c1")
        await client.initialize()
        session = "signin:/00000000-0000-4000-8000-0000000000b1"
        await client.request("createSession", {"channel": session})
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        chat = state["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        await start_turn(client, chat, "search", "t1")
        blocked = await client.recv_until(is_action("chat/toolCallAuthRequired", chat))
        assert blocked["params"]["action"]["auth"]["resource"]["resource"] == RESOURCE
        needed = await client.recv_until(is_action("session/inputNeededSet", session))
        request = needed["params"]["action"]["request"]
        assert request["kind"] == "toolAuthentication"
        assert request["toolCall"]["status"] == "auth-required"
        assert request["toolCall"]["contributor"] == {"kind": "mcp", "customizationId": "mcp-docs"}
        assert await client.request("authenticate", {"resource": RESOURCE, "token": "tkn"}) == {}
        await client.recv_until(is_action("chat/toolCallAuthResolved", chat))
        await client.recv_until(is_action("session/inputNeededRemoved", session))
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await client.sync()
        final = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        call = final["turns"][0]["responseParts"][0]["toolCall"]
        assert call["status"] == "completed" and call["pastTenseMessage"] == "Searched with tkn"
