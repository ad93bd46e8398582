"""createResourceWatch over watchfiles: batches of changes, globs, release on unsubscribe."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from files_support import Tree, call, error_of

from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio


def changes_on(channel: str):
    def match(frame: dict[str, Any]) -> bool:
        return (
            frame.get("method") == "action"
            and frame["params"]["channel"] == channel
            and frame["params"]["action"]["type"] == "resourceWatch/changed"
        )

    return match


async def wait_until_watching(client: AhpTestClient, channel: str, tree: Tree) -> None:
    """The OS watcher starts in its own thread: poke a file until a change comes back."""
    poke = tree.work / "poke.txt"
    with anyio.fail_after(20):
        for attempt in range(200):
            poke.write_text(str(attempt))
            try:
                await client.recv_until(changes_on(channel), timeout=0.3)
                break
            except TimeoutError:
                continue
    await drain(client, channel)


async def drain(client: AhpTestClient, channel: str) -> None:
    while True:
        try:
            await client.recv_until(changes_on(channel), timeout=0.3)
        except TimeoutError:
            return


async def collect(client: AhpTestClient, channel: str, done) -> list[list[dict[str, Any]]]:
    """Batches until ``done(all changes so far)`` holds."""
    batches: list[list[dict[str, Any]]] = []
    with anyio.fail_after(15):
        while not done([c for batch in batches for c in batch]):
            frame = await client.recv_until(changes_on(channel))
            batches.append(frame["params"]["action"]["changes"]["items"])
    return batches


async def test_a_watch_reports_create_modify_delete_in_batches(files_host, tree: Tree):
    async with files_host() as (running, client):
        created = await call(
            client,
            "createResourceWatch",
            {"uri": tree.uri(), "recursive": True, "excludes": {"items": ["ignored/**", "*.log"]}},
        )
        channel = created["channel"]
        assert channel.startswith("ahp-resource-watch:/")
        snapshot = (await client.request("subscribe", {"channel": channel}))["snapshot"]
        assert snapshot["state"]["root"] == tree.uri() and snapshot["state"]["recursive"] is True
        await wait_until_watching(client, channel, tree)

        (tree.work / "ignored").mkdir()
        (tree.work / "ignored" / "x.txt").write_text("no")
        (tree.work / "noise.log").write_text("no")
        for n in range(20):
            (tree.work / "sub" / f"n{n}.txt").write_text("new")
        wanted = {tree.uri(f"sub/n{n}.txt") for n in range(20)}
        batches = await collect(
            client, channel, lambda seen: wanted <= {c["uri"] for c in seen if c["type"] == "added"}
        )
        assert len(batches) < 20  # coalesced, not one frame per file
        (tree.work / "sub" / "n0.txt").write_text("changed")
        updated = await collect(
            client, channel, lambda seen: {"uri": tree.uri("sub/n0.txt"), "type": "updated"} in seen
        )
        (tree.work / "sub" / "n1.txt").unlink()
        deleted = await collect(
            client, channel, lambda seen: {"uri": tree.uri("sub/n1.txt"), "type": "deleted"} in seen
        )
        everything = [c["uri"] for batch in batches + updated + deleted for c in batch]
        assert not [uri for uri in everything if "ignored" in uri or uri.endswith(".log")]

        watches = running.host.resources.watches
        watcher = watches[channel].handle
        await client.notify("unsubscribe", {"channel": channel})
        await client.sync()
        assert channel not in watches and watcher.closed
        gone = await client.request_frame("subscribe", {"channel": channel})
        assert "error" in gone


async def test_includes_and_a_non_recursive_watch(files_host, tree: Tree):
    async with files_host() as (running, client):
        channel = (
            await call(
                client,
                "createResourceWatch",
                {"uri": tree.uri(), "includes": {"items": ["*.py", "poke.txt"]}},
            )
        )["channel"]
        await client.request("subscribe", {"channel": channel})
        await wait_until_watching(client, channel, tree)
        (tree.work / "sub" / "deep.py").write_text("x")  # below the top: not reported
        (tree.work / "top.md").write_text("x")  # not included
        (tree.work / "top.py").write_text("x")
        batches = await collect(
            client, channel, lambda seen: any(c["uri"] == tree.uri("top.py") for c in seen)
        )
        assert {c["uri"] for batch in batches for c in batch} == {tree.uri("top.py")}
        # A client cannot speak for the host's watch.
        seq = await client.dispatch(
            channel,
            {
                "type": "resourceWatch/changed",
                "changes": {"items": [{"uri": tree.uri("x"), "type": "added"}]},
            },
        )
        assert "rejectionReason" in await client.answer_to(seq)
        missing = await error_of(client, "createResourceWatch", {"uri": tree.uri("nothing-here")})
        assert missing["code"] == -32008
        # The connection going away releases the watcher too.
        watcher = running.host.resources.watches[channel].handle
        await client.close()
        with anyio.fail_after(5):
            while channel in running.host.resources.watches:
                await anyio.sleep(0.01)
        assert watcher.closed


async def test_a_watch_on_one_file_survives_it_being_replaced(files_host, tree: Tree):
    target = tree.work / "a.txt"
    async with files_host() as (_, client):
        channel = (await call(client, "createResourceWatch", {"uri": tree.uri("a.txt")}))["channel"]
        await client.request("subscribe", {"channel": channel})
        with anyio.fail_after(20):  # ready once a poke of the file itself comes back
            for attempt in range(200):
                target.write_text(f"poke {attempt}")
                try:
                    await client.recv_until(changes_on(channel), timeout=0.3)
                    break
                except TimeoutError:
                    continue
        await drain(client, channel)
        (tree.work / "neighbour.txt").write_text("not watched")
        for text in ("first", "second"):  # each write renames a new file over the old
            await call(
                client,
                "resourceWrite",
                {"uri": tree.uri("a.txt"), "data": text, "encoding": "utf-8"},
            )
            batches = await collect(
                client, channel, lambda seen: any(c["uri"] == tree.uri("a.txt") for c in seen)
            )
            assert {c["uri"] for batch in batches for c in batch} == {tree.uri("a.txt")}
