"""The Arrow side of a user-defined (Python) aggregate function: a batch's rows turned into one
buffer per key, buffers merged with the stored ones, buffers finished into results.

statestream's opt-in beyond Spark (Spark refuses grouped-aggregate pandas UDFs on streams). The
user's function (``statestream.AggregateFunction``) has four parts:

* ``zero()``: the empty buffer, one value per buffer field;
* ``update(buffer, *columns)``: the buffer after one key's new rows of a batch (the columns are
  that key's argument values, Arrow arrays or pandas Series), vectorised over the rows;
* ``merge(left, right)``: row ``i`` of ``left`` merged with row ``i`` of ``right`` (tables of
  buffers), vectorised over the keys; ``left`` is the older buffer, as Spark's restore puts the
  stored row before the new one;
* ``finish(buffers)``: the results of a table of buffers, vectorised over the keys.

The batch side collects each key's argument rows (``collect_list`` of a struct, so one Spark
aggregation still computes every function's partial buffers); the state step calls ``update``
once per key of the batch, then ``merge`` once for all keys that had a stored buffer. The
finishing step runs as a scalar Arrow UDF over the buffer columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "PythonAggregateRule",
    "buffers_from_rows",
    "update_groups",
    "merge_buffer_tables",
    "finish_buffers",
    "evaluate_group",
]


def _name(function: Any) -> str:
    return getattr(function, "function_name", None) or type(function).__name__


def _pandas(function: Any) -> bool:
    return getattr(function, "columns", "arrow") == "pandas"


def _plain(value: Any) -> Any:
    """A Python value from what ``zero``/``update`` may return for a field (Arrow or numpy
    scalars included)."""
    if isinstance(value, pa.Scalar):
        return value.as_py()
    if isinstance(value, np.generic):
        return value.item()
    return value


def buffers_from_rows(function: Any, rows: Sequence[Any], schema: pa.Schema, part: str) -> pa.Table:
    """The buffers ``zero``/``update`` returned (one mapping per key) as a table of ``schema``.
    A mapping whose fields are not the buffer's gets an error naming the function and ``part``."""
    names = list(schema.names)
    plain = []
    for row in rows:
        if not isinstance(row, Mapping) or set(row) != set(names):
            got = sorted(row) if isinstance(row, Mapping) else type(row).__name__
            raise TypeError(f"{_name(function)}.{part}() must return a mapping with the buffer fields {names}, got {got}")
        plain.append({n: _plain(row[n]) for n in names})
    try:
        return pa.Table.from_pylist(plain, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
        raise TypeError(f"{_name(function)}.{part}() returned a buffer that does not fit {schema}: {e}") from e


def as_table(function: Any, result: Any, schema: pa.Schema, rows: int, part: str) -> pa.Table:
    """``merge``'s result (an Arrow table, a pandas DataFrame or a mapping of columns) as a table
    of the buffer ``schema`` with ``rows`` rows."""
    try:
        if isinstance(result, pa.Table):
            table = result.select(schema.names)
        elif isinstance(result, Mapping):
            table = pa.table({n: _array(result[n], schema.field(n).type) for n in schema.names})
        elif hasattr(result, "to_dict") and hasattr(result, "columns"):  # a pandas DataFrame
            table = pa.Table.from_pandas(result[schema.names], schema=schema, preserve_index=False)
        else:
            raise TypeError(f"a table of buffers, got {type(result).__name__}")
        table = table.cast(schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
        raise TypeError(f"{_name(function)}.{part}() must return the buffer fields {schema.names}: {e}") from e
    if table.num_rows != rows:
        raise ValueError(f"{_name(function)}.{part}() returned {table.num_rows} buffers for {rows} keys")
    return table


def _array(values: Any, type_: pa.DataType) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values.cast(type_) if not values.type.equals(type_) else values
    if hasattr(values, "to_numpy") and hasattr(values, "dtype"):  # a pandas Series
        return pa.Array.from_pandas(values, type=type_)
    return pa.array(values, type=type_)


def _arguments(function: Any, values: pa.StructArray) -> list[Any]:
    """The argument columns of a flat struct array of argument rows, as ``update`` takes them."""
    columns = [values.field(i) for i in range(values.type.num_fields)]
    if _pandas(function):
        return [c.to_pandas() for c in columns]
    return columns


def update_groups(function: Any, lists: pa.Array, schema: pa.Schema) -> pa.Table:
    """One buffer per key: ``update(zero(), rows)`` for each key's list of argument rows."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    if len(lists) == 0:
        return schema.empty_table()
    if lists.null_count:
        lists = pc.fill_null(lists, pa.scalar([], type=lists.type))
    offsets = lists.offsets.to_numpy(zero_copy_only=False) - lists.offsets[0].as_py()
    columns = _arguments(function, lists.flatten())
    rows = []
    for i in range(len(lists)):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        group = [c.iloc[lo:hi] if hasattr(c, "iloc") else c.slice(lo, hi - lo) for c in columns]
        rows.append(function.update(function.zero(), *group))
    return buffers_from_rows(function, rows, schema, "update")


def merge_buffer_tables(function: Any, left: pa.Table, right: pa.Table, schema: pa.Schema) -> pa.Table:
    """``merge(left, right)`` as a table of ``schema`` (row ``i`` of each is the same key)."""
    if left.num_rows == 0:
        return schema.empty_table()
    if _pandas(function):
        result = function.merge(left.to_pandas(), right.to_pandas())
    else:
        result = function.merge(left, right)
    return as_table(function, result, schema, left.num_rows, "merge")


def finish_buffers(function: Any, buffers: pa.Table, result_type: pa.DataType) -> pa.Array:
    """``finish(buffers)``: one result per buffer row, as an array of ``result_type``."""
    if buffers.num_rows == 0:
        return pa.array([], type=result_type)
    result = function.finish(buffers.to_pandas() if _pandas(function) else buffers)
    try:
        array = _array(result, result_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
        raise TypeError(f"{_name(function)}.finish() must return one {result_type} per buffer: {e}") from e
    if len(array) != buffers.num_rows:
        raise ValueError(f"{_name(function)}.finish() returned {len(array)} results for {buffers.num_rows} buffers")
    return array


def evaluate_group(function: Any, schema: pa.Schema, result_type: pa.DataType, columns: Sequence[pa.Array]) -> Any:
    """The function over one whole group (a static DataFrame's ``groupBy().agg()``): ``finish``
    of ``update(zero(), rows)``, as a Python value."""
    args = [c.to_pandas() for c in columns] if _pandas(function) else list(columns)
    buffer = buffers_from_rows(function, [function.update(function.zero(), *args)], schema, "update")
    return finish_buffers(function, buffer, result_type)[0].as_py()


@dataclass(frozen=True)
class PythonAggregateRule:
    """The merge rule of one user-defined aggregate call in the aggregation state step.

    ``input_column`` is the batch's list of argument rows per key; ``columns`` the call's buffer
    columns in state (internal names, in the order of the user's buffer fields); ``schema`` the
    buffer with the user's field names."""

    function: Any
    input_column: str
    columns: tuple[str, ...]
    schema: pa.Schema

    def update_table(self, table: pa.Table) -> pa.Table:
        """``table`` with the input lists replaced by this batch's buffer per key."""
        buffers = update_groups(self.function, table.column(self.input_column), self.schema)
        table = table.drop_columns([self.input_column])
        for column, array in zip(self.columns, buffers.columns):
            table = table.append_column(pa.field(column, array.type), array)
        return table

    def merge(self, state: Sequence[Any], batch: Sequence[Any], found: Any = None) -> list[pa.Array]:
        """The batch's buffers, merged with the stored ones where a key had one (``found``)."""
        batch = [b.combine_chunks() if isinstance(b, pa.ChunkedArray) else b for b in batch]
        n = len(batch[0]) if batch else 0
        if found is None or n == 0:
            return list(batch)
        has = pc.fill_null(found, False)
        has = has.combine_chunks() if isinstance(has, pa.ChunkedArray) else has
        where = np.flatnonzero(has.to_numpy(zero_copy_only=False))
        if len(where) == 0:
            return list(batch)
        take = pa.array(where)
        left = pa.Table.from_arrays([_array(s, f.type).take(take) for s, f in zip(state, self.schema)], schema=self.schema)
        right = pa.Table.from_arrays([b.cast(f.type).take(take) for b, f in zip(batch, self.schema)], schema=self.schema)
        merged = merge_buffer_tables(self.function, left, right, self.schema)
        order = np.arange(n, dtype=np.int64)
        order[where] = n + np.arange(len(where), dtype=np.int64)
        positions = pa.array(order)
        return [
            pa.concat_arrays([b.cast(f.type), m.combine_chunks()]).take(positions)
            for b, m, f in zip(batch, merged.columns, self.schema)
        ]
