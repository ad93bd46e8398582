"""The root channel: agents from backends, config contributed by plugins, build facts."""

from __future__ import annotations

import platform

import pytest

from ahpcore.hookspecs import hookimpl
from ahpcore.plugins import PluginError

pytestmark = pytest.mark.anyio


class EchoBackend:
    provider = "echo"

    def agents(self):
        return [
            {"provider": "echo", "displayName": "Echo", "description": "says it back", "models": []}
        ]


class BackendPlugin:
    def __init__(self, backend):
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host, register):
        register(self.backend)


class ConfigPlugin:
    @hookimpl
    def ahp_root_config(self, host):
        return {"defaultShell": {"type": "string", "title": "Default shell"}}


async def test_root_lists_agents_from_backends_and_config_from_plugins(ahp_host):
    plugins = [("echo", BackendPlugin(EchoBackend())), ("shell", ConfigPlugin())]
    async with ahp_host(plugins=plugins) as running:
        client = await running.connect()
        root = (await client.initialize())["snapshots"][0]["state"]
        assert root["agents"] == EchoBackend().agents()
        properties = root["config"]["schema"]["properties"]
        assert set(properties) == {"clientQueueBytes", "replayBytes", "defaultShell"}
        assert root["_meta"]["ahp.plugins"] == ["core", "echo", "shell"]
        seq = await client.dispatch(
            "ahp-root://", {"type": "root/configChanged", "config": {"defaultShell": "/bin/zsh"}}
        )
        assert "rejectionReason" not in await client.answer_to(seq)


async def test_a_protocol_only_host_has_no_agents(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect()
        root = (await client.initialize())["snapshots"][0]["state"]
        assert root["agents"] == []
        assert root["terminals"] == []
        assert root["_meta"]["ahp.version"]
        assert root["_meta"]["ahp.python"] == platform.python_version()


async def test_two_plugins_claiming_one_provider_is_an_error_naming_both(ahp_host):
    plugins = [("first", BackendPlugin(EchoBackend())), ("second", BackendPlugin(EchoBackend()))]
    with pytest.raises(PluginError, match="'echo' is claimed by both 'first' and 'second'"):
        async with ahp_host(plugins=plugins):
            pass


async def test_a_plugin_cannot_replace_a_protocol_method(ahp_host):
    class Hijack:
        @hookimpl
        def ahp_rpc_methods(self, host, register):
            register("subscribe", lambda client, params: {})

    with pytest.raises(PluginError, match="'subscribe' is a protocol method; plugin 'hijack'"):
        async with ahp_host(plugins=[("hijack", Hijack())]):
            pass
