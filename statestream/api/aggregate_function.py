"""``AggregateFunction``: an aggregate function written once in Python, usable in
``groupBy().agg()`` on a statestream stream (its buffer kept in the state store) and on a static
DataFrame (as a grouped-aggregate Arrow UDF).

Beyond Spark: Spark's engine refuses grouped-aggregate pandas UDFs on streams, because a UDF
that sees a whole group at once cannot be continued batch after batch. An ``AggregateFunction``
says how: ``zero`` (the empty buffer), ``update`` (a buffer after one key's new rows, vectorised
over the rows), ``merge`` (two tables of buffers, vectorised over the keys) and ``finish``
(results of a table of buffers, vectorised over the keys).

Example::

    import pyarrow.compute as pc
    from statestream import AggregateFunction

    class WeightedMean(AggregateFunction):
        buffer_schema = "total double, weight double"
        result_type = "double"

        def zero(self):
            return {"total": 0.0, "weight": 0.0}

        def update(self, buffer, values, weights):
            return {
                "total": buffer["total"] + (pc.sum(pc.multiply(values, weights)).as_py() or 0.0),
                "weight": buffer["weight"] + (pc.sum(weights).as_py() or 0.0),
            }

        def merge(self, left, right):
            return {"total": pc.add(left["total"], right["total"]), "weight": pc.add(left["weight"], right["weight"])}

        def finish(self, buffers):
            return pc.divide(buffers["total"], buffers["weight"])

    weighted_mean = WeightedMean()
    counts = events.groupBy("user").agg(weighted_mean("price", "quantity").alias("avg_price"))
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from statestream.operators.python_aggregate import evaluate_group
from statestream.plan.python_aggregates import register_python_aggregate

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["AggregateFunction"]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class AggregateFunction:
    """Base class of a user-defined aggregate function (see the module docstring).

    Subclasses set ``buffer_schema`` (a Spark DDL struct: ``"total double, weight double"``),
    ``result_type`` (a Spark DDL type) and optionally ``name`` (the output column's function
    name; default: the class name in snake case) and ``columns`` (``"arrow"``, the default:
    ``update`` gets ``pyarrow.Array`` columns and ``merge``/``finish`` get ``pyarrow.Table``
    buffers; ``"pandas"``: ``pandas.Series`` and ``pandas.DataFrame``).

    Calling an instance on columns gives the aggregate column for ``groupBy().agg()``.

    Examples
    --------
    >>> import pyarrow.compute as pc
    >>> from statestream import AggregateFunction
    >>> class Total(AggregateFunction):
    ...     buffer_schema = "total bigint"
    ...     result_type = "bigint"
    ...     def zero(self):
    ...         return {"total": 0}
    ...     def update(self, buffer, values):
    ...         return {"total": buffer["total"] + (pc.sum(values).as_py() or 0)}
    ...     def merge(self, left, right):
    ...         return {"total": pc.add(left["total"], right["total"])}
    ...     def finish(self, buffers):
    ...         return buffers["total"]
    >>> total = Total()
    >>> ss = StreamingSession(spark)
    >>> ms = ss.memoryStream("k STRING, v BIGINT")
    >>> ms.add_data([("a", 1), ("a", 2), ("b", 5)])
    0
    >>> sums = ms.toDF().groupBy("k").agg(total("v").alias("total"))
    >>> q = sums.writeStream.outputMode("update").format("memory").queryName("aggregate_function_total").start()
    >>> q.processAllAvailable()
    >>> sorted(spark.table("aggregate_function_total").collect())
    [Row(k='a', total=3), Row(k='b', total=5)]
    >>> q.stop()
    """

    buffer_schema: str = ""
    result_type: str = ""
    name: str | None = None
    columns: str = "arrow"

    def zero(self) -> dict[str, Any]:
        """The empty buffer: one value per buffer field."""
        raise NotImplementedError(f"{type(self).__name__}.zero()")

    def update(self, buffer: dict[str, Any], *columns: Any) -> dict[str, Any]:
        """``buffer`` after one key's rows (``columns``: the argument values of those rows)."""
        raise NotImplementedError(f"{type(self).__name__}.update()")

    def merge(self, left: Any, right: Any) -> Any:
        """Row ``i`` of ``left`` merged with row ``i`` of ``right`` (``left`` the older buffer):
        a table of buffers, or a mapping of buffer field to column."""
        raise NotImplementedError(f"{type(self).__name__}.merge()")

    def finish(self, buffers: Any) -> Any:
        """One result per buffer row of ``buffers``."""
        raise NotImplementedError(f"{type(self).__name__}.finish()")

    def __call__(self, *cols: "Column | str") -> "Column":
        """This function over ``cols``: a column for ``groupBy().agg()`` on a stream or a static
        DataFrame."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
        from pyspark.sql.types import StructType, _parse_datatype_string

        if not cols:
            raise TypeError(f"{self.function_name}() needs at least one column")
        if self.columns not in ("arrow", "pandas"):
            raise ValueError(f"{type(self).__name__}.columns must be 'arrow' or 'pandas', not {self.columns!r}")
        buffer_type = _parse_datatype_string(self.buffer_schema)
        if not isinstance(buffer_type, StructType) or not buffer_type.fields:
            raise ValueError(f"{type(self).__name__}.buffer_schema must be a struct of named fields, got {self.buffer_schema!r}")
        result_type = _parse_datatype_string(self.result_type)
        schema = to_arrow_schema(buffer_type, timestamp_utc=True)
        arrow_result = to_arrow_type(result_type, timestamp_utc=True)
        function = self

        def evaluate(*columns: pa.Array) -> Any:
            return evaluate_group(function, schema, arrow_result, columns)

        evaluate.__name__ = self.function_name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the function type is given, not hinted
            udaf = F.arrow_udf(evaluate, result_type, F.ArrowUDFType.GROUPED_AGG)  # type: ignore[call-overload]  # PySpark's overloads omit GROUPED_AGG
        args = tuple(F.col(c) if isinstance(c, str) else c for c in cols)
        col = udaf(*args)
        register_python_aggregate(col, self, args)
        return col

    @property
    def function_name(self) -> str:
        """The function's name in the output column (``total(v)``): ``name``, else the class name
        in snake case.

        Examples
        --------
        >>> from statestream import AggregateFunction
        >>> class WeightedMean(AggregateFunction):
        ...     pass
        >>> WeightedMean().function_name
        'weighted_mean'
        """
        return self.name or _snake(type(self).__name__)
