"""The hand-over to Spark's engine (``statestream/api/handover.py``) with stand-ins for the API and
for Spark: which calls are recorded, how a chain is replayed, when the refusal stands."""

from __future__ import annotations

from typing import Any

import pytest

from statestream.api import handover
from statestream.errors import NotSupportedYetError


class Conf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, key: str, default: str) -> str:
        return self.values.get(key, default)


class Streams:
    """The served session's query manager: told of each hand-over."""

    def __init__(self) -> None:
        self.handed_over = 0

    def _handed_over(self) -> None:
        self.handed_over += 1


class ServedSpark:
    _statestream_served = True

    def __init__(self) -> None:
        self.conf = Conf()
        self.streams = Streams()


class PlainSpark(ServedSpark):
    _statestream_served = False


class Session:
    def __init__(self, spark: Any) -> None:
        self.sparkSession = spark


class Twin:
    """Spark's side: every call gives a new twin recording the path of calls."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "writeStream":  # a property in PySpark
            return Twin(f"{self.path}.{name}")

        def call(*args: Any, **kwargs: Any) -> "Twin":
            shown = ", ".join([*(a.path if isinstance(a, Twin) else repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])
            return Twin(f"{self.path}.{name}({shown})")

        return call


@handover.hands_over
class Frame:
    def __init__(self, session: Session) -> None:
        self._session = session

    def select(self, *cols: Any) -> "Frame":
        return Frame(self._session)

    def join(self, other: "Frame", on: str) -> "Frame":
        return Frame(self._session)

    def groupBy(self, *cols: Any) -> "Grouped":
        return Grouped(self)

    def exceptAll(self, other: "Frame") -> "Frame":
        raise NotSupportedYetError("DataFrame.exceptAll() is not supported by statestream yet")

    @property
    def writeStream(self) -> "Writer":
        return Writer(self._session)


@handover.hands_over
class Grouped:
    def __init__(self, df: Frame) -> None:
        self._df = df

    def applyInPandas(self, fn: Any, schema: str) -> Frame:
        raise NotSupportedYetError("GroupedData.applyInPandas() is not supported by statestream yet")


@handover.hands_over
class Writer:
    _handover_builder = True

    def __init__(self, session: Session) -> None:
        self._session = session
        self.started = False

    def format(self, name: str) -> "Writer":
        return self

    def trigger(self, **kwargs: Any) -> "Writer":
        if "continuous" in kwargs:
            raise NotSupportedYetError("DataStreamWriter.trigger() is not supported by statestream yet")
        return self

    def start(self) -> str:
        self.started = True
        return "statestream query"


def _stream(spark: Any, name: str = "rate") -> Frame:
    return handover.root(Frame(Session(spark)), lambda: Twin(f"readStream({name})"))


def test_a_refused_call_is_replayed_on_spark():
    df = _stream(ServedSpark())
    other = _stream(df._session.sparkSession, "other").select("v")
    assert df._session.sparkSession.streams.handed_over == 0
    result = df.select("k").join(other, on="k").exceptAll(other)
    assert result.path == "readStream(rate).select('k').join(readStream(other).select('v'), on='k').exceptAll(readStream(other).select('v'))"
    assert df._session.sparkSession.streams.handed_over == 1  # the session's manager now covers Spark's queries


def test_grouped_data_hands_over_through_its_frame():
    result = _stream(ServedSpark()).groupBy("k").applyInPandas(len, "k INT")
    assert result.path == "readStream(rate).groupBy('k').applyInPandas(<built-in function len>, 'k INT')"


def test_a_writer_replays_its_settings_and_hands_on_later_calls():
    writer = _stream(ServedSpark()).writeStream
    writer.format("console")
    handed = writer.trigger(continuous="1 second")
    assert handed.path == "readStream(rate).writeStream.format('console').trigger(continuous='1 second')"
    query = writer.start()  # the same writer object, used again: Spark's now
    assert isinstance(query, Twin) and query.path.endswith(".trigger(continuous='1 second').start()")
    assert not writer.started


def test_the_refusal_stands_where_there_is_no_hand_over():
    plain = _stream(PlainSpark())
    with pytest.raises(NotSupportedYetError):
        plain.exceptAll(plain)
    assert "_handover" not in plain.select("k").__dict__  # nothing is recorded off a served session

    strict = ServedSpark()
    strict.conf.values[handover.HANDOVER_CONF] = "false"
    with pytest.raises(NotSupportedYetError):
        _stream(strict).exceptAll(_stream(strict))

    served = ServedSpark()
    no_twin = Frame(Session(served))  # a chain that does not begin at a reader (a MemoryStream)
    with pytest.raises(NotSupportedYetError):
        no_twin.exceptAll(no_twin)
    with pytest.raises(NotSupportedYetError):  # an argument without a twin keeps the refusal too
        _stream(served).exceptAll(no_twin)


def test_a_frame_used_twice_is_one_twin():
    df = _stream(ServedSpark()).select("k")
    assert handover.spark_twin(df) is handover.spark_twin(df)


def test_only_the_outermost_call_hands_over():
    @handover.hands_over
    class Outer(Frame):
        def both(self) -> Frame:
            return self.exceptAll(self)  # refused inside another API call: not this call's to hand over

    outer = handover.root(Outer(Session(ServedSpark())), lambda: Twin("readStream(rate)"))
    assert outer.both().path == "readStream(rate).both()"
