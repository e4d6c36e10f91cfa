"""Adapted from PySpark's ``python/pyspark/sql/tests/pandas/test_pandas_grouped_map_with_state.py``
(Spark 4.1): ``groupBy(...).applyInPandasWithState`` over the two-line text stream (``hello``,
``this``): the state handed to the function, functions that return more, fewer or no rows than
they got keys, a null in the output, and a query whose Python worker dies, run again from its
checkpoint until its output is complete.

Each test runs on Spark's engine and on statestream (``conftest.py``). Spark's worker-failure test
kills workers at random and polls for two minutes; here the function kills its worker once, at a
fixed key of a fixed batch (a marker file says it already did), and the test starts the query
again from its checkpoint, as Spark's test does after each kill.
"""

from __future__ import annotations

import os
import sys

import pandas as pd
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import Row
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import LongType, StringType, StructField, StructType

OUTPUT = StructType([StructField("key", StringType()), StructField("countAsString", StringType())])
STATE = StructType([StructField("c", LongType())])


# ------------------------------------------------------------------------------------------------
# The functions of the tests (module level: shipped by value to Spark's Python workers, below)
# ------------------------------------------------------------------------------------------------


def count_once(key, pdfs, state):
    """Counts the key's rows (one each here), keeps the count and reads it back."""
    assert isinstance(state, GroupState)
    n = sum(len(pdf) for pdf in pdfs)
    state.update((n,))
    assert state.get[0] == 1, state.get
    yield pd.DataFrame({"key": [key[0]], "countAsString": [str(n)]})


def two_rows_per_key(key, pdfs, state):
    """Keeps no state; answers each key with two rows, one of them for a key it did not get."""
    assert isinstance(state, GroupState)
    yield pd.DataFrame({"key": [key[0], "foo"], "countAsString": ["100", "222"]})


def empty_frame(key, pdfs, state):
    """Keeps no state and yields an empty frame."""
    assert isinstance(state, GroupState)
    yield pd.DataFrame({"key": [], "countAsString": []})


def three_rows_per_key(key, pdfs, state):
    """Writes the state, then answers each key with three rows."""
    state.update((1,))
    assert isinstance(state, GroupState)
    k = key[0]
    yield pd.DataFrame({"key": [k, "foo", f"{k}_2"], "countAsString": ["1", "666", "2"]})


def state_but_no_rows(key, pdfs, state):
    """Writes the state and yields an empty frame."""
    state.update((1,))
    assert isinstance(state, GroupState)
    yield pd.DataFrame({"key": [], "countAsString": []})


def null_key_out(key, pdfs, state):
    """Counts as :func:`count_once` but answers with a null key."""
    assert isinstance(state, GroupState)
    n = sum(len(pdf) for pdf in pdfs)
    state.update((n,))
    assert state.get[0] == 1, state.get
    yield pd.DataFrame({"key": [None], "countAsString": [str(n)]})


# Spark's Python workers cannot import this test module: ship its functions by value.
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ------------------------------------------------------------------------------------------------
# The two-line text stream, one batch
# ------------------------------------------------------------------------------------------------


def _run_one_batch(session, text_dir, func) -> list:
    """Runs ``func`` over the text stream in update mode without timeout; the rows of each batch
    the sink got, in batch order."""
    batches: list = []

    def keep(batch_df, batch_id):
        batches.append((batch_id, batch_df.collect()))

    df = session.readStream.format("text").load(text_dir)
    assert df.isStreaming
    query = (
        df.groupBy(df["value"])
        .applyInPandasWithState(func, OUTPUT, STATE, "Update", GroupStateTimeout.NoTimeout)
        .writeStream.queryName("this_query")
        .foreachBatch(keep)
        .outputMode("update")
        .start()
    )
    try:
        assert query.name == "this_query"
        assert query.isActive
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    return [rows for _, rows in sorted(batches, key=lambda b: b[0])]


