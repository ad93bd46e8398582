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

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
