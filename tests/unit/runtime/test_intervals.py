"""Interval strings for watermark delays and window durations (expected values checked on Spark 4.1)."""

from __future__ import annotations

import pytest

from statestream.errors import StatestreamAnalysisException
from statestream.runtime.intervals import (
    CalendarInterval,
    IllegalArgumentError,
    IntervalArithmeticError,
    parse_interval,
    parse_watermark_delay_ms,
    parse_trigger_interval_ms,
    parse_window_duration_us,
)

DAY_MS = 86_400_000


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("20 seconds", 20_000),
        ("5 minutes", 300_000),
        ("1 hour 30 minutes", 5_400_000),
        ("interval 10 seconds", 10_000),
        ("1500 milliseconds", 1500),
        ("10 second", 10_000),
        ("10 SECONDS", 10_000),
        (" 10 seconds ", 10_000),
        ("1\tday", DAY_MS),
        ("1 day", DAY_MS),
        ("1 week", 7 * DAY_MS),
        ("2 weeks", 14 * DAY_MS),
        ("1 month", 2_678_400_000),
        ("1 year", 32_140_800_000),
        ("0 seconds", 0),
        ("-0 seconds", 0),
        ("+5 seconds", 5000),
        ("+ 5 seconds", 5000),
        ("1.5 seconds", 1500),
        ("1. seconds", 1000),
        (".5 seconds", 500),
        ("1.0000001 seconds", 1000),
        ("0.0005 seconds", 0),
        ("10 microseconds", 0),
        ("1500 microseconds", 1),
        ("1999 microseconds", 1),
        ("1 millisecond 500 microseconds", 1),
        ("1 second 1 second", 2000),
        ("1 day 1 month", 2_764_800_000),
        ("1 month -31 days", 0),
        ("-1 day 30 hours", 21_600_000),
        ("1 day -2 hours", 79_200_000),
        ("3 days 1 week", 10 * DAY_MS),
        ("9223372036854775807 microseconds", 9_223_372_036_854_775),
        ("1 day 2 hours 3 minutes 4 seconds", 93_784_000),
        # SQL literal forms
        ("interval 1 day -2 hours", 79_200_000),
        ("Interval 3 day", 3 * DAY_MS),
        ("inTerval '3' day", 3 * DAY_MS),
        ("INTERVAL '3' DAY", 3 * DAY_MS),
        ("interval\t1 day", DAY_MS),
        ("interval 1 week", 7 * DAY_MS),
        ("interval 1 day 1 week", 8 * DAY_MS),
        ("interval 1500 milliseconds", 1500),
        ("interval 1 microsecond", 0),
        ("interval 1.5 seconds", 1500),
        ("interval '1.5' second", 1500),
        ("interval 2 hours 1.5 seconds", 7_201_500),
        ("interval '1' day '2' hours", 93_600_000),
        ("interval '10' hours '5' minutes", 36_300_000),
        ("interval 1 year 2 month", 37_497_600_000),
        ("interval '1' year '2' month", 37_497_600_000),
        ("interval '10 seconds'", 10_000),
        ("interval '1 day 2 hours'", 93_600_000),
        ("interval '1 2:3:4' day to second", 93_784_000),
        ("interval '1 2:3:4' DAY TO SECOND", 93_784_000),
        ("interval '1 2:3:4' day  to  second", 93_784_000),
        ("interval '1 2:3:4.5' day to second", 93_784_500),
        ("interval '1 2:3:4.5'day to second", 93_784_500),
        ("interval '+1 2:3:4' day to second", 93_784_000),
        ("interval '1 02:03:04.123456789' day to second", 93_784_123),
        ("interval '0 0:0:0.001' day to second", 1),
        ("interval '1 2' day to hour", 93_600_000),
        ("interval '1 2:3' day to minute", 93_780_000),
        ("interval '2:3' hour to minute", 7_380_000),
        ("interval '25:00' hour to minute", 90_000_000),
        ("interval '2:3:4' hour to second", 7_384_000),
        ("interval '3:4' minute to second", 184_000),
        ("interval '100:59' minute to second", 6_059_000),
        ("interval '1-2' year to month", 37_497_600_000),
        ("\tinterval '1-2' year to month", 37_497_600_000),
    ],
)
def test_delay_ms(text, expected_ms):
    assert parse_watermark_delay_ms(text) == expected_ms


