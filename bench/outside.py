"""Outside-in benchmarks: an ``ahp serve`` process driven over real sockets.

Every figure is taken from outside the server, over a real WebSocket, with a
bare websockets server (``bench/_bare.py``) doing the same job in the same run
as the baseline. Server CPU is read from ``/proc/<pid>/stat`` around each
measured window, memory from ``/proc/<pid>/status``.

    python bench/outside.py startup            # serve -> first initialize answer, idle RSS
    python bench/outside.py dispatch           # one client's actions: parse, validate, reduce, echo
    python bench/outside.py catalogue -n 1000  # listSessions cold/warm, another client's ping meanwhile
    python bench/outside.py turns -n 500       # per-turn latency along one long chat
    python bench/outside.py all

Fan-out to many clients is ``bench/fanout.py``. This is a benchmark, not a
test: it prints figures and asserts nothing. Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

from ahpcore.protocol.uris import default_chat_uri  # noqa: E402

BARE = Path(__file__).with_name("_bare.py")
TICKS = os.sysconf("SC_CLK_TCK")
#: A command both servers run under, e.g. ``valgrind --tool=callgrind`` to count
#: their instructions, which a change in the machine's speed does not move.
SERVER_PREFIX = shlex.split(os.environ.get("AHP_BENCH_SERVER_PREFIX", ""))
VERSIONS = ["1.0.0"]
#: Options every ``ahp serve`` of the run gets (``--plugins``).
HOST_OPTIONS: list[str] = []


def now() -> float:
    return time.perf_counter()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def memory_kib(pid: int, key: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


@dataclass
class Server:
    """A server process on a port: the host (``ahp serve``) or the bare baseline."""

    kind: str
    process: subprocess.Popen[bytes]
    port: int
    started: float

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                # Under a SERVER_PREFIX such as valgrind, exiting takes far longer.
                self.process.wait(300 if SERVER_PREFIX else 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_host(state_dir: Path, *extra: str, budget: bool = True) -> Server:
    """``ahp serve``; ``budget=False`` lifts its inbound budget (bare has none)."""
    port = free_port()
    command = [
        sys.executable,
        "-c",
        "from ahpcore.cli import main; main()",
        "serve",
        "--no-token",
        "--port",
        str(port),
        "--state-dir",
        str(state_dir),
        "--log-level",
        "warning",
        *HOST_OPTIONS,
        *extra,
    ]
    started = now()
    env = dict(os.environ)
    if not budget:
        env["AHP_INBOUND_FRAMES"] = "0"
        # Fan-out rows open up to 200 clients from loopback, one address for the host.
        env["AHP_MAX_CONNECTIONS_PER_ADDRESS"] = "0"
    process = subprocess.Popen(
        [*SERVER_PREFIX, *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
    )
    return Server("host", process, port, started)


def start_bare(*extra: str) -> Server:
    port = free_port()
    started = now()
    process = subprocess.Popen(
        [*SERVER_PREFIX, sys.executable, str(BARE), "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return Server("bare", process, port, started)


class Client:
    """One JSON-RPC client connection, enough for these benchmarks."""

    def __init__(self, ws: ClientConnection, client_id: str) -> None:
        self.ws = ws
        self.client_id = client_id
        self._ids = 0
        self._seq = 0
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        #: Answers over 64 KB are handed back as {"unparsed": text}, parsed by the caller
        #: later: parsing 3 MB here would delay another client's pings in this process.
        self.defer_large = False
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for text in self.ws:
                if self.defer_large and len(text) > 65536:
                    found = re.search(r'"id"\s*:\s*(\d+)', text[:200])
                    if found is not None:
                        future = self.waiting.pop(int(found.group(1)), None)
                        if future is not None and not future.done():
                            future.set_result({"result": {"unparsed": text}})
                        continue
                message = json.loads(text)
                if "id" in message and "method" not in message:
                    future = self.waiting.pop(message["id"], None)
                    if future is not None and not future.done():
                        future.set_result(message)
                    continue
                for listener in list(self.listeners):
                    listener(message)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self._ids += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[self._ids] = future
        await self.ws.send(
            json.dumps({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        )
        answer = await asyncio.wait_for(future, 600)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    async def dispatch(self, channel: str, action: dict[str, Any]) -> int:
        self._seq += 1
        params = {"channel": channel, "clientSeq": self._seq, "action": action}
        await self.ws.send(
            json.dumps({"jsonrpc": "2.0", "method": "dispatchAction", "params": params})
        )
        return self._seq

    async def close(self) -> None:
        self._reader.cancel()
        await self.ws.close()


@contextlib.asynccontextmanager
async def client(
    server: Server, client_id: str, compression: str | None = None
) -> AsyncIterator[Client]:
    deadline = now() + 60
    while True:
        try:
            ws = await connect(server.url, max_size=None, compression=compression, open_timeout=5)
            break
        except OSError:
            if now() > deadline or server.process.poll() is not None:
                raise RuntimeError(f"{server.kind} never accepted a connection") from None
            await asyncio.sleep(0.01)
    peer = Client(ws, client_id)
    try:
        await peer.request(
            "initialize",
            {"channel": "ahp-root://", "protocolVersions": VERSIONS, "clientId": client_id},
        )
        yield peer
    finally:
        await peer.close()


def line(*cells: Any) -> None:
    print("  ".join(f"{c:>12}" if not isinstance(c, str) else f"{c:<12}" for c in cells))


# -- startup and idle memory -----------------------------------------------------
async def bench_startup(args: argparse.Namespace) -> None:
    print("\n## startup: process start -> first initialize answered; RSS after 2 s idle")
    if args.bytecode:
        print("(bytecode cached, as in an installed package: one unmeasured start of each first)")
    line("server", "run", "start ms", "start CPU ms", "idle RSS MB")
    figures: dict[str, list[tuple[float, float, float]]] = {"host": [], "bare": []}
    for run in range(-1 if args.bytecode else 0, args.repeat):
        for kind in ("host", "bare"):
            with tempfile.TemporaryDirectory() as tmp:
                server = start_host(Path(tmp)) if kind == "host" else start_bare()
                try:
                    async with client(server, "startup"):
                        ready = now() - server.started
                        cpu = cpu_seconds(server.pid)
                    await asyncio.sleep(2)
                    rss = memory_kib(server.pid) / 1024
                finally:
                    server.stop()
            if run < 0:
                continue  # the warm-up start that filled the bytecode cache
            figures[kind].append((ready, cpu, rss))
            line(kind, run + 1, round(ready * 1000), round(cpu * 1000), round(rss, 1))
    host = [statistics.median(x) for x in zip(*figures["host"], strict=True)]
    bare = [statistics.median(x) for x in zip(*figures["bare"], strict=True)]
    print(
        f"median: host {host[0] * 1000:.0f} ms ({host[1] * 1000:.0f} ms CPU) / {host[2]:.1f} MB, "
        f"bare {bare[0] * 1000:.0f} ms ({bare[1] * 1000:.0f} ms CPU) / {bare[2]:.1f} MB; "
        f"ratio start x{host[0] / bare[0]:.2f}, CPU x{host[1] / bare[1]:.2f}, "
        f"RSS x{host[2] / bare[2]:.2f}"
    )


# -- one client's actions ----------------------------------------------------------
async def _open_session(peer: Client, server: Server) -> tuple[str, str]:
    session = f"scripted:/{uuid.uuid4()}"
    if server.kind == "host":
        await peer.request("createSession", {"channel": session, "provider": "scripted"})
        await peer.request("subscribe", {"channel": session})
    return session, default_chat_uri(session)


def _action(kind: str, i: int) -> dict[str, Any]:
    if kind == "title":  # saved durably (an SQLite commit) before it is echoed
        return {"type": "session/titleChanged", "title": f"title {i}"}
    # A chat draft: reduced, echoed and relayed; the session record is saved later, coalesced.
    return {
        "type": "chat/draftChanged",
        "draft": {"text": f"draft {i}", "origin": {"kind": "user"}},
    }


async def _drive_actions(
    peer: Client, channel: str, count: int, window: int, kind: str = "draft"
) -> float:
    """Send ``count`` actions, at most ``window`` unanswered; seconds until all echoed."""
    echoed = asyncio.Event()
    done = {"n": 0, "refused": 0}
    credit = asyncio.Semaphore(window)

    def on_frame(message: dict[str, Any]) -> None:
        params = message.get("params") or {}
        origin = params.get("origin") or {}
        if message.get("method") == "action" and origin.get("clientId") == peer.client_id:
            done["n"] += 1
            done["refused"] += "rejectionReason" in params
            credit.release()
            if done["n"] == count:
                echoed.set()

    peer.listeners.append(on_frame)
    start = now()
    for i in range(count):
        await credit.acquire()
        await peer.dispatch(channel, _action(kind, i))
    await asyncio.wait_for(echoed.wait(), 600)
    peer.listeners.remove(on_frame)
    if done["refused"]:
        print(f"  ({done['refused']} of {count} refused: the figures are not of the same job)")
    return now() - start


async def _dispatch_run(args: argparse.Namespace, kind: str, window: int) -> tuple[float, float]:
    """One server's run: (seconds, server CPU seconds) for ``args.actions`` actions."""
    with tempfile.TemporaryDirectory() as tmp:
        # The host's inbound budget (1,000 frames/s) would refuse part of a flat-out
        # run; bare has none, so it is lifted to compare the same job.
        server = start_host(Path(tmp), budget=False) if kind == "host" else start_bare()
        try:
            async with client(server, "sender") as peer:
                session, chat = await _open_session(peer, server)
                target = session if args.action == "title" else chat
                if server.kind == "host" and target == chat:
                    await peer.request("subscribe", {"channel": chat})
                await _drive_actions(peer, target, 200, window, args.action)  # warm-up
                cpu = cpu_seconds(server.pid)
                wall = await _drive_actions(peer, target, args.actions, window, args.action)
                return wall, cpu_seconds(server.pid) - cpu
        finally:
            server.stop()


