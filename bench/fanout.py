"""Fan-out benchmark: the engine's path to many clients against a bare websockets broadcast.

For each client count C, the same C client connections (held by client processes,
separate from the server) receive N frames twice:

* engine: an in-process ahp host (``--no-plugins``); each frame is a
  ``root/configChanged`` pushed with ``engine.apply``, so it is reduced, numbered,
  buffered for replay, and written at once to every client with nothing queued
  or buffered (one broadcast per spelling), checked against clientQueueBytes
  and queued for the others.
* bare: a websockets server that ``broadcast()``s frames of the same shape and size,
  with nothing in between.

Each frame carries the server's send time (CLOCK_MONOTONIC, one clock for every
process on the machine) and each client notes when it arrived. Printed per row:
deliveries/s (frames x clients over first send to last arrival), p50 and p99
latency, and the server process's CPU time per 1,000 deliveries, then the ratio
engine/bare.

    .venv/bin/python bench/fanout.py                    # C = 1, 10, 50, 200; N = 2000
    .venv/bin/python bench/fanout.py --compression both -n 1000
    .venv/bin/python bench/fanout.py --clients 10 --actions 5000 --size 4096

This is a benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast, serve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from ahpcore.host import HostSettings
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.rpc.peer import HostQueues
from ahpcore.testing import running_host
from ahpcore.transports.websocket import ConnectionLimits

CLIENT_SCRIPT = Path(__file__).with_name("_client.py")
#: Client processes a row uses unless --procs says otherwise.
MAX_PROCS = 16
#: Frames pushed before the measured ones (ignored by clients), so both modes start warm.
WARMUP = 100
#: How long a client process may take to connect or to finish, in seconds.
STEP_TIMEOUT = 300.0


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclass
class Row:
    mode: str
    clients: int
    actions: int
    size: int
    deliveries: int
    wall: float
    cpu: float
    latencies: list[float]
    closed: int

    @property
    def rate(self) -> float:
        return self.deliveries / self.wall

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def cpu_per_1000(self) -> float:
        return self.cpu / self.deliveries * 1000 * 1000  # ms per 1,000 deliveries


class ClientProcesses:
    """Client processes, kept across the rows of one client count."""

    def __init__(self, clients: int, procs: int) -> None:
        base, extra = divmod(clients, procs)
        self.shares = [base + (1 if i < extra else 0) for i in range(procs)]
        self.shares = [share for share in self.shares if share]
        self.procs: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        for _ in self.shares:
            self.procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(CLIENT_SCRIPT),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )

    async def _expect(self, word: str) -> None:
        async def one(proc: asyncio.subprocess.Process) -> None:
            assert proc.stdout is not None
            line = (await proc.stdout.readline()).decode().strip()
            if line != word:
                raise RuntimeError(f"client process {proc.pid} said {line!r}, not {word!r}")

        await asyncio.wait_for(asyncio.gather(*(one(p) for p in self.procs)), STEP_TIMEOUT)

    async def run(
        self,
        url: str,
        mode: str,
        args: argparse.Namespace,
        warm: Callable[[], Awaitable[Any]],
        push: Callable[[], Awaitable[Any]],
        cpu_clock: Callable[[], float] = time.process_time,
        channel: str = ROOT_CHANNEL,
    ) -> tuple[float, float, list[dict[str, Any]]]:
        """Connect every client, warm up, then time ``push`` until every frame has arrived.

        Returns the monotonic time the first measured frame was sent, the server CPU
        seconds spent from then until the last one arrived (``cpu_clock``: this
        process's, or a server process's read from /proc), and each connection's
        results. The clients subscribe to ``channel``.
        """
        with tempfile.TemporaryDirectory() as scratch:
            outs = [os.path.join(scratch, f"{i}.json") for i in range(len(self.procs))]
            for index, (proc, share, out) in enumerate(
                zip(self.procs, self.shares, outs, strict=True)
            ):
                command = {
                    "url": url,
                    "mode": mode,
                    "count": args.actions,
                    "warmup": WARMUP,
                    "connections": share,
                    "compression": args.compression,
                    "proc": index,
                    "out": out,
                    "channel": channel,
                }
                assert proc.stdin is not None
                proc.stdin.write((json.dumps(command) + "\n").encode())
                await proc.stdin.drain()
            await self._expect("ready")
            await warm()
            await self._expect("warm")
            cpu_before = cpu_clock()
            started = now()
            await push()
            await self._expect("done")
            cpu = cpu_clock() - cpu_before
            results = [conn for out in outs for conn in json.loads(Path(out).read_text())]
        return started, cpu, results

    async def stop(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(b'{"quit": true}\n')
            await proc.stdin.drain()
        for proc in self.procs:
            await proc.wait()


def _stamp(index: int, pad: str, warm: bool = False) -> dict[str, Any]:
    stamp: dict[str, Any] = {"i": index, "t": now(), "pad": pad}
    if warm:
        stamp["warm"] = True
    return stamp


def _pads(count: int, size: int) -> list[str]:
    # A different pad per frame: with context takeover, deflate would otherwise send a
    # repeated pad as a back-reference and the frames would not be ``size`` on the wire.
    return [os.urandom(size // 2 + 1).hex()[:size] for _ in range(count)]


def _row(
    mode: str,
    args: argparse.Namespace,
    clients: int,
    started: float,
    cpu: float,
    results: list[dict[str, Any]],
) -> Row:
    latencies = [lat for conn in results for lat in conn["latencies"]]
    lasts = [conn["last"] for conn in results if conn["last"] is not None]
    closed = sum(1 for conn in results if conn["closed"])
    return Row(
        mode,
        clients,
        args.actions,
        args.size,
        len(latencies),
        max(lasts) - started,
        cpu,
        latencies,
        closed,
    )


async def _drive(
    procs: ClientProcesses,
    url: str,
    mode: str,
    args: argparse.Namespace,
    send: Callable[[int, dict[str, Any]], Any],
    **run: Any,
) -> tuple[float, float, list[dict[str, Any]]]:
    """Warm up, then push the measured frames; ``send(seq, stamp)`` puts one out.

    ``run`` goes to ``ClientProcesses.run`` (the CPU clock, the channel)."""
    warm_pads, pads = _pads(WARMUP, args.size), _pads(args.actions, args.size)

    async def warm() -> None:
        for index, pad in enumerate(warm_pads):
            send(index, _stamp(index, pad, warm=True))
            await asyncio.sleep(0)

    async def push() -> None:
        start = now()
        for index, pad in enumerate(pads):
            if args.rate:
                # Paced: latency is then the path's own, not time spent queued behind a burst.
                delay = start + index / args.rate - now()
                if delay > 0:
                    await asyncio.sleep(delay)
            send(WARMUP + index, _stamp(index, pad))
            # One turn of the loop per frame: the writers (engine) and the transports
            # (both) get to move bytes between frames, the same way in both modes.
            await asyncio.sleep(0)

    return await procs.run(url, mode, args, warm, push, **run)


def _bench_action(stamp: dict[str, Any]) -> dict[str, Any]:
    return {"type": "root/configChanged", "config": {"bench": stamp}}


async def engine_row(args: argparse.Namespace, clients: int, procs: ClientProcesses) -> Row:
    settings = HostSettings(sessions="memory", port=0, compression=args.compression)
    # All the clients come from loopback, one address: past the default 64 per address.
    # The host's queues keep their ledger (its cost is measured), far out of the way.
    limits = ConnectionLimits(per_address=0, queues=HostQueues(1 << 40))
    async with running_host(no_plugins=True, settings=settings, limits=limits) as running:
        engine = running.host.engine_or_fail
        # Far above what the run can queue: the benchmark measures delivery, not closing.
        config = {"clientQueueBytes": 1 << 34}
        engine.apply(ROOT_CHANNEL, {"type": "root/configChanged", "config": config})

        def send(seq: int, stamp: dict[str, Any]) -> None:
            # Reduce, number, buffer for replay, queue per client, wake each writer.
            engine.apply(ROOT_CHANNEL, _bench_action(stamp))

        started, cpu, results = await _drive(procs, running.url, "engine", args, send)
    return _row("engine", args, clients, started, cpu, results)


async def bare_row(args: argparse.Namespace, clients: int, procs: ClientProcesses) -> Row:
    connections: set[ServerConnection] = set()

    async def handler(connection: ServerConnection) -> None:
        connections.add(connection)
        try:
            await connection.wait_closed()
        finally:
            connections.discard(connection)

    first_seq = int(time.time() * 1000)  # as many digits as the engine's serverSeq

    def send(seq: int, stamp: dict[str, Any]) -> None:
        # The engine's envelope, field for field, so both put the same bytes out.
        envelope = {
            "channel": ROOT_CHANNEL,
            "action": _bench_action(stamp),
            "serverSeq": first_seq + seq,
        }
        message = {"jsonrpc": "2.0", "method": "action", "params": envelope}
        broadcast(connections, json.dumps(message, separators=(",", ":"), ensure_ascii=False))

    compression = "deflate" if args.compression else None
    async with serve(handler, "127.0.0.1", 0, compression=compression, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        url = f"ws://127.0.0.1:{port}/"
        started, cpu, results = await _drive(procs, url, "bare", args, send)
    return _row("bare", args, clients, started, cpu, results)


def _draft_frame(channel: str, seq: int, stamp: dict[str, Any]) -> str:
    """A client's ``dispatchAction`` carrying ``stamp`` in a chat draft (a declared field,
    so the host's check keeps it)."""
    action = {
        "type": "chat/draftChanged",
        "draft": {"text": json.dumps(stamp), "origin": {"kind": "user"}},
    }
    params = {"channel": channel, "clientSeq": seq + 1, "action": action}
    return json.dumps({"jsonrpc": "2.0", "method": "dispatchAction", "params": params})


