"""Reading shell-integration marks out of a byte stream, however it is split."""

from __future__ import annotations

from ahp_terminals.marks import Mark, MarkReader

STREAM = (
    b"hello\x1b]7;file://host/tmp/a%20b\x07"
    b"\x1b]0;my title\x07"
    b"\x1b]133;A\x07$ ls\r\n"
    b"\x1b]633;E;ls\\x3b echo\x07\x1b]133;C\x07"
    b"out\r\n\x1b]133;D;2\x1b\\done"
)


def _collect(chunks: list[bytes]) -> tuple[bytes, list[Mark]]:
    reader = MarkReader()
    output = b""
    marks: list[Mark] = []
    for chunk in chunks:
        for item in reader.feed(chunk):
            if isinstance(item, Mark):
                marks.append(item)
            else:
                output += item
    return output + reader.flush(), marks


def test_marks_come_out_in_order_and_integration_marks_leave_the_output() -> None:
    whole = _collect([STREAM])
    assert whole[1] == [
        Mark("cwd", "/tmp/a b"),
        Mark("title", "my title"),
        Mark("prompt"),
        Mark("command-line", "ls; echo"),
        Mark("executed"),
        Mark("finished", "2"),
    ]
    # The title stays for the emulator to draw; OSC 7, 133 and 633 are gone.
    assert whole[0] == b"hello\x1b]0;my title\x07$ ls\r\nout\r\ndone"


def test_every_split_of_the_stream_reads_the_same() -> None:
    whole = _collect([STREAM])
    for cut in range(1, len(STREAM)):
        assert _collect([STREAM[:cut], STREAM[cut:]]) == whole, cut
    assert _collect([STREAM[i : i + 1] for i in range(len(STREAM))]) == whole


def test_an_unterminated_osc_is_let_through_rather_than_held_forever() -> None:
    reader = MarkReader()
    data = b"\x1b]8;;" + b"x" * 10000
    out = b"".join(item for item in reader.feed(data) if isinstance(item, bytes))
    assert out == data


def test_many_marks_in_one_read_take_linear_time() -> None:
    # The output is the terminal's, so whoever drives it chooses it. Each mark
    # ended by BEL once had the reader look for an ST all the way to the end of
    # the read: a 64 KiB read of short marks took a second of the event loop.
    import time

    for mark, terminator in ((b"\x1b]133;B", b"\x07"), (b"\x1b]133;B", b"\x1b\\")):
        data = (mark + terminator + b"x") * ((256 << 10) // (len(mark) + len(terminator) + 1))
        began = time.monotonic()
        items = MarkReader().feed(data)
        assert time.monotonic() - began < 0.5
        assert b"".join(item for item in items if isinstance(item, bytes)) == b"x" * (
            len(data) // (len(mark) + len(terminator) + 1)
        )
