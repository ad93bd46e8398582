"""``python -m ahp_remote.mirror SOCKET``: what runs in this host's terminal that mirrors a
remote one.

The ``remote`` plugin opens a terminal here (``host.open_terminal``) running this
program, and serves it a Unix socket of its own (in an owner-only folder). What
the remote terminal prints comes in on the socket and goes out on stdout, so
this host's terminal shows it; what a person types here arrives on stdin (put
in raw mode, so nothing is echoed or edited here) and goes back on the socket
as a JSON line ``{"input": ...}``, the terminal's size as ``{"resize": [cols,
rows]}``. The program ends when the socket closes (the remote terminal exited)
or stdin does.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys
from typing import Any


def _size(fd: int) -> tuple[int, int] | None:
    try:
        import fcntl
        import termios

        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except (OSError, ImportError):
        return None
    return (cols, rows) if cols and rows else None


def _send(link: socket.socket, message: dict[str, Any]) -> None:
    link.sendall(json.dumps(message).encode("utf-8") + b"\n")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ahp_remote.mirror SOCKET", file=sys.stderr)
        return 2
    link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        link.connect(argv[0])
    except OSError as exc:
        print(f"cannot reach the remote terminal: {exc.strerror}", file=sys.stderr)
        return 1
    stdin = sys.stdin.fileno()
    saved: Any = None
    if os.isatty(stdin):
        import termios
        import tty

        saved = termios.tcgetattr(stdin)
        # At once, not after a flush: what was typed before this started still goes there.
        tty.setraw(stdin, termios.TCSANOW)
    resized = [True]
    signal.signal(signal.SIGWINCH, lambda *_: resized.__setitem__(0, True))
    try:
        while True:
            if resized[0]:
                resized[0] = False
                size = _size(stdin)
                if size is not None:
                    _send(link, {"resize": list(size)})
            try:
                ready, _, _ = select.select([link, stdin], [], [], 0.5)
            except InterruptedError:
                continue
            if link in ready:
                data = link.recv(65536)
                if not data:
                    return 0
                os.write(sys.stdout.fileno(), data)
            if stdin in ready:
                typed = os.read(stdin, 4096)
                if not typed:
                    return 0
                _send(link, {"input": typed.decode("utf-8", "replace")})
    except (BrokenPipeError, ConnectionResetError):
        return 0
    finally:
        if saved is not None:
            import termios

            with contextlib.suppress(OSError):
                termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        link.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
