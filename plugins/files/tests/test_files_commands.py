"""Every resource* command on a temp tree, over a real connection."""

from __future__ import annotations

import base64
import os
import stat

import pytest
from files_support import Tree, call, error_of

pytestmark = pytest.mark.anyio


async def test_read_answers_text_as_utf8_and_bytes_as_base64(files_host, tree: Tree):
    async with files_host() as (_, client):
        text = await call(client, "resourceRead", {"uri": tree.uri("a.txt")})
        assert text == {"data": "hello", "encoding": "utf-8", "contentType": "text/plain"}
        binary = await call(client, "resourceRead", {"uri": tree.uri("bin.dat")})
        assert binary["encoding"] == "base64"
        assert base64.b64decode(binary["data"]) == bytes(range(256))
        asked = await call(client, "resourceRead", {"uri": tree.uri("a.txt"), "encoding": "base64"})
        assert base64.b64decode(asked["data"]) == b"hello"
        missing = await error_of(client, "resourceRead", {"uri": tree.uri("nope.txt")})
        assert missing["code"] == -32008
        folder = await error_of(client, "resourceRead", {"uri": tree.uri("sub")})
        assert folder["code"] == -32602 and "folder" in folder["message"]


async def test_list_and_resolve_say_what_is_there(files_host, tree: Tree):
    async with files_host() as (_, client):
        listed = await call(client, "resourceList", {"uri": tree.uri()})
        names = {entry["name"]: entry["type"] for entry in listed["entries"]}
        assert names == {
            "a.txt": "file",
            "bin.dat": "file",
            "sub": "directory",
            "link": "file",
            "escape": "directory",
        }
        assert (await error_of(client, "resourceList", {"uri": tree.uri("a.txt")}))[
            "code"
        ] == -32602
        resolved = await call(client, "resourceResolve", {"uri": tree.uri("a.txt")})
        assert resolved["type"] == "file" and resolved["size"] == 5
        assert resolved["uri"] == tree.uri("a.txt")
        assert resolved["mtime"].endswith("Z") and resolved["etag"]
        folder = await call(client, "resourceResolve", {"uri": tree.uri("sub")})
        assert folder["type"] == "directory" and "etag" not in folder
        os.symlink(tree.work / "a.txt", tree.work / "alias")
        link = await call(
            client, "resourceResolve", {"uri": tree.uri("alias"), "followSymlinks": False}
        )
        assert link["type"] == "symlink" and link["uri"] == tree.uri("alias")
        followed = await call(client, "resourceResolve", {"uri": tree.uri("alias")})
        assert followed["uri"] == (tree.work / "a.txt").resolve().as_uri()
        assert followed["etag"] == resolved["etag"]
        gone = await error_of(client, "resourceResolve", {"uri": tree.uri("gone")})
        assert gone["code"] == -32008


async def test_write_modes_keep_the_file_mode(files_host, tree: Tree):
    target = tree.work / "w.txt"

    async def write(**params):
        return await call(client, "resourceWrite", {"uri": tree.uri("w.txt"), **params})

    async with files_host() as (_, client):
        assert await write(data="0123456789", encoding="utf-8", createOnly=True) == {}
        again = await error_of(
            client,
            "resourceWrite",
            {"uri": tree.uri("w.txt"), "data": "x", "encoding": "utf-8", "createOnly": True},
        )
        assert again["code"] == -32010 and target.read_text() == "0123456789"
        os.chmod(target, 0o640)
        await write(data="AB", encoding="utf-8", mode="append")
        assert target.read_text() == "0123456789AB"
        await write(data="--", encoding="utf-8", mode="append", position=2)
        assert target.read_text() == "0123456789--AB"
        await write(data="^", encoding="utf-8", mode="insert", position=1)
        assert target.read_text() == "0^123456789--AB"
        await write(data="xy", encoding="utf-8", mode="truncate", position=3)
        assert target.read_text() == "0^1xy"
        await write(data=base64.b64encode(b"\x00\xff").decode(), encoding="base64")
        assert target.read_bytes() == b"\x00\xff"
        assert stat.S_IMODE(target.stat().st_mode) == 0o640
        past = await error_of(
            client,
            "resourceWrite",
            {
                "uri": tree.uri("w.txt"),
                "data": "x",
                "encoding": "utf-8",
                "mode": "insert",
                "position": 9,
            },
        )
        assert past["code"] == -32602 and "past the end" in past["message"]
        bad = await error_of(
            client, "resourceWrite", {"uri": tree.uri("w.txt"), "data": "@@", "encoding": "base64"}
        )
        assert bad["code"] == -32602


async def test_if_match_guards_against_lost_updates(files_host, tree: Tree):
    async with files_host() as (_, client):
        etag = (await call(client, "resourceResolve", {"uri": tree.uri("a.txt")}))["etag"]
        await call(
            client,
            "resourceWrite",
            {"uri": tree.uri("a.txt"), "data": "mine", "encoding": "utf-8", "ifMatch": etag},
        )
        assert (tree.work / "a.txt").read_text() == "mine"
        stale = await error_of(
            client,
            "resourceWrite",
            {"uri": tree.uri("a.txt"), "data": "theirs", "encoding": "utf-8", "ifMatch": etag},
        )
        assert stale["code"] == -32011
        assert (tree.work / "a.txt").read_text() == "mine"
        fresh = (await call(client, "resourceResolve", {"uri": tree.uri("a.txt")}))["etag"]
        assert fresh != etag
        gone = await error_of(
            client,
            "resourceWrite",
            {"uri": tree.uri("new.txt"), "data": "x", "encoding": "utf-8", "ifMatch": fresh},
        )
        assert gone["code"] == -32011 and not (tree.work / "new.txt").exists()


