"""`puzzle.calendar_arithmetic`: dates and weekdays in the proleptic Gregorian calendar, computed with datetime.

Four kinds of question, each with an answer space far too large to guess (a bare weekday would be right 1
time in 7, so weekday questions always come with a date or in groups):
- offset: the date N days after (or before) a date, with its weekday: `2031-07-14 Monday`;
- between: the number of days from one date to a later one: an integer (see _numbers for the format);
- nth_weekday: the dates of two "k-th weekday of a month" days: `2031-03-18, 2029-11-30`;
- weekdays: the weekdays of four dates, in order: `Monday, Friday, Sunday, Tuesday`.
The checker recomputes the answer from the dates in the reference (datetime is the rule).
"""

from __future__ import annotations

import datetime
import random
import re
from typing import Literal

from pydantic import Field, model_validator

from proctor.environments.puzzles._numbers import parse_integer
from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

Kind = Literal["offset", "between", "nth_weekday", "weekdays"]
KINDS: tuple[Kind, ...] = ("offset", "between", "nth_weekday", "weekdays")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", -1: "last"}
WEEKDAY_DATES = 4
NTH_QUESTIONS = 2
MIN_YEAR, MAX_YEAR = 1000, 9000
MAX_DAYS = 1_000_000
GREGORIAN_START = 1583

_WEEKDAY_NAMES = {name.lower(): index for index, name in enumerate(WEEKDAYS)} | {
    name[:3].lower(): index for index, name in enumerate(WEEKDAYS)
}
_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})", re.ASCII)
_SPLIT = re.compile(r"[\s,;()]+")
_DAYS_SUFFIX = re.compile(r"\s*days?\.?\s*$", re.IGNORECASE)


class CalendarConfig(PuzzleConfig):
    """Difficulty knobs: the span of years, the largest day offset, and which kinds of question to ask."""

    min_year: int = Field(default=1900, ge=MIN_YEAR, le=MAX_YEAR)
    max_year: int = Field(default=2100, ge=MIN_YEAR, le=MAX_YEAR)
    max_days: int = Field(default=2000, ge=30, le=MAX_DAYS, description="Largest offset in days.")
    kinds: list[Kind] = Field(default=list(KINDS), min_length=1, max_length=4)

    @model_validator(mode="after")
    def _span(self) -> CalendarConfig:
        if self.min_year > self.max_year:
            raise ValueError("min_year must not exceed max_year")
        return self


class NthWeekday(PuzzleReference):
    """The `nth` (1..4, or -1 for last) `weekday` (0 = Monday) of `month` in `year`."""

    year: int = Field(ge=MIN_YEAR, le=MAX_YEAR)
    month: int = Field(ge=1, le=12)
    nth: Literal[1, 2, 3, 4, -1]
    weekday: int = Field(ge=0, le=6)


class CalendarReference(PuzzleReference):
    """The question's kind and dates: `start` and `days` (offset), `start` and `end` (between), ..."""

    kind: Kind
    start: datetime.date | None = None
    days: int = Field(default=0, ge=-MAX_DAYS, le=MAX_DAYS)
    end: datetime.date | None = None
    nth: list[NthWeekday] = Field(default_factory=list, max_length=NTH_QUESTIONS)
    dates: list[datetime.date] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _complete(self) -> CalendarReference:
        if self.kind == "offset":
            if self.start is None:
                raise ValueError("offset needs start")
            offset_date(self.start, self.days)
        elif self.kind == "between" and (self.start is None or self.end is None):
            raise ValueError("between needs start and end")
        elif self.kind == "nth_weekday" and len(self.nth) != NTH_QUESTIONS:
            raise ValueError(f"nth_weekday needs {NTH_QUESTIONS} entries in nth")
        elif self.kind == "weekdays" and not self.dates:
            raise ValueError("weekdays needs dates")
        return self


def offset_date(start: datetime.date, days: int) -> datetime.date:
    """start + days (ValueError outside the calendar's years 1..9999)."""
    try:
        return start + datetime.timedelta(days=days)
    except OverflowError:
        raise ValueError("the offset leaves the calendar") from None