async def bench_dispatch(args: argparse.Namespace) -> None:
    what = "session/titleChanged" if args.action == "title" else "chat/draftChanged"
    print(f"\n## dispatch: one client, {args.actions} {what}, echoed to the sender")
    print(f"({args.repeat} pairs per window, host and bare in turns, each pair's order swapped)")
    line("server", "window", "actions/s", "us/action", "CPU us/act")
    for window in (1, 64):
        throughput, cpu = [], []
        for pair in range(args.repeat):
            results = {}
            # Swapping who runs first each pair keeps a drift in the machine's speed
            # from always favouring one server.
            for kind in ("host", "bare") if pair % 2 == 0 else ("bare", "host"):
                wall, used = results[kind] = await _dispatch_run(args, kind, window)
                line(
                    kind,
                    window,
                    round(args.actions / wall),
                    round(wall / args.actions * 1e6, 1),
                    round(used / args.actions * 1e6, 1),
                )
            (host_wall, host_cpu), (bare_wall, bare_cpu) = results["host"], results["bare"]
            throughput.append(bare_wall / host_wall)
            cpu.append(host_cpu / max(bare_cpu, 1e-9))
            print(f"  pair {pair + 1}: throughput x{throughput[-1]:.2f}, CPU x{cpu[-1]:.2f}")
        print(
            f"ratio window {window}, median of {args.repeat} pairs: throughput "
            f"x{statistics.median(throughput):.2f} of bare, CPU per action "
            f"x{statistics.median(cpu):.2f} (pairs {min(throughput):.2f}-{max(throughput):.2f}, "
            f"{min(cpu):.2f}-{max(cpu):.2f})"
        )


