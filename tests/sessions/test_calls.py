"""Backend calls that block run in worker threads; a long pass over files hands the
interpreter lock to the event loop as it goes."""

from __future__ import annotations

import threading
from typing import Any

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


def test_a_long_sort_is_made_of_short_ones_with_pauses_and_keeps_sorteds_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import random

    rng = random.Random(7)
    # Few distinct keys: ties everywhere, so stability shows.
    items = [(rng.randrange(50), n) for n in range(3 * calls.SORT_RUN + 123)]
    lengths: list[int] = []
    real_sorted = sorted

    def watched(values: list[tuple[int, int]], **kwargs: Any) -> list[tuple[int, int]]:
        lengths.append(len(values))
        return real_sorted(values, **kwargs)

    slept: list[float] = []
    monkeypatch.setattr(calls, "sorted", watched, raising=False)
    monkeypatch.setattr(calls.time, "sleep", slept.append)
    for reverse in (False, True):
        lengths.clear()
        got = calls.sorted_pausing(iter(items), key=lambda item: item[0], reverse=reverse)
        assert got == real_sorted(items, key=lambda item: item[0], reverse=reverse)
        # No call of the list's own sort (which holds the interpreter) over more than a run.
        assert lengths and max(lengths) <= calls.SORT_RUN
        assert sum(lengths) == len(items)
    assert len(slept) >= 2 * 4
    few = [(3, "a"), (1, "b"), (3, "c")]
    assert calls.sorted_pausing(few, key=lambda item: item[0], reverse=True) == [
        (3, "a"),
        (3, "c"),
        (1, "b"),
    ]
