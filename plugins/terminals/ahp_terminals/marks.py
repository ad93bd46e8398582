"""Reading the marks a shell writes into its own output.

OSC 7 (where the shell is), OSC 133 (prompt and command boundaries) and
OSC 633;E (the command line, sent by our integration scripts) are taken out
of the stream and turned into events; OSC 0/2 titles are reported and left
in, since a terminal emulator draws them too. A mark split across two reads
is carried over to the next one.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

ESC = 0x1B
OSC_START = b"\x1b]"
#: An OSC longer than this is not a mark of ours: it is passed through as it is.
MAX_OSC = 8192


@dataclass(frozen=True)
class Mark:
    """One shell-integration event, in stream order between output bytes."""

    kind: str  # "cwd", "title", "prompt", "command-line", "executed", "finished"
    value: str = ""


def _decode(payload: bytes) -> str:
    return payload.decode("utf-8", "replace")


def _mark_of(body: bytes) -> tuple[Mark | None, bool]:
    """What an OSC body means, and whether it should be removed from the output."""
    code, _, rest = body.partition(b";")
    if code == b"7":
        parts = urlsplit(_decode(rest))
        if parts.scheme == "file" and parts.path:
            return Mark("cwd", unquote(parts.path)), True
        return None, True
    if code in (b"0", b"2"):
        return Mark("title", _decode(rest)), False
    if code == b"133":
        letter, _, arg = rest.partition(b";")
        if letter == b"A":
            return Mark("prompt"), True
        if letter == b"C":
            return Mark("executed"), True
        if letter == b"D":
            return Mark("finished", _decode(arg.partition(b";")[0])), True
        return None, True  # B and anything else: boundaries we do not report
    if code == b"633":
        letter, _, arg = rest.partition(b";")
        if letter == b"E":
            return Mark("command-line", _unescape(arg)), True
        return None, True
    return None, False


def _unescape(arg: bytes) -> str:
    # The scripts escape backslash and ';' as \\xHH so a command line survives the OSC.
    text = _decode(arg)
    out: list[str] = []
    index = 0
    while index < len(text):
        if text.startswith("\\x", index) and index + 4 <= len(text):
            try:
                out.append(chr(int(text[index + 2 : index + 4], 16)))
                index += 4
                continue
            except ValueError:
                pass
        out.append(text[index])
        index += 1
    return "".join(out)


class MarkReader:
    """Splits a byte stream into output and marks, keeping marks in order."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, data: bytes) -> list[bytes | Mark]:
        """Output chunks and marks, in order; an unfinished OSC waits for the next feed."""
        if self._carry:
            data, self._carry = self._carry + data, b""
        if OSC_START not in data and not data.endswith(b"\x1b"):
            return [data] if data else []  # the common case: plain output
        items: list[bytes | Mark] = []
        ends = _Terminators(data)
        start = 0
        while True:
            found = data.find(OSC_START, start)
            if found < 0:
                tail = data[start:]
                if tail.endswith(b"\x1b"):
                    tail, self._carry = tail[:-1], b"\x1b"
                if tail:
                    items.append(tail)
                return items
            end, terminator = ends.after(found + 2)
            if end < 0:
                if len(data) - found > MAX_OSC:
                    items.append(data[start:])  # not a mark: let it through
                    return items
                if found > start:
                    items.append(data[start:found])
                self._carry = data[found:]
                return items
            mark, strip = _mark_of(data[found + 2 : end])
            stop = end + terminator
            if strip:
                if found > start:
                    items.append(data[start:found])
            else:
                items.append(data[start:stop])
            if mark is not None:
                items.append(mark)
            start = stop

    def flush(self) -> bytes:
        """Whatever was held back waiting for a mark's end (the stream has ended)."""
        carry, self._carry = self._carry, b""
        return carry


class _Terminators:
    """Where the next BEL and the next ST are in one read, each looked for once.

    Looking for both from every OSC anew scanned to the end of the read for the
    kind that did not come (an ST after each BEL-ended mark): time growing with
    the square of the read, on output the terminal's user chooses. Remembering
    where each next one is keeps the scans from overlapping.
    """

    _UNKNOWN = -2  # not looked for yet; -1 is "none from here to the end"

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.bel = self.st = self._UNKNOWN

    def after(self, begin: int) -> tuple[int, int]:
        """Where the OSC starting at ``begin`` ends, and its terminator's length (BEL or ST)."""
        if self.bel != -1 and self.bel < begin:
            self.bel = self.data.find(b"\x07", begin)
        if self.st != -1 and self.st < begin:
            self.st = self.data.find(b"\x1b\\", begin)
        bel, st = self.bel, self.st
        if bel < 0 and st < 0:
            return -1, 0
        if st < 0 or (0 <= bel < st):
            return bel, 1
        return st, 2