# -- the catalogue ---------------------------------------------------------------------
async def _seed(state_dir: Path, sessions: int) -> None:
    """Create ``sessions`` scripted sessions through the host, eight clients at a time."""
    server = start_host(state_dir)
    try:
        async with client(server, "seed") as first:
            lanes = 8
            created = {"n": 0}

            async def lane(index: int) -> None:
                async with client(server, f"seed{index}") as peer:
                    for _ in range(index, sessions, lanes):
                        await peer.request(
                            "createSession",
                            {"channel": f"scripted:/{uuid.uuid4()}", "provider": "scripted"},
                        )
                        created["n"] += 1
                        if created["n"] % 1000 == 0:
                            print(f"  seeded {created['n']}/{sessions}", flush=True)

            await asyncio.gather(*(lane(i) for i in range(lanes)))
            await first.request("ping", {})
    finally:
        server.stop()


#: Another client, in a process of its own: it pings every 2 ms and prints each ping's
#: send time (CLOCK_MONOTONIC, one clock for every process) and round trip, until its
#: stdin closes. In the bench's own process, its pings would also wait for the lister
#: reading a 3 MB answer, which is not the server's doing.
PINGER = """
import asyncio, json, sys, time
from websockets.asyncio.client import connect

async def main(url, versions):
    async with connect(url, max_size=None) as ws:
        hello = {"channel": "ahp-root://", "protocolVersions": versions, "clientId": "pinger"}
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}))
        while json.loads(await ws.recv()).get("id") != 0:
            pass
        print("ready", flush=True)
        done = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        ident = 0
        while not done.done():
            ident += 1
            sent = time.monotonic()
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": "ping", "params": {}}))
            while json.loads(await ws.recv()).get("id") != ident:
                pass
            print(sent, time.monotonic() - sent, flush=True)
            await asyncio.sleep(0.002)

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
"""


