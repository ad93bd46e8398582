"""Refused handshakes, logged without letting a client flood the log.

A client with a stale token retries and a guesser guesses: one line per address
(``address_key``: all of loopback is one) a minute at most, and the next line
from that address counts the refusals left unlogged in between. What a line
names is the address and the reason, never what was offered.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("ahpcore.transports.websocket")

#: Seconds between two lines about one address.
INTERVAL = 60.0
#: Addresses remembered at most; past it the stalest half is forgotten.
MAX_TRACKED = 4096


class RefusalLog:
    """Logs a refusal per address at most every ``interval`` seconds, counting the rest."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        #: address -> (when its last line was written, refusals since then left unlogged)
        self._seen: dict[str, tuple[float, int]] = {}

    def refused(self, address: str, reason: str, key: str | None = None) -> None:
        """Note a refusal of ``address``; ``key`` is who it counts as (the address itself
        when None)."""
        key = key or address
        now = time.monotonic()
        last, unlogged = self._seen.get(key, (-self.interval, 0))
        if now - last < self.interval:
            self._seen[key] = (last, unlogged + 1)
            return
        if len(self._seen) >= MAX_TRACKED:
            stalest = sorted(self._seen, key=lambda key: self._seen[key][0])
            for stale in stalest[: MAX_TRACKED // 2]:
                del self._seen[stale]
        self._seen[key] = (now, 0)
        more = (
            f" ({unlogged} more refused from this address since the last such line)"
            if unlogged
            else ""
        )
        log.warning("refused a connection from %s: %s%s", address, reason, more)
