"""Work the backend does beside its chats, each in a thread of its own so it needs no host task.

- The boot probe starts one CLI, asks it what it offers (models with their effort
  levels, commands, agents) and stops it; the agent is listed before and after.
- The watcher follows the projects folder, so a transcript written elsewhere (a
  ``claude`` run in a terminal) reaches the index as it is written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient

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


async def server_info(env: Mapping[str, str], cwd: str) -> dict[str, Any]:
    client = ClaudeSDKClient(ClaudeAgentOptions(env=dict(env), cwd=cwd))
    await client.connect()
    try:
        return dict(await client.get_server_info() or {})
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await client.disconnect()


def run_probe(
    env: Mapping[str, str], cwd: str, done: Callable[[dict[str, Any]], None]
) -> threading.Thread:
    """Ask a CLI what it offers, in a thread; ``done`` gets the answer (or nothing on failure)."""

    def probe() -> None:
        try:
            info = anyio.run(server_info, env, cwd)
        except Exception as exc:
            log.info("the Claude CLI could not be asked what it offers: %s", exc)
            return
        done(info)

    thread = threading.Thread(target=probe, name="claude probe", daemon=True)
    thread.start()
    return thread


class Watcher:
    """Follows a folder with watchfiles and hands the changed paths to ``changed``."""

    def __init__(self, folder: str, changed: Callable[[list[str]], None]) -> None:
        self.folder = folder
        self.changed = changed
        self.stop = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claude watcher", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def _run(self) -> None:
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
