"""What a hostile client can do with createResourceWatch: patterns that make a
backtracking matcher run for minutes, watches past what the OS can give, links
out of the fence. Each is refused or harmless, and the host keeps answering."""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import pytest
from files_support import Tree, call, error_of
from test_files_watch import changes_on, collect, drain, wait_until_watching

from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio


async def longest_silence(client: AhpTestClient, seconds: float) -> float:
    """Ping for ``seconds``; the longest wait from one answer to the next.

    The host runs in this process, so a stall stops the test's clock between
    pings as well as the answer to one: the gap between answers sees both.
    """
    longest = 0.0
    last = time.monotonic()
    until = last + seconds
    while last < until:
        await client.request("ping", {"channel": "ahp-root://"})
        now = time.monotonic()
        longest, last = max(longest, now - last), now
        await anyio.sleep(0.02)
    return longest


async def test_a_pattern_built_to_backtrack_does_not_stall_the_host(files_host, tree: Tree):
    # A backtracking regex for **a**a…b tries every way to split a long run of
    # "a"s between the stars, holding the interpreter all the while: no client of
    # the host got an answer until it gave up.
    attack = "**a" * 6 + "b"
    async with files_host() as (running, client):
        bystander = await running.connect("bystander")
        await bystander.initialize()
        channel = (
            await call(
                client,
                "createResourceWatch",
                {"uri": tree.uri(), "recursive": True, "excludes": {"items": [attack]}},
            )
        )["channel"]
        await client.request("subscribe", {"channel": channel})
        await wait_until_watching(client, channel, tree)

        (tree.work / ("a" * 75)).write_text("x")
        (tree.work / "aaaaaab").write_text("excluded: six a's then b")
        assert await longest_silence(bystander, 2.0) < 1.0
        batches = await collect(
            client, channel, lambda seen: any(c["uri"] == tree.uri("a" * 75) for c in seen)
        )
        await drain(client, channel)
        reported = {c["uri"] for batch in batches for c in batch}
        assert tree.uri("aaaaaab") not in reported
        assert [f for f in client.frames if changes_on(channel)(f)]


async def test_pattern_lists_past_their_bounds_are_refused_naming_them(files_host, tree: Tree):
    async with files_host() as (running, client):
        for params, says in [
            ({"excludes": {"items": ["*.log"] * 65}}, "at most 64"),
            ({"includes": {"items": ["a" * 1025]}}, "most a pattern may have is 1024"),
            ({"includes": {"items": ["{a,b}" * 30]}}, "alternatives in includes"),
        ]:
            refused = await error_of(client, "createResourceWatch", {"uri": tree.uri(), **params})
            assert refused["code"] == -32602 and says in refused["message"], refused
        assert not running.host.resources.watches


