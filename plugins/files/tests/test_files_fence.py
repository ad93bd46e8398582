"""The fence: only the sessions' folders, whatever spelling or link is used to get out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from files_support import Tree, call, error_of

pytestmark = pytest.mark.anyio


async def test_escapes_are_refused_without_saying_where_they_lead(files_host, tree: Tree):
    secret = tree.outside / "secret.txt"
    escapes = [
        tree.uri() + "/../outside/secret.txt",  # ..
        tree.uri() + "/sub/../../outside/secret.txt",
        secret.as_uri(),  # an absolute path elsewhere
        tree.uri("link"),  # a file link pointing out
        tree.uri("escape/secret.txt"),  # a folder link pointing out
        "file:///proc/self/root" + str(secret),  # an alias the kernel resolves
        "file://localhost" + str(secret),
    ]
    async with files_host() as (_, client):
        for uri in escapes:
            error = await error_of(client, "resourceRead", {"uri": uri})
            assert error["code"] == -32009, uri
            assert str(tree.outside) not in error["message"].replace(uri, ""), error
            assert "not yours" not in str(error)
        writes = await error_of(
            client,
            "resourceWrite",
            {"uri": tree.uri("escape/planted.txt"), "data": "x", "encoding": "utf-8"},
        )
        assert writes["code"] == -32009 and not (tree.outside / "planted.txt").exists()
        through_link = await error_of(
            client, "resourceWrite", {"uri": tree.uri("link"), "data": "x", "encoding": "utf-8"}
        )
        assert through_link["code"] == -32009 and secret.read_text() == "not yours"
        for method, params in [
            ("resourceList", {"uri": tree.uri("escape")}),
            ("resourceMkdir", {"uri": tree.uri("escape/made")}),
            ("resourceDelete", {"uri": tree.uri("escape/secret.txt")}),
            ("resourceCopy", {"source": tree.uri("link"), "destination": tree.uri("stolen.txt")}),
            ("resourceMove", {"source": tree.uri("a.txt"), "destination": secret.as_uri()}),
            ("resourceRequest", {"uri": secret.as_uri()}),
            ("createResourceWatch", {"uri": tree.outside.as_uri()}),
        ]:
            assert (await error_of(client, method, params))["code"] == -32009, method
        assert not (tree.work / "stolen.txt").exists() and secret.read_text() == "not yours"
        assert (tree.work / "a.txt").exists()
        other = await error_of(client, "resourceRead", {"uri": "file://elsewhere/etc/hostname"})
        assert other["code"] == -32009
        # The same file by a spelling that stays inside is fine.
        inside = await call(client, "resourceRead", {"uri": tree.uri("sub/../a.txt")})
        assert inside["data"] == "hello"


async def test_a_copied_folder_keeps_links_as_links(files_host, tree: Tree):
    os.symlink(tree.outside / "secret.txt", tree.work / "sub" / "out")
    async with files_host() as (_, client):
        await call(
            client, "resourceCopy", {"source": tree.uri("sub"), "destination": tree.uri("copy")}
        )
        assert (tree.work / "copy" / "out").is_symlink()
        refused = await error_of(client, "resourceRead", {"uri": tree.uri("copy/out")})
        assert refused["code"] == -32009


async def test_without_a_session_nothing_is_reachable(files_host, tree: Tree):
    async with files_host(session=False) as (_, client):
        error = await error_of(client, "resourceRead", {"uri": tree.uri("a.txt")})
        assert error["code"] == -32009


async def test_the_deployment_can_open_the_whole_machine(files_host, tree: Tree, monkeypatch):
    monkeypatch.setenv("AHP_FILES_REACH", "machine")
    async with files_host(session=False) as (_, client):
        read = await call(client, "resourceRead", {"uri": (tree.outside / "secret.txt").as_uri()})
        assert read["data"] == "not yours"


async def test_a_folder_added_to_a_session_becomes_reachable(
    files_host, tree: Tree, tmp_path: Path
):
    later = tmp_path / "later"
    later.mkdir()
    (later / "x.txt").write_text("x")
    async with files_host() as (_, client):
        assert (await error_of(client, "resourceRead", {"uri": (later / "x.txt").as_uri()}))[
            "code"
        ] == -32009
        session = "scripted:/00000000-0000-4000-8000-000000000001"
        seq = await client.dispatch(
            session, {"type": "session/workingDirectorySet", "directory": later.as_uri()}
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        read = await call(client, "resourceRead", {"uri": (later / "x.txt").as_uri()})
        assert read["data"] == "x"


async def test_a_grant_opens_exactly_what_was_granted(files_host, tree: Tree):
    (tree.outside / "other.txt").write_text("still not yours")
    async with files_host() as (running, client):
        running.host.ports["resources"].fence.grant(tree.outside / "secret.txt")
        read = await call(client, "resourceRead", {"uri": (tree.outside / "secret.txt").as_uri()})
        assert read["data"] == "not yours"
        through_link = await call(client, "resourceRead", {"uri": tree.uri("link")})
        assert through_link["data"] == "not yours"
        other = await error_of(
            client, "resourceRead", {"uri": (tree.outside / "other.txt").as_uri()}
        )
        assert other["code"] == -32009
