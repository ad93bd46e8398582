"""Resources a client publishes as ``<scheme>://<clientId>/...``, routed by the core.

No resources port is installed here: forwarding needs no filesystem.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"
REFUSAL = {"code": -32009, "message": "the editor keeps that buffer to itself", "data": {}}


@dataclass
class Publisher:
    """A client serving ``virtual://<its id>/...`` from memory, as an editor would its buffers."""

    client: AhpTestClient
    files: dict[str, str] = field(default_factory=dict)
    asked: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Every other frame it was sent, in order.
    received: list[dict[str, Any]] = field(default_factory=list)
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        uri = params.get("uri", "")
        if uri.endswith("/private.txt"):
            return {"error": REFUSAL}
        if method == "resourceRead":
            if uri not in self.files:
                return {"error": {"code": -32008, "message": f"no buffer {uri}"}}
            return {"result": {"data": self.files[uri], "encoding": "utf-8"}}
        if method == "resourceWrite":
            self.files[uri] = params["data"]
            return {"result": {}}
        if method == "resourceResolve":
            return {"result": {"uri": uri, "type": "file", "size": len(self.files.get(uri, ""))}}
        if method == "resourceList":
            names = sorted(u.rsplit("/", 1)[1] for u in self.files)
            return {"result": {"entries": [{"name": n, "type": "file"} for n in names]}}
        if method == "resourceMove":
            self.files[params["destination"]] = self.files.pop(params["source"])
            return {"result": {}}
        if method == "createResourceWatch":
            return {"result": {"channel": "ahp-resource-watch:/editor-watch-1"}}
        return {"error": {"code": -32601, "message": f"{method} is not served here"}}

    async def next_frame(self, predicate) -> dict[str, Any]:
        """The first frame other than a request that matches (the serve loop owns the socket)."""
        with anyio.fail_after(10):
            while True:
                for frame in self.received:
                    if predicate(frame):
                        return frame
                self._arrived = anyio.Event()
                await self._arrived.wait()

    async def serve(self) -> None:
        while True:
            try:
                frame = await self.client.recv(timeout=3600)
            except ConnectionClosed:
                return  # the publisher left
            if not ("method" in frame and "id" in frame):
                self.received.append(frame)
                self._arrived.set()
                continue
            self.asked.append((frame["method"], frame["params"]))
            await self.client.send(
                {
                    "jsonrpc": "2.0",
                    "id": frame["id"],
                    **self.answer(frame["method"], frame["params"]),
                }
            )


@asynccontextmanager
async def publishing(ahp_host) -> AsyncIterator[tuple[Any, AhpTestClient, Publisher]]:
    async with ahp_host(no_plugins=True) as running:
        reader = await running.connect("reader")
        await reader.initialize()
        editor = await running.connect("editor")
        await editor.initialize()
        publisher = Publisher(editor, {"virtual://editor/doc.txt": "draft"})
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(publisher.serve)
            yield running, reader, publisher
            tasks.cancel_scope.cancel()


async def test_a_client_reads_and_writes_what_another_publishes(ahp_host):
    async with publishing(ahp_host) as (_, reader, publisher):
        read = await reader.request(
            "resourceRead", {"channel": ROOT, "uri": "virtual://editor/doc.txt"}
        )
        assert read == {"data": "draft", "encoding": "utf-8"}
        await reader.request(
            "resourceWrite",
            {
                "channel": ROOT,
                "uri": "virtual://editor/doc.txt",
                "data": "final",
                "encoding": "utf-8",
            },
        )
        assert publisher.files["virtual://editor/doc.txt"] == "final"
        resolved = await reader.request(
            "resourceResolve", {"channel": ROOT, "uri": "virtual://editor/doc.txt"}
        )
        assert resolved == {"uri": "virtual://editor/doc.txt", "type": "file", "size": 5}
        listed = await reader.request("resourceList", {"channel": ROOT, "uri": "virtual://editor/"})
        assert listed == {"entries": [{"name": "doc.txt", "type": "file"}]}
        await reader.request(
            "resourceMove",
            {
                "channel": ROOT,
                "source": "virtual://editor/doc.txt",
                "destination": "virtual://editor/renamed.txt",
            },
        )
        assert list(publisher.files) == ["virtual://editor/renamed.txt"]
        # The publisher was asked with the reader's own params.
        assert publisher.asked[0] == (
            "resourceRead",
            {"channel": ROOT, "uri": "virtual://editor/doc.txt"},
        )


