"""What a resource watch on a large tree costs: setup time and CPU while idle and busy.

    uv run python bench/watch.py [--files 100000] [--per-dir 100] [--idle 5]

Builds a tree in a temporary folder, starts the ahp-files watcher on it (the
same ``open_watch`` a ``createResourceWatch`` runs), waits until it reports a
change, then measures the process's CPU time (all threads) over an idle window
and over a burst of writes. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from ahp_files.watch import open_watch


def build(root: Path, files: int, per_dir: int) -> int:
    folders = 0
    for n in range(files):
        if n % per_dir == 0:
            folder = root / f"d{n // per_dir:05d}"
            folder.mkdir()
            folders += 1
        (folder / f"f{n % per_dir:03d}.txt").write_bytes(b"x")
    return folders


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        started = time.perf_counter()
        folders = build(root, args.files, args.per_dir)
        print(
            f"tree: {args.files} files in {folders} folders, built in {time.perf_counter() - started:.1f} s"
        )

        seen: list[dict[str, Any]] = []
        arrived = anyio.Event()

        def emit(changes: list[dict[str, Any]]) -> None:
            nonlocal arrived
            seen.extend(changes)
            arrived.set()

        class Owner:  # stands for the resources port, whose watchers these are
            pass

        async with anyio.create_task_group() as tasks:

            def spawn(function: Any, *args: Any, name: str | None = None) -> None:
                tasks.start_soon(function, *args)

            cpu0, wall0 = time.process_time(), time.perf_counter()
            params = {"recursive": True}
            watch = await open_watch(
                Owner(), spawn, root.as_uri(), root, params, emit, lambda name: False
            )
            poke = root / "poke.txt"
            for attempt in range(10_000):  # the watcher is ready once a poke comes back
                poke.write_text(str(attempt))
                with anyio.move_on_after(0.2):
                    await arrived.wait()
                    break
            setup_wall, setup_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            print(f"ready after {setup_wall:.2f} s wall, {setup_cpu:.2f} s CPU")

            await anyio.sleep(0.5)
            cpu0 = time.process_time()
            await anyio.sleep(args.idle)
            idle = time.process_time() - cpu0
            print(
                f"idle {args.idle:g} s: {idle:.3f} s CPU ({100 * idle / args.idle:.2f}% of a core)"
            )

            seen.clear()
            burst = min(1000, args.files)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for n in range(burst):
                (root / f"d{n % folders:05d}" / "f000.txt").write_bytes(b"%d" % n)
            with anyio.fail_after(60):
                while len({c["uri"] for c in seen}) < min(burst, folders):
                    arrived = anyio.Event()
                    await arrived.wait()
            print(
                f"burst of {burst} writes reported in {time.perf_counter() - wall0:.2f} s, "
                f"{time.process_time() - cpu0:.2f} s CPU"
            )
            watch.close()
            tasks.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--per-dir", type=int, default=100)
    parser.add_argument("--idle", type=float, default=5.0)
    anyio.run(main, parser.parse_args())
