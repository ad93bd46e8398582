"""A protocol-only host (``ahp serve --no-plugins``) is a supported mode.

It speaks the whole protocol surface it can without a plugin, and refuses the
rest by naming the missing port and the distribution that would provide it.
"""

from __future__ import annotations

import pytest

from ahpcore.protocol.errors import METHOD_NOT_FOUND

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"

#: method, params, the port it needs, a distribution that would provide it.
REFUSED = [
    (
        "createSession",
        {"channel": "ahp-session://scripted/one", "provider": "scripted"},
        "backends",
        "ahp-scripted",
    ),
    ("createSession", {"channel": "ahp-session://claude/one"}, "backends", "ahp-claude"),
    ("createTerminal", {"channel": "ahp-terminal://t1"}, "terminals", "ahp-terminals"),
    ("resourceRead", {"channel": ROOT, "uri": "file:///etc/hostname"}, "resources", "ahp-files"),
    ("resourceList", {"channel": ROOT, "uri": "file:///"}, "resources", "ahp-files"),
    ("createResourceWatch", {"channel": ROOT, "uri": "file:///"}, "resources", "ahp-files"),
    (
        "invokeChangesetOperation",
        {"channel": ROOT, "changeset": "x", "operation": "y"},
        "changes",
        "ahp-git",
    ),
]


async def test_a_client_initializes_subscribes_and_lists_no_sessions(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        result = await client.initialize(subscriptions=[])
        assert result["snapshots"] == []
        subscribed = await client.request("subscribe", {"channel": ROOT})
        root = subscribed["snapshot"]["state"]
        assert root["agents"] == []
        assert root["_meta"]["ahp.plugins"] == ["core"]
        assert await client.request("listSessions", {"channel": ROOT}) == {"items": []}


@pytest.mark.parametrize(("method", "params", "port", "plugin"), REFUSED)
async def test_port_commands_are_refused_naming_port_and_plugin(
    ahp_host, method, params, port, plugin
):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        await client.initialize()
        frame = await client.request_frame(method, params)
        error = frame["error"]
        assert error["code"] == METHOD_NOT_FOUND
        assert method in error["message"]
        assert f"the {port} port" in error["message"]
        assert plugin in error["message"]
        # The host keeps serving after a refusal.
        assert await client.request("ping", {"channel": ROOT}) is None


async def test_with_a_backend_but_no_files_plugin_resource_reads_name_the_plugin(ahp_host):
    from ahp_scripted import plugin as scripted_plugin

    async with ahp_host([("scripted", scripted_plugin)]) as running:
        client = await running.connect()
        await client.initialize()
        frame = await client.request_frame(
            "resourceRead", {"channel": ROOT, "uri": "file:///etc/hostname"}
        )
        assert frame["error"]["code"] == METHOD_NOT_FOUND
        assert "the resources port" in frame["error"]["message"]
        assert "ahp-files" in frame["error"]["message"]
