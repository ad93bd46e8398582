"""How fast the Claude backend lists and opens past sessions, against the SDK's own listing.

Generates N realistic transcripts (default 10,000; a few of 5 MB) in a temporary
CLAUDE_CONFIG_DIR, starts a host with the Claude plugin over a real WebSocket and
measures, through the protocol:

* listSessions cold (the first call after the host starts, no index yet),
* listSessions cold again after a restart (the SQLite index exists),
* listSessions warm (median of repeated calls),
* opening one past session by id (subscribe to its URI: lookup and rebuild),
* the host's RSS before and after,

then claude_agent_sdk.list_sessions() over the same folder, as the baseline.

    uv run python bench/claude_catalogue.py [--sessions 10000] [--big 20]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

print = functools.partial(print, flush=True)

PROJECTS = 60


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def entries(
    session_id: str, cwd: str, turns: int, rng: random.Random, pad: int
) -> list[dict[str, Any]]:
    """A conversation as the CLI writes it: prompts, answers, tool calls and results."""
    out: list[dict[str, Any]] = [
        {"type": "queue-operation", "operation": "enqueue", "sessionId": session_id}
    ]
    parent = None
    base = {"sessionId": session_id, "cwd": cwd, "version": "2.1.332", "userType": "external"}
    for turn in range(turns):
        prompt_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        out.append(
            {
                **base,
                "type": "user",
                "uuid": prompt_id,
                "parentUuid": parent,
                "timestamp": f"2026-11-{1 + turn % 28:02d}T10:00:00.000Z",
                "message": {"role": "user", "content": f"Please look at part {turn} of the code"},
            }
        )
        call = f"toolu_{rng.getrandbits(64):016x}"
        answer_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        out.append(
            {
                **base,
                "type": "assistant",
                "uuid": answer_id,
                "parentUuid": prompt_id,
                "message": {
                    "id": f"msg_{rng.getrandbits(64):x}",
                    "role": "assistant",
                    "model": "claude-opus-5-5",
                    "content": [
                        {"type": "text", "text": "Let me read it."},
                        {
                            "type": "tool_use",
                            "id": call,
                            "name": "Read",
                            "input": {"file_path": f"{cwd}/f{turn}.py"},
                        },
                    ],
                    "usage": {
                        "input_tokens": 1200,
                        "output_tokens": 80,
                        "cache_read_input_tokens": 900,
                    },
                },
            }
        )
        out.append(
            {
                **base,
                "type": "user",
                "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "parentUuid": answer_id,
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call, "content": "x" * pad}],
                },
                "toolUseResult": {"type": "text"},
            }
        )
        parent = answer_id
    return out


def generate(root: Path, count: int, big: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    ids: list[str] = []
    projects = root / "projects"
    started = time.perf_counter()
    for n in range(count):
        session_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        cwd = f"/home/dev/project{n % PROJECTS}"
        folder = projects / cwd.replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        if n < big:
            turns, pad = 200, 25_000  # about 5 MB
        else:
            turns, pad = rng.randint(1, 12), rng.choice((100, 400, 2000))
        lines = entries(session_id, cwd, turns, rng, pad)
        path = folder / f"{session_id}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        stamp = 1.79e9 + n
        os.utime(path, (stamp, stamp))
        ids.append(session_id)
    total = sum(p.stat().st_size for p in projects.rglob("*.jsonl"))
    print(
        f"generated {count} transcripts, {total / 1e6:.0f} MB, in {time.perf_counter() - started:.1f} s"
    )
    return ids


async def timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    frame = await call
    return (time.perf_counter() - started) * 1000, frame.get("result")


async def measure(
    config_dir: Path, state_dir: Path, ids: list[str], restart: bool
) -> dict[str, Any]:
    from ahp_claude.plugin import backend_for
    from ahpcore.hookspecs import hookimpl
    from ahpcore.host import HostSettings
    from ahpcore.testing import running_host

    env = {"CLAUDE_CONFIG_DIR": str(config_dir), "HOME": str(config_dir.parent)}

    class Plugin:
        @hookimpl
        def ahp_backends(self, host: Any, register: Any) -> None:
            register(backend_for(host, env, probe=False))

    figures: dict[str, Any] = {}
    rss_before = rss_kib()
    settings = HostSettings(sessions="file", port=0, state_dir=state_dir)
    async with running_host([("claude", Plugin())], settings=settings) as running:
        # No wire validation in the client: the figures are the host's, not the checker's.
        client = await running.connect("bench", validate=False, conformance=False)
        await client.initialize()
        figures["cold_ms"], answer = await timed(client.request_frame("listSessions", None, 600))
        figures["listed"] = len(answer["items"])
        warm = []
        for _ in range(7):
            ms, _ = await timed(client.request_frame("listSessions", None, 600))
            warm.append(ms)
        figures["warm_ms"] = statistics.median(warm)
        paged = []
        for _ in range(7):
            ms, _ = await timed(client.request_frame("listSessions", {"limit": 50}, 600))
            paged.append(ms)
        figures["page_ms"] = statistics.median(paged)
        if not restart:
            opened = []
            for session_id in ids[100:105]:
                ms, _ = await timed(
                    client.request_frame("subscribe", {"channel": f"claude:/{session_id}"}, 600)
                )
                opened.append(ms)
            figures["open_ms"] = statistics.median(opened)
            big, _ = await timed(
                client.request_frame("subscribe", {"channel": f"claude:/{ids[0]}"}, 600)
            )
            figures["open_big_ms"] = big
        figures["rss_kib"] = rss_kib() - rss_before
        await client.close()
    return figures


def backend_figures(config_dir: Path, state_dir: Path, ids: list[str]) -> dict[str, float]:
    """The backend's own calls, without the host: what the plugin costs."""
    from ahp_claude.backend import ClaudeBackend

    env = {"CLAUDE_CONFIG_DIR": str(config_dir)}

    def backend() -> ClaudeBackend:
        return ClaudeBackend(state_dir, lambda *a, **k: None, env=env, probe=False, watch=False)

    figures: dict[str, float] = {}
    cold = backend()
    started = time.perf_counter()
    cold.catalogue()
    figures["cold_ms"] = (time.perf_counter() - started) * 1000
    cold.stop()
    again = backend()
    started = time.perf_counter()
    again.catalogue()
    figures["index_ms"] = (time.perf_counter() - started) * 1000
    again.index.watched = True  # as with the watcher running: no rescan per listing
    warm = []
    for _ in range(7):
        started = time.perf_counter()
        again.catalogue()
        warm.append((time.perf_counter() - started) * 1000)
    figures["warm_ms"] = statistics.median(warm)
    started = time.perf_counter()
    for session_id in ids[200:300]:
        again.lookup(session_id)
    figures["lookup_ms"] = (time.perf_counter() - started) * 1000 / 100
    again.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=20, help="how many 5 MB transcripts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ahp-bench-catalogue-") as tmp:
        root = Path(tmp)
        config_dir = root / "home" / ".claude"
        ids = generate(config_dir, args.sessions, args.big)
        own = backend_figures(config_dir, root / "backend-state", ids)
        print("the backend alone:")
        print(f"  catalogue(), no index:           {own['cold_ms']:8.1f} ms")
        print(f"  catalogue(), index on disk:      {own['index_ms']:8.1f} ms")
        print(f"  catalogue(), warm:               {own['warm_ms']:8.1f} ms")
        print(f"  lookup(id):                      {own['lookup_ms']:8.3f} ms")
        print("through the host (listSessions and subscribe over a WebSocket):")
        state = root / "state"
        first = anyio.run(measure, config_dir, state, ids, False)
        again = anyio.run(measure, config_dir, state, ids, True)
        n = first["listed"]
        print(f"listed {n} sessions")
        print(f"listSessions cold, no index:       {first['cold_ms']:8.1f} ms")
        print(f"listSessions cold, index on disk:  {again['cold_ms']:8.1f} ms")
        print(f"listSessions warm (median of 7):   {first['warm_ms']:8.1f} ms")
        print(f"listSessions warm, limit 50:       {first['page_ms']:8.1f} ms")
        print(f"open one past session by id:       {first['open_ms']:8.1f} ms (median of 5)")
        print(f"open a 5 MB past session by id:    {first['open_big_ms']:8.1f} ms")
        print(
            f"host RSS growth:                   {first['rss_kib'] / 1024:8.1f} MiB "
            f"({first['rss_kib'] * 1024 / max(n, 1) / 1000:.1f} KB per session)"
        )
        os.environ["CLAUDE_CONFIG_DIR"] = str(config_dir)
        from claude_agent_sdk import list_sessions

        for limit in (None, 50):
            started = time.perf_counter()
            found = list_sessions(limit=limit)
            ms = (time.perf_counter() - started) * 1000
            print(f"SDK list_sessions(limit={limit}):     {ms:8.1f} ms ({len(found)} sessions)")


if __name__ == "__main__":
    main()
