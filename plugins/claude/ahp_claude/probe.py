"""Work the backend does beside its chats, each in a thread of its own so it needs no host task.

- The boot probe starts one CLI, asks it what it offers (models with their effort
  levels, commands, subagents, MCP servers with their states) and stops it; the agent
  is listed before and after.
- The watcher follows the projects folder, so a transcript written elsewhere (a
  ``claude`` run in a terminal) reaches the index as it is written.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio

log = logging.getLogger(__name__)

EFFORT_TITLES = {
    "low": "Low",
    "medium": "Medium",
    "high": "High",
    "xhigh": "Extra high",
    "max": "Max",
}


def session_model(model: Mapping[str, Any], provider: str) -> dict[str, Any]:
    """A ``SessionModelInfo`` from the CLI's model entry; a thinkingLevel schema when it has efforts."""
    info: dict[str, Any] = {
        "id": str(model.get("value")),
        "provider": provider,
        "name": str(model.get("displayName") or model.get("value")),
    }
    if model.get("resolvedModel"):
        info["_meta"] = {"ahp.resolvedModel": model["resolvedModel"]}
    levels = [str(level) for level in model.get("supportedEffortLevels") or ()]
    if levels:
        info["configSchema"] = {
            "type": "object",
            "properties": {
                "thinkingLevel": {
                    "type": "string",
                    "title": "Thinking",
                    "enum": levels,
                    "enumLabels": [EFFORT_TITLES.get(level, level) for level in levels],
                    "default": "medium" if "medium" in levels else levels[0],
                }
            },
        }
    return info


async def server_info(
    env: Mapping[str, str], cwd: str, cli_path: str | None = None
) -> dict[str, Any]:
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient

    client = ClaudeSDKClient(ClaudeAgentOptions(env=dict(env), cwd=cwd, cli_path=cli_path))
    await client.connect()
    try:
        info = dict(await client.get_server_info() or {})
        try:
            info["mcpServers"] = await mcp_servers(client)
        except Exception as exc:  # the rest of what the CLI said still counts
            log.info("the Claude CLI did not list its MCP servers: %s", exc)
        return info
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await client.disconnect()


#: How long the probe follows MCP servers still starting before it reports them as starting.
MCP_SETTLE_SECONDS = 10.0


async def mcp_servers(client: Any) -> list[dict[str, Any]]:
    """The CLI's MCP servers (``get_mcp_status``), once none is pending or the wait is over."""
    servers: list[dict[str, Any]] = []
    with anyio.move_on_after(MCP_SETTLE_SECONDS):
        while True:
            answer = await client.get_mcp_status()
            servers = [dict(s) for s in answer.get("mcpServers") or ()]
            if not any(s.get("status") == "pending" for s in servers):
                break
            await anyio.sleep(0.2)
    return servers


#: How long the boot probe may take (a CLI start and one question) before it is given up.
PROBE_SECONDS = 120.0
#: How long after the host starts the probe waits before starting its CLI. A Python
#: child and a CLI starting beside the host took the machine's cores from its own
#: start: on two cores the first client was answered after about 1.1 s instead of 0.3.
PROBE_DELAY_SECONDS = 2.0
#: How often a running probe looks whether its backend stopped ...
STOP_POLL_SECONDS = 0.05
#: ... and how long its child has to end once told to, before it is killed.
STOP_GRACE_SECONDS = 2.0
#: What the probe's child runs. Not ``-m ahp_claude.probe``: that imports the package,
#: and this module with it, before running the module again as ``__main__``, and
#: Python warns of it (a RuntimeWarning on every probe's stderr, which a failing probe
#: then gave as its reason).
PROBE_CODE = "from ahp_claude.probe import probe_main; probe_main()"