async def test_a_refusal_comes_back_verbatim_and_is_logged(ahp_host, caplog):
    caplog.set_level(logging.INFO, logger="ahpcore.services.resources")
    async with publishing(ahp_host) as (_, reader, _publisher):
        frame = await reader.request_frame(
            "resourceRead", {"channel": ROOT, "uri": "virtual://editor/private.txt"}
        )
        assert frame["error"] == REFUSAL
        missing = await reader.request_frame(
            "resourceRead", {"channel": ROOT, "uri": "virtual://editor/none.txt"}
        )
        assert missing["error"] == {
            "code": -32008,
            "message": "no buffer virtual://editor/none.txt",
        }
    [record] = [r for r in caplog.records if "private.txt" in r.getMessage()]
    message = record.getMessage()
    assert "resourceRead" in message and "editor" in message and "-32009" in message


async def test_move_and_copy_across_two_peers_are_refused(ahp_host):
    async with publishing(ahp_host) as (running, reader, publisher):
        other = await running.connect("other")
        await other.initialize()
        for method, destination in [
            ("resourceMove", "virtual://other/doc.txt"),
            ("resourceCopy", "file:///tmp/doc.txt"),
            ("resourceCopy", "virtual://reader/doc.txt"),
        ]:
            frame = await reader.request_frame(
                method,
                {"channel": ROOT, "source": "virtual://editor/doc.txt", "destination": destination},
            )
            assert frame["error"]["code"] == -32602, (method, destination)
            assert "neither" in frame["error"]["message"]
        assert not [m for m, _ in publisher.asked if m in ("resourceMove", "resourceCopy")]


async def test_a_watch_on_published_resources_is_relayed_from_its_owner_only(ahp_host):
    async with publishing(ahp_host) as (running, reader, publisher):
        created = await reader.request(
            "createResourceWatch",
            {"channel": ROOT, "uri": "virtual://editor/", "recursive": True},
        )
        channel = created["channel"]
        assert channel == "ahp-resource-watch:/editor-watch-1"
        snapshot = (await reader.request("subscribe", {"channel": channel}))["snapshot"]
        assert snapshot["state"] == {"root": "virtual://editor/", "recursive": True}
        change = {"uri": "virtual://editor/doc.txt", "type": "updated"}
        action = {"type": "resourceWatch/changed", "changes": {"items": [change]}}

        seq = await publisher.client.dispatch(channel, action)
        echo = (
            await publisher.next_frame(
                lambda f: (
                    f.get("method") == "action"
                    and f["params"].get("origin", {}).get("clientSeq") == seq
                )
            )
        )["params"]
        assert "rejectionReason" not in echo
        relayed = await reader.recv_until(
            lambda f: f.get("method") == "action" and f["params"]["channel"] == channel
        )
        assert relayed["params"]["action"] == action
        assert relayed["params"]["origin"] == {"clientId": "editor", "clientSeq": seq}

        seq = await reader.dispatch(channel, action)
        refused = await reader.answer_to(seq)
        assert "only client editor" in refused["rejectionReason"]

        # The publisher leaving ends the watch: nothing more can come through it.
        await publisher.client.close()
        with anyio.fail_after(5):
            while channel in running.host.resources.watches:
                await anyio.sleep(0.01)
        assert channel not in running.host.engine.channels


async def test_file_uris_need_the_resources_port(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect("c")
        await client.initialize()
        frame = await client.request_frame(
            "resourceRead", {"channel": ROOT, "uri": "file:///etc/hostname"}
        )
        assert frame["error"]["code"] == -32601
        assert "resources port" in frame["error"]["message"]
        # A URI naming no connected client is not forwarded anywhere.
        frame = await client.request_frame(
            "resourceRead", {"channel": ROOT, "uri": "virtual://nobody/x"}
        )
        assert frame["error"]["code"] == -32601


class BeforeSide:
    """A changes port that serves the before side of an edit under its own scheme."""

    def serves(self, uri):
        return uri.startswith("before:")

    async def read(self, params):
        return {"data": "as it was", "encoding": "utf-8"}


async def test_readers_are_asked_first_and_may_pass(ahp_host):
    from ahpcore import hookimpl

    class Changes:
        @hookimpl
        def ahp_changes(self, host):
            return BeforeSide()

    async with ahp_host(plugins=[("changes", Changes())]) as running:
        client = await running.connect("c")
        await client.initialize()
        read = await client.request("resourceRead", {"channel": ROOT, "uri": "before:/a.txt"})
        assert read == {"data": "as it was", "encoding": "utf-8"}

        async def virtual(params):
            return {"data": "from a plugin", "encoding": "utf-8"} if "v:" in params["uri"] else None

        running.host.resources.readers.append(virtual)
        read = await client.request("resourceRead", {"channel": ROOT, "uri": "v:/x"})
        assert read["data"] == "from a plugin"
        passed = await client.request_frame("resourceRead", {"channel": ROOT, "uri": "file:///x"})
        assert "resources port" in passed["error"]["message"]  # both passed it on
