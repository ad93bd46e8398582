"""The protocol's five-field cron grammar, checked, and its occurrences in a time zone.

``croniter`` does the calendar arithmetic; it accepts more than the protocol
allows (seconds, ``L``, ``W``, ``#``, ``?``, ``@daily``, a step on a single
value), so an expression is checked against the protocol's grammar first and
croniter only ever sees what passed.

Daylight saving time follows ISC cron: an occurrence in the hour that the
spring change skips runs when the clock jumps (croniter's own answer), and in
the hour the autumn change repeats, a job at a fixed hour runs once while a job
whose hour field is ``*`` or a step runs in both.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter  # type: ignore[import-untyped]

MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    #: Where the first name counts from (JAN is 1, SUN is 0).
    first_name: int = 0


FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, MONTHS, 1),
    _Field("day of week", 0, 7, DAYS, 0),
)
_STEP = re.compile(r"^(?P<base>[^/]+)/(?P<step>[^/]*)$")


def _value(field: _Field, text: str) -> int:
    upper = text.upper()
    if field.names and upper in field.names:
        return field.names.index(upper) + field.first_name
    if not text.isascii() or not text.isdigit():
        allowed = f"{field.low}-{field.high}"
        if field.names:
            allowed += f" or {field.names[0]}-{field.names[-1]}"
        raise ValueError(f"{field.name} {text!r} is not a value ({allowed})")
    number = int(text)
    if not field.low <= number <= field.high:
        raise ValueError(f"{field.name} {number} is outside {field.low}-{field.high}")
    return number


def _part(field: _Field, text: str) -> None:
    """One comma-separated part: ``*``, a value, a range, or a step on ``*`` or a range."""
    base, step = text, None
    found = _STEP.match(text)
    if found is not None:
        base, step = found["base"], found["step"]
        if not (step.isascii() and step.isdigit()) or int(step) < 1:
            raise ValueError(f"{field.name} step {step!r} must be a positive whole number")
        if base != "*" and "-" not in base:
            raise ValueError(f"{field.name} step on {base!r}: a step applies to * or a range")
    if base == "*":
        return
    if "-" in base:
        first, _, last = base.partition("-")
        low, high = _value(field, first), _value(field, last)
        if low > high:
            raise ValueError(f"{field.name} range {base!r} runs backwards")
        return
    _value(field, base)


def check_expression(expression: str) -> None:
    """Raise ValueError saying what is wrong when ``expression`` is outside the grammar."""
    if not isinstance(expression, str):
        raise ValueError("must be a string")
    parts = expression.split()
    if len(parts) != 5:
        raise ValueError(
            f"needs exactly five fields (minute hour day-of-month month day-of-week), "
            f"not {len(parts)}"
        )
    for field, text in zip(FIELDS, parts, strict=True):
        for part in text.split(","):
            if not part:
                raise ValueError(f"{field.name} has an empty list item")
            _part(field, part)


#: Days enough for every pairing of a month day with a weekday, leap days included.
_CALENDAR_DAYS = 28 * 366


def _expanded(values: list[int | str], everything: range) -> list[int]:
    return list(everything) if values and values[0] == "*" else [int(v) for v in values]


def shortest_gap(expression: str, at_least: int) -> int | None:
    """The shortest time in minutes between two occurrences of ``expression`` when it
    is under ``at_least``; None when no two occurrences come closer than that.

    Counted on the wall clock the fields describe: the hour a daylight saving change
    takes away or repeats is not counted (once a year, it may bring two runs closer).
    """
    check_expression(expression)
    fields, _ = croniter.expand(expression)
    minutes = _expanded(fields[0], range(60))
    hours = _expanded(fields[1], range(24))
    daily = sorted({hour * 60 + minute for hour in hours for minute in minutes})
    within = min((b - a for a, b in itertools.pairwise(daily)), default=None)
    if within is not None and within < at_least:
        return within
    # The last run of one day and the first of the next, if two days in a row both run.
    overnight = 24 * 60 - daily[-1] + daily[0]
    if overnight >= at_least:
        return None
    days = set(_expanded(fields[2], range(1, 32)))
    months = set(_expanded(fields[3], range(1, 13)))
    weekdays = {v % 7 for v in _expanded(fields[4], range(7))}
    # croniter's rule, as ISC cron's: both day fields restricted means either may match.
    either = fields[2][0] != "*" and fields[4][0] != "*"

    def runs_on(day: date) -> bool:
        if day.month not in months:
            return False
        by_date, by_weekday = day.day in days, (day.weekday() + 1) % 7 in weekdays
        return by_date or by_weekday if either else by_date and by_weekday

    day = date(2024, 1, 1)
    before = runs_on(day)
    for _ in range(_CALENDAR_DAYS):
        day += timedelta(days=1)
        now = runs_on(day)
        if now and before:
            return overnight
        before = now
    return None


def time_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ValueError when zoneinfo does not know it."""
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError(f"unknown time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r}") from None


def _fixed_hour(expression: str) -> bool:
    hour = expression.split()[1]
    return "*" not in hour and "/" not in hour


def _same_wall(moment: datetime) -> bool:
    # croniter hands back the later instant with fold 0 but the later offset: compare the
    # offset the wall time has on its first pass with the one it carries.
    zone = moment.tzinfo
    assert zone is not None
    wall = moment.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    return first != second and moment.utcoffset() == second


class Schedule:
    """One ``AutomationSchedule``: its occurrences as UTC instants."""

    def __init__(self, expression: str, zone: str) -> None:
        check_expression(expression)
        self.expression = expression
        self.zone = time_zone(zone)
        self._once_a_wall_time = _fixed_hour(expression)

    def _skip(self, moment: datetime) -> bool:
        return self._once_a_wall_time and _same_wall(moment)

    def next_after(self, instant: datetime) -> datetime:
        """The first occurrence strictly after ``instant`` (UTC)."""
        found = croniter(self.expression, instant.astimezone(self.zone))
        while True:
            moment: datetime = found.get_next(datetime)
            if moment <= instant:
                continue
            if not self._skip(moment):
                return moment.astimezone(UTC)

    def latest_at_or_before(self, instant: datetime) -> datetime:
        """The newest occurrence not after ``instant`` (UTC)."""
        # croniter's get_prev is strict: start a second on so an occurrence at ``instant`` counts.
        found = croniter(self.expression, (instant + timedelta(seconds=1)).astimezone(self.zone))
        while True:
            moment: datetime = found.get_prev(datetime)
            if moment > instant:
                continue
            if not self._skip(moment):
                return moment.astimezone(UTC)