#: In place of a listing's params: half a second of nothing, so the pings show what the
#: machine alone does to a round trip (the floor the listing's figures stand on).
IDLE = None


async def _timed_lists(
    server: Server, calls: list[dict[str, Any] | None]
) -> list[tuple[float, list[float], int]]:
    """Each call's wall time, another client's ping latencies meanwhile, and rows returned."""
    out = []
    windows = []
    async with client(server, "lister") as lister:  # waits for the server to accept
        pinger = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            PINGER,
            server.url,
            json.dumps(VERSIONS),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert pinger.stdin is not None and pinger.stdout is not None
        try:
            await asyncio.wait_for(pinger.stdout.readline(), 60)  # "ready"
            for params in calls:
                await asyncio.sleep(0.05)
                lister.defer_large = True
                start = now()
                if params is IDLE:
                    await asyncio.sleep(0.5)
                    result = {}
                else:
                    result = await lister.request("listSessions", params)
                wall = now() - start
                windows.append((start, start + wall))
                if "unparsed" in result:
                    result = json.loads(result["unparsed"])["result"]
                out.append((wall, len(result.get("items", []))))
        finally:
            pinger.stdin.close()
            lines = (await asyncio.wait_for(pinger.stdout.read(), 60)).decode().split()
            await pinger.wait()
    pings = [
        (float(sent), float(took)) for sent, took in zip(lines[::2], lines[1::2], strict=False)
    ]
    return [
        (wall, [took for sent, took in pings if begin <= sent <= end], rows)
        for (wall, rows), (begin, end) in zip(out, windows, strict=True)
    ]