async def test_mkdir_delete_move_copy(files_host, tree: Tree):
    work = tree.work
    async with files_host() as (_, client):
        await call(client, "resourceMkdir", {"uri": tree.uri("d/e/f")})
        assert (work / "d" / "e" / "f").is_dir()
        await call(client, "resourceMkdir", {"uri": tree.uri("d/e/f")})  # already there: fine
        on_file = await error_of(client, "resourceMkdir", {"uri": tree.uri("a.txt")})
        assert on_file["code"] == -32010

        await call(
            client,
            "resourceCopy",
            {"source": tree.uri("a.txt"), "destination": tree.uri("d/a.txt")},
        )
        assert (work / "d" / "a.txt").read_text() == "hello"
        taken = await error_of(
            client,
            "resourceCopy",
            {
                "source": tree.uri("sub/b.txt"),
                "destination": tree.uri("d/a.txt"),
                "failIfExists": True,
            },
        )
        assert taken["code"] == -32010 and (work / "d" / "a.txt").read_text() == "hello"
        await call(
            client, "resourceCopy", {"source": tree.uri("sub"), "destination": tree.uri("d/sub")}
        )
        assert (work / "d" / "sub" / "b.txt").read_text() == "inner"
        await call(
            client,
            "resourceMove",
            {"source": tree.uri("d/a.txt"), "destination": tree.uri("moved.txt")},
        )
        assert (work / "moved.txt").read_text() == "hello" and not (work / "d" / "a.txt").exists()
        await call(
            client, "resourceMove", {"source": tree.uri("d/sub"), "destination": tree.uri("sub2")}
        )
        assert (work / "sub2" / "b.txt").exists()
        into_itself = await error_of(
            client, "resourceMove", {"source": tree.uri("sub2"), "destination": tree.uri("sub2/x")}
        )
        assert into_itself["code"] == -32602

        full = await error_of(client, "resourceDelete", {"uri": tree.uri("d")})
        assert full["code"] == -32602 and "recursive" in full["message"]
        await call(client, "resourceDelete", {"uri": tree.uri("d"), "recursive": True})
        assert not (work / "d").exists()
        await call(client, "resourceDelete", {"uri": tree.uri("moved.txt")})
        assert not (work / "moved.txt").exists()
        missing = await error_of(client, "resourceDelete", {"uri": tree.uri("moved.txt")})
        assert missing["code"] == -32008
        root = await error_of(client, "resourceDelete", {"uri": tree.uri(), "recursive": True})
        assert root["code"] == -32009 and work.is_dir()
        # A link inside is removed as a link; what it points to stays.
        await call(client, "resourceDelete", {"uri": tree.uri("link")})
        assert not (work / "link").exists() and (tree.outside / "secret.txt").exists()

        assert (
            await call(client, "resourceRequest", {"uri": tree.uri("a.txt"), "write": True}) == {}
        )


async def test_move_and_copy_replace_whatever_is_in_the_way(files_host, tree: Tree):
    work = tree.work
    (work / "folder").mkdir()
    (work / "folder" / "in.txt").write_text("in")
    (work / "plain.txt").write_text("plain")
    async with files_host() as (_, client):
        await call(
            client, "resourceCopy", {"source": tree.uri("a.txt"), "destination": tree.uri("folder")}
        )
        assert (work / "folder").read_text() == "hello"
        await call(
            client,
            "resourceMove",
            {"source": tree.uri("sub"), "destination": tree.uri("plain.txt")},
        )
        assert (work / "plain.txt" / "b.txt").read_text() == "inner" and not (work / "sub").exists()
        await call(
            client,
            "resourceCopy",
            {"source": tree.uri("plain.txt"), "destination": tree.uri("folder")},
        )
        assert (work / "folder" / "b.txt").read_text() == "inner"
        assert not [p.name for p in work.iterdir() if p.name.endswith(".ahp-tmp")]


async def test_concurrent_appends_from_several_clients_all_land(files_host, tree: Tree):
    import anyio

    async with files_host() as (running, first):
        clients = [first]
        for n in range(3):
            other = await running.connect(f"writer-{n}")
            await other.initialize()
            clients.append(other)

        async def append_from(client, n: int) -> None:
            for k in range(5):
                await call(
                    client,
                    "resourceWrite",
                    {
                        "uri": tree.uri("log.txt"),
                        "data": f"{n}.{k}\n",
                        "encoding": "utf-8",
                        "mode": "append",
                    },
                )

        async with anyio.create_task_group() as tasks:
            for n, client in enumerate(clients):
                tasks.start_soon(append_from, client, n)
        lines = (tree.work / "log.txt").read_text().splitlines()
        assert sorted(lines) == sorted(f"{n}.{k}" for n in range(4) for k in range(5))