def inotify_fds() -> int:
    """The OS watchers this process holds (Linux: inotify instances among its fds)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            continue
    return count


async def settled_inotify_fds() -> int:
    """The count once watchers of earlier tests have closed (they close within a step)."""
    last, steady = inotify_fds(), 0
    with anyio.fail_after(5):
        while steady < 5:
            await anyio.sleep(0.05)
            now = inotify_fds()
            steady, last = (steady + 1 if now == last else 0), now
    return last


needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/fd"), reason="counts inotify instances through /proc"
)


async def watch_of(client: AhpTestClient, params: dict[str, Any]) -> str:
    channel = (await call(client, "createResourceWatch", params))["channel"]
    await client.request("subscribe", {"channel": channel})
    return str(channel)


@needs_proc
async def test_watches_of_one_folder_share_one_os_watcher(files_host, tree: Tree):
    # Five connections with 32 watches each took 160 inotify instances, past the 128
    # Linux gives a user: the rest were answered but dead, and every other program
    # of the user could no longer watch anything.
    os.symlink(tree.work / "sub", tree.work / "alias")
    async with files_host() as (running, first):
        before = await settled_inotify_fds()
        clients = [first]
        for n in range(4):
            client = await running.connect(f"c{n + 2}")
            await client.initialize()
            clients.append(client)
        channels: list[list[str]] = []
        for n, client in enumerate(clients):
            mine = [
                await watch_of(
                    client,
                    {
                        "uri": tree.uri(),
                        "recursive": True,
                        "excludes": {"items": [f"skip{n}.txt", f"{k}.none"]},
                    },
                )
                for k in range(31)
            ]
            # A folder through a link: one watcher, whichever name; URIs under the link.
            mine.append(await watch_of(client, {"uri": tree.uri("alias"), "recursive": True}))
            channels.append(mine)
        assert inotify_fds() == before + 2  # the tree, and sub (through alias)

        for n in range(5):
            (tree.work / f"skip{n}.txt").write_text("x")
        (tree.work / "sub" / "shared.txt").write_text("x")
        for n, client in enumerate(clients):
            everything, alias = channels[n][0], channels[n][-1]
            seen = await collect(
                client,
                everything,
                lambda s: any(c["uri"] == tree.uri("sub/shared.txt") for c in s),
            )
            uris = {c["uri"] for batch in seen for c in batch}
            assert tree.uri(f"skip{n}.txt") not in uris  # its own excludes
            assert {tree.uri(f"skip{m}.txt") for m in range(5) if m != n} <= uris
            through_link = await collect(
                client, alias, lambda s: any(c["uri"].endswith("/shared.txt") for c in s)
            )
            assert tree.uri("alias/shared.txt") in {c["uri"] for b in through_link for c in b}


@needs_proc
async def test_a_watcher_past_the_hosts_ceiling_is_refused(files_host, tree: Tree, monkeypatch):
    for name in ("one", "two", "three"):
        (tree.work / name).mkdir()
    async with files_host() as (_, client):
        before = await settled_inotify_fds()
        monkeypatch.setenv("AHP_FILES_MAX_WATCHERS", str(before + 2))
        one = await watch_of(client, {"uri": tree.uri("one")})
        await watch_of(client, {"uri": tree.uri("two")})
        refused = await error_of(client, "createResourceWatch", {"uri": tree.uri("three")})
        assert refused["code"] == -32602
        assert "AHP_FILES_MAX_WATCHERS" in refused["message"]
        assert str(before + 2) in refused["message"]
        # A folder already watched costs no new watcher.
        await watch_of(client, {"uri": tree.uri("two"), "includes": {"items": ["*.md"]}})
        assert inotify_fds() == before + 2

        # Disposing of the last watch of a folder frees its watcher for another.
        await client.notify("unsubscribe", {"channel": one})
        three = await watch_of(client, {"uri": tree.uri("three")})
        await wait_until_watching_folder(client, three, tree.work / "three")
        assert inotify_fds() == before + 2


async def wait_until_watching_folder(client: AhpTestClient, channel: str, folder) -> None:
    poke = folder / "poke.txt"
    with anyio.fail_after(20):
        for attempt in range(200):
            poke.write_text(str(attempt))
            try:
                await client.recv_until(changes_on(channel), timeout=0.3)
                return
            except TimeoutError:
                continue


async def test_a_watcher_the_system_will_not_start_is_refused_not_dead(files_host, tree: Tree):
    resource = pytest.importorskip("resource", reason="POSIX file limits")
    # The OS watcher used to start after the answer: when the system refused it,
    # the client held a watch that never reported anything.
    async with files_host() as (running, client):
        probe = os.open(os.devnull, os.O_RDONLY)
        os.close(probe)  # the lowest free descriptor: below it, every one is taken
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (probe, hard))
        try:
            refused = await client.request_frame(
                "createResourceWatch", {"channel": "ahp-root://", "uri": tree.uri()}
            )
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert "error" in refused, refused
        assert "inotify" in refused["error"]["message"] or "open" in refused["error"]["message"]
        assert not running.host.resources.watches
        # Nothing is lost: with descriptors to spare the same watch starts and reports.
        channel = await watch_of(client, {"uri": tree.uri()})
        await wait_until_watching(client, channel, tree)


async def test_a_recursive_watch_reports_nothing_through_a_link_out_of_the_fence(
    files_host, tree: Tree
):
    # tree.work/escape links to tree.outside. The OS watcher follows links into
    # the folders they point at, and reported what changed there as escape/...
    async with files_host() as (_, client):
        channel = await watch_of(client, {"uri": tree.uri(), "recursive": True})
        await wait_until_watching(client, channel, tree)
        (tree.outside / "leak.txt").write_text("changed outside the fence")
        (tree.outside / "secret.txt").write_text("rewritten outside the fence")
        os.utime(tree.outside)
        (tree.work / "after.txt").write_text("inside")
        batches = await collect(
            client, channel, lambda seen: any(c["uri"] == tree.uri("after.txt") for c in seen)
        )
        await anyio.sleep(0.3)
        while True:
            try:
                frame = await client.recv_until(changes_on(channel), timeout=1.2)
            except TimeoutError:
                break
            batches.append(frame["params"]["action"]["changes"]["items"])
        reported = {c["uri"] for batch in batches for c in batch}
        assert not {uri for uri in reported if "escape" in uri}, reported
        # The link itself is still a name in the tree: making one is reported.
        os.symlink(tree.outside, tree.work / "second-link")
        made = await collect(
            client, channel, lambda seen: any(c["uri"] == tree.uri("second-link") for c in seen)
        )
        assert {"uri": tree.uri("second-link"), "type": "added"} in [c for b in made for c in b]


@needs_proc
async def test_a_tree_past_half_the_users_inotify_watches_is_refused(
    files_host, tree: Tree, tmp_path, monkeypatch
):
    # A recursive watcher takes an inotify watch per folder, from a budget every
    # program of the user shares; the host keeps to half of it.
    from ahp_files import watchers

    limits = tmp_path / "inotify"
    limits.mkdir()
    (limits / "max_user_instances").write_text("128\n")
    (limits / "max_user_watches").write_text("10\n")
    monkeypatch.setattr(watchers, "PROC_INOTIFY", limits)
    for n in range(12):
        (tree.work / "sub" / f"d{n}").mkdir()
    async with files_host() as (_, client):
        before = await settled_inotify_fds()
        refused = await error_of(
            client, "createResourceWatch", {"uri": tree.uri(), "recursive": True}
        )
        assert refused["code"] == -32602
        assert "max_user_watches=10" in refused["message"]
        assert await settled_inotify_fds() == before  # closed, not left running
        channel = await watch_of(client, {"uri": tree.uri()})  # one folder: one watch
        await wait_until_watching(client, channel, tree)
