"""Property: whatever URI a client sends, an operation either is refused or acts
strictly inside a session's folder, and nothing outside the fence ever changes.

The fence and the operations are called directly (no connection), so thousands of
URIs fit in a few seconds: ``..``, ``.``, ``//``, percent-encoded dots and slashes,
links inside pointing in and out, names with accents, trailing slashes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ahp_files import operations
from ahp_files.fence import Fence, Target, is_git_name
from ahp_files.operations import WriteRequest
from ahpcore.protocol.errors import ProtocolError

SEGMENTS = [
    *("..", ".", "", "...", "~"),
    *("a.txt", "sub", "deep", "b.txt", "new", "served", "inner.txt"),
    *("link_in", "link_file_in", "link_out", "link_file_out", "link_up", "link_root"),
    *("link_git", "link_served", "link_dangling_out"),
    *(".git", ".GIT", ".g%E2%80%8Cit", ".git.", "hooks", "config"),
    *("%2e%2e", "%2E%2e", "%2e", "..%2f..", "sub%2f..", "%2f", "%2F%2e%2e"),
    *("project", "home", "sibling", ".ssh", "id_ed25519"),
    *("caf%C3%A9", "café", "cafe\u0301", "x%20y", "%00"),
]


class World:
    """A home with a project served as a session's folder, a second session folder
    inside it, and the rest of the home as the sentinel that must never change."""

    def __init__(self, base: Path) -> None:
        self.home = base / "home"
        self.project = self.home / "project"
        self.served = self.project / "served"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
        (self.home / "sibling" / "sub").mkdir(parents=True)
        (self.home / "sibling" / "main.py").write_text("keep me")
        (self.home / "sibling" / "sub" / "x").write_text("keep me too")
        self.build()
        self.fence = Fence(lambda: [self.project.as_uri(), self.served.as_uri()])
        self.roots = self.fence.roots()
        assert self.roots == [self.project.resolve(), self.served.resolve()]
        #: Operations that went through, so a fence that refuses everything fails.
        self.done = 0
        self.before = self.snapshot()

    def build(self) -> None:
        if self.project.exists():
            shutil.rmtree(self.project)
        p = self.project
        (p / "sub" / "deep").mkdir(parents=True)
        (p / ".git" / "hooks").mkdir(parents=True)
        (p / "café").mkdir()
        self.served.mkdir()
        (p / "a.txt").write_text("hello")
        (p / "sub" / "b.txt").write_text("inner")
        (p / ".git" / "config").write_text("[core]\n")
        (p / "served" / "inner.txt").write_text("served")
        (p / "src.txt").write_text("source")
        (p / "srcdir").mkdir()
        (p / "srcdir" / "f").write_text("f")
        for name, to in (
            ("link_in", "sub"),
            ("link_file_in", "a.txt"),
            ("link_out", "../sibling"),
            ("link_file_out", "../.ssh/id_ed25519"),
            ("link_up", ".."),
            ("link_root", "/"),
            ("link_git", ".git"),
            ("link_served", "served"),
            ("link_dangling_out", "../planted"),
        ):
            os.symlink(to, p / name)

    def snapshot(self) -> dict[str, str]:
        seen: dict[str, str] = {}
        for top, folders, files in os.walk(self.home):
            here = Path(top)
            if here == self.home:
                folders.remove("project")
            for name in folders:
                seen[str(here / name)] = "folder"
            for name in files:
                seen[str(here / name)] = hashlib.sha256((here / name).read_bytes()).hexdigest()
        return seen

    def check_unharmed(self) -> None:
        assert self.snapshot() == self.before
        assert self.served.is_dir() and not self.served.is_symlink()
        assert self.project.is_dir() and not self.project.is_symlink()
        assert (self.project / ".git" / "config").read_text() == "[core]\n"


def assert_well_formed(world: World, target: Target, *, follow: bool, change: bool) -> None:
    path = target.path
    assert path.is_absolute() and not any(p in (".", "..") for p in path.parts), path
    if target.name == ".":
        assert path == target.anchor and target.walk == ()
    else:
        assert target.anchor.joinpath(*target.walk, target.name) == path
    assert target.anchor in world.roots or any(r.parent == target.anchor for r in world.roots)
    if follow:
        assert os.path.realpath(path) == str(path), path
    else:
        assert os.path.realpath(path.parent) == str(path.parent), path
    holding = [r for r in world.roots if path == r or path.is_relative_to(r)]
    assert holding, f"{path} is outside every root"
    if change:
        assert path not in world.roots and not any(r.is_relative_to(path) for r in world.roots)
        assert not any(is_git_name(part) for part in path.parts), path


def refusals_allowed() -> suppress:
    """An operation may be refused, or fail as the file system says; nothing else."""
    return suppress(ProtocolError, OSError)


def operations_on(world: World, uri: str) -> list[Callable[[], Any]]:
    fence, p = world.fence, world.project.as_uri()

    def write(mode: str) -> Callable[[], Any]:
        request = WriteRequest(data=b"planted", mode=mode)
        return lambda: operations.write(
            fence.target(uri, change=True), request, rewrite_limit=1 << 20
        )

    def transfer(operation: Callable[..., None], source: str, destination: str) -> Any:
        move = operation is operations.move
        return operation(
            fence.target(source, follow=not move, change=move),
            fence.target(destination, follow=False, change=True),
            fail_if_exists=False,
            limit=1 << 20,
        )

    return [
        lambda: operations.read(fence.target(uri), None),
        lambda: operations.list_folder(fence.target(uri)),
        lambda: operations.resolve(fence.target(uri), follow=True, requested=Path("/")),
        lambda: operations.resolve(
            fence.target(uri, follow=False), follow=False, requested=Path("/")
        ),
        write("truncate"),
        write("append"),
        lambda: operations.mkdir(fence.target(uri, change=True)),
        lambda: transfer(operations.copy, f"{p}/src.txt", uri),
        lambda: transfer(operations.copy, f"{p}/srcdir", uri),
        lambda: transfer(operations.copy, uri, f"{p}/copied"),
        lambda: transfer(operations.move, f"{p}/src.txt", uri),
        lambda: transfer(operations.move, f"{p}/srcdir", uri),
        lambda: transfer(operations.move, uri, f"{p}/moved"),
        lambda: operations.delete(fence.target(uri, follow=False, change=True), recursive=True),
    ]


uris = st.builds(
    lambda prefix, segments, trailing: prefix + "/".join(segments) + ("/" if trailing else ""),
    st.sampled_from(["{project}/", "{project}//", "{served}/", "{home}/", "file:///", "{local}/"]),
    st.lists(
        st.one_of(
            st.sampled_from(SEGMENTS),
            st.text(alphabet="./%2eE\\é~ ", min_size=1, max_size=5),
        ),
        max_size=6,
    ),
    st.booleans(),
)


def real_folder(tmp_path: Path) -> Path:
    """A tmpfs where there is one: the property runs thousands of file operations."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return Path(tempfile.mkdtemp(prefix="ahp-fence-", dir=shm))
    return tmp_path


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    base = real_folder(tmp_path)
    try:
        yield World(base)
    finally:
        if base != tmp_path:
            shutil.rmtree(base)


def expand(world: World, template: str) -> str:
    for key, value in (
        ("{project}", world.project.as_uri()),
        ("{served}", world.served.as_uri()),
        ("{home}", world.home.as_uri()),
        ("{local}", "file://localhost" + str(world.project)),
    ):
        template = template.replace(key, value)
    return template


def test_every_uri_the_fence_lets_through_is_in_reach(world: World) -> None:
    @settings(
        max_examples=2000,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(uris)
    def check(template: str) -> None:
        uri = expand(world, template)
        for change in (False, True):
            for follow in (False, True):
                with refusals_allowed():
                    target = world.fence.target(uri, follow=follow, change=change)
                    assert_well_formed(world, target, follow=follow, change=change)
                    world.done += 1

    check()
    assert world.done > 800


def test_no_operation_on_any_uri_changes_anything_outside(world: World) -> None:
    @settings(
        max_examples=250,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(uris)
    def check(template: str) -> None:
        uri = expand(world, template)
        for operation in operations_on(world, uri):
            with refusals_allowed():
                result = operation()
                assert "PRIVATE KEY" not in str(result) and "keep me" not in str(result)
                world.done += 1
        world.check_unharmed()
        world.build()

    check()
    assert world.done > 250
