"""The uncommitted changeset of a large repository, against ``git status`` alone.

Builds a repository of ``--files`` files (100,000 by default) in nested
folders, commits it, then changes ``--changed`` of them (1,000 by default): a
third modified in the tree, a third modified and staged, a sixth deleted and a
sixth new and untracked. Then, in one run and alternating, times

* git: ``git status --porcelain=v2 -z --branch --untracked-files=all`` as a
  subprocess, the output read and nothing else;
* changeset: ``GitChanges.files(...)`` for the uncommitted scope, which runs
  that same command, parses it and builds every row (URIs, both sides,
  ``_meta`` letters, binary sniffing).

and prints the median, the best and the ratio of medians.

    .venv/bin/python bench/changeset.py
    .venv/bin/python bench/changeset.py --files 20000 --changed 500 --runs 5

This is a benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from ahp_git.port import GitChanges
from ahpcore.ports import ChangeScope


def git(root: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True).stdout


def build(root: Path, files: int, changed: int) -> None:
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Bench")
    git(root, "config", "user.email", "bench@example.com")
    for i in range(files):
        folder = root / f"d{i // 1000:03d}" / f"e{(i // 100) % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:06d}.txt").write_text(f"line one of {i}\nline two\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    step = max(1, files // changed)
    picked = [
        root / f"d{i // 1000:03d}" / f"e{(i // 100) % 10}" / f"f{i:06d}.txt"
        for i in range(0, files, step)
    ][:changed]
    for n, path in enumerate(picked):
        kind = n % 6
        if kind in (0, 1):
            path.write_text("modified\n")
        elif kind in (2, 3):
            path.write_text("staged\n")
        elif kind == 4:
            path.unlink()
        else:
            path.with_name(path.stem + "-new.txt").write_text("untracked\n")
    # Stage the staged third in one call rather than one process per file.
    staged = [str(p.relative_to(root)) for n, p in enumerate(picked) if n % 6 in (2, 3)]
    subprocess.run(
        ["git", "add", "--pathspec-from-file=-"],
        cwd=root,
        input="\n".join(staged).encode(),
        check=True,
    )


def time_git(root: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        ["git", "status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all", "--", "."],
        cwd=root,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


async def time_changeset(port: GitChanges, root: Path) -> tuple[float, int]:
    start = time.perf_counter()
    rows = await port.files(str(root), ChangeScope("uncommitted", "uncommitted"))
    return time.perf_counter() - start, len(rows)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--changed", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--keep", help="build (or reuse) the repository here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.keep or scratch) / "repo"
        if not (root / ".git").exists():
            root.mkdir(parents=True, exist_ok=True)
            began = time.perf_counter()
            build(root, args.files, args.changed)
            print(
                f"built {args.files} files, {args.changed} changed, in {time.perf_counter() - began:.1f} s",
                file=sys.stderr,
            )
        port = GitChanges()
        # Warm the page cache and git's index stat data for both.
        time_git(root)
        _, rows = await time_changeset(port, root)
        plain: list[float] = []
        ours: list[float] = []
        for _ in range(args.runs):
            plain.append(time_git(root))
            took, rows = await time_changeset(port, root)
            ours.append(took)
        print(
            f"repository: {args.files} files, {rows} rows in the changeset, {args.runs} runs each"
        )
        print(f"{'what':<10} {'median ms':>10} {'best ms':>10}")
        for name, values in (("git", plain), ("changeset", ours)):
            print(
                f"{name:<10} {statistics.median(values) * 1000:>10.1f} {min(values) * 1000:>10.1f}"
            )
        ratio = statistics.median(ours) / statistics.median(plain)
        print(f"ratio changeset/git (medians): x{ratio:.2f}")


if __name__ == "__main__":
    anyio.run(main)