async def outside_row(
    mode: str, args: argparse.Namespace, clients: int, procs: ClientProcesses
) -> Row:
    """``ahp serve`` (or bench/_bare.py) as a process of its own, driven over a socket.

    A driver client dispatches each frame as a chat draft; the host checks, reduces,
    numbers and buffers it and fans it out to the clients subscribed to the chat
    (bare relays it to every connection). The server's CPU is read from /proc.
    """
    import outside  # bench/outside.py: starts and reads the server processes

    compression = "deflate" if args.compression else None
    flags = () if args.compression else ("--no-compression",)
    with tempfile.TemporaryDirectory() as tmp:
        server = (
            outside.start_host(Path(tmp) / "state", *flags, budget=False)
            if mode == "engine"
            else outside.start_bare(*flags)
        )
        try:
            async with outside.client(server, "driver", compression) as driver:
                _, channel = await outside._open_session(driver, server)

                def send(seq: int, stamp: dict[str, Any]) -> None:
                    broadcast([driver.ws], _draft_frame(channel, seq, stamp))

                started, cpu, results = await _drive(
                    procs,
                    server.url,
                    mode,
                    args,
                    send,
                    cpu_clock=lambda: outside.cpu_seconds(server.pid),
                    channel=channel,
                )
        finally:
            server.stop()
    return _row(mode, args, clients, started, cpu, results)