UNPARSABLE = [
    "",
    "  ",
    "foo",
    "1 foo",
    "10",
    "interval",
    "1.5 days",
    "1.5 minutes",
    "0.5 milliseconds",
    "1.0000000001 seconds",
    "100 nanoseconds",
    "10 us",
    "10 ms",
    "10 s",
    "10 sec",
    "10 mins",
    "10 hrs",
    "1day",
    "10seconds",
    "1 seconds 1",
    "1 days ago",
    "1 2:3:4",
    "2147483648 days",
    "9223372036854775808 microseconds",
    "interva 2 day",
    "intrval '3' day",
    "interval1 day",
    "interval interval 1 day",
    "interval 4 foo",
    "interval '5' foo",
    "interval 'foo' day",
    "interval 1.5 days",
    "interval '1.5' day",
    "interval 1 year 2 days",
    "interval 1 month 1 week",
    "interval '1 month 1 day'",
    "interval '1 2:3:4' day to hour",
    "interval '1 2' year to month",
    "interval '2' hour to minute",
    "interval '2:3' day to hour",
    "interval '100:61' minute to second",
    "interval '1 25:00:00' day to second",
    "interval '1-13' year to month",
    "interval '1:2:3:4' day to second",
    "interval '1' day to hour",
    "interval 1 hour to second",
    "interval '1 2:3:4' day to second extra",
    "interval '1 2:3:4 day to second",
]


@pytest.mark.parametrize("text", UNPARSABLE)
def test_unparsable(text):
    with pytest.raises(StatestreamAnalysisException) as err:
        parse_watermark_delay_ms(text)
    assert err.value.getCondition() == "CANNOT_PARSE_INTERVAL"
    assert err.value.getSqlState() == "22006"


def test_cannot_parse_text_is_sparks():
    with pytest.raises(StatestreamAnalysisException) as err:
        parse_watermark_delay_ms("interval '5' foo")
    assert str(err.value) == (
        "[CANNOT_PARSE_INTERVAL] Unable to parse 'interval \\'5\\' foo'. Please ensure that the value "
        "provided is in a valid format for defining an interval. You can reference the documentation "
        "for the correct format. If the issue persists, please double check that the input value is "
        "not null or empty and try again. SQLSTATE: 22006"
    )
    assert err.value.getMessageParameters() == {"intervalString": "'interval \\'5\\' foo'"}


@pytest.mark.parametrize(
    "text",
    [
        "-1 second",
        "- 1 second",
        "-0.5 seconds",
        "interval -10 seconds",
        "interval - 5 seconds",
        "interval -'5' second",
        "interval '-5' second",
        "interval -'1 2:3:4' day to second",
        "interval '-1 2:3:4' day to second",
        "interval '-1-2' year to month",
        "-1 month 30 days",
    ],
)
def test_negative_delay(text):
    with pytest.raises(IllegalArgumentError) as err:
        parse_watermark_delay_ms(text)
    assert str(err.value) == f"requirement failed: delay threshold ({text}) should not be negative."
    assert isinstance(err.value, ValueError)


def test_delay_overflow():
    with pytest.raises(IntervalArithmeticError) as err:
        parse_watermark_delay_ms("2147483647 days")
    assert str(err.value).startswith("[INTERVAL_ARITHMETIC_OVERFLOW.WITHOUT_SUGGESTION] Integer overflow")


def test_parse_interval_parts():
    assert parse_interval("1 year 2 months 3 weeks 4 days 5 hours") == CalendarInterval(14, 25, 5 * 3_600_000_000)
    # SQL day-time literals fold days into microseconds (Spark's DayTimeIntervalType)
    assert parse_interval("interval 2 days") == CalendarInterval(0, 0, 2 * 86_400_000_000)
    assert parse_interval("interval 1 year") == CalendarInterval(12, 0, 0)
    assert parse_interval("-0.5 seconds") == CalendarInterval(0, 0, -500_000)


@pytest.mark.parametrize(
    ("text", "expected_us"),
    [
        ("10 seconds", 10_000_000),
        ("1 week", 604_800_000_000),
        ("1 day", 86_400_000_000),
        ("interval 10 seconds", 10_000_000),
        ("interval '1 2:3:4' day to second", 93_784_000_000),
        ("1500 microseconds", 1500),
        ("1.5 seconds", 1_500_000),
        ("-10 seconds", -10_000_000),  # positivity is checked by the window rules
        ("0 seconds", 0),
    ],
)
def test_window_duration_us(text, expected_us):
    assert parse_window_duration_us(text) == expected_us


@pytest.mark.parametrize("text", ["1 month", "1 year", "1 day 1 month", "interval '1-2' year to month", "1 month -31 days"])
def test_window_duration_rejects_months(text):
    with pytest.raises(IllegalArgumentError) as err:
        parse_window_duration_us(text)
    assert str(err.value) == f"Intervals greater than a month is not supported ({text})."


