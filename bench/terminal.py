"""Terminal output throughput: ``cat`` of a large file through the host to a subscribed client,
against the same pty read loop with no host in between.

* raw: ``cat FILE`` on a pty, read by ``ahp_terminals.pty.PtyProcess.run`` (the
  plugin's own read loop) into a sink that only counts bytes.
* host: an in-process host with ahp-terminals; a client in a separate process
  creates a session and a terminal, subscribes, types ``cat FILE; exit`` and
  reads ``terminal/data`` frames until ``terminal/exited``. The clock runs from
  the keystrokes to the exit, as the client sees them.

    .venv/bin/python bench/terminal.py              # 100 MB
    .venv/bin/python bench/terminal.py --megabytes 20

This is a benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LINE = b"the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnopqrstuvwxyz\n"


def make_file(directory: Path, megabytes: int) -> Path:
    path = directory / "big.txt"
    block = LINE * (1 << 20 // len(LINE) + 1)
    with path.open("wb") as out:
        written = 0
        while written < megabytes * 1_000_000:
            chunk = block[: megabytes * 1_000_000 - written]
            out.write(chunk)
            written += len(chunk)
    return path


class Counter:
    """TerminalEvents that only counts what arrives."""

    def __init__(self) -> None:
        self.bytes = 0
        self.done = False

    async def output(self, data: bytes) -> None:
        self.bytes += len(data)

    def exited(self, exit_code: int | None) -> None:
        self.done = True

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


async def raw(path: Path, workdir: Path) -> tuple[int, float, float]:
    import anyio

    from ahp_terminals.pty import PtyProcess
    from ahpcore.ports import TerminalSpec

    spec = TerminalSpec("bench:/raw", str(workdir), 120, 40, command=f"cat {path}")
    counter = Counter()
    began, cpu = time.monotonic(), time.process_time()
    process = PtyProcess(spec, ["/bin/sh", "-c", f"cat {path}"], {}, False)
    async with anyio.create_task_group() as group:
        group.start_soon(process.run, counter)
    return counter.bytes, time.monotonic() - began, time.process_time() - cpu


async def client(url: str, path: str, workdir: str) -> None:
    from websockets.asyncio.client import connect

    ids = iter(range(1, 1 << 30))

    async with connect(url, max_size=None, compression=None) as ws:

        async def request(method: str, params: dict[str, Any]) -> Any:
            ident = next(ids)
            await ws.send(
                json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
            )
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("id") == ident:
                    if "error" in frame:
                        raise RuntimeError(f"{method}: {frame['error']}")
                    return frame["result"]

        await request(
            "initialize",
            {
                "channel": "ahp-root://",
                "protocolVersions": ["1.0.0"],
                "clientId": "bench",
                "initialSubscriptions": [],
            },
        )
        session = "scripted:/00000000-0000-4000-8000-00000000be01"
        await request(
            "createSession",
            {
                "channel": session,
                "provider": "scripted",
                "workingDirectories": [Path(workdir).as_uri()],
            },
        )
        terminal = "ahp-terminal:/bench"
        await request(
            "createTerminal",
            {
                "channel": terminal,
                "claim": {"kind": "client", "clientId": "bench"},
                "cwd": Path(workdir).as_uri(),
                "cols": 120,
                "rows": 40,
            },
        )
        await request("subscribe", {"channel": terminal})
        began = time.monotonic()
        await ws.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "dispatchAction",
                    "params": {
                        "channel": terminal,
                        "clientSeq": 1,
                        "action": {"type": "terminal/input", "data": f"cat {path}; exit\r"},
                    },
                }
            )
        )
        received = frames = 0
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("method") != "action":
                continue
            action = frame["params"]["action"]
            if action["type"] == "terminal/data":
                received += len(action["data"].encode())
                frames += 1
            elif action["type"] == "terminal/exited":
                break
        print(
            json.dumps({"bytes": received, "seconds": time.monotonic() - began, "frames": frames})
        )


async def hosted(path: Path, workdir: Path) -> dict[str, Any]:
    from ahp_scripted import Script, ScriptedBackend
    from ahp_terminals import plugin as terminals_plugin
    from ahpcore.hookspecs import hookimpl
    from ahpcore.host import HostSettings
    from ahpcore.testing import running_host

    class Backend:
        def __init__(self) -> None:
            self.backend = ScriptedBackend(workdir / ".scripted", Script(rules=[], default=[]))

        @hookimpl
        def ahp_backends(self, host: Any, register: Any) -> None:
            register(self.backend)

    settings = HostSettings(sessions="memory", port=0, state_dir=workdir / ".state")
    async with running_host(
        [("terminals", terminals_plugin), ("scripted", Backend())], settings=settings
    ) as running:
        cpu = time.process_time()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--client",
            running.url,
            str(path),
            str(workdir),
            stdout=subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        result = json.loads(out.decode().strip().splitlines()[-1])
        result["host_cpu"] = time.process_time() - cpu
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--client", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        asyncio.run(client(*args.client))
        return
    os.environ["SHELL"] = "/bin/sh"  # no rc files: the shell only runs cat
    with tempfile.TemporaryDirectory() as temp:
        workdir = Path(temp)
        path = make_file(workdir, args.megabytes)
        import anyio

        raw_bytes, raw_seconds, raw_cpu = anyio.run(raw, path, workdir)
        result = anyio.run(hosted, path, workdir)
    mb = 1_000_000
    print(f"file          {args.megabytes} MB (pty output is larger: each \\n becomes \\r\\n)")
    print(
        f"raw pty loop  {raw_bytes / mb:8.1f} MB in {raw_seconds:6.2f} s  "
        f"{raw_bytes / mb / raw_seconds:7.1f} MB/s  reader CPU {raw_cpu / (raw_bytes / mb) * 1000:6.2f} ms/MB"
    )
    print(
        f"through host  {result['bytes'] / mb:8.1f} MB in {result['seconds']:6.2f} s  "
        f"{result['bytes'] / mb / result['seconds']:7.1f} MB/s  "
        f"host CPU {result['host_cpu'] / (result['bytes'] / mb) * 1000:6.2f} ms/MB  "
        f"({result['frames']} frames)"
    )
    print(
        f"ratio host/raw  throughput x{(result['bytes'] / result['seconds']) / (raw_bytes / raw_seconds):.2f}"
        f", CPU per MB x{(result['host_cpu'] / result['bytes']) / (raw_cpu / raw_bytes):.2f}"
    )


if __name__ == "__main__":
    main()
