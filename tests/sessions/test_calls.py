"""Backend calls that block run in worker threads; a long pass over files hands the
interpreter lock to the event loop as it goes."""

from __future__ import annotations

import threading

import pytest

from ahpcore.sessions import calls


def test_a_long_pass_pauses_every_so_many_items_and_loses_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[tuple[int, float]] = []
    seen: list[int] = []
    monkeypatch.setattr(calls.time, "sleep", lambda seconds: slept.append((len(seen), seconds)))
    for item in calls.pausing(range(3 * calls.PAUSE_EVERY + 5)):
        seen.append(item)
    assert seen == list(range(3 * calls.PAUSE_EVERY + 5))
    every = calls.PAUSE_EVERY
    # One pause per PAUSE_EVERY items handed out.
    assert slept == [
        (every - 1, calls.PAUSE),
        (2 * every - 1, calls.PAUSE),
        (3 * every - 1, calls.PAUSE),
    ]
    assert 0 < calls.PAUSE < 0.005  # long enough to hand the lock over, short beside a scan


@pytest.mark.anyio
async def test_a_blocking_backend_method_runs_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    assert await calls.call(threading.get_ident) != loop_thread

    async def native() -> int:
        return threading.get_ident()

    assert await calls.call(native) == loop_thread
