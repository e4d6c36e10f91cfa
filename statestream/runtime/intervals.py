"""Interval strings for ``withWatermark`` delays and ``window()`` durations.

Spark: ``IntervalUtils.fromIntervalString`` (used by ``Dataset.withWatermark`` and by
``TimeWindow``), ``EventTimeWatermark.getDelayMs`` and ``TimeWindow.getIntervalInMicroSeconds``.

Two syntaxes are accepted, as in Spark:

* unit lists, ``"20 seconds"``, ``"1 hour 30 minutes"``, ``"-1 day 30 hours"``: pairs of a signed
  number and a unit (``year``, ``month``, ``week``, ``day``, ``hour``, ``minute``, ``second``,
  ``millisecond``, ``microsecond``, singular or plural, any case). Only seconds may have a
  fraction (up to 9 digits, truncated to µs);
* SQL interval literals, when the string starts with the ``interval`` keyword:
  ``"interval 10 seconds"``, ``"interval '5' hour"``, ``"interval '1 2:3:4' day to second"``,
  ``"interval '1-2' year to month"``, ``"interval '1 day 2 hours'"``. Year-month and day-time
  units cannot be mixed in this form (``"interval 1 month 1 day"`` is rejected, while the
  unit-list form ``"1 month 1 day"`` is fine), again like Spark.

A parsed interval has three parts, months, days and microseconds. Turning it into one duration
needs a month length: Spark takes 31 days, so a ``"1 month"`` delay is 2 678 400 000 ms. A window
duration may not have months at all.

The functions raise Spark's errors with Spark's texts: ``[CANNOT_PARSE_INTERVAL]`` (an
``AnalysisException``) for anything unparsable, ``requirement failed: delay threshold (...)
should not be negative.`` for a negative delay, and ``Intervals greater than a month is not
supported (...).`` for a window duration with months.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from statestream.errors import (
    IntervalArithmeticError,
    StatestreamIllegalArgumentException,
    cannot_parse_interval_error,
    invalid_interval_format_error,
    negative_delay_threshold_error,
    negative_trigger_interval_error,
    trigger_interval_with_months_error,
    window_interval_with_months_error,
)

__all__ = [
    "CalendarInterval",
    "IllegalArgumentError",
    "parse_interval",
    "interval_duration_ms",
    "interval_duration_us",
    "parse_watermark_delay_ms",
    "parse_window_duration_us",
    "parse_trigger_interval_ms",
    "parse_time_conf_ms",
    "DAYS_PER_MONTH",
    "MICROS_PER_DAY",
]

MICROS_PER_MILLI = 1_000
MICROS_PER_SECOND = 1_000_000
MICROS_PER_MINUTE = 60 * MICROS_PER_SECOND
MICROS_PER_HOUR = 60 * MICROS_PER_MINUTE
MICROS_PER_DAY = 24 * MICROS_PER_HOUR
#: Month length used to turn an interval with months into a duration (Spark's choice).
DAYS_PER_MONTH = 31

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


#: Spark's ``IllegalArgumentException``; carries Spark's error class and parameters when Spark's
#: error has them.
IllegalArgumentError = StatestreamIllegalArgumentException


@dataclass(frozen=True)
class CalendarInterval:
    """Spark's ``CalendarInterval``: months and days (32-bit) and microseconds (64-bit), kept
    apart because a month and a day have no fixed length in µs."""

    months: int = 0
    days: int = 0
    microseconds: int = 0


class _ParseError(Exception):
    """Internal: the input is not a valid interval (turned into CANNOT_PARSE_INTERVAL)."""


def _check_int(value: int) -> int:
    if not _INT_MIN <= value <= _INT_MAX:
        raise _ParseError("integer overflow")
    return value


def _check_long(value: int) -> int:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise _ParseError("long overflow")
    return value


# -- unit lists ----------------------------------------------------------------------------------

_YEAR_MONTH_UNITS = frozenset({"year", "month"})
_UNITS = ("year", "month", "week", "day", "hour", "minute", "second", "millisecond", "microsecond")
_UNIT_MICROS = {
    "hour": MICROS_PER_HOUR,
    "minute": MICROS_PER_MINUTE,
    "second": MICROS_PER_SECOND,
    "millisecond": MICROS_PER_MILLI,
    "microsecond": 1,
}
_NUMBER = re.compile(r"(\d+)(?:\.(\d*))?|\.(\d+)")


def _unit_name(word: str) -> str:
    lowered = word.lower()
    if lowered in _UNITS:
        return lowered
    if lowered.endswith("s") and lowered[:-1] in _UNITS:
        return lowered[:-1]
    raise _ParseError(f"invalid unit {word}")


class _Accumulator:
    def __init__(self) -> None:
        self.months = 0
        self.days = 0
        self.micros = 0
        self.units: list[str] = []

    def add(self, negative: bool, number: str, unit_word: str) -> None:
        unit = _unit_name(unit_word)
        match = _NUMBER.fullmatch(number)
        if match is None:
            raise _ParseError(f"invalid number {number}")
        whole_text, frac_text, leading_frac = match.groups()
        whole = int(whole_text) if whole_text else 0
        fraction = frac_text if whole_text is not None else leading_frac
        _check_long(whole)
        sign = -1 if negative else 1
        if fraction:
            if unit != "second":
                raise _ParseError(f"{unit} cannot have fractional part")
            if len(fraction) > 9:
                raise _ParseError("fraction beyond nanoseconds")
        frac_micros = int((fraction or "").ljust(6, "0")[:6]) if fraction else 0
        value = sign * whole
        if unit == "year":
            self.months = _check_int(self.months + _check_int(value * 12))
        elif unit == "month":
            self.months = _check_int(self.months + _check_int(value))
        elif unit == "week":
            self.days = _check_int(self.days + _check_int(_check_int(value) * 7))
        elif unit == "day":
            self.days = _check_int(self.days + _check_int(value))
        else:
            delta = _check_long(value * _UNIT_MICROS[unit]) + sign * frac_micros
            self.micros = _check_long(self.micros + _check_long(delta))
        self.units.append(unit)

    def result(self) -> CalendarInterval:
        return CalendarInterval(self.months, self.days, self.micros)


def _parse_unit_list(text: str, allow_interval_word: bool = False) -> _Accumulator:
    """``[+|-] number unit`` pairs separated by white space (Spark's ``stringToInterval``)."""
    words = text.split()
    if allow_interval_word and words and words[0].lower() == "interval":
        words = words[1:]
    if not words:
        raise _ParseError("empty interval")
    acc = _Accumulator()
    i = 0
    while i < len(words):
        word = words[i]
        negative = False
        if word[0] in "+-":
            negative = word[0] == "-"
            word = word[1:]
            if not word:
                i += 1
                if i >= len(words):
                    raise _ParseError("sign without a number")
                word = words[i]
        if i + 1 >= len(words):
            raise _ParseError(f"expect a unit name after {word}")
        acc.add(negative, word, words[i + 1])
        i += 2
    return acc


# -- SQL interval literals -----------------------------------------------------------------------

_TOKEN = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[+-]|[^\s'"+-]+""", re.S)
_UNIT_TO_UNIT = {
    ("year", "month"),
    ("day", "hour"),
    ("day", "minute"),
    ("day", "second"),
    ("hour", "minute"),
    ("hour", "second"),
    ("minute", "second"),
}
_FRACTION = r"(?:\.(\d{1,9}))?"
_DAY_TIME_PATTERNS = {
    ("day", "hour"): re.compile(r"([+-])?(\d+) (\d{1,2})"),
    ("day", "minute"): re.compile(r"([+-])?(\d+) (\d{1,2}):(\d{1,2})"),
    ("day", "second"): re.compile(r"([+-])?(\d+) (\d{1,2}):(\d{1,2}):(\d{1,2})" + _FRACTION),
    ("hour", "minute"): re.compile(r"([+-])?(\d+):(\d{1,2})"),
    ("hour", "second"): re.compile(r"([+-])?(\d+):(\d{1,2}):(\d{1,2})" + _FRACTION),
    ("minute", "second"): re.compile(r"([+-])?(\d+):(\d{1,2})" + _FRACTION),
}
# Largest leading field of a day-time interval (Long.MaxValue µs expressed in that unit).
_MAX_LEADING = {"day": 106751991, "hour": 2562047788, "minute": 153722867280}
_FIELD_MICROS = {"day": MICROS_PER_DAY, "hour": MICROS_PER_HOUR, "minute": MICROS_PER_MINUTE, "second": MICROS_PER_SECOND}
_FIELD_ORDER = ("day", "hour", "minute", "second")
_FIELD_LIMIT = {"hour": 23, "minute": 59, "second": 59}


def _unquote(token: str) -> str:
    body = token[1:-1]
    return re.sub(r"\\(.)", r"\1", body, flags=re.S)


def _is_string(token: str) -> bool:
    return len(token) >= 2 and token[0] in "'\"" and token[-1] == token[0]


def _day_time(value: str, start: str, end: str) -> CalendarInterval:
    match = _DAY_TIME_PATTERNS[(start, end)].fullmatch(value.strip())
    if match is None:
        raise _ParseError(f"interval string does not match {start} to {end} format")
    groups = match.groups()
    negative = groups[0] == "-"
    fields = _FIELD_ORDER[_FIELD_ORDER.index(start) : _FIELD_ORDER.index(end) + 1]
    numbers = groups[1 : 1 + len(fields)]
    fraction = groups[1 + len(fields)] if end == "second" and len(groups) > 1 + len(fields) else None
    micros = 0
    for position, (name, text) in enumerate(zip(fields, numbers)):
        number = int(text)
        limit = _MAX_LEADING.get(name) if position == 0 else _FIELD_LIMIT[name]
        if limit is not None and number > limit:
            raise _ParseError(f"{name} {number} outside range")
        micros += number * _FIELD_MICROS[name]
    if fraction:
        micros += int(fraction.ljust(6, "0")[:6])
    micros = -micros if negative else micros
    return CalendarInterval(0, 0, _check_long(micros))


def _year_month(value: str) -> CalendarInterval:
    match = re.fullmatch(r"([+-])?(\d+)-(\d+)", value.strip())
    if match is None:
        raise _ParseError("interval string does not match year-month format")
    sign, years, months = match.groups()
    if int(months) > 11:
        raise _ParseError(f"month {months} outside range [0, 11]")
    total = _check_int(int(years) * 12 + int(months))
    return CalendarInterval(-total if sign == "-" else total, 0, 0)


def _parse_sql_literal(body: str) -> CalendarInterval:
    """The part after the ``interval`` keyword of a SQL interval literal."""
    tokens: list[str] = []
    position = 0
    for match in _TOKEN.finditer(body):
        if body[position : match.start()].strip():
            raise _ParseError("unexpected characters")  # e.g. an unterminated quote
        tokens.append(match.group(0))
        position = match.end()
    if body[position:].strip():
        raise _ParseError("unexpected characters")
    if not tokens:
        raise _ParseError("interval without a value")
    # INTERVAL 'unit list' : a typed literal, parsed as a unit list, no year-month/day-time mix.
    if len(tokens) == 1 and _is_string(tokens[0]):
        acc = _parse_unit_list(_unquote(tokens[0]), allow_interval_word=True)
        result = acc.result()
        if result.months != 0 and (result.days != 0 or result.microseconds != 0):
            raise _ParseError("cannot mix year-month and day-time fields")
        return result
    groups: list[tuple[bool, str, str]] = []
    i = 0
    while i < len(tokens):
        negative = False
        if tokens[i] in "+-":
            negative = tokens[i] == "-"
            i += 1
        if i + 1 >= len(tokens):
            raise _ParseError("value without unit")
        value, unit = tokens[i], tokens[i + 1]
        i += 2
        if i < len(tokens) and tokens[i].lower() == "to":
            # INTERVAL [+|-] 'value' <from> TO <to>: the only group of the literal
            if groups or i + 2 != len(tokens) or not _is_string(value):
                raise _ParseError("malformed unit-to-unit interval")
            start, end = unit.lower(), tokens[i + 1].lower()
            if (start, end) not in _UNIT_TO_UNIT:
                raise _ParseError(f"unsupported {start} to {end} interval")
            text = _unquote(value).strip()
            if negative:
                text = text[1:] if text.startswith("-") else "-" + text
            return _year_month(text) if start == "year" else _day_time(text, start, end)
        if _is_string(value):
            value = _unquote(value).strip()
        elif not _NUMBER.fullmatch(value):
            raise _ParseError(f"invalid value {value}")
        groups.append((negative, value, unit))
    acc = _Accumulator()
    for negative, value, unit in groups:
        inner_negative = value.startswith("-")
        if value[:1] in "+-":
            value = value[1:]
        acc.add(negative != inner_negative, value, unit)
    kinds = {u in _YEAR_MONTH_UNITS for u in acc.units}
    if len(kinds) > 1:
        raise _ParseError("cannot mix year-month and day-time fields")
    result = acc.result()
    if kinds == {False}:
        # a day-time literal: days are folded into microseconds
        return CalendarInterval(0, 0, _check_long(result.days * MICROS_PER_DAY + result.microseconds))
    return result


def _starts_with_interval_keyword(text: str) -> bool:
    return text.strip().lower().startswith("interval")


def parse_interval(text: str) -> CalendarInterval:
    """Parse an interval string the way Spark's ``fromIntervalString`` does.

    Raises
    ------
    StatestreamAnalysisException
        ``[CANNOT_PARSE_INTERVAL] Unable to parse '<text>'. ...`` for anything that is not a
        valid interval (including an empty string, unknown units, a fraction on a unit other than
        seconds, out-of-range fields and 32/64-bit overflow).
    """
    if not isinstance(text, str):
        raise cannot_parse_interval_error(None if text is None else str(text))
    try:
        stripped = text.strip()
        if _starts_with_interval_keyword(stripped):
            rest = stripped[len("interval") :]
            if rest and (rest[0].isalnum() or rest[0] == "_"):
                raise _ParseError("identifier starting with interval")
            return _parse_sql_literal(rest)
        return _parse_unit_list(stripped).result()
    except _ParseError as exc:
        raise cannot_parse_interval_error(text) from exc


def interval_duration_us(interval: CalendarInterval, days_per_month: int = DAYS_PER_MONTH) -> int:
    """The interval as one duration in µs, a month being ``days_per_month`` days.

    Raises
    ------
    IntervalArithmeticError
        The duration does not fit in 64 bits (Spark's ``INTERVAL_ARITHMETIC_OVERFLOW``).
    """
    months_us = days_per_month * MICROS_PER_DAY * interval.months
    days_us = MICROS_PER_DAY * interval.days
    for part in (months_us, days_us):
        if not _LONG_MIN <= part <= _LONG_MAX:
            raise IntervalArithmeticError()
    total = interval.microseconds + days_us + months_us
    if not _LONG_MIN <= total <= _LONG_MAX:
        raise IntervalArithmeticError()
    return total


def interval_duration_ms(interval: CalendarInterval, days_per_month: int = DAYS_PER_MONTH) -> int:
    """The interval as one duration in ms, truncated towards zero (Java's ``TimeUnit``
    conversion), a month being ``days_per_month`` days."""
    total = interval_duration_us(interval, days_per_month)
    return int(total / MICROS_PER_MILLI) if total < 0 else total // MICROS_PER_MILLI


def parse_watermark_delay_ms(delay_threshold: str) -> int:
    """The delay of ``withWatermark(col, delay_threshold)`` in ms.

    Examples: ``"20 seconds"`` → 20000, ``"1 month"`` → 2 678 400 000 (31 days),
    ``"1500 microseconds"`` → 1 (truncated), ``"interval '1 2:3:4' day to second"`` → 93 784 000.

    Raises
    ------
    StatestreamAnalysisException
        ``[CANNOT_PARSE_INTERVAL]`` (see :func:`parse_interval`).
    IllegalArgumentError
        ``requirement failed: delay threshold (<text>) should not be negative.`` when the whole
        interval (months counted as 31 days) is below zero; ``"-1 day 30 hours"`` is fine.
    IntervalArithmeticError
        The delay overflows 64 bits.
    """
    interval = parse_interval(delay_threshold)
    if interval_duration_us(interval) < 0:
        raise negative_delay_threshold_error(delay_threshold)
    return interval_duration_ms(interval)


def parse_window_duration_us(duration: str) -> int:
    """A ``window()`` duration, slide or start time in µs (days count as 24 h).

    Checking that the value is positive and consistent with the other durations is the job of
    the window rules, which report Spark's ``DATATYPE_MISMATCH`` errors.

    Raises
    ------
    StatestreamAnalysisException
        ``[CANNOT_PARSE_INTERVAL]`` (see :func:`parse_interval`).
    IllegalArgumentError
        ``Intervals greater than a month is not supported (<text>).`` when the interval has a
        month part (months have no fixed length), as Spark's ``_LEGACY_ERROR_TEMP_3231``.
    IntervalArithmeticError
        The duration overflows 64 bits.
    """
    interval = parse_interval(duration)
    if interval.months != 0:
        raise window_interval_with_months_error(duration)
    return _day_time_micros(interval)


def _day_time_micros(interval) -> int:
    """Days and microseconds of a month-free interval in µs; a 64-bit overflow raises, as
    Spark's exact long arithmetic does."""
    total = interval.days * MICROS_PER_DAY + interval.microseconds
    if not _LONG_MIN <= total <= _LONG_MAX:
        raise IntervalArithmeticError()
    return total


# -- processing-time triggers --------------------------------------------------------------------

# unit names by first letter, in the order Spark tries them
_UNIT_PREFIXES = {
    "y": ("year",),
    "w": ("week",),
    "d": ("day",),
    "h": ("hour",),
    "s": ("second",),
    "m": ("month", "minute", "millisecond", "microsecond"),
}


class _FormatError(Exception):
    def __init__(self, sub: str, **params: str) -> None:
        super().__init__(sub)
        self.sub = sub
        self.params = params


def _strict_unit_list(text: str) -> CalendarInterval:
    """Spark's ``stringToInterval`` with its detailed ``INVALID_INTERVAL_FORMAT`` reasons (used
    where Spark calls it directly, e.g. for processing-time triggers)."""
    lowered = text.strip().lower()
    if not lowered:
        raise _FormatError("INPUT_IS_EMPTY")
    words = lowered.split()
    if lowered.startswith("interval"):
        if lowered == "interval":
            raise _FormatError("INPUT_IS_EMPTY")
        if not lowered[len("interval")].isspace():
            raise _FormatError("INVALID_PREFIX", prefix=words[0])
        words = words[1:]
    acc = _Accumulator()
    i = 0
    while i < len(words):
        word = words[i]
        negative = False
        if word[0] in "+-":
            negative = word[0] == "-"
            if len(word) == 1:
                if i + 1 >= len(words):
                    raise _FormatError("MISSING_NUMBER", word=word)
                i += 1
                word = words[i]
            else:
                word = word[1:]
            if not (word[0].isdigit() or word[0] == "."):
                raise _FormatError("INVALID_VALUE", value=words[i])
        elif not (word[0].isdigit() or word[0] == "."):
            raise _FormatError("UNRECOGNIZED_NUMBER", number=word)
        whole, dot, fraction = word.partition(".")
        if not whole.isdigit() and whole:
            raise _FormatError("INVALID_VALUE", value=words[i])
        if dot:
            if fraction and not fraction.isdigit():
                raise _FormatError("INVALID_VALUE", value=words[i])
            if len(fraction) > 9:
                raise _FormatError("INVALID_PRECISION", value=words[i])
        if whole and int(whole) > _LONG_MAX:
            raise _FormatError("ARITHMETIC_EXCEPTION")
        if i + 1 >= len(words):
            raise _FormatError("MISSING_UNIT", word=words[i])
        if dot and not whole and not fraction:
            raise _FormatError("INVALID_VALUE", value=words[i])
        unit_word = words[i + 1]
        if dot and unit_word[0] != "s":
            raise _FormatError("INVALID_FRACTION", unit=unit_word)
        unit = next((u for u in _UNIT_PREFIXES.get(unit_word[0], ()) if unit_word.startswith(u)), None)
        if unit is None or unit_word[len(unit) :] not in ("", "s"):
            raise _FormatError("INVALID_UNIT", unit=unit_word)
        try:
            acc.add(negative, word if whole else "0" + word, unit)
        except _ParseError as exc:
            raise _FormatError("ARITHMETIC_EXCEPTION") from exc
        i += 2
    return acc.result()


def parse_trigger_interval_ms(interval: str) -> int:
    """The period of ``trigger(processingTime=...)`` in ms (Spark's ``ProcessingTimeTrigger``).

    Unlike a watermark delay, the string is parsed as a plain unit list (an ``interval`` word
    in front is allowed, SQL literal forms are not), and Spark reports the precise reason of a
    failure.

    Raises
    ------
    IllegalArgumentError
        ``[INVALID_INTERVAL_FORMAT.<reason>] Error parsing '<s>' to interval. ...`` for a
        malformed string, ``Doesn't support month or year interval: <s>`` for months, and
        ``requirement failed: the interval of trigger should not be negative`` for a negative
        period.
    """
    text = interval.strip()
    try:
        parsed = _strict_unit_list(text)
    except _FormatError as exc:
        raise invalid_interval_format_error(text, exc.sub, exc.params) from exc
    if parsed.months != 0:
        raise trigger_interval_with_months_error(text)
    micros = _day_time_micros(parsed)
    if micros < 0:  # checked in µs: Spark refuses even "-0.0005 seconds"
        raise negative_trigger_interval_error()
    return micros // MICROS_PER_MILLI


_TIME_CONF_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time_conf_ms(value: str, default_unit: str = "ms") -> int:
    """A Spark time configuration value (``"10000"``, ``"10s"``, ``"250ms"``, ``"1min"``) in ms.

    Spark reads such confs with Java's time-string rule: an integer with an optional unit suffix
    (us, ms, s, m or min, h, d), the conf's own unit when there is none.

    Raises
    ------
    ValueError
        for anything else, naming the value.
    """
    import re

    m = re.fullmatch(r"\s*(-?[0-9]+)\s*([a-z]+)?\s*", value.lower())
    unit = (m.group(2) or default_unit) if m else None
    if m is None or unit not in _TIME_CONF_UNITS_MS:
        msg = f"invalid time value {value!r}: expected an integer with an optional unit (us, ms, s, m, min, h, d)"
        raise ValueError(msg)
    return int(int(m.group(1)) * _TIME_CONF_UNITS_MS[unit])