async def bench_catalogue(args: argparse.Namespace) -> None:
    sessions = args.sessions
    seed_dir = Path(tempfile.gettempdir()) / f"ahp-bench-catalogue-{sessions}"
    if not (seed_dir / "done").exists():
        shutil.rmtree(seed_dir, ignore_errors=True)
        print(f"seeding {sessions} sessions into {seed_dir} (kept for later runs)")
        await _seed(seed_dir, sessions)
        (seed_dir / "done").write_text("")
    print(f"\n## catalogue: listSessions at {sessions} sessions; another client pings every 2 ms")
    line("server", "call", "rows", "ms", "ping p99 ms", "ping max ms")
    calls = [{}, {}, {}, {"limit": 50}, {"limit": 50}, {"limit": 50}, IDLE]
    names = ["cold all", "warm all", "warm all", "page 50", "page 50", "page 50", "idle"]
    rows_file = Path(tempfile.gettempdir()) / f"ahp-bench-rows-{sessions}.json"
    for kind in ("host", "bare"):
        with tempfile.TemporaryDirectory() as tmp:
            if kind == "host":
                work = Path(tmp) / "state"
                shutil.copytree(seed_dir, work)
                # Never listed before: no catalogue index rows from a backend, no caches.
                server = start_host(work)
                try:
                    (never,) = await _timed_lists(server, [{}])
                finally:
                    server.stop()
                # Restarted after that run: what it left answers the first listing.
                server = start_host(work)
            else:
                server = start_bare("--list", str(rows_file))
            try:
                results = await _timed_lists(server, calls)
                if kind == "host":
                    results.insert(0, never)
                    async with client(server, "rows") as peer:
                        rows = (await peer.request("listSessions", {}))["items"]
                    rows_file.write_text(json.dumps(rows))
                else:
                    results.insert(0, results[0])
                rss = memory_kib(server.pid) / 1024
            finally:
                server.stop()
        for name, (wall, pings, count) in zip(["never listed", *names], results, strict=True):
            ordered = sorted(pings) or [0.0]
            p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
            line(
                kind,
                name,
                count,
                round(wall * 1000, 1),
                round(p99 * 1000, 1),
                round(ordered[-1] * 1000, 1),
            )
        print(f"{kind} RSS after listing: {rss:.1f} MB")


# -- a long chat ---------------------------------------------------------------------------
class Chatter:
    """Runs turns in chats over one connection and times each, turnStarted to its end."""

    def __init__(self, peer: Client, server: Server) -> None:
        self.peer = peer
        self.server = server
        self.ended: dict[str, asyncio.Event] = {}
        peer.listeners.append(self._on_frame)

    def _on_frame(self, message: dict[str, Any]) -> None:
        action = (message.get("params") or {}).get("action") or {}
        if action.get("type") in ("chat/turnComplete", "chat/error", "chat/turnCancelled"):
            event = self.ended.get(action.get("turnId"))
            if event is not None:
                event.set()

    async def open_chat(self) -> str:
        _session, chat = await _open_session(self.peer, self.server)
        if self.server.kind == "host":
            await self.peer.request("subscribe", {"channel": chat})
        return chat

    async def turn(self, chat: str) -> tuple[float, float]:
        """One turn's latency and the server's CPU seconds spent on it."""
        turn_id = str(uuid.uuid4())
        ended = self.ended[turn_id] = asyncio.Event()
        cpu = cpu_seconds(self.server.pid)
        start = now()
        await self.peer.dispatch(
            chat,
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": "2026-01-01T00:00:00.000Z",
                "message": {"text": "tell me something", "origin": {"kind": "user"}},
            },
        )
        await asyncio.wait_for(ended.wait(), 60)
        del self.ended[turn_id]
        return now() - start, cpu_seconds(self.server.pid) - cpu


async def _turns(
    server: Server, count: int, paired: int
) -> tuple[list[float], list[float], list[float]]:
    """Latency and CPU of each turn of one long chat, and of a new chat's first turns.

    The long chat's last ``paired`` turns alternate with the first ``paired`` turns
    of a chat opened beside it, so the two sets are taken in the same seconds: the
    machine's speed, which drifts by more than the target over a run, is the same
    for both.
    """
    async with client(server, "chatter") as peer:
        chatter = Chatter(peer, server)
        long_chat = await chatter.open_chat()
        latencies: list[float] = []
        cpus: list[float] = []
        for _ in range(count - paired):
            latency, cpu = await chatter.turn(long_chat)
            latencies.append(latency)
            cpus.append(cpu)
        new_chat = await chatter.open_chat()
        fresh: list[float] = []
        for i in range(paired):
            # Swapped each time, so neither chat always runs right after the other.
            order = (long_chat, new_chat) if i % 2 == 0 else (new_chat, long_chat)
            for chat in order:
                latency, cpu = await chatter.turn(chat)
                if chat == long_chat:
                    latencies.append(latency)
                    cpus.append(cpu)
                else:
                    fresh.append(latency)
        return latencies, cpus, fresh


