"""What a careless or hostile client can point resource* at: pipes, devices, huge files,
names no filesystem takes. Each is refused promptly, and the host keeps serving."""

from __future__ import annotations

import os

import anyio
import pytest
from files_support import Tree, call, error_of

pytestmark = pytest.mark.anyio

#: Long enough for a thread hop, far shorter than a hang.
PROMPT = 10.0


async def still_serving(client, tree: Tree) -> None:
    read = await call(client, "resourceRead", {"uri": tree.uri("a.txt")})
    assert read["data"] == "hello"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
async def test_a_named_pipe_is_refused_not_waited_on(files_host, tree: Tree):
    os.mkfifo(tree.work / "pipe")
    async with files_host() as (_, client):
        with anyio.fail_after(PROMPT):
            read = await error_of(client, "resourceRead", {"uri": tree.uri("pipe")})
            appended = await error_of(
                client,
                "resourceWrite",
                {"uri": tree.uri("pipe"), "data": "x", "encoding": "utf-8", "mode": "append"},
            )
            replaced = await error_of(
                client, "resourceWrite", {"uri": tree.uri("pipe"), "data": "x", "encoding": "utf-8"}
            )
            copied = await error_of(
                client,
                "resourceCopy",
                {"source": tree.uri("pipe"), "destination": tree.uri("copy")},
            )
        for error in (read, appended, replaced, copied):
            assert error["code"] == -32602 and "not a regular file" in error["message"]
        assert (tree.work / "pipe").is_fifo() and not (tree.work / "copy").exists()
        await still_serving(client, tree)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
async def test_an_endless_device_is_refused_even_with_the_whole_machine_in_reach(
    files_host, tree: Tree, monkeypatch
):
    # /dev/zero says it is 0 bytes long and never ends: a read that trusts the size
    # eats memory until the host dies.
    monkeypatch.setenv("AHP_FILES_REACH", "machine")
    async with files_host() as (_, client):
        with anyio.fail_after(PROMPT):
            error = await error_of(client, "resourceRead", {"uri": "file:///dev/zero"})
        assert error["code"] == -32602 and "not a regular file" in error["message"]
        await still_serving(client, tree)


async def test_a_huge_sparse_file_is_refused_with_its_size(files_host, tree: Tree):
    with open(tree.work / "sparse", "wb") as out:
        out.truncate(5 << 30)
    async with files_host() as (_, client):
        with anyio.fail_after(PROMPT):
            error = await error_of(client, "resourceRead", {"uri": tree.uri("sparse")})
        assert error["code"] == -32602 and str(5 << 30) in error["message"]


async def test_names_no_filesystem_takes_are_refused_as_bad_params(files_host, tree: Tree):
    async with files_host() as (_, client):
        long_name = await error_of(client, "resourceRead", {"uri": tree.uri("x" * 300)})
        assert long_name["code"] == -32602 and "too long" in long_name["message"]
        nul = await error_of(client, "resourceRead", {"uri": tree.uri() + "/a%00b"})
        assert nul["code"] == -32602 and "NUL" in nul["message"]
        other_host = tree.uri("a.txt").replace("file://", "file://elsewhere")
        assert (await error_of(client, "resourceRead", {"uri": other_host}))["code"] == -32009
        # Percent-encoded dots and slashes are names, never a way up.
        for sneaky in ("%2e%2e/outside/secret.txt", "sub%2f..%2f..%2foutside%2fsecret.txt"):
            error = await error_of(client, "resourceRead", {"uri": f"{tree.uri()}/{sneaky}"})
            assert error["code"] in (-32008, -32009)
        await still_serving(client, tree)


async def test_one_connection_cannot_take_every_watch(files_host, tree: Tree, monkeypatch):
    import ahpcore.services.resources as resources

    monkeypatch.setattr(resources, "MAX_WATCHES_PER_CLIENT", 2)
    async with files_host() as (running, client):
        first = await call(client, "createResourceWatch", {"uri": tree.uri()})
        await client.request("subscribe", {"channel": first["channel"]})
        await call(client, "createResourceWatch", {"uri": tree.uri("sub")})
        refused = await error_of(client, "createResourceWatch", {"uri": tree.uri()})
        assert refused["code"] == -32602 and "(2)" in refused["message"]
        other = await running.connect("c2")
        await other.initialize()
        await call(other, "createResourceWatch", {"uri": tree.uri()})
        # Releasing one makes room again.
        await client.notify("unsubscribe", {"channel": first["channel"]})
        await client.sync()
        await call(client, "createResourceWatch", {"uri": tree.uri()})


async def test_a_write_far_past_the_end_is_refused_not_filled_with_zeros(files_host, tree: Tree):
    # A position of 1e29 once meant a gap of zeros that filled the disk.
    async with files_host() as (_, client):
        for mode in ("truncate", "append", "insert"):
            with anyio.fail_after(PROMPT):
                error = await error_of(
                    client,
                    "resourceWrite",
                    {
                        "uri": tree.uri("a.txt"),
                        "data": "x",
                        "encoding": "utf-8",
                        "mode": mode,
                        "position": 10**29,
                    },
                )
            assert error["code"] == -32602 and "past the end" in error["message"], mode
        assert (tree.work / "a.txt").read_text() == "hello"
        assert [p.name for p in tree.work.iterdir() if p.name.endswith(".ahp-tmp")] == []