@pytest.mark.parametrize(
    "func, expected",
    [
        pytest.param(count_once, {Row(key="hello", countAsString="1"), Row(key="this", countAsString="1")}, id="basic"),
        pytest.param(
            two_rows_per_key,
            {Row(key="hello", countAsString="100"), Row(key="this", countAsString="100"), Row(key="foo", countAsString="222")},
            id="no_state",
        ),
        pytest.param(empty_frame, set(), id="no_state_no_data"),
        pytest.param(
            three_rows_per_key,
            {
                Row(key="hello", countAsString="1"),
                Row(key="foo", countAsString="666"),
                Row(key="hello_2", countAsString="2"),
                Row(key="this", countAsString="1"),
                Row(key="this_2", countAsString="2"),
            },
            id="more_data",
        ),
        pytest.param(state_but_no_rows, set(), id="fewer_data"),
        pytest.param(null_key_out, {Row(key=None, countAsString="1")}, id="with_null"),
    ],
)
def test_function_output_shapes(session, text_dir, func, expected):
    batches = _run_one_batch(session, text_dir, func)
    assert len(batches) == 1
    assert set(batches[0]) == expected
    if func is two_rows_per_key:
        # "foo" comes once from each key: the rows are not merged
        assert sorted(r.key for r in batches[0]) == ["foo", "foo", "hello", "this"]


# ------------------------------------------------------------------------------------------------
# A Python worker that dies, and the query started again from its checkpoint
# ------------------------------------------------------------------------------------------------

#: five files of letters, read one per batch; "k" is in the third
LETTER_FILES = (
    "abcabcd",
    "aabbe",
    "kkabz",
    "zzzab",
    "cdek",
)


def _dying_counter(marker: str):
    """A running count per letter that kills its Python worker (``sys.exit``) once: the first
    time it sees the letter ``k``, when the marker file is not there yet."""

    def func(key, pdfs, state):
        assert isinstance(state, GroupState)
        if key[0] == "k" and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write("killed")
            sys.exit(1)
        count = state.getOption
        count = 0 if count is None else count[0]
        for pdf in pdfs:
            count += len(pdf)
        state.update((count,))
        yield pd.DataFrame({"value": [key[0]], "count": [count]})

    return func


def test_worker_failure_then_restart(session, tmp_path):
    input_dir = tmp_path / "letters"
    input_dir.mkdir()
    base = 1_700_000_000
    for i, letters in enumerate(LETTER_FILES):
        path = input_dir / f"part-{i}.txt"
        path.write_text("".join(f"{c}\n" for c in letters))
        os.utime(path, (base + 10 * i, base + 10 * i))  # one file per batch, in this order
    output = str(tmp_path / "out")
    checkpoint = str(tmp_path / "checkpoint")
    marker = str(tmp_path / "killed-once")
    func = _dying_counter(marker)

    def start():
        df = session.readStream.format("text").option("maxFilesPerTrigger", "1").load(str(input_dir))
        assert df.isStreaming
        return (
            df.groupBy(df["value"])
            .applyInPandasWithState(
                func,
                StructType([StructField("value", StringType()), StructField("count", LongType())]),
                StructType([StructField("cnt", LongType())]),
                "Append",
                GroupStateTimeout.NoTimeout,
            )
            .writeStream.queryName("this_query")
            .format("json")
            .outputMode("append")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .start()
        )

    expected = session.read.format("text").load(str(input_dir)).groupBy("value").count().sort("value").collect()

    query = start()
    assert query.name == "this_query"
    with pytest.raises(StreamingQueryException):
        query.processAllAvailable()  # the worker dies on the batch with "k"
    assert os.path.exists(marker)
    assert not query.isActive

    query = start()  # again from the checkpoint: the failed batch runs again, now to its end
    try:
        assert query.isActive
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    result = (
        session.read.schema("value string, count int")
        .format("json")
        .load(output)
        .groupBy("value")
        .max("count")
        .selectExpr("value", "`max(count)` AS count")
        .sort("value")
        .collect()
    )
    assert result == expected
