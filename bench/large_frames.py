"""How long one inbound frame holds the event loop, by shape, at the default frame limit.

For each shape: the time ``ahpcore.rpc.framing.parse`` takes (refusing or accepting
it), beside the time a bare ``json.loads`` of the same text takes, which is what the
frame would cost with no bound. Every other client waits that long.

    uv run python bench/large_frames.py [--mib 16]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from ahpcore.protocol.errors import ProtocolError
from ahpcore.rpc.framing import parse


def _ping(payload: str) -> str:
    head = '{"jsonrpc":"2.0","id":7,"method":"ping","params":{"channel":"ahp-root://","x":'
    return head + payload + "}}"


def shapes(size: int) -> dict[str, Callable[[], str]]:
    return {
        "[] x N": lambda: _ping("[" + "[]," * (size // 3 - 40) + "[]]"),
        "1 x N": lambda: _ping("[" + "1," * (size // 2 - 60) + "1]"),
        '"" x N': lambda: _ping("[" + '"",' * (size // 3 - 40) + '""]'),
        "one long string": lambda: _ping(json.dumps("a" * (size - 120))),
        "string, escapes": lambda: _ping(json.dumps('a"b[c,' * ((size - 120) // 8))),
        "300 [ in a string": lambda: _ping(json.dumps("[" * 300)),
    }


def timed(function: Callable[[str], object], text: str) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        function(text)
        outcome = "accepted"
    except ProtocolError as error:
        outcome = f"refused: {error.message}"
    except (ValueError, RecursionError, MemoryError) as error:
        outcome = f"error: {type(error).__name__}"
    return time.perf_counter() - started, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=16, help="frame size in MiB")
    size = int(parser.parse_args().mib * (1 << 20))
    print(f"{'shape':<20} {'MiB':>5} {'parse s':>8} {'json.loads s':>13}  outcome")
    for name, build in shapes(size).items():
        text = build()
        spent, outcome = timed(parse, text)
        bare, _ = timed(json.loads, text)
        print(f"{name:<20} {len(text) / (1 << 20):5.1f} {spent:8.3f} {bare:13.3f}  {outcome}")


if __name__ == "__main__":
    main()
