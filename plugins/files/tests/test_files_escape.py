"""Ways out of a session's folder through the names themselves: a trailing ``..``,
a ``.git`` folder git runs code from, a session whose folder is the whole machine.

The layout is a user's home with a project in it; the session works in the project,
and the rest of the home (an SSH key, a sibling project) must survive every attack.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from files_support import call, error_of

import ahp_files.plugin
import ahp_scripted.plugin
from ahp_files.fence import Fence
from ahpcore.protocol.errors import ProtocolError
from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio

SESSION = "scripted:/00000000-0000-4000-8000-000000000001"


@dataclass
class Home:
    home: Path
    project: Path

    def uri(self, relative: str = "") -> str:
        # Built by hand: Path would fold a trailing ".." away before it reaches the host.
        return self.project.as_uri() + (f"/{relative}" if relative else "")

    def snapshot(self) -> dict[str, str]:
        """Every file and folder outside the project, with a hash of each file."""
        seen: dict[str, str] = {}
        for top, folders, files in os.walk(self.home):
            rel_top = Path(top).relative_to(self.home)
            if rel_top.parts[:1] == ("project",):
                continue
            for name in folders:
                seen[str(rel_top / name)] = "folder"
            for name in files:
                data = (Path(top) / name).read_bytes()
                seen[str(rel_top / name)] = hashlib.sha256(data).hexdigest()
        return seen


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = tmp_path / "home"
    project = home / "project"
    (project / "sub").mkdir(parents=True)
    (project / "a.txt").write_text("hello")
    (project / "sub" / "b.txt").write_text("inner")
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / "sibling").mkdir()
    (home / "sibling" / "main.py").write_text("print('keep me')")
    return Home(home, project)


@pytest.fixture
def home_host(ahp_host: Callable[..., Any], home: Home) -> Callable[..., Any]:
    @asynccontextmanager
    async def start() -> AsyncIterator[AhpTestClient]:
        plugins = [("scripted", ahp_scripted.plugin), ("files", ahp_files.plugin)]
        async with ahp_host(plugins=plugins) as running:
            client = await running.connect("attacker")
            await client.initialize()
            await client.request(
                "createSession",
                {"channel": SESSION, "provider": "scripted", "workingDirectories": [home.uri()]},
            )
            yield client

    return start


def assert_home_untouched(home: Home, before: dict[str, str]) -> None:
    assert home.snapshot() == before
    assert (home.home / ".ssh" / "id_ed25519").read_text() == "PRIVATE KEY"
    assert (home.home / "sibling" / "main.py").read_text() == "print('keep me')"


async def test_a_trailing_dotdot_cannot_delete_the_home_folder(home_host, home: Home):
    before = home.snapshot()
    async with home_host() as client:
        for uri in (home.uri(".."), home.uri("../"), home.uri("sub/../.."), home.uri("%2e%2e")):
            error = await error_of(client, "resourceDelete", {"uri": uri, "recursive": True})
            assert error["code"] in (-32009, -32008), (uri, error)
            assert_home_untouched(home, before)
        # Deleting the session's own folder by another spelling is refused too.
        for uri in (home.uri("sub/.."), home.uri("."), home.uri("sub/../.")):
            error = await error_of(client, "resourceDelete", {"uri": uri, "recursive": True})
            assert error["code"] == -32009, (uri, error)
        assert (home.project / "a.txt").read_text() == "hello"
        assert (home.project / "sub" / "b.txt").read_text() == "inner"
    assert_home_untouched(home, before)


async def test_a_trailing_dotdot_cannot_be_a_move_or_copy_destination(home_host, home: Home):
    before = home.snapshot()
    async with home_host() as client:
        for method in ("resourceMove", "resourceCopy"):
            for source, destination in (
                (home.uri("a.txt"), home.uri("..")),
                (home.uri("sub"), home.uri("..")),
                (home.uri("a.txt"), home.uri("sub/..")),  # the session's own folder
                (home.uri("sub/b.txt"), home.uri("sub/../..")),
            ):
                error = await error_of(
                    client, method, {"source": source, "destination": destination}
                )
                assert error["code"] == -32009, (method, destination, error)
                assert_home_untouched(home, before)
                assert (home.project / "a.txt").read_text() == "hello"
                assert (home.project / "sub" / "b.txt").read_text() == "inner"
        # Nor a move or copy source.
        for method in ("resourceMove", "resourceCopy"):
            error = await error_of(
                client, method, {"source": home.uri(".."), "destination": home.uri("stolen")}
            )
            assert error["code"] == -32009, (method, error)
        assert not (home.project / "stolen").exists()
    assert_home_untouched(home, before)


async def test_resolve_does_not_answer_for_the_folder_above(home_host, home: Home):
    async with home_host() as client:
        for follow in (True, False):
            for uri in (home.uri(".."), home.uri("sub/../.."), home.uri("../.ssh")):
                error = await error_of(
                    client, "resourceResolve", {"uri": uri, "followSymlinks": follow}
                )
                assert error["code"] == -32009, (uri, follow, error)
        # The session's own folder is still readable, by any spelling that stays inside.
        for uri in (home.uri(), home.uri("sub/.."), home.uri("sub/")):
            resolved = await call(client, "resourceResolve", {"uri": uri})
            assert resolved["type"] == "directory", uri
        listed = await call(client, "resourceList", {"uri": home.uri("sub/..")})
        assert {e["name"] for e in listed["entries"]} == {"a.txt", "sub"}


async def test_nothing_in_a_git_folder_can_be_changed(home_host, home: Home):
    subprocess.run(["git", "init", "-q", str(home.project)], check=True)
    git_dir = home.project / ".git"
    (home.project / "hook.sh").write_text("#!/bin/sh\ntouch pwned\n")
    os.chmod(home.project / "hook.sh", 0o755)

    def git_state() -> dict[str, bytes]:
        return {
            str(p.relative_to(git_dir)): p.read_bytes() if p.is_file() else b"<folder>"
            for p in sorted(git_dir.rglob("*"))
        }

    before = git_state()
    data = {"data": "[core]\n\tfsmonitor = touch pwned\n", "encoding": "utf-8"}
    async with home_host() as client:
        attempts: list[tuple[str, dict[str, Any]]] = [
            ("resourceWrite", {"uri": home.uri(".git/hooks/pre-commit"), **data}),
            ("resourceWrite", {"uri": home.uri(".git/config"), **data, "mode": "append"}),
            ("resourceWrite", {"uri": home.uri(".GIT/config"), **data}),  # folded on macOS
            ("resourceWrite", {"uri": home.uri("sub/../.git/hooks/post-checkout"), **data}),
            ("resourceWrite", {"uri": home.uri(".git"), **data}),  # a .git file redirects git
            ("resourceMkdir", {"uri": home.uri(".git/hooks/more")}),
            ("resourceDelete", {"uri": home.uri(".git/HEAD")}),
            ("resourceDelete", {"uri": home.uri(".git"), "recursive": True}),
            ("resourceMove", {"source": home.uri("hook.sh"), "destination": home.uri(".git/hooks/pre-commit")}),
            ("resourceCopy", {"source": home.uri("hook.sh"), "destination": home.uri(".git/hooks/pre-commit")}),
            ("resourceMove", {"source": home.uri(".git/config"), "destination": home.uri("config")}),
            ("resourceMove", {"source": home.uri(".git"), "destination": home.uri("elsewhere")}),
            ("resourceMove", {"source": home.uri("sub"), "destination": home.uri(".Git")}),
        ]  # fmt: skip
        for method, params in attempts:
            error = await error_of(client, method, params)
            assert error["code"] == -32009, (method, params, error)
            assert ".git" in error["message"], error
        assert git_state() == before
        assert (home.project / "hook.sh").exists() and (home.project / "sub").is_dir()
        # A link into .git is no way around it.
        os.symlink(git_dir / "hooks", home.project / "hooks")
        error = await error_of(
            client, "resourceWrite", {"uri": home.uri("hooks/pre-commit"), **data}
        )
        assert error["code"] == -32009 and git_state() == before
        # Nor is a copy out of it (either end of a copy is refused).
        copied = await error_of(
            client,
            "resourceCopy",
            {"source": home.uri(".git"), "destination": home.uri("git-copy")},
        )
        assert copied["code"] == -32009 and ".git" in copied["message"]
        assert not (home.project / "git-copy").exists()
        # Reading stays allowed.
        head = await call(client, "resourceRead", {"uri": home.uri(".git/HEAD")})
        assert head["data"].startswith("ref: ")
        listed = await call(client, "resourceList", {"uri": home.uri(".git")})
        assert "hooks" in {e["name"] for e in listed["entries"]}
        # A name that only starts like .git is an ordinary name.
        await call(client, "resourceMkdir", {"uri": home.uri(".github")})
        await call(client, "resourceWrite", {"uri": home.uri(".github/ci.yml"), **data})
        await call(client, "resourceWrite", {"uri": home.uri(".gitignore"), **data})
    result = subprocess.run(
        ["git", "-C", str(home.project), "status", "--porcelain"], capture_output=True, check=True
    )
    assert result.returncode == 0 and not (home.project / "pwned").exists()


def test_the_fence_ignores_a_session_folder_that_is_the_whole_machine(home: Home, monkeypatch):
    monkeypatch.delenv("AHP_FILES_REACH", raising=False)
    held = {os.environ.get("HOME", "/nonexistent-home")}
    for root in ("file:///", "/", "file:///etc", "file:///usr", "file:///proc/self/root"):
        fence = Fence(lambda root=root: [root, home.uri()])
        for uri in ("file:///etc/passwd", "file:///usr/bin/env", home.home.as_uri() + "/sibling"):
            with pytest.raises(ProtocolError) as refused:
                fence.locate(uri)
            assert refused.value.code == -32009, (root, uri)
        assert fence.locate(home.uri("a.txt")) == (home.project / "a.txt").resolve()
        assert Path("/") not in fence.roots()
    # The user's home as a session folder is fine.
    for value in held:
        if os.path.isdir(value):
            assert Path(os.path.realpath(value)) in Fence(lambda value=value: [value]).roots()
    # The host can still open the whole machine on purpose.
    machine = Fence(lambda: ["file:///"], reach="machine")
    assert machine.locate("file:///etc") == Path("/etc").resolve()