def run_probe(
    env: Mapping[str, str],
    cwd: str,
    done: Callable[[dict[str, Any]], None],
    delay: float = PROBE_DELAY_SECONDS,
    stopped: threading.Event | None = None,
    guard_folder: str | None = None,
) -> threading.Thread:
    """Ask a CLI what it offers, in a thread, ``delay`` seconds from now; ``done`` gets the
    answer (or nothing on failure). A backend ``stopped`` within the delay asks nothing;
    one stopped while the probe asks ends its child, and the thread, at once and quietly
    (join the thread to know it is over).

    The asking runs in a child Python process: claude-agent-sdk is heavy to load, and
    a host that never starts a Claude chat should not carry it. That child dies with
    this thread (the host), and runs its CLI through the guard (``guard_folder``), so
    no CLI outlives a host killed while it asks.
    """
    stop = stopped or threading.Event()

    def probe() -> None:
        if stop.wait(delay):
            return
        try:
            child = subprocess.Popen(
                [sys.executable, "-c", PROBE_CODE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            log.info("the Claude CLI could not be asked what it offers: %s", exc)
            return
        asked: str | None = json.dumps(
            {"env": dict(env), "cwd": cwd, "guard": guard_folder, "host": os.getpid()}
        )
        deadline = time.monotonic() + PROBE_SECONDS
        while True:
            try:
                out, err = child.communicate(asked, timeout=STOP_POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                asked = None  # written once; what it says so far is kept
            if stop.is_set() or time.monotonic() > deadline:
                # Its guard sees it go and stops the CLI it started.
                child.terminate()
                try:
                    child.communicate(timeout=STOP_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.communicate()
                if stop.is_set():
                    log.debug("the Claude boot probe stopped with its backend")
                    return  # nothing failed
                log.info("the Claude CLI did not say what it offers within %.0f s", PROBE_SECONDS)
                return
        if child.returncode < 0:
            # A signal ended it: the one that stops the host too (a terminal's Ctrl-C, a
            # service manager's SIGTERM reach the whole process group), not a failure.
            log.debug("the Claude boot probe ended on signal %d", -child.returncode)
            return
        try:
            if child.returncode != 0:
                said = err.strip().splitlines()
                raise RuntimeError(said[-1] if said else f"exit status {child.returncode}")
            info = json.loads(out)
        except Exception as exc:
            log.info("the Claude CLI could not be asked what it offers: %s", exc)
            return
        if not stop.is_set():
            done(info)

    thread = threading.Thread(target=probe, name="claude probe", daemon=True)
    thread.start()
    return thread


def probe_main() -> None:
    """The probe's child (``PROBE_CODE``): the asked environment and folder on stdin, JSON out."""
    from ahp_claude import guard

    asked = json.load(sys.stdin)
    # The host's thread that started this waits for it: its end is the host's end.
    guard.die_with_parent()
    if asked.get("host") and os.getppid() != asked["host"]:
        sys.exit("the host stopped before the probe began")
    env, cli_path = dict(asked["env"]), None
    launcher = guard.launcher(asked["guard"]) if asked.get("guard") else None
    if launcher is not None:
        cli_path, guarded = launcher
        env.update(guarded)
    info = anyio.run(server_info, env, asked["cwd"], cli_path)
    json.dump(info, sys.stdout)


#: How long after the host starts the transcript watcher starts. Importing watchfiles
#: (and multiprocessing under it) beside the host's own start took about 30 ms of CPU
#: from its first answer; until the watch is on, each listing looks at the folder.
WATCH_DELAY_SECONDS = 1.0


class Watcher:
    """Follows a folder with watchfiles and hands the changed paths to ``changed``.

    The first call, once the watch is on, has no paths: look at the whole folder.
    """

    def __init__(
        self,
        folder: str,
        changed: Callable[[list[str]], None],
        delay: float = WATCH_DELAY_SECONDS,
    ) -> None:
        self.folder = folder
        self.changed = changed
        self.delay = delay
        self.stop = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claude watcher", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        if self.stop.wait(self.delay):
            return
        from watchfiles import watch

        try:
            for changes in watch(
                self.folder,
                stop_event=self.stop,
                debounce=200,
                step=50,
                rust_timeout=500,
                yield_on_timeout=True,
            ):
                if not changes and self.ready.is_set():
                    continue
                # The first (empty) answer says the watch is on: what changed before it
                # began is caught by one look at the whole folder (an empty list).
                paths = sorted({path for _, path in changes})
                try:
                    self.changed(paths)
                except Exception:
                    log.exception("the Claude transcript index could not take a change")
                self.ready.set()
        except Exception as exc:
            log.info("not watching %s: %s", self.folder, exc)

    def close(self) -> None:
        self.stop.set()
        self._thread.join(timeout=2)