def nth_weekday_date(year: int, month: int, nth: int, weekday: int) -> datetime.date:
    """The date of the nth (or last, nth = -1) given weekday of a month."""
    if nth == -1:
        next_month = datetime.date(year + month // 12, month % 12 + 1, 1)
        last = next_month - datetime.timedelta(days=1)
        return last - datetime.timedelta(days=(last.weekday() - weekday) % 7)
    first = datetime.date(year, month, 1)
    return first + datetime.timedelta(days=(weekday - first.weekday()) % 7 + 7 * (nth - 1))


def parse_date(token: str) -> datetime.date | None:
    """YYYY-MM-DD (month and day may have one digit), or None."""
    match = _DATE.fullmatch(token)
    if match is None:
        return None
    try:
        return datetime.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def parse_weekday(token: str) -> int | None:
    """0 for Monday ... 6 for Sunday (full name or three-letter abbreviation, any case), or None."""
    return _WEEKDAY_NAMES.get(token.lower().rstrip("."))


def tokens(answer: str) -> list[str]:
    """The answer split at blanks, commas, semicolons and parentheses."""
    return [t for t in _SPLIT.split(answer.strip()) if t]


def describe_date(value: datetime.date) -> str:
    """'2031-07-14'."""
    return value.isoformat()


class CalendarArithmetic(PuzzleFamily[CalendarConfig, CalendarReference]):
    """Calendar arithmetic: offsets with weekdays, days between dates, k-th weekdays, weekdays of dates."""

    name = "calendar_arithmetic"
    description = (
        "Calendar arithmetic: date offsets with weekdays, days between dates, k-th weekdays of months."
    )
    Config = CalendarConfig
    Reference = CalendarReference
    max_answer_chars = 200
    levels = {
        "easy": {"min_year": 2000, "max_year": 2030, "max_days": 100},
        "medium": {"min_year": 1900, "max_year": 2100, "max_days": 2000},
        "hard": {"min_year": 1600, "max_year": 2400, "max_days": 60000},
    }

    def generate(self, rng: random.Random, config: CalendarConfig) -> Puzzle[CalendarReference]:
        """Pick a kind, then its dates uniformly from the configured years."""
        kind = rng.choice(config.kinds)
        low = datetime.date(config.min_year, 1, 1).toordinal()
        high = datetime.date(config.max_year, 12, 31).toordinal()

        def random_date() -> datetime.date:
            return datetime.date.fromordinal(rng.randint(low, high))

        shortest = max(7, config.max_days // 5)  # tiny offsets would shrink the space of answers
        end = datetime.date(config.min_year, 1, 1)
        if kind == "offset":
            start, days = random_date(), rng.randint(shortest, config.max_days) * rng.choice((1, -1))
            end = start + datetime.timedelta(days=days)
            direction = "after" if days > 0 else "before"
            question = (
                f"What is the date {abs(days)} days {direction} {describe_date(start)}, and which day of the "
                "week is it? Answer with the date as YYYY-MM-DD followed by the weekday, for example "
                "2001-02-03 Saturday."
            )
            reference = CalendarReference(kind=kind, start=start, days=days)
            gold = f"{end.isoformat()} {WEEKDAYS[end.weekday()]}"
            measure = {"kind": kind, "days": abs(days)}
        elif kind == "between":
            start = random_date()
            end = start + datetime.timedelta(days=rng.randint(shortest, config.max_days))
            question = (
                f"How many days are there from {describe_date(start)} to {describe_date(end)}? Count the "
                "steps from one day to the next (from 2001-02-03 to 2001-02-05 is 2 days). Answer with an "
                "integer."
            )
            reference = CalendarReference(kind=kind, start=start, end=end)
            gold = str((end - start).days)
            measure = {"kind": kind, "days": (end - start).days}
        elif kind == "nth_weekday":
            asked = []
            for _ in range(NTH_QUESTIONS):
                day = random_date()
                asked.append(
                    NthWeekday(
                        year=day.year,
                        month=day.month,
                        nth=rng.choice((1, 2, 3, 4, -1)),
                        weekday=rng.randrange(7),
                    )
                )
            phrases = [
                f"the {ORDINALS[a.nth]} {WEEKDAYS[a.weekday]} of {MONTHS[a.month - 1]} {a.year}"
                for a in asked
            ]
            question = (
                f"Give the dates of {phrases[0]} and of {phrases[1]}, in that order, as YYYY-MM-DD separated "
                "by a comma."
            )
            reference = CalendarReference(kind=kind, nth=asked)
            gold = ", ".join(nth_weekday_date(a.year, a.month, a.nth, a.weekday).isoformat() for a in asked)
            measure = {"kind": kind, "questions": NTH_QUESTIONS}
        else:
            dates = [random_date() for _ in range(WEEKDAY_DATES)]
            question = (
                f"On which day of the week does each of these dates fall: {', '.join(map(describe_date, dates))}? "
                "Answer with the weekday names in the same order, separated by commas."
            )
            reference = CalendarReference(kind=kind, dates=dates)
            gold = ", ".join(WEEKDAYS[d.weekday()] for d in dates)
            measure = {"kind": kind, "dates": len(dates)}
        if config.min_year < GREGORIAN_START or (kind == "offset" and end.year < GREGORIAN_START):
            question += " Use the Gregorian calendar's rules for every year, also before 1582."
        return Puzzle(question=question, reference=reference, gold=gold, measure=measure)

    def check(self, answer: str, reference: CalendarReference) -> Checked:
        """Recompute the dates with datetime and compare exactly."""
        if reference.kind == "between":
            value = parse_integer(_DAYS_SUFFIX.sub("", answer))
            if value is None:
                return Checked.malformed("not_an_integer")
            assert reference.start is not None and reference.end is not None
            expected = (reference.end - reference.start).days
            return Checked.right() if value == expected else Checked.wrong("wrong_days")
        parts = tokens(answer)
        if reference.kind == "offset":
            assert reference.start is not None
            if len(parts) != 2:
                return Checked.malformed("not_date_and_weekday")
            date, weekday = parse_date(parts[0]), parse_weekday(parts[1])
            if date is None or weekday is None:
                date, weekday = parse_date(parts[1]), parse_weekday(parts[0])
            if date is None or weekday is None:
                return Checked.malformed("not_date_and_weekday")
            expected = offset_date(reference.start, reference.days)
            if date != expected:
                return Checked.wrong("wrong_date")
            return Checked.right() if weekday == expected.weekday() else Checked.wrong("wrong_weekday")
        if reference.kind == "nth_weekday":
            dates = [parse_date(p) for p in parts]
            if len(dates) != len(reference.nth) or any(d is None for d in dates):
                return Checked.malformed("not_dates")
            for given, asked in zip(dates, reference.nth, strict=True):
                if given != nth_weekday_date(asked.year, asked.month, asked.nth, asked.weekday):
                    return Checked.wrong("wrong_date")
            return Checked.right()
        weekdays = [parse_weekday(p) for p in parts]
        if len(weekdays) != len(reference.dates) or any(w is None for w in weekdays):
            return Checked.malformed("not_weekdays")
        for given, date in zip(weekdays, reference.dates, strict=True):
            if given != date.weekday():
                return Checked.wrong("wrong_weekday")
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: CalendarReference) -> str:
        """A random answer of the kind's shape: near dates, weekdays, or day counts of the right size."""
        if reference.kind == "between":
            assert reference.start is not None and reference.end is not None
            return str(rng.randint(1, 2 * max(1, (reference.end - reference.start).days)))
        if reference.kind == "offset":
            assert reference.start is not None
            guess = reference.start + datetime.timedelta(
                days=rng.randint(-2 * abs(reference.days), 2 * abs(reference.days))
            )
            return f"{guess.isoformat()} {rng.choice(WEEKDAYS)}"
        if reference.kind == "nth_weekday":
            return ", ".join(
                datetime.date(a.year, a.month, rng.randint(1, 28)).isoformat() for a in reference.nth
            )
        return ", ".join(rng.choice(WEEKDAYS) for _ in reference.dates)


register_family(CalendarArithmetic)