def _print_header() -> None:
    print(
        f"{'mode':<7} {'C':>3} {'N':>6} {'size':>6} {'deliveries':>10} {'wall s':>7} "
        f"{'deliv/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/1k':>9} {'closed':>6}"
    )


def _print_row(row: Row) -> None:
    print(
        f"{row.mode:<7} {row.clients:>3} {row.actions:>6} {row.size:>6} {row.deliveries:>10} "
        f"{row.wall:>7.2f} {row.rate:>9.0f} {row.percentile(0.5):>8.2f} {row.percentile(0.99):>8.2f} "
        f"{row.cpu_per_1000:>9.2f} {row.closed:>6}",
        flush=True,
    )


def _print_ratio(engine: Row, bare: Row) -> None:
    print(
        f"{'ratio':<7} {engine.clients:>3} engine/bare: deliveries/s x{engine.rate / bare.rate:.2f}, "
        f"p50 x{engine.percentile(0.5) / bare.percentile(0.5):.2f}, "
        f"p99 x{engine.percentile(0.99) / bare.percentile(0.99):.2f}, "
        f"CPU per delivery x{engine.cpu_per_1000 / bare.cpu_per_1000:.2f}",
        flush=True,
    )


def _print_median(pairs: list[tuple[Row, Row]]) -> None:
    rates = sorted(engine.rate / bare.rate for engine, bare in pairs)
    cpus = sorted(engine.cpu_per_1000 / bare.cpu_per_1000 for engine, bare in pairs)
    print(
        f"{'median':<7} {pairs[0][0].clients:>3} of {len(pairs)} pairs: "
        f"deliveries/s x{statistics.median(rates):.2f} ({rates[0]:.2f}-{rates[-1]:.2f}), "
        f"CPU per delivery x{statistics.median(cpus):.2f} ({cpus[0]:.2f}-{cpus[-1]:.2f})",
        flush=True,
    )


