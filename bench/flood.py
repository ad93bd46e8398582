"""Flood a host with session/titleChanged from many clients; can a newcomer still get in?

Starts ``ahp serve`` (from this checkout, or the one ``--root`` names) in its
own process with a file session store, creates one session, then C clients
each send their share of N ``session/titleChanged`` dispatches as fast as the
socket takes them. Once every flood frame is written, a new client connects,
initializes and pings. Prints:

* absorbed actions/s: flood answers received (applied or refused) / time from
  the first flood frame to the last answer (or to the connection closing);
* time to serve a new client: connect + initialize + ping, started once the
  flood is written;
* the server's peak RSS (VmHWM).

    .venv/bin/python bench/flood.py                  # C = 10, N = 20000
    .venv/bin/python bench/flood.py -c 20 -n 100000
    .venv/bin/python bench/flood.py --root /tmp/other-checkout
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

HERE = Path(__file__).resolve().parent.parent
SESSION = "scripted:/00000000-0000-4000-8000-00000000f100"


def start_server(root: Path, state_dir: Path) -> tuple[subprocess.Popen[str], str]:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "contrib" / "scripted")])
    env["AHP_PLUGINS"] = "scripted"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "ahpcore.cli", "serve", "--port", "0", "--no-token"),
            *("--state-dir", str(state_dir), "--log-level", "error"),
        ],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        if not line:
            raise SystemExit("ahp serve exited before listening")
        if match := re.search(r"listening on (ws://\S+)", line):
            return process, match.group(1)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def request(ws: ClientConnection, ident: int, method: str, params: dict[str, Any]) -> Any:
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
    while True:
        frame = json.loads(await ws.recv())
        if frame.get("id") == ident and "method" not in frame:
            return frame


async def initialize(ws: ClientConnection, client_id: str) -> None:
    await request(
        ws,
        0,
        "initialize",
        {
            "channel": "ahp-root://",
            "protocolVersions": ["1.0.0"],
            "clientId": client_id,
            "initialSubscriptions": [],
        },
    )


class Flooder:
    def __init__(self, url: str, name: str, count: int) -> None:
        self.url, self.name, self.count = url, name, count
        self.answered = self.refused = 0
        self.closed_with: str | None = None
        self.written = asyncio.Event()
        self.last_answer = 0.0

    async def run(self, go: asyncio.Event) -> None:
        async with connect(self.url, max_size=None, max_queue=None) as ws:
            await initialize(ws, self.name)
            await go.wait()
            reader = asyncio.create_task(self._read(ws))
            try:
                for seq in range(1, self.count + 1):
                    frame = {
                        "jsonrpc": "2.0",
                        "method": "dispatchAction",
                        "params": {
                            "channel": SESSION,
                            "clientSeq": seq,
                            "action": {
                                "type": "session/titleChanged",
                                "title": f"{self.name} {seq}",
                            },
                        },
                    }
                    await ws.send(json.dumps(frame))
            except Exception as exc:
                self.closed_with = f"send: {exc}"
            self.written.set()
            await reader

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for text in ws:
                frame = json.loads(text)
                params = frame.get("params") or {}
                origin = params.get("origin") or {}
                if frame.get("method") == "action" and origin.get("clientId") == self.name:
                    self.answered += 1
                    self.refused += "rejectionReason" in params
                    self.last_answer = time.monotonic()
                    if origin.get("clientSeq") == self.count:
                        return
        except Exception as exc:
            self.closed_with = str(exc)
        self.closed_with = self.closed_with or f"closed ({ws.close_code} {ws.close_reason})"
        self.last_answer = time.monotonic()


async def newcomer(url: str) -> float:
    began = time.monotonic()
    async with connect(url, max_size=None) as ws:
        await initialize(ws, "newcomer")
        await request(ws, 1, "ping", {"channel": "ahp-root://"})
    return time.monotonic() - began


async def flood(url: str, clients: int, actions: int, timeout: float) -> dict[str, Any]:
    async with connect(url, max_size=None) as ws:
        await initialize(ws, "setup")
        answer = await request(ws, 1, "createSession", {"channel": SESSION, "provider": "scripted"})
        if "error" in answer:
            raise SystemExit(f"createSession failed: {answer['error']}")
    share = actions // clients
    flooders = [Flooder(url, f"flood-{n}", share) for n in range(clients)]
    go = asyncio.Event()
    runs = [asyncio.create_task(f.run(go)) for f in flooders]
    await asyncio.sleep(0.5)  # every flooder connected and initialized
    began = time.monotonic()
    go.set()
    await asyncio.gather(*(f.written.wait() for f in flooders))
    written = time.monotonic() - began
    try:
        served_in = await asyncio.wait_for(newcomer(url), timeout)
    except TimeoutError:
        served_in = float("inf")
    _, pending = await asyncio.wait(runs, timeout=timeout)
    for task in pending:
        task.cancel()
    ended = max((f.last_answer for f in flooders), default=began) - began
    answered = sum(f.answered for f in flooders)
    return {
        "sent": share * clients,
        "written_s": written,
        "answered": answered,
        "refused": sum(f.refused for f in flooders),
        "closed": [f.closed_with for f in flooders if f.closed_with],
        "absorb_s": ended,
        "absorbed_per_s": answered / ended if ended > 0 else float("nan"),
        "newcomer_s": served_in,
        "unfinished": len(pending),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--clients", type=int, default=10)
    parser.add_argument("-n", "--actions", type=int, default=20000)
    parser.add_argument("--root", type=Path, default=HERE, help="checkout to run the host from")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        process, url = start_server(args.root, Path(state))
        try:
            figures = asyncio.run(flood(url, args.clients, args.actions, args.timeout))
            rss = peak_rss_mib(process.pid)
        finally:
            process.kill()
            process.wait()
    closed = figures["closed"]
    print(f"host from            {args.root}")
    print(f"flood                {figures['sent']} actions from {args.clients} clients")
    print(f"written in           {figures['written_s']:.2f} s")
    print(f"answered             {figures['answered']} ({figures['refused']} refused)")
    print(
        f"absorbed             {figures['absorbed_per_s']:.0f} actions/s over {figures['absorb_s']:.2f} s"
    )
    print(f"new client served in {figures['newcomer_s']:.3f} s")
    print(f"peak RSS             {rss:.0f} MiB")
    print(f"connections closed   {len(closed)}" + (f": {closed[0]}" if closed else ""))
    if figures["unfinished"]:
        print(f"unfinished flooders  {figures['unfinished']} (timed out)")


if __name__ == "__main__":
    main()
