"""How much memory idle Claude sessions hold, before and after their idle CLIs are stopped.

Starts a host with the Claude plugin over a real WebSocket, its CLIs (the real
bundled Claude Code CLI, under the host's guard) talking to the scripted Messages
API of the plugin's tests on 127.0.0.1. Creates N sessions (default 20) and runs one
short turn in each, so each has a CLI that sits idle; prints the resident memory
(RSS, from /proc) of the host process and of every process under it, then lets the
backend stop idle CLIs (the idle period set to --idle seconds) and prints it again,
then runs one more turn in one session to show it resumes.

The live-CLI limit (AHP_CLAUDE_MAX_CLIS) is lifted for the first part, so all N run.

    uv run python bench/claude_idle.py [--sessions 20] [--idle 1]

Linux only (reads /proc). Asserts nothing; not run by pytest.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

print = functools.partial(print, flush=True)

TESTS = Path(__file__).resolve().parent.parent / "plugins" / "claude" / "tests"


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(root: int) -> list[int]:
    """Every process under ``root`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the ppid follows it.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    waiting = [root]
    while waiting:
        for child in children.get(waiting.pop(), ()):
            found.append(child)
            waiting.append(child)
    return found


def figures(label: str, live: int) -> None:
    me = os.getpid()
    below = descendants(me)
    host, others = rss_kib(me), sum(rss_kib(pid) for pid in below)
    print(
        f"{label:<28} live CLIs {live:3d}   host {host / 1024:8.1f} MiB   "
        f"processes under it {len(below):3d}: {others / 1024:8.1f} MiB   "
        f"total {(host + others) / 1024:8.1f} MiB"
    )


async def measure(sessions: int, idle: float, root: Path) -> None:
    sys.path.insert(0, str(TESTS))
    from anthropic_server import AnthropicServer, reply

    from ahp_claude.plugin import backend_for
    from ahpcore.hookspecs import hookimpl
    from ahpcore.host import HostSettings
    from ahpcore.testing import running_host

    home = root / "home"
    (home / ".claude").mkdir(parents=True)
    work = root / "work"
    work.mkdir()
    api = AnthropicServer().start()
    api.script(*(reply(f"Answer {n}.") for n in range(sessions + 1)))
    env = {
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "sk-ant-bench-dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
    }

    class Plugin:
        backend: Any = None

        @hookimpl
        def ahp_backends(self, host: Any, register: Any) -> None:
            # No idle stop and no limit until the second part.
            self.backend = backend_for(
                host, env, probe=False, watch=False, idle_seconds=0, max_clis=0
            )
            register(self.backend)

    plugin = Plugin()
    settings = HostSettings(sessions="file", port=0, state_dir=root / "state")
    try:
        async with running_host([("claude", plugin)], settings=settings) as running:
            backend = plugin.backend
            client = await running.connect("bench")
            await client.initialize()
            figures("host started", 0)
            chats: list[str] = []
            began = time.monotonic()
            for n in range(1, sessions + 1):
                uri = f"claude:/00000000-0000-4000-8000-{n:012d}"
                await client.request(
                    "createSession",
                    {"channel": uri, "provider": "claude", "workingDirectories": [work.as_uri()]},
                )
                state = (await client.request("subscribe", {"channel": uri}))["snapshot"]
                chat = state["state"]["defaultChat"]
                await client.request("subscribe", {"channel": chat})
                await turn(client, chat, f"t{n}")
                chats.append(chat)
            took = time.monotonic() - began
            print(f"{sessions} sessions, one turn each, in {took:.1f} s")
            live = sum(agent.cli_running for agent in backend.live.values())
            figures(f"{sessions} idle sessions", live)
            # Let the backend stop what sat idle for ``idle`` seconds.
            backend.idle_seconds = idle
            backend.watch_idle()
            began = time.monotonic()
            with anyio.fail_after(60 + idle):
                while any(agent.cli_running for agent in backend.live.values()):
                    await anyio.sleep(0.1)
            print(f"idle CLIs stopped {time.monotonic() - began:.1f} s after the idle period began")
            await anyio.sleep(1)  # the guards exit after their CLIs
            figures("after stopping idle CLIs", 0)
            began = time.monotonic()
            await turn(client, chats[0], "again")
            print(f"a turn that resumed in a new CLI took {time.monotonic() - began:.2f} s")
            live = sum(agent.cli_running for agent in backend.live.values())
            figures("after one more turn", live)
    finally:
        api.close()


async def turn(client: Any, chat: str, turn_id: str) -> None:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-30T00:00:00.000Z",
            "message": {"text": "hello", "origin": {"kind": "user"}},
        },
    )
    await client.answer_to(seq)
    ends = ("chat/turnComplete", "chat/turnCancelled", "chat/error")
    frame = await client.recv_until(
        lambda f: f.get("method") == "action" and f["params"]["action"]["type"] in ends, 120
    )
    if frame["params"]["action"]["type"] != "chat/turnComplete":
        raise SystemExit(f"a turn did not complete: {frame['params']['action']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20, help="idle sessions to hold")
    parser.add_argument("--idle", type=float, default=1.0, help="idle period, in seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ahp-bench-idle-") as tmp:
        anyio.run(measure, args.sessions, args.idle, Path(tmp))


if __name__ == "__main__":
    main()
