"""Python values of the user's state, shared by the Python state operators
(``applyInPandasWithState`` and ``transformWithState``): timestamps between Arrow's UTC and the
naive wall-clock times of the session time zone that Spark's JVM hands PySpark, and the
conversion of a function's pandas DataFrames to one Arrow table with PySpark's own code."""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from statestream.state.keys import group_ids

__all__ = [
    "session_zone",
    "has_timestamp",
    "to_session_wall_clock",
    "from_session_wall_clock",
    "pandas_frames_to_arrow",
    "to_pandas",
    "pandas_key_tuples",
    "group_rows_by_key",
]

_UTC = datetime.timezone.utc


def session_zone(name: str | None) -> Any:
    """The ``ZoneInfo`` of a session time zone id (``None`` when Python does not know it)."""
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(name) if name else None
    except Exception:  # noqa: BLE001 - an offset id Python does not know: the process's zone
        return None


def has_timestamp(t: pa.DataType) -> bool:
    """Whether ``t`` holds a timestamp anywhere (so its values need the zone conversions)."""
    if pa.types.is_timestamp(t):
        return True
    if pa.types.is_struct(t):
        return any(has_timestamp(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return has_timestamp(t.value_type)
    return False


def to_session_wall_clock(value: Any, t: pa.DataType, zone: Any) -> Any:
    """``value`` (from ``to_pylist``) with its UTC-aware timestamps turned into naive datetimes of
    ``zone`` (``None``: the process's local zone)."""
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        if getattr(value, "tzinfo", None) is None:
            return value
        return value.astimezone(zone).replace(tzinfo=None)
    if pa.types.is_struct(t):
        return {f.name: to_session_wall_clock(value[f.name], f.type, zone) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [to_session_wall_clock(v, t.value_type, zone) for v in value]
    return value


def from_session_wall_clock(value: Any, t: pa.DataType, zone: Any) -> Any:
    """The inverse of :func:`to_session_wall_clock` for a state the function wrote: a naive datetime
    is a wall-clock time of ``zone``, as Spark reads it."""
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        if not hasattr(value, "tzinfo") or not hasattr(value, "astimezone"):
            return value
        if value.tzinfo is None:
            value = value.replace(tzinfo=zone) if zone is not None else value.astimezone()
        # in UTC: pyarrow ignores a datetime's zone when PYARROW_IGNORE_TIMEZONE is set (importing
        # pyspark.pandas sets it), and would then store the wall-clock time as UTC
        return value.astimezone(_UTC)
    if pa.types.is_struct(t):
        if isinstance(value, dict):
            return {f.name: from_session_wall_clock(value.get(f.name), f.type, zone) for f in t}
        if isinstance(value, (tuple, list)):  # a Row or tuple for a nested struct: by position
            return {f.name: from_session_wall_clock(v, f.type, zone) for f, v in zip(t, value)}
        return value
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [from_session_wall_clock(v, t.value_type, zone) for v in value]
    return value


def to_pandas(table: pa.Table, timezone: str | None) -> Any:
    """``table`` as PySpark's worker converts Arrow for a pandas processor (a null integer or
    float becomes NaN, a null timestamp NaT)."""
    import pandas as pd
    from pyspark.sql.pandas.serializers import ArrowStreamPandasUDFSerializer

    ser = ArrowStreamPandasUDFSerializer(timezone, False, True, arrow_cast=True)
    cols = [ser.arrow_to_pandas(c, i) for i, c in enumerate(table.columns)]
    if not cols:
        return pd.DataFrame(index=range(table.num_rows))
    pdf = pd.concat(cols, axis=1)
    pdf.columns = table.column_names
    return pdf


def pandas_key_tuples(keys: pa.Table, timezone: str | None) -> list[tuple]:
    """Each key row as the tuple PySpark's worker passes a pandas processor: the values pandas
    gives (NaN for a null number, ``Timestamp`` for a timestamp, NumPy arrays for arrays).
    Columns of plain types without nulls, which pandas hands out as the same Python scalars,
    skip the conversion.

    Examples
    --------
    >>> import pyarrow as pa
    >>> pandas_key_tuples(pa.table({"k": [1, None], "s": ["a", "b"]}), "UTC")
    [(1.0, 'a'), (nan, 'b')]
    """
    columns = []
    for i, column in enumerate(keys.columns):
        t = column.type
        plain = (
            pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_decimal(t) or pa.types.is_date(t)
        )
        if plain and column.null_count == 0:
            columns.append(column.to_pylist())
        else:
            columns.append(list(to_pandas(keys.select([i]), timezone).iloc[:, 0]))
    return list(zip(*columns)) if columns else [()] * keys.num_rows


def pandas_frames_to_arrow(ser: Any, frames: list, out_type: pa.DataType, padded: bool = False) -> pa.Table:
    """The function's DataFrames as one Arrow table, converted by PySpark's own code; frames
    with the same columns are concatenated first, so the conversion runs a few times, not
    once per key.

    ``padded``: convert as PySpark's ``applyInPandasWithState`` worker does, which concatenates
    the frames of a batch with an empty frame of ``None`` columns. With pandas 3 every column
    then reaches the conversion as objects: a float NaN written to a string column (pandas 3
    gives a null string key as NaN) is a null, and a naive ``datetime64`` column is read as
    the objects' UTC time, not as the session zone's wall clock."""
    import pandas as pd

    schema = pa.schema(list(out_type))
    tables = []
    i = 0
    while i < len(frames):
        cols = list(frames[i].columns)
        j = i + 1
        while j < len(frames) and list(frames[j].columns) == cols:
            j += 1
        run = frames[i:j]
        pdf = run[0] if len(run) == 1 else _stacked(run)
        if pdf is None:
            pdf = pd.concat(run, ignore_index=True)
        if len(run) > 1:
            # a concatenated column of pandas' string dtype holds several Arrow chunks, which
            # PySpark's conversion does not take: hand it the same strings as objects
            back = {c: object for c in pdf.columns if isinstance(pdf[c].dtype, pd.StringDtype)}
            if back:
                pdf = pdf.astype(back)
        if padded:
            pdf = pd.concat([pdf, pd.DataFrame(dict.fromkeys(pdf.columns), index=[])], ignore_index=True)
        batch = ser._create_batch([(pdf, out_type)])  # noqa: SLF001 - PySpark's own conversion
        tables.append(pa.Table.from_batches([pa.RecordBatch.from_struct_array(batch.column(0))]))
        i = j
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _stacked(frames: list) -> Any:
    """``pd.concat(frames, ignore_index=True)`` for the common case of many small frames (one
    a key) whose columns all have the same plain NumPy dtypes (bool, integers, floats, objects):
    their rows stacked as objects and the dtypes put back, which gives the same frame in about
    half of concat's time (it spends ~90 µs a frame on checks and index work). None otherwise."""
    import pandas as pd

    first = frames[0]
    cols = list(first.columns)
    dtypes = tuple(first.dtypes)
    if not cols or len(set(cols)) != len(cols) or not all(isinstance(d, np.dtype) and d.kind in "biufO" for d in dtypes):
        return None
    if any(tuple(f.dtypes) != dtypes for f in frames):
        return None
    rows = np.concatenate([f.to_numpy(dtype=object) for f in frames])
    # each column built with its dtype given, so that pandas infers nothing (an object column of
    # strings would otherwise become its string dtype, None turning into NaN)
    return pd.DataFrame({c: pd.Series(rows[:, k], dtype=d) for k, (c, d) in enumerate(zip(cols, dtypes))})


def group_rows_by_key(keys: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(row order grouping equal keys together, start offset of each group + the end), with
    the groups in the order their keys first appear. Equality is Spark's grouping equality
    (``state.keys.group_ids``: -0.0 == 0.0, NaN == NaN, structs field-wise), the same the
    state store matches keys with, so one group never meets two stored rows."""
    n = keys.num_rows
    if n == 0:
        return np.empty(0, np.int64), np.zeros(1, np.int64)
    ids = group_ids(list(keys.columns), n)
    groups = int(ids.max()) + 1
    first = np.full(groups, n, dtype=np.int64)
    np.minimum.at(first, ids, np.arange(n, dtype=np.int64))
    rank = np.empty(groups, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(groups, dtype=np.int64)
    row_rank = rank[ids]
    order = np.argsort(row_rank, kind="stable").astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(row_rank, minlength=groups))]).astype(np.int64)
    return order, offsets
