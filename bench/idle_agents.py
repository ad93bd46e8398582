"""Twenty idle Claude sessions: the memory of the host and its CLIs, and the turn after a reap.

Runs ``ahp serve`` as a process of its own, its Claude backend running the real
Claude Code CLI bundled with claude-agent-sdk against the scripted Messages API
of the plugin's tests (``plugins/claude/tests/anthropic_server.py``, in this
process, on 127.0.0.1). Every setting is the host's default but the idle period
(``AHP_CLAUDE_IDLE_SECONDS``, ``--idle``, 300 s by default, shortened so the
run takes a minute), so at most ``AHP_CLAUDE_MAX_CLIS`` (8) CLIs run at once.

Over one client connection it creates ``--sessions`` sessions and runs one short
turn in each, sampling every 0.2 s the resident memory (RSS, from /proc) of the
host and of every process under it (CLIs and their guards); then waits for the
idle CLIs to be stopped, and prints the memory again. Last, it runs a turn in
``--after`` sessions whose CLI was stopped, one at a time, and times each from
the dispatch of ``chat/turnStarted`` to its first streamed part (the CLI is
started again and resumes the transcript) and to ``chat/turnComplete``; a turn
in a session whose CLI still runs, timed the same way in the same run, is the
baseline.

    .venv/bin/python bench/idle_agents.py [--sessions 20] [--idle 5] [--after 3]

Prints figures; asserts nothing. Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "plugins" / "claude" / "tests"))

import outside  # noqa: E402
from anthropic_server import AnthropicServer, reply  # noqa: E402
from claude_idle import descendants, rss_kib  # noqa: E402

STREAMED = ("chat/responsePart", "chat/delta")
ENDS = ("chat/turnComplete", "chat/turnCancelled", "chat/error")


def memory(pid: int) -> tuple[float, float, int]:
    """(host MiB, MiB of every process under it, how many there are)."""
    below = descendants(pid)
    return rss_kib(pid) / 1024, sum(rss_kib(p) for p in below) / 1024, len(below)


class Turns:
    """Turns over one connection, each timed to its first streamed part and to its end."""

    def __init__(self, peer: outside.Client) -> None:
        self.peer = peer
        self.waiting: dict[str, tuple[float, list[float], asyncio.Event, list[str]]] = {}
        peer.listeners.append(self._on_frame)

    def _on_frame(self, message: dict[str, Any]) -> None:
        action = (message.get("params") or {}).get("action") or {}
        entry = self.waiting.get(action.get("turnId"))
        if entry is None:
            return
        began, marks, done, ended = entry
        kind = action.get("type")
        if kind in STREAMED and not marks:
            marks.append(time.monotonic() - began)
        elif kind in ENDS:
            ended.append(kind)
            done.set()

    async def run(self, chat: str) -> tuple[float, float]:
        """Seconds to the first streamed part and to the turn's end."""
        turn_id = str(uuid.uuid4())
        done = asyncio.Event()
        marks: list[float] = []
        ended: list[str] = []
        began = time.monotonic()
        self.waiting[turn_id] = (began, marks, done, ended)
        await self.peer.dispatch(
            chat,
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": "2026-12-01T00:00:00.000Z",
                "message": {"text": "hello", "origin": {"kind": "user"}},
            },
        )
        await asyncio.wait_for(done.wait(), 120)
        del self.waiting[turn_id]
        if ended != ["chat/turnComplete"]:
            raise SystemExit(f"a turn ended with {ended}")
        total = time.monotonic() - began
        return (marks[0] if marks else total), total


def show(label: str, pid: int) -> float:
    host, below, count = memory(pid)
    print(
        f"{label:<34} host {host:7.1f} MiB   {count:3d} processes under it {below:8.1f} MiB   "
        f"together {host + below:8.1f} MiB"
    )
    return host + below


async def measure(args: argparse.Namespace, root: Path) -> None:
    home = root / "home"
    (home / ".claude").mkdir(parents=True)
    work = root / "work"
    work.mkdir()
    api = AnthropicServer().start()
    api.script(*(reply(f"Answer {n}.") for n in range(4 * args.sessions + 20)))
    os.environ.update(
        {
            "ANTHROPIC_BASE_URL": api.url,
            "ANTHROPIC_API_KEY": "sk-ant-bench-dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "AHP_CLAUDE_IDLE_SECONDS": str(args.idle),
        }
    )
    server = outside.start_host(root / "state")
    peak = {"total": 0.0}
    try:
        async with outside.client(server, "bench") as peer:
            show("host started", server.pid)
            turns = Turns(peer)

            async def sample() -> None:
                while True:
                    host, below, _ = memory(server.pid)
                    peak["total"] = max(peak["total"], host + below)
                    await asyncio.sleep(0.2)

            sampler = asyncio.create_task(sample())
            chats: list[str] = []
            began = time.monotonic()
            firsts = []
            for _ in range(args.sessions):
                uri = f"claude:/{uuid.uuid4()}"
                await peer.request(
                    "createSession",
                    {"channel": uri, "provider": "claude", "workingDirectories": [work.as_uri()]},
                )
                state = (await peer.request("subscribe", {"channel": uri}))["snapshot"]
                chat = state["state"]["defaultChat"]
                await peer.request("subscribe", {"channel": chat})
                firsts.append(await turns.run(chat))
                chats.append(chat)
            print(
                f"{args.sessions} sessions, one turn each, in {time.monotonic() - began:.1f} s; "
                f"a new session's first turn: first part median "
                f"{statistics.median(f for f, _ in firsts):.2f} s"
            )
            show(f"{args.sessions} sessions just used", server.pid)
            # The last session's CLI still runs: a warm turn, the baseline for the one after a reap.
            warm = [await turns.run(chats[-1]) for _ in range(2)]
            began = time.monotonic()
            while memory(server.pid)[2] and time.monotonic() - began < args.idle + 60:
                await asyncio.sleep(0.2)
            print(f"every CLI stopped {time.monotonic() - began:.1f} s after the last turn")
            await asyncio.sleep(0.5)
            sampler.cancel()
            reaped = show(f"{args.sessions} idle sessions, CLIs reaped", server.pid)
            print(f"peak while the turns ran: together {peak['total']:.1f} MiB")
            after = []
            for chat in chats[: args.after]:
                after.append(await turns.run(chat))
                print(
                    f"  turn after a reap: first part {after[-1][0]:.2f} s, "
                    f"complete {after[-1][1]:.2f} s"
                )
            show("after those turns", server.pid)
            warm_first = statistics.median(f for f, _ in warm)
            after_first = statistics.median(f for f, _ in after)
            print(
                f"turn after a reap, first part: median {after_first:.2f} s "
                f"(max {max(f for f, _ in after):.2f}); a warm CLI's {warm_first:.2f} s: "
                f"x{after_first / max(warm_first, 1e-9):.1f}"
            )
            print(f"RSS together with every CLI reaped: {reaped:.1f} MiB")
    finally:
        server.stop()
        api.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--idle", type=float, default=5.0, help="AHP_CLAUDE_IDLE_SECONDS")
    parser.add_argument("--after", type=int, default=3, help="turns timed after a reap")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    with tempfile.TemporaryDirectory(prefix="ahp-bench-idle-agents-") as tmp:
        asyncio.run(measure(args, Path(tmp)))
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()