async def main(args: argparse.Namespace) -> None:
    for compression in args.compressions:
        args.compression = compression
        await run_all(args)


async def run_all(args: argparse.Namespace) -> None:
    print(
        f"# fan-out: N={args.actions} frames of ~{args.size} B padding, "
        f"compression={'deflate' if args.compression else 'off'}, "
        f"rate={args.rate or 'flat out'}, cpus={os.cpu_count()}, "
        f"python {sys.version.split()[0]}"
    )
    _print_header()
    for clients in args.clients:
        # More reader processes than this only fight the server for 2 cores.
        procs = ClientProcesses(clients, min(clients, args.procs or MAX_PROCS))
        await procs.start()
        try:
            pairs: list[tuple[Row, Row]] = []
            for _ in range(args.repeat):
                # Engine and bare take turns, so a change in the machine's speed lands
                # on both sides of a ratio instead of on one.
                rows: dict[str, Row] = {}
                for mode in args.modes:
                    if args.outside:
                        rows[mode] = await outside_row(mode, args, clients, procs)
                    else:
                        run = engine_row if mode == "engine" else bare_row
                        rows[mode] = await run(args, clients, procs)
                    _print_row(rows[mode])
                if len(rows) == 2:
                    _print_ratio(rows["engine"], rows["bare"])
                    pairs.append((rows["engine"], rows["bare"]))
            if len(pairs) > 1:
                _print_median(pairs)
        finally:
            await procs.stop()


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--actions", "-n", type=int, default=2000, help="frames per row (default 2000)"
    )
    parser.add_argument(
        "--clients",
        "-c",
        default="1,10,50,200",
        help="client counts, comma-separated (default 1,10,50,200)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="engine/bare pairs per client count, taken in turn; with more than one, "
        "the median ratios are printed too (default 1)",
    )
    parser.add_argument(
        "--size", type=int, default=1024, help="padding bytes per frame (default 1024)"
    )
    parser.add_argument(
        "--outside",
        action="store_true",
        help="serve from an `ahp serve` process (and bare from bench/_bare.py), frames "
        "dispatched by a client as chat drafts, server CPU read from /proc",
    )
    parser.add_argument(
        "--procs",
        type=int,
        default=0,
        help=f"client processes per row (default: one per client, at most {MAX_PROCS})",
    )
    parser.add_argument(
        "--compression",
        choices=["deflate", "off", "both"],
        default="deflate",
        help="permessage-deflate on, off, or every row both ways (default deflate)",
    )
    parser.add_argument(
        "--no-compression",
        dest="compression",
        action="store_const",
        const="off",
        help="same as --compression off",
    )
    parser.add_argument(
        "--rate", type=float, default=0, help="frames/s to pace the push at (default 0: flat out)"
    )
    parser.add_argument("--mode", choices=["both", "engine", "bare"], default="both")
    args = parser.parse_args()
    args.clients = [int(part) for part in str(args.clients).split(",") if part.strip()]
    args.modes = ["engine", "bare"] if args.mode == "both" else [args.mode]
    args.compressions = {"deflate": [True], "off": [False], "both": [False, True]}[args.compression]
    return args


if __name__ == "__main__":
    asyncio.run(main(_parse()))
