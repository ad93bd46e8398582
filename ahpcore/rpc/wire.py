"""What the JSON-RPC peer needs of a transport."""

from __future__ import annotations

from typing import Protocol


class Wire(Protocol):
    """One connection's byte pipe, as seen by its peer."""

    #: A short description for logs (address, socket path, "stdio", ...).
    label: str

    async def send(self, text: str) -> None:
        """Write one frame; may wait while the transport drains."""
        ...

    def buffered_bytes(self) -> int | None:
        """Bytes written but not yet taken by the other side, or None when the wire cannot tell.

        A wire that cannot tell is never closed for being behind.
        """
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...

    # Optional: ``write_now(text) -> None`` puts a frame on the wire at once,
    # without waiting for it to drain; a peer then skips its outbox for it.
