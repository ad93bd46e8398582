"""A client publishing resources that answers badly, late or never, or leaves mid-request.

The asker always gets a well-formed answer that says what went wrong (the test
client checks every frame it receives against the protocol), and the host keeps
serving both.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import ahpcore.services.resources as resources
from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"
READ = {"channel": ROOT, "uri": "virtual://editor/doc.txt"}


async def two_clients(running: Any) -> tuple[AhpTestClient, AhpTestClient]:
    reader = await running.connect("reader")
    await reader.initialize()
    editor = await running.connect("editor")
    await editor.initialize()
    return reader, editor


async def asked_and_answered(
    reader: AhpTestClient, editor: AhpTestClient, answer: dict[str, Any]
) -> dict[str, Any]:
    """The frame ``reader`` gets for a resourceRead the editor answers with ``answer``."""
    got: dict[str, Any] = {}

    async def ask() -> None:
        got.update(await reader.request_frame("resourceRead", READ))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ask)
        request = await editor.recv()
        assert request["method"] == "resourceRead"
        await editor.send({"jsonrpc": "2.0", "id": request["id"], **answer})
    return got


async def still_served(reader: AhpTestClient, editor: AhpTestClient) -> None:
    answer = {"result": {"data": "draft", "encoding": "utf-8"}}
    frame = await asked_and_answered(reader, editor, answer)
    assert frame["result"] == {"data": "draft", "encoding": "utf-8"}


@pytest.mark.parametrize(
    "result",
    [{"bogus": 1}, "a string", None, {"data": 5, "encoding": "utf-8"}],
    ids=["unknown-keys", "string", "null", "wrong-type"],
)
async def test_a_malformed_result_is_refused_not_relayed(ahp_host, result):
    async with ahp_host(no_plugins=True) as running:
        reader, editor = await two_clients(running)
        frame = await asked_and_answered(reader, editor, {"result": result})
        error = frame["error"]
        assert error["code"] == -32603
        assert "client editor answered resourceRead" in error["message"]
        assert "not a resourceRead result" in error["message"]
        await still_served(reader, editor)


async def test_a_malformed_error_is_refused_not_relayed(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        reader, editor = await two_clients(running)
        frame = await asked_and_answered(
            reader, editor, {"error": {"code": "not a number", "message": 5}}
        )
        assert frame["error"]["code"] == -32603
        assert "malformed error" in frame["error"]["message"]
        # A well-formed refusal still comes back verbatim.
        refusal = {"code": -32009, "message": "kept private", "data": {"why": [1, [2]]}}
        assert (await asked_and_answered(reader, editor, {"error": refusal}))["error"] == refusal
        await still_served(reader, editor)


async def test_a_publisher_that_never_answers_times_out(ahp_host, monkeypatch):
    monkeypatch.setattr(resources, "FORWARD_TIMEOUT", 0.5)
    async with ahp_host(no_plugins=True) as running:
        reader, editor = await two_clients(running)
        frame = await reader.request_frame("resourceRead", READ)
        assert frame["error"]["code"] == -32603
        assert "did not answer resourceRead" in frame["error"]["message"]
        stale = await editor.recv()
        # An answer after the deadline is dropped, not sent to anyone.
        await editor.send({"jsonrpc": "2.0", "id": stale["id"], "result": {"bogus": 1}})
        await still_served(reader, editor)


async def test_a_publisher_leaving_mid_request_is_told_to_the_asker(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        reader, editor = await two_clients(running)
        got: dict[str, Any] = {}

        async def ask() -> None:
            got.update(await reader.request_frame("resourceRead", READ))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ask)
            assert (await editor.recv())["method"] == "resourceRead"
            await editor.close()
        assert got["error"]["code"] == -32008
        assert "left before answering" in got["error"]["message"]
        # With the publisher gone the URI names nobody, and the host says so.
        gone = await reader.request_frame("resourceRead", READ)
        assert gone["error"]["code"] == -32601


async def test_a_reconnected_publisher_is_asked_on_its_newest_connection(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        reader, _ = await two_clients(running)
        # The editor reconnects before its old connection is found dead; several times,
        # so a lucky ordering of the host's bookkeeping cannot pass this by chance.
        for _ in range(5):
            newest = await running.connect("editor")
            await newest.initialize()
        frame = await asked_and_answered(
            reader, newest, {"result": {"data": "fresh", "encoding": "utf-8"}}
        )
        assert frame["result"]["data"] == "fresh"