@pytest.mark.parametrize("text", ["foo", "10"])
def test_window_duration_unparsable(text):
    with pytest.raises(StatestreamAnalysisException, match=r"^\[CANNOT_PARSE_INTERVAL\] Unable to parse"):
        parse_window_duration_us(text)


# -- processing-time triggers (texts checked against Spark 4.1's Trigger.ProcessingTime) -----------

_FMT = (
    "[INVALID_INTERVAL_FORMAT.{sub}] Error parsing '{text}' to interval. Please ensure that the value "
    "provided is in a valid format for defining an interval. You can reference the documentation for "
    "the correct format. {detail} SQLSTATE: 22006"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5 seconds", 5000),
        ("0 seconds", 0),
        ("interval 5 seconds", 5000),
        ("+ 5 seconds", 5000),
        ("10 Seconds", 10_000),
        ("1 day 2 hours", 93_600_000),
        (".5 seconds", 500),
        ("1. seconds", 1000),
        ("100 milliseconds", 100),
        ("1500 microseconds", 1),
        ("1 week", 604_800_000),
        ("  5 seconds  ", 5000),
    ],
)
def test_trigger_interval(text, expected):
    assert parse_trigger_interval_ms(text) == expected


@pytest.mark.parametrize(
    ("text", "sub", "detail"),
    [
        ("bogus", "UNRECOGNIZED_NUMBER", "Unrecognized number bogus."),
        ("60s", "INVALID_VALUE", "Invalid value 60s."),
        ("0", "MISSING_UNIT", "Expect a unit name after 0 but hit EOL."),
        ("- 5", "MISSING_UNIT", "Expect a unit name after 5 but hit EOL."),
        ("0.5 milliseconds", "INVALID_FRACTION", "milliseconds cannot have fractional part."),
        ("1.5 days", "INVALID_FRACTION", "days cannot have fractional part."),
        ("interval", "INPUT_IS_EMPTY", "Interval string cannot be empty."),
        ("intervalx 5 seconds", "INVALID_PREFIX", "Invalid interval prefix intervalx."),
        ("1.0000000001 seconds", "INVALID_PRECISION", "Interval can only support nanosecond precision, 1.0000000001 is out of range."),
        ("10 foo", "INVALID_UNIT", "Invalid unit foo."),
        ("5 secondss", "INVALID_UNIT", "Invalid unit secondss."),
        ("5 +", "INVALID_UNIT", "Invalid unit +."),
        ("- x", "INVALID_VALUE", "Invalid value x."),
        (". seconds", "INVALID_VALUE", "Invalid value .."),
        ("5,seconds", "INVALID_VALUE", "Invalid value 5,seconds."),
        ("interval '5' second", "UNRECOGNIZED_NUMBER", "Unrecognized number '5'."),
        ("9223372036854775808 seconds", "ARITHMETIC_EXCEPTION", "Uncaught arithmetic exception while parsing '9223372036854775808 seconds'."),
        ("2147483648 days", "ARITHMETIC_EXCEPTION", "Uncaught arithmetic exception while parsing '2147483648 days'."),
    ],
)
def test_trigger_interval_errors(text, sub, detail):
    with pytest.raises(IllegalArgumentError) as err:
        parse_trigger_interval_ms(text)
    assert str(err.value) == _FMT.format(sub=sub, text=text, detail=detail)
    assert err.value.getCondition() == f"INVALID_INTERVAL_FORMAT.{sub}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 month", "Doesn't support month or year interval: 1 month"),
        ("1 year", "Doesn't support month or year interval: 1 year"),
        ("-1 seconds", "requirement failed: the interval of trigger should not be negative"),
        ("-0.0005 seconds", "requirement failed: the interval of trigger should not be negative"),
    ],
)
def test_trigger_interval_refused(text, message):
    with pytest.raises(IllegalArgumentError) as err:
        parse_trigger_interval_ms(text)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("value", "ms"),
    [("10000", 10_000), ("10000ms", 10_000), ("10s", 10_000), (" 250ms ", 250), ("1min", 60_000), ("2m", 120_000),
     ("1h", 3_600_000), ("1d", 86_400_000), ("1500us", 1), ("0", 0)],
)
def test_time_conf_values(value, ms):
    from statestream.runtime.intervals import parse_time_conf_ms

    assert parse_time_conf_ms(value) == ms


@pytest.mark.parametrize("value", ["", "ten", "10 seconds", "1.5s", "10x"])
def test_time_conf_value_refused_with_the_value_named(value):
    from statestream.runtime.intervals import parse_time_conf_ms

    with pytest.raises(ValueError, match="invalid time value"):
        parse_time_conf_ms(value)
