"""A host answers its first client without loading what only later requests need."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

from ahpcore.protocol.wire import assert_valid_frame

#: Loaded only when a request needs them: pydantic (the handshake is checked without
#: it), the full protocol models (hundreds of classes), the Claude SDK (a chat on the claude backend), the YAML parser (the
#: scripted demo's script, read by its first turn); the scripted runner, its step
#: classes and its loader (a chat's first turn); the files plugin's watcher and
#: watchfiles under it (the first resource watch); git's operations and pull
#: requests (the first changeset whose operations are asked for).
HEAVY = (
    "pydantic",
    "pydantic_core",
    "ahpcore.protocol._generated.models",
    "claude_agent_sdk",
    "yaml",
    "ahp_scripted.runner",
    "ahp_scripted.script",
    "ahp_scripted.loader",
    "ahp_files.watch",
    "watchfiles",
    "ahp_git.operations",
    "ahp_git.pulls",
)

SCRIPT = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path

    import anyio
    from websockets.asyncio.client import connect

    from ahpcore.host import Host, HostSettings
    from ahpcore.plugins import PluginManager
    from ahpcore.transports.websocket import start_websocket_server

    async def main():
        with tempfile.TemporaryDirectory() as tmp:
            host = Host(PluginManager(), HostSettings(port=0, state_dir=Path(tmp)))
            async with host:
                server = await start_websocket_server(
                    host.serve_connection,
                    host="127.0.0.1",
                    port=0,
                    token=None,
                    max_frame_bytes=1 << 20,
                    compression=False,
                )
                port = next(iter(server.sockets)).getsockname()[1]
                async with connect(f"ws://127.0.0.1:{port}/") as ws:
                    for ident, method, params in (
                        (1, "initialize", {"protocolVersions": ["1.0.0"], "clientId": "a"}),
                        (2, "ping", {}),
                        (3, "initialize", {"protocolVersions": "1.0.0", "clientId": "b"}),
                        (4, "listSessions", {"limit": 5}),
                        (5, "subscribe", {"channel": "ahp-root://"}),
                    ):
                        await ws.send(json.dumps(
                            {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
                        ))
                        print(json.dumps(json.loads(await ws.recv())))
                print(json.dumps(sorted(m for m in sys.argv[1:] if m in sys.modules)))
                print(json.dumps(sorted(n for n in host.plugins.names() if n != "core")))
                server.close()
                await server.wait_closed()

    anyio.run(main)
    """
)


def _checked(answers: list[str], methods: list[str]) -> list[dict[str, Any]]:
    """The child's answers, each through the strict wire validator in this process
    (the child must not load the models the validator is built on)."""
    frames = [json.loads(answer) for answer in answers]
    for frame, method in zip(frames, methods, strict=True):
        assert_valid_frame(frame, direction="server", request_method=method)
    return frames


def test_a_first_client_loads_neither_pydantic_nor_the_full_models_nor_the_claude_sdk():
    env = {**os.environ, "AHP_CLAUDE_PROBE": "0", "AHP_CLAUDE_WATCH": "0"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    *answers, loaded, plugins = [
        line for line in done.stdout.splitlines() if line.startswith(("{", "["))
    ]
    first, pong, bad, listed, subscribed = _checked(
        answers, ["initialize", "ping", "initialize", "listSessions", "subscribe"]
    )
    assert first["result"]["protocolVersion"] == "1.0.0"
    assert pong["id"] == 2 and "error" not in pong
    # Bad handshake params are still refused, naming the field.
    assert bad["error"]["code"] == -32602
    assert "protocolVersions" in bad["error"]["message"]
    # The first requests a client makes after the handshake are checked without it too.
    assert "items" in listed["result"]
    assert subscribed["result"]["snapshot"]["state"]["agents"]
    assert json.loads(loaded) == []
    # ... while the plugins that own them were loaded and registered.
    installed = {ep.name for ep in importlib.metadata.entry_points(group="ahp")}
    assert json.loads(plugins) == sorted(installed)
    assert {"claude", "files", "git", "scripted", "terminals"} <= installed


OFF_LOOP = textwrap.dedent(
    """
    import json, sys, tempfile, threading
    from pathlib import Path

    import anyio
    from websockets.asyncio.client import connect

    from ahpcore.host import Host, HostSettings
    from ahpcore.plugins import PluginManager
    from ahpcore.transports.websocket import start_websocket_server

    FULL = "ahpcore.protocol._generated.models"
    built_in = []

    class Watch:  # notes which thread imports the full models
        def find_spec(self, name, path=None, target=None):
            if name == FULL:
                built_in.append(threading.current_thread() is threading.main_thread())
            return None

    sys.meta_path.insert(0, Watch())

    async def main():
        with tempfile.TemporaryDirectory() as tmp:
            host = Host(PluginManager(), HostSettings(port=0, state_dir=Path(tmp)))
            async with host:
                server = await start_websocket_server(
                    host.serve_connection, host="127.0.0.1", port=0, token=None,
                    max_frame_bytes=1 << 20, compression=False,
                )
                port = next(iter(server.sockets)).getsockname()[1]
                async with connect(f"ws://127.0.0.1:{port}/") as ws:
                    for ident, method, params in (
                        (1, "initialize", {"protocolVersions": ["1.0.0"], "clientId": "a"}),
                        (2, "listSessions", {}),
                        (3, "listSessions", {"limit": "x"}),
                    ):
                        await ws.send(json.dumps(
                            {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
                        ))
                        print(json.dumps(json.loads(await ws.recv())))
                    print(json.dumps(built_in))
                    # An action can be of any type: checking it needs the full models.
                    await ws.send(json.dumps({
                        "jsonrpc": "2.0",
                        "method": "dispatchAction",
                        "params": {
                            "channel": "ahp-root://",
                            "clientSeq": 1,
                            "action": {"type": "session/titleChanged", "title": "t"},
                        },
                    }))
                    with anyio.fail_after(60):
                        while not built_in:
                            await anyio.sleep(0.01)
                print(json.dumps(built_in))
                server.close()
                await server.wait_closed()

    anyio.run(main)
    """
)


def test_requests_build_only_their_params_and_an_action_builds_the_rest_off_the_loop():
    env = {**os.environ, "AHP_CLAUDE_PROBE": "0", "AHP_CLAUDE_WATCH": "0"}
    done = subprocess.run(
        [sys.executable, "-c", OFF_LOOP],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("{", "["))]
    first, listed, bad = _checked(lines[:3], ["initialize", "listSessions", "listSessions"])
    before_action, after_action = (json.loads(line) for line in lines[3:])
    assert first["result"]["protocolVersion"] == "1.0.0"
    assert "items" in listed["result"]
    # The params' own module checks what the full models checked.
    assert bad["error"]["code"] == -32602 and "limit" in bad["error"]["message"]
    # Listing sessions built none of the other classes: its first answer never waits
    # for them.
    assert before_action == []
    # The first action built them once, and not in the thread running the event loop.
    assert after_action == [False]
