"""Terminals on the host's side: channels, claims, the fence, scrollback, ``!command``.

A terminals port (``ahpcore.ports.TerminalsPort``) runs the processes; this
package turns what they report into ``terminal/*`` actions and serves the
commands and client actions that reach them. ``install`` wires it into a
started host when a port is present.
"""

from __future__ import annotations

from ahpcore.terminals.output import (
    DEFAULT_SCROLLBACK_BYTES,
    MAX_SCROLLBACK_BYTES,
    MIN_SCROLLBACK_BYTES,
    SCROLLBACK_KEY,
)
from ahpcore.terminals.service import TerminalService, install

__all__ = [
    "DEFAULT_SCROLLBACK_BYTES",
    "MAX_SCROLLBACK_BYTES",
    "MIN_SCROLLBACK_BYTES",
    "SCROLLBACK_KEY",
    "TerminalService",
    "install",
]
