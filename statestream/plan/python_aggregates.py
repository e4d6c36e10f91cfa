"""User-defined (Python) aggregate functions in a streaming aggregation: statestream's opt-in.

A ``statestream.AggregateFunction`` called on columns gives a grouped-aggregate Arrow UDF column
(so it runs on a static DataFrame as any such UDF does) and records the call here, under the
JVM expression's result id, with the function object and its argument columns. The planner
looks each aggregate column up: a recorded call becomes a ``PythonAggregateCall`` with the
user's buffer fields as state value columns; any other grouped-aggregate pandas or Arrow UDF is
refused with Spark's error, as Spark's engine refuses it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from statestream.operators.python_aggregate import PythonAggregateRule, finish_buffers
from statestream.operators.python_worker import releasing_zip_importers
from statestream.plan.aggregate_functions import BufferField
from statestream.errors import python_aggregate_buffer_schema_error, python_aggregate_in_session_window_error
from statestream.plan.aggregates import AggregateCall, column_node

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["PythonAggregateCall", "register_python_aggregate", "python_aggregate_of", "decompose_python_aggregate"]

_CALLS: dict[int, tuple[Any, tuple[Any, ...]]] = {}
_LOCK = threading.Lock()


def _expression_id(node: Any) -> int | None:
    """The result id of the aggregate expression behind an ``ExpressionColumnNode``."""
    while node.getClass().getSimpleName() == "Alias":
        node = node.child()
    if node.getClass().getSimpleName() != "ExpressionColumnNode":
        return None
    expression = node.expression()
    if expression.getClass().getSimpleName() != "AggregateExpression":
        return None
    return int(expression.resultId().id())


def register_python_aggregate(col: "Column", function: Any, args: tuple[Any, ...]) -> None:
    """Record that ``col`` is ``function`` called on ``args`` (called by
    ``AggregateFunction.__call__``)."""
    key = _expression_id(column_node(col))
    if key is None:
        raise TypeError("not a grouped-aggregate UDF column")
    with _LOCK:
        _CALLS[key] = (function, tuple(args))


def python_aggregate_of(node: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """``(function, args)`` when the column node is a recorded ``AggregateFunction`` call."""
    try:
        key = _expression_id(node)
    except Exception:  # noqa: BLE001 - a node kind without the accessors: not ours
        return None
    if key is None:
        return None
    with _LOCK:
        return _CALLS.get(key)


def _spark_type(ddl: str) -> Any:
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl)


@dataclass(frozen=True)
class PythonAggregateCall(AggregateCall):
    """A call of a user's ``AggregateFunction``: its buffer fields are the state value columns;
    the batch side hands the state step each key's argument rows (``input_column``)."""

    spark_function: ClassVar[bool] = False

    function_object: Any = None
    input_column: str = ""
    buffer_type: Any = None  # Spark StructType of the buffer (the user's field names)
    result_type: Any = None  # Spark DataType of the result

    @property
    def _arrow_buffer_schema(self) -> Any:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.buffer_type, timestamp_utc=True)

    @property
    def merge_groups(self) -> tuple[tuple[Any, tuple[str, ...]], ...]:
        columns = tuple(b.column for b in self.buffers)
        rule = PythonAggregateRule(self.function_object, self.input_column, columns, self._arrow_buffer_schema)
        return ((rule, columns),)

    def partial_columns(self) -> list["Column"]:
        """Each key's argument rows of the batch (``collect_list`` keeps rows whose arguments are
        null: the struct itself is never null), for ``update`` in the state step."""
        from pyspark.sql import functions as F

        rows = F.struct(*(a.alias(f"_{i}") for i, a in enumerate(self.args)))
        return [F.collect_list(rows).alias(self.input_column)]

    def partial_names(self) -> list[str]:
        return [self.input_column]

    def state_fields(self) -> list[Any]:
        """The Spark fields of the buffer columns (internal names)."""
        from pyspark.sql.types import StructField

        return [StructField(b.column, f.dataType, True) for b, f in zip(self.buffers, self.buffer_type.fields)]

    def row_columns(self) -> list["Column"]:
        raise python_aggregate_in_session_window_error(self.function)

    def final_column(self) -> "Column":
        """``finish`` over the merged buffers, as a scalar Arrow UDF."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_type

        function, schema = self.function_object, self._arrow_buffer_schema
        result_type = to_arrow_type(self.result_type, timestamp_utc=True)

        def finish(buffers: pa.Array) -> pa.Array:
            table = pa.Table.from_struct_array(buffers).rename_columns(schema.names).cast(schema)
            return finish_buffers(function, table, result_type)

        finish.__name__ = f"{self.function}_finish"
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            udf = F.arrow_udf(releasing_zip_importers(finish), self.result_type, F.ArrowUDFType.SCALAR)
        return udf(F.struct(*(F.col(b.column).alias(f.name) for b, f in zip(self.buffers, self.buffer_type.fields))))


def decompose_python_aggregate(col: "Column", index: int | str, output_name: str) -> PythonAggregateCall | None:
    """The ``PythonAggregateCall`` of ``col`` when it is a recorded ``AggregateFunction`` call,
    else ``None``."""
    from pyspark.sql.types import StructType

    found = python_aggregate_of(column_node(col))
    if found is None:
        return None
    function, args = found
    name = getattr(function, "function_name", None) or type(function).__name__
    buffer_type = _spark_type(function.buffer_schema)
    if not isinstance(buffer_type, StructType) or not buffer_type.fields:
        raise python_aggregate_buffer_schema_error(name, function.buffer_schema)
    buffers = tuple(BufferField(f.name, f"__b{index}_{j}", "python", 0) for j, f in enumerate(buffer_type.fields))
    sql_args = []
    for a in args:
        try:
            sql_args.append(str(column_node(a).sql()))
        except Exception:  # noqa: BLE001
            sql_args.append("?")
    return PythonAggregateCall(
        function=name,
        args=tuple(args),
        is_distinct=False,
        output_name=output_name,
        buffers=buffers,
        sql=f"{name}({', '.join(sql_args)})",
        function_object=function,
        input_column=f"__b{index}_input",
        buffer_type=buffer_type,
        result_type=_spark_type(function.result_type),
    )
