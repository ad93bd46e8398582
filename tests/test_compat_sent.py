"""What a client really receives is never a "not sent" row of the compatibility table.

The table reads what the host sends from the code; this drives a host with the
scripted backend and ahp-files over real sockets (a turn, a file watch, a
resource another client publishes) and holds the table to every action,
notification and request that arrived.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from ahp_files import plugin as files_plugin
from ahp_scripted import plugin as scripted_plugin
from ahpcore import compat
from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio

ROOT = "ahp-root://"
SESSION = "scripted:/00000000-0000-4000-8000-0000000000c1"


def received(client: AhpTestClient) -> set[str]:
    """Every action type, notification and request the host sent this client."""
    names = set()
    for frame in client.frames:
        method = frame.get("method")
        if method == "action":
            if "rejectionReason" not in frame["params"]:
                names.add(frame["params"]["action"]["type"])
        elif isinstance(method, str):
            names.add(method)
    return names


async def publish(editor: AhpTestClient) -> None:
    """Answer what the host relays to the client publishing ``virtual://editor/...``."""
    while True:
        try:
            frame = await editor.recv(timeout=3600)
        except ConnectionClosed:
            return
        if "method" in frame and "id" in frame:
            answer: dict[str, Any] = {"result": {"data": "draft", "encoding": "utf-8"}}
            if frame["method"] != "resourceRead":
                answer = {"error": {"code": -32601, "message": "not served here"}}
            await editor.send({"jsonrpc": "2.0", "id": frame["id"], **answer})


async def test_nothing_a_client_received_is_reported_not_sent(ahp_host, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    plugins = [("scripted", scripted_plugin), ("files", files_plugin)]
    async with ahp_host(plugins=plugins) as running:
        client = await running.connect("reader")
        await client.initialize()
        editor = await running.connect("editor")
        await editor.initialize([])
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(publish, editor)

            await client.request(
                "createSession",
                {"channel": SESSION, "provider": "scripted", "workingDirectories": [work.as_uri()]},
            )
            state = (await client.request("subscribe", {"channel": SESSION}))["snapshot"]["state"]
            chat = state["defaultChat"]
            await client.request("subscribe", {"channel": chat})
            await client.dispatch(
                chat,
                {
                    "type": "chat/turnStarted",
                    "turnId": "t1",
                    "startedAt": "2026-11-29T00:00:00.000Z",
                    "message": {"text": "hello", "origin": {"kind": "user"}},
                },
            )
            await client.recv_until(
                lambda f: (
                    f.get("method") == "action"
                    and f["params"]["action"]["type"] == "chat/turnComplete"
                )
            )

            # A watch ahp-files keeps: poked until a change comes back (its watcher
            # starts in a thread of its own).
            watch = await client.request("createResourceWatch", {"uri": work.as_uri()})
            await client.request("subscribe", {"channel": watch["channel"]})
            with anyio.fail_after(20):
                for attempt in range(200):
                    (work / "poke.txt").write_text(str(attempt))
                    try:
                        await client.recv_until(
                            lambda f: (
                                f.get("method") == "action"
                                and f["params"]["action"]["type"] == "resourceWatch/changed"
                            ),
                            timeout=0.3,
                        )
                        break
                    except TimeoutError:
                        continue

            # A resource another client publishes: the host asks that client for it.
            read = await client.request(
                "resourceRead", {"channel": ROOT, "uri": "virtual://editor/doc.txt"}
            )
            assert read["data"] == "draft"
            tasks.cancel_scope.cancel()

        got = received(client) | received(editor)
        assert {"resourceWatch/changed", "resourceRead", "chat/turnComplete"} <= got
        rows = compat.rows_of(running.host)
        said_not_sent = {row.name: row.detail for row in rows if row.status == "not sent"}
        wrong = {name: said_not_sent[name] for name in got if name in said_not_sent}
        assert not wrong, f"the table says these are never sent, yet a client got them: {wrong}"
