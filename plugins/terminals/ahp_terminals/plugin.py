"""The ahp-terminals plugin: the terminals port on POSIX pseudoterminals."""

from __future__ import annotations

import logging
import sys
from typing import Any

from ahpcore import hookimpl
from ahpcore.api import (
    DEFAULT_SCROLLBACK_BYTES,
    MAX_SCROLLBACK_BYTES,
    MIN_SCROLLBACK_BYTES,
    SCROLLBACK_KEY,
    PluginHost,
)
from ahpcore.ports import TerminalEvents, TerminalSpec

log = logging.getLogger(__name__)

WINDOWS_REASON = (
    "terminals need a POSIX pseudoterminal, and this host runs on Windows; "
    "ahp-terminals does not open ConPTY consoles"
)


class PtyTerminals:
    """Opens each terminal on its own pty and reads it on the host's task group."""

    def __init__(self, host: PluginHost) -> None:
        self.host = host

    def unavailable(self) -> str | None:
        return WINDOWS_REASON if sys.platform == "win32" else None

    async def open(self, spec: TerminalSpec, events: TerminalEvents) -> Any:
        reason = self.unavailable()
        if reason is not None:
            raise OSError(reason)
        from ahp_terminals.pty import PtyProcess, shell_command

        argv, env, integrated = shell_command(spec)
        process = PtyProcess(spec, argv, env, integrated)
        if not integrated and spec.command is None:
            log.info("terminal %s: %s has no shell integration here", spec.uri, argv[0])
        self.host.spawn(self._read, process, events, name=f"terminal {spec.uri}")
        return process

    @staticmethod
    async def _read(process: Any, events: TerminalEvents) -> None:
        # A terminal that fails is that terminal's problem, never the host's.
        try:
            await process.run(events)
        except Exception:
            log.exception("terminal %s: reading its output failed", process.spec.uri)
            events.exited(None)


@hookimpl
def ahp_terminals(host: PluginHost) -> PtyTerminals:
    return PtyTerminals(host)


@hookimpl
def ahp_root_config(host: PluginHost) -> dict[str, Any]:
    return {
        SCROLLBACK_KEY: {
            "type": "number",
            "title": "Terminal scrollback bytes",
            "description": (
                "How much of a terminal's output the host keeps for clients that "
                "subscribe later; older output is dropped. At least 64 KiB, at most 8 MiB."
            ),
            "default": DEFAULT_SCROLLBACK_BYTES,
            "minimum": MIN_SCROLLBACK_BYTES,
            "maximum": MAX_SCROLLBACK_BYTES,
        }
    }