async def bench_turns(args: argparse.Namespace) -> None:
    count = args.turns
    bucket = max(1, count // 5)
    print(f"\n## turns: {count} turns in one chat, turnStarted -> turnComplete")
    print(f"(the last {bucket} alternate with the first {bucket} turns of a new chat beside it)")
    line("server", "turns", "median ms", "p90 ms", "CPU ms/turn")
    for kind in ("host", "bare"):
        with tempfile.TemporaryDirectory() as tmp:
            server = start_host(Path(tmp)) if kind == "host" else start_bare()
            try:
                latencies, cpus, fresh = await _turns(server, count, bucket)
            finally:
                server.stop()
        medians = []
        cpu_means = []
        for start in range(0, count, bucket):
            part = sorted(latencies[start : start + bucket])
            medians.append(statistics.median(part))
            # /proc counts in clock ticks (10 ms): only a bucket's mean is meaningful.
            cpu_means.append(statistics.fmean(cpus[start : start + bucket]))
            line(
                kind,
                f"{start + 1}-{start + len(part)}",
                round(medians[-1] * 1000, 2),
                round(part[int(0.9 * (len(part) - 1))] * 1000, 2),
                round(cpu_means[-1] * 1000, 2),
            )
        fresh.sort()
        line(
            kind,
            f"new 1-{len(fresh)}",
            round(statistics.median(fresh) * 1000, 2),
            round(fresh[int(0.9 * (len(fresh) - 1))] * 1000, 2),
            "",
        )
        print(
            f"{kind}: last bucket / first bucket: latency x{medians[-1] / medians[0]:.2f}, "
            f"CPU x{cpu_means[-1] / max(cpu_means[0], 1e-9):.2f}; "
            f"last bucket / a new chat's first turns beside it: "
            f"latency x{medians[-1] / statistics.median(fresh):.2f}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["startup", "dispatch", "catalogue", "turns", "all"])
    parser.add_argument(
        "--repeat", type=int, default=3, help="startup runs per server; dispatch pairs per window"
    )
    parser.add_argument("--actions", type=int, default=5000, help="actions in the dispatch run")
    parser.add_argument(
        "--action",
        choices=["draft", "title"],
        default="draft",
        help="dispatch: chat/draftChanged (default) or session/titleChanged (saved before echo)",
    )
    parser.add_argument(
        "-n", "--sessions", type=int, default=1000, help="sessions in the catalogue"
    )
    parser.add_argument("--turns", type=int, default=500, help="turns in the long chat")
    parser.add_argument(
        "--no-bytecode-cache",
        dest="bytecode",
        action="store_false",
        help="let the servers honour PYTHONDONTWRITEBYTECODE (every start compiles every module)",
    )
    parser.add_argument(
        "--plugins",
        help="load only these plugins in the host (ahp serve --plugins), e.g. scripted",
    )
    args = parser.parse_args()
    if args.plugins is not None:
        HOST_OPTIONS.extend(["--plugins", args.plugins])
    if args.bytecode:
        # Servers write and reuse compiled modules in a folder of this run's own, as an
        # installed package does, whatever the caller's PYTHONDONTWRITEBYTECODE says.
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="ahp-bench-pyc-")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {os.uname().release}")
    steps = {
        "startup": bench_startup,
        "dispatch": bench_dispatch,
        "catalogue": bench_catalogue,
        "turns": bench_turns,
    }
    for name, step in steps.items():
        if args.what in (name, "all"):
            await step(args)


if __name__ == "__main__":
    asyncio.run(main())
