"""The streaming DataFrame: PySpark's DataFrame API, building statestream's logical plan.

Every method records a logical node and checks it at once against a *template* (the same
operation on an empty batch DataFrame), so mistakes such as an unknown column fail where the user
wrote them, with Spark's own error, exactly as they do on ``spark.readStream``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from pyspark import _NoValue  # PySpark's marker of an argument not given (replace's value)
from pyspark.errors import AnalysisException
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.session import SparkSession as ClassicSparkSession  # PySpark's own sql, not an enabled session's
from pyspark.sql.types import TimestampNTZType, TimestampType

from statestream.errors import (
    call_on_streaming_dataset_unsupported_error,
    check_batch_action_on_stream,
    event_time_not_timestamp_error,
    event_time_without_watermark_error,
    finality_column_conflict_error,
    finality_session_window_error,
    missing_member,
    not_supported_yet,
    not_supported_yet_attribute,
    pivot_on_stream_error,
    union_stream_batch_error,
)
from statestream.api.handover import hands_over
from statestream.operators.aggregate import FINALITY_CONF, IS_FINAL_COLUMN, REVISION_COLUMN
from statestream.operators.watermark import mark_event_time
from statestream.plan import logical as L
from statestream._jvm.calls import java_dataframe, jvm_seq
from statestream.plan.aggregates import column_node
from statestream.plan.bindings import (
    JoinCondition,
    ambiguous_references,
    bind_for_template,
    bind_positions,
    mark_event_time_keeping_ids,
    remember_binding,
)
from statestream.plan.dedup import analysed_key_names
from statestream.plan.explain import explain_string, logical_tree_string
from statestream.plan.joins import join_type_name
from statestream.plan.planner import optimized_plan
from statestream.plan.spark_text import logical_sections
from statestream.plan.sql import check_stateless_above_view, per_batch_sql
from statestream.runtime.intervals import parse_watermark_delay_ms
from statestream.runtime.replay import REPLAY_DELAY_CONF
from statestream.runtime.microbatch import plan_for_explain
from statestream.api.writer import DataStreamWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame as SparkDataFrame
    from pyspark.sql.types import StructType

    # the protocol a StreamingSession satisfies: session.py imports this module (via reader.py)
    from statestream.runtime.interfaces import StreamingSessionLike as StreamingSession

__all__ = ["DataFrame", "GroupedData", "DataFrameNaFunctions", "DataFrameStatFunctions"]


def _col(c: Any) -> Column:
    if isinstance(c, Column):
        return c
    if isinstance(c, str):
        return F.col(c)
    msg = f"[NOT_COLUMN_OR_STR] Argument `col` should be a Column or str, got {type(c).__name__}."
    raise TypeError(msg)


def _cols(cols: tuple[Any, ...]) -> list[Any]:
    if len(cols) == 1 and isinstance(cols[0], (list, tuple)):
        return list(cols[0])
    return list(cols)


def _describe(cols: list[Any]) -> str:
    out = []
    for c in cols:
        if isinstance(c, Column):
            try:
                out.append(str(column_node(c).sql()))
            except Exception:  # noqa: BLE001 - description only
                out.append(str(c))
        else:
            out.append(str(c))
    return "[" + ", ".join(out) + "]"


def _is_pyspark_member(cls: str, name: str) -> bool:
    """Whether ``name`` is a public member of PySpark's class ``cls``."""
    import pyspark.sql as S

    return not name.startswith("_") and hasattr(getattr(S, cls), name)


#: members not tried on the template first: views would change the session, and the template
#: (an empty relation) has no file metadata columns
_NOT_PROBED = frozenset(
    {
        "createTempView", "createOrReplaceTempView", "createGlobalTempView", "createOrReplaceGlobalTempView",
        "registerTempTable", "observe", "metadataColumn",
    }
)  # fmt: skip


def _same_on_template(method: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    """Call a PySpark method of the template with the user's arguments, so that a wrong argument
    gets PySpark's or Spark's own error before statestream says the method is not supported yet.
    Skipped when an argument is a statestream object (PySpark cannot take it)."""
    if any(type(a).__module__.startswith("statestream") for a in (*args, *kwargs.values())):
        return
    method(*args, **kwargs)


def _batch_relation(other: Any) -> L.BatchRelation:
    """A PySpark batch DataFrame as a leaf of a streaming plan (anything else is PySpark's type error)."""
    from pyspark.sql import DataFrame as SparkDataFrame

    if not isinstance(other, SparkDataFrame):
        msg = f"'{type(other).__name__}' object has no attribute '_jdf'"  # what PySpark's union raises
        raise AttributeError(msg)
    return L.BatchRelation(template=other)


def _join(
    left: L.LogicalPlan, right: L.LogicalPlan, on: Any, how: str | None, session: "StreamingSession", cross: bool = False
) -> "DataFrame":
    """The ``Join`` node of ``left.join(right, on, how)`` (or ``crossJoin``), whichever side is
    the stream. The template join runs first, so an unknown ``how``, a missing column or an
    ambiguous reference is Spark's own error, raised here as on Spark's engine."""
    from functools import reduce

    condition: JoinCondition | None = None
    conditions = on if isinstance(on, list) else [on] if on is not None else []
    if conditions and all(isinstance(c, Column) for c in conditions):
        condition = JoinCondition(reduce(lambda a, b: a & b, conditions), left, right)

    def transform(left_df: "SparkDataFrame", right_df: "SparkDataFrame") -> "SparkDataFrame":
        if cross:
            return left_df.crossJoin(right_df)
        if condition is not None:
            return left_df.join(right_df, condition.for_batch(left_df, right_df), how)
        return left_df.join(right_df, on, how)

    lt, rt = left.template, right.template
    if cross:
        template = lt.crossJoin(rt)
    elif condition is not None:
        template = lt.join(rt, condition.for_template(), how)
    else:
        template = lt.join(rt, on, how)
    node = L.Join(
        template=template,
        left=left,
        right=right,
        join_type="Cross" if cross else join_type_name(how),
        description="" if cross or not conditions else _describe(conditions),
        transform=transform,
    )
    return DataFrame(node, session)


def install_stream_on_the_right() -> None:
    """Let PySpark's own ``join``/``crossJoin`` of a static DataFrame take a statestream stream
    (``static_df.join(stream_df, "k", "right")``): they then build statestream's join, with the
    static side on the left. Idempotent; called by ``StreamingSession``.

    Why: Spark accepts a stream on the right of an inner or right outer join, and the user writes
    that join on the static DataFrame, whose method is PySpark's; a statestream DataFrame has no
    JVM plan for it to read. The methods are wrapped, not replaced: any other argument goes to
    PySpark's original."""
    try:
        from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
    except ImportError:  # pragma: no cover - a PySpark without the classic DataFrame module
        return

    def reflected(original: Callable[..., Any], cross: bool) -> Callable[..., Any]:
        def method(self: Any, other: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(other, DataFrame):
                if cross:
                    return _join(_batch_relation(self), other._plan, None, None, other._session, cross=True)  # noqa: SLF001
                bound = _join_arguments(original, self, other, args, kwargs)
                return _join(_batch_relation(self), other._plan, bound["on"], bound["how"], other._session)  # noqa: SLF001
            return original(self, other, *args, **kwargs)

        method.__name__ = original.__name__
        method.__qualname__ = original.__qualname__
        method.__doc__ = original.__doc__
        method.__wrapped__ = original  # type: ignore[attr-defined]
        method._statestream_reflected = True  # type: ignore[attr-defined]  # noqa: SLF001
        return method

    for name, cross in (("join", False), ("crossJoin", True)):
        original = getattr(ClassicDataFrame, name)
        if not getattr(original, "_statestream_reflected", False):
            setattr(ClassicDataFrame, name, reflected(original, cross))


def _join_arguments(original: Callable[..., Any], self: Any, other: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """``on`` and ``how`` of a call to PySpark's ``join``, as its signature binds them."""
    import inspect

    bound = inspect.signature(original).bind(self, other, *args, **kwargs)
    bound.apply_defaults()
    return {"on": bound.arguments.get("on"), "how": bound.arguments.get("how")}


@hands_over
class DataFrame:
    """A streaming DataFrame of statestream (``isStreaming`` is always true): PySpark's
    ``DataFrame`` methods build the query; ``writeStream`` runs it.

    Examples
    --------
    >>> ss = StreamingSession(spark)
    >>> ms = ss.memoryStream("a INT")
    >>> ms.add_data([(1,), (2,), (3,)])
    0
    >>> df = ms.toDF().where(F.col("a") > 1).withColumn("b", F.col("a") * 10)
    >>> df
    DataFrame[a: int, b: int]
    >>> q = df.writeStream.format("memory").queryName("dataframe_class").start()
    >>> q.processAllAvailable()
    >>> sorted(spark.table("dataframe_class").collect())
    [Row(a=2, b=20), Row(a=3, b=30)]
    >>> q.stop()
    """

    def __init__(self, plan: L.LogicalPlan, session: "StreamingSession") -> None:
        self._plan = plan
        self._session = session

    # ------------------------------------------------------------------ properties
    @property
    def isStreaming(self) -> bool:  # noqa: N802 - PySpark's name
        """Always ``True``: a statestream DataFrame is a stream (PySpark's ``DataFrame.isStreaming``)."""
        return True

    @property
    def schema(self) -> "StructType":
        """The stream's schema, as PySpark's ``DataFrame.schema`` (a ``StructType``, known before the query starts)."""
        return self._plan.schema

    @property
    def columns(self) -> list[str]:
        """The stream's column names, in order, as PySpark's ``DataFrame.columns``."""
        return list(self._plan.schema.names)

    @property
    def dtypes(self) -> list[tuple[str, str]]:
        """The stream's columns as ``(name, type)`` pairs of simple type strings, as PySpark's ``DataFrame.dtypes``."""
        return [(f.name, f.dataType.simpleString()) for f in self._plan.schema.fields]

    @property
    def sparkSession(self):  # noqa: N802 - PySpark's name
        """The ``SparkSession`` the stream was read with (the wrapped one, not the ``StreamingSession``)."""
        return self._session.sparkSession

    def printSchema(self) -> None:  # noqa: N802 - PySpark's name
        """Print the stream's schema as a tree, as PySpark's ``DataFrame.printSchema``."""
        self._plan.template.printSchema()

    def __getitem__(self, item: Any) -> Column:
        if isinstance(item, str):
            self._plan.template[item]  # raises Spark's error for an unknown column
            return self._bound_name(item)
        if isinstance(item, Column):
            return self.filter(item)  # type: ignore[return-value]
        if isinstance(item, int):
            return F.col(self.columns[item])
        raise TypeError(f"unexpected item type: {type(item)}")

    def __getattr__(self, name: str) -> Column:
        if name == "_jdf":
            self._refuse_jdf()
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self.columns:
            if _is_pyspark_member("DataFrame", name):
                # a member a future PySpark added: say so by name (an AttributeError too, for hasattr)
                raise not_supported_yet_attribute("DataFrame", name)
            msg = f"'DataFrame' object has no attribute '{name}'"
            raise AttributeError(msg)
        return self._bound_name(name)

    def _bound_name(self, name: str) -> Column:
        """``df.name`` / ``df["name"]``: a name reference (each micro-batch resolves it on its own
        DataFrame) that remembers it came from this DataFrame. Why: in Spark such a column is this
        DataFrame's attribute, so used after ``withWatermark`` it is the column *without* the
        event-time marker; the aggregation's template binds it back (``plan/bindings.py``)."""
        return remember_binding(F.col(name), self._plan, name)

    @staticmethod
    def _refuse_jdf() -> None:
        """``_jdf`` is what PySpark's own methods read from their DataFrame argument, as in
        ``batch_df.union(stream_df)``; a statestream DataFrame has no JVM streaming plan to give.

        Why: for ``batch.union(stream)`` Spark builds the union and refuses it at ``start()``
        with ``_LEGACY_ERROR_TEMP_3102``; PySpark's ``union`` here would only fail on a missing
        attribute, so the same error (class and text) is raised now, when the union is built.
        Any other PySpark method gets an ``AttributeError`` that says what to do instead."""
        import sys

        caller = sys._getframe(2).f_code.co_name  # noqa: SLF001 - the PySpark method reading other._jdf
        if caller in ("union", "unionAll", "unionByName"):
            raise union_stream_batch_error()
        msg = (
            f"a statestream DataFrame cannot be passed to PySpark's DataFrame.{caller}(): it has no JVM "
            "plan; call the method on the statestream DataFrame instead (stream_df.<method>(batch_df))"
        )
        raise AttributeError(msg)

    # ------------------------------------------------------------------ helpers
    def _stateless(
        self, op: str, description: str, fn: Callable[["SparkDataFrame"], "SparkDataFrame"], columns=()
    ) -> "DataFrame":
        template = fn(self._plan.template)
        node = L.Stateless(
            template=template, child=self._plan, op=op, description=description, transform=fn, columns=tuple(columns)
        )
        return DataFrame(node, self._session)

    def _bound_to_positions(self, cols: list[Any]) -> Callable[["SparkDataFrame"], list[Any]]:
        """``cols`` as each DataFrame of this node's input (template or batch) needs them: a
        column taken from a DataFrame below a join (``events.k``) whose name both join sides
        have is bound to that DataFrame's attribute by its position, as Spark binds it
        (``plan/bindings.py``); every other column is used as given."""
        refs = [ambiguous_references(c, self._plan) if isinstance(c, Column) else () for c in cols]
        if not any(refs):
            return lambda df: cols
        return lambda df: [bind_positions(c, r, df) if r else c for c, r in zip(cols, refs)]

    # ------------------------------------------------------------------ stateless
    def select(self, *cols: Any) -> "DataFrame":
        """Project the stream onto columns or expressions, as PySpark's ``DataFrame.select``: a
        stateless step, run on each micro-batch's rows.

        Parameters
        ----------
        *cols : str or Column
            Column names, ``"*"``, or column expressions (a single list of them is taken too).

        Returns
        -------
        DataFrame
            The projected stream.
        """
        cs = _cols(cols)
        bound = self._bound_to_positions(cs)
        return self._stateless("Project", _describe(cs), lambda df: df.select(*bound(df)), [c for c in cs if isinstance(c, Column)])

    def selectExpr(self, *exprs: Any) -> "DataFrame":  # noqa: N802
        """Project the stream onto SQL expressions, as PySpark's ``DataFrame.selectExpr``: a stateless step, run on each micro-batch's rows."""
        es = _cols(exprs)
        return self._stateless("Project", _describe(es), lambda df: df.selectExpr(*es), [F.expr(e) for e in es])

    def filter(self, condition: Any) -> "DataFrame":
        """Keep the rows that meet a condition, as PySpark's ``DataFrame.filter`` (also ``where``): a
        stateless step, run on each micro-batch's rows.

        Parameters
        ----------
        condition : Column or str
            A boolean column, or a SQL expression string.

        Returns
        -------
        DataFrame
            The filtered stream.
        """
        cond = F.expr(condition) if isinstance(condition, str) else condition
        bound = self._bound_to_positions([cond])
        return self._stateless("Filter", _describe([cond]).strip("[]"), lambda df: df.filter(bound(df)[0]), [cond])

    where = filter  # noqa: A003 - PySpark's name

    def withColumn(self, colName: str, col: Column) -> "DataFrame":  # noqa: N802,N803
        """Add or replace a column, as PySpark's ``DataFrame.withColumn``: a stateless step, run on each micro-batch's rows."""
        bound = self._bound_to_positions([col])
        return self._stateless(
            "Project", f"[*, {_describe([col]).strip('[]')} AS {colName}]", lambda df: df.withColumn(colName, bound(df)[0]), [col]
        )

    def withColumns(self, *colsMap: dict[str, Column]) -> "DataFrame":  # noqa: N802,N803
        """Add or replace columns given as a ``{name: Column}`` dict, as PySpark's ``DataFrame.withColumns``: a stateless step, run on each micro-batch's rows."""
        mapping = dict(colsMap[0]) if colsMap else {}
        names, values = list(mapping), list(mapping.values())
        bound = self._bound_to_positions(values)
        return self._stateless("Project", _describe(values), lambda df: df.withColumns(dict(zip(names, bound(df)))), values)

    def withColumnRenamed(self, existing: str, new: str) -> "DataFrame":  # noqa: N802
        """Rename one column, as PySpark's ``DataFrame.withColumnRenamed``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Project", f"[{existing} AS {new}]", lambda df: df.withColumnRenamed(existing, new))

    def withColumnsRenamed(self, colsMap: dict[str, str]) -> "DataFrame":  # noqa: N802,N803
        """Rename columns given as an ``{existing: new}`` dict, as PySpark's ``DataFrame.withColumnsRenamed``: a stateless step, run on each micro-batch's rows."""
        mapping = dict(colsMap)
        return self._stateless("Project", str(mapping), lambda df: df.withColumnsRenamed(mapping))

    def drop(self, *cols: Any) -> "DataFrame":
        """Drop columns (names or columns; an unknown name is ignored, as in Spark), as PySpark's ``DataFrame.drop``: a stateless step, run on each micro-batch's rows."""
        cs = list(cols)
        bound = self._bound_to_positions(cs)
        return self._stateless("Project", f"drop {_describe(cs)}", lambda df: df.drop(*bound(df)))

    def toDF(self, *cols: str) -> "DataFrame":  # noqa: N802
        """Rename every column, in order, as PySpark's ``DataFrame.toDF``: a stateless step, run on each micro-batch's rows."""
        names = list(cols)
        return self._stateless("Project", _describe(names), lambda df: df.toDF(*names))

    def alias(self, alias: str) -> "DataFrame":
        """The stream under an alias (for ``alias.column`` references, as in a self-join), as PySpark's ``DataFrame.alias``."""
        return self._stateless("SubqueryAlias", alias, lambda df: df.alias(alias))

    def sample(self, *args: Any, **kwargs: Any) -> "DataFrame":
        """A random sample of the rows, as PySpark's ``DataFrame.sample``: built (PySpark's argument checks), then refused at ``start()``, as Spark refuses sampling a stream."""
        return self._stateless("Sample", "", lambda df: df.sample(*args, **kwargs))

    def offset(self, num: int) -> "DataFrame":
        """Skip the first ``num`` rows, as PySpark's ``DataFrame.offset``: built, then refused at ``start()``, as Spark refuses an offset on a stream."""
        return self._stateless("Offset", str(num), lambda df: df.offset(num))

    def union(self, other: "DataFrame") -> "DataFrame":
        """The rows of both DataFrames, matched by position, as PySpark's ``DataFrame.union`` (also
        ``unionAll``); both may be streams. A batch DataFrame is accepted here and, as in Spark,
        the query is refused at ``start()``.

        Parameters
        ----------
        other : DataFrame
            A DataFrame with as many columns, of compatible types.

        Returns
        -------
        DataFrame
            The union stream.
        """
        return self._union(other, by_name=False)

    unionAll = union  # noqa: N815 - PySpark's name

    def unionByName(self, other: "DataFrame", allowMissingColumns: bool = False) -> "DataFrame":  # noqa: N802, N803 - PySpark's names
        """The rows of both DataFrames, matched by column name, as PySpark's ``DataFrame.unionByName``;
        ``allowMissingColumns=True`` fills a column one side lacks with nulls.
        """
        return self._union(other, by_name=True, allow_missing=allowMissingColumns)

    def _union(self, other: Any, by_name: bool, allow_missing: bool = False) -> "DataFrame":
        """A batch DataFrame on the other side becomes a ``BatchRelation``: like Spark, the union
        is built (schema checks happen now) and refused by the analysis at ``start()``."""
        other_plan = other._plan if isinstance(other, DataFrame) else _batch_relation(other)  # noqa: SLF001 - another statestream DataFrame's plan
        if by_name:
            template = self._plan.template.unionByName(other_plan.template, allowMissingColumns=allow_missing)
        else:
            template = self._plan.template.union(other_plan.template)
        node = L.Union(template=template, inputs=(self._plan, other_plan), by_name=by_name, allow_missing=allow_missing)
        return DataFrame(node, self._session)

    # ------------------------------------------------------------------ joins
    def join(self, other: Any, on: Any = None, how: str | None = None) -> "DataFrame":
        """PySpark's ``join``: ``other`` is a static (PySpark batch) DataFrame of the same Spark
        application, or another statestream stream. ``on`` is a column name, a list of names, a
        ``Column`` condition or a list of them; ``how`` any of PySpark's join types.

        A stream-static join keeps no state: every micro-batch joins its rows with the static
        DataFrame, evaluated again in that batch, as Spark's engine does. Which join types Spark
        accepts with which side streaming is checked at ``start()``, with Spark's errors; a join
        of two streams is not supported yet (``NotSupportedYetError`` from ``start()``)."""
        other_plan = other._plan if isinstance(other, DataFrame) else _batch_relation(other)  # noqa: SLF001 - another statestream DataFrame's plan
        return _join(self._plan, other_plan, on, how, self._session)

    def crossJoin(self, other: Any) -> "DataFrame":  # noqa: N802 - PySpark's name
        """PySpark's ``crossJoin``: the Cartesian product of each micro-batch with ``other``."""
        other_plan = other._plan if isinstance(other, DataFrame) else _batch_relation(other)  # noqa: SLF001 - another statestream DataFrame's plan
        return _join(self._plan, other_plan, None, None, self._session, cross=True)

    def observe(self, observation: Any, *exprs: Column) -> "DataFrame":
        """Named metrics of each batch, in the progress' ``observedMetrics`` (Spark's
        ``CollectMetrics``). An ``Observation`` object is refused: on a stream Spark reports
        the metrics through the progress, by name."""
        from pyspark.sql import Observation

        if isinstance(observation, Observation):
            raise not_supported_yet("DataFrame", "observe", "observe an Observation object on a stream; give a name and read observedMetrics")
        template = self._plan.template.observe(observation, *exprs)  # Spark's checks of the metrics
        node = L.CollectMetrics(template=template, child=self._plan, name=str(observation), exprs=tuple(exprs))
        return DataFrame(node, self._session)

    # ------------------------------------------------------------------ views and SQL
    def createTempView(self, name: str) -> None:  # noqa: N802
        """Register the stream as a temporary view of this ``StreamingSession``, as PySpark's
        ``DataFrame.createTempView``: ``ss.table(name)``, ``ss.readStream.table(name)`` and
        ``ss.sql`` over it give the stream. Spark's error when the view exists.
        """
        self._session._register_view(name, self, replace=False)  # noqa: SLF001

    def createOrReplaceTempView(self, name: str) -> None:  # noqa: N802
        """Register the stream as a temporary view of this ``StreamingSession``, replacing one of the same
        name, as PySpark's ``DataFrame.createOrReplaceTempView`` (also ``registerTempTable``).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ss.memoryStream("a INT").toDF().createOrReplaceTempView("df_view")
        >>> ss.table("df_view").isStreaming
        True
        """
        self._session._register_view(name, self, replace=True)  # noqa: SLF001

    registerTempTable = createOrReplaceTempView  # noqa: N815 - PySpark's name

    def createGlobalTempView(self, name: str) -> None:  # noqa: N802
        """Register the stream as ``global_temp.<name>``, shared by every ``StreamingSession`` of the
        process, as PySpark's ``DataFrame.createGlobalTempView``. Spark's error when the view exists.
        """
        self._session._register_view(name, self, replace=False, is_global=True)  # noqa: SLF001

    def createOrReplaceGlobalTempView(self, name: str) -> None:  # noqa: N802
        """Register the stream as ``global_temp.<name>``, replacing one of the same name, as PySpark's
        ``DataFrame.createOrReplaceGlobalTempView``.
        """
        self._session._register_view(name, self, replace=True, is_global=True)  # noqa: SLF001

    def _sql_over_view(self, view: str, query: str) -> "DataFrame":
        """``ss.sql(query)`` reading this stream as ``view`` (``plan/sql.py``)."""
        template = ClassicSparkSession.sql(self.sparkSession, query)  # Spark's analysis over the view's template
        check_stateless_above_view(template, view, query)
        node = L.Stateless(
            template=template, child=self._plan, op="SQL", description=query, transform=per_batch_sql(view, query, self._plan.template)
        )
        return DataFrame(node, self._session)

    def coalesce(self, numPartitions: int) -> "DataFrame":  # noqa: N803
        """Each micro-batch in at most ``numPartitions`` partitions, as PySpark's ``DataFrame.coalesce``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Coalesce", str(numPartitions), lambda df: df.coalesce(numPartitions))

    def repartition(self, numPartitions: Any, *cols: Any) -> "DataFrame":  # noqa: N803
        """Each micro-batch repartitioned (by number and/or columns), as PySpark's ``DataFrame.repartition``: a stateless step, run on each micro-batch's rows."""
        if isinstance(numPartitions, int) and not cols:  # Spark's text for the exchange
            description = f"RoundRobinPartitioning({numPartitions}), REPARTITION_BY_NUM"
        elif isinstance(numPartitions, int) and all(isinstance(c, str) for c in cols):
            description = f"hashpartitioning({', '.join(cols)}, {numPartitions}), REPARTITION_BY_NUM"
        else:
            description = "RoundRobinPartitioning" if not cols else _describe(list(cols))
        return self._stateless("Exchange", description, lambda df: df.repartition(numPartitions, *cols))

    def repartitionByRange(self, numPartitions: Any, *cols: Any) -> "DataFrame":  # noqa: N802,N803
        """Each micro-batch range-partitioned by the columns, as PySpark's ``DataFrame.repartitionByRange``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Exchange", "rangepartitioning", lambda df: df.repartitionByRange(numPartitions, *cols))

    def repartitionById(self, numPartitions: int, partitionIdCol: Any) -> "DataFrame":  # noqa: N802,N803
        """Each micro-batch partitioned by a column that holds the partition id, as PySpark's ``DataFrame.repartitionById``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Exchange", "directpartitioning", lambda df: df.repartitionById(numPartitions, partitionIdCol))

    def hint(self, name: str, *parameters: Any) -> "DataFrame":
        """The stream with a hint for Spark's planner (``broadcast``, ...), as PySpark's ``DataFrame.hint``."""
        return self._stateless("ResolvedHint", name, lambda df: df.hint(name, *parameters))

    def transform(self, func: Callable[..., "DataFrame"], *args: Any, **kwargs: Any) -> "DataFrame":
        """PySpark's ``transform``: ``func(self, *args, **kwargs)``, which must give a DataFrame."""
        result = func(self, *args, **kwargs)
        if not isinstance(result, DataFrame):
            raise TypeError(f"[TRANSFORM_FUNCTION_MUST_RETURN_DATAFRAME] Func returned an instance of type [{type(result).__name__}], should have been DataFrame.")
        return result

    @property
    def na(self) -> "DataFrameNaFunctions":
        """The ``DataFrameNaFunctions`` of the stream (``drop``, ``fill``, ``replace``), as PySpark's ``DataFrame.na``."""
        return DataFrameNaFunctions(self)

    def dropna(self, how: str = "any", thresh: int | None = None, subset: Any = None) -> "DataFrame":
        """Drop the rows with nulls, as PySpark's ``DataFrame.dropna``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Filter", f"dropna({how})", lambda df: df.dropna(how, thresh, subset))

    def fillna(self, value: Any, subset: Any = None) -> "DataFrame":
        """Replace nulls with a value, as PySpark's ``DataFrame.fillna``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Project", f"fillna({value!r})", lambda df: df.fillna(value, subset))

    def replace(self, to_replace: Any, value: Any = _NoValue, subset: Any = None) -> "DataFrame":
        """PySpark's ``replace``: ``value=None`` replaces with null; ``value`` left out is
        allowed only with a dict (PySpark's own ``_NoValue`` marker tells the two apart)."""
        return self._stateless("Project", f"replace({to_replace!r})", lambda df: df.replace(to_replace, value, subset))

    def mapInPandas(self, func: Callable, schema: Any, barrier: bool = False, profile: Any = None) -> "DataFrame":  # noqa: N802
        """Transform each micro-batch with ``func``, an iterator of pandas DataFrames to an iterator of
        pandas DataFrames, as PySpark's ``DataFrame.mapInPandas`` (a stateless step).
        """
        return self._stateless("MapInPandas", getattr(func, "__name__", "func"), lambda df: df.mapInPandas(func, schema, barrier, profile))

    def mapInArrow(self, func: Callable, schema: Any, barrier: bool = False, profile: Any = None) -> "DataFrame":  # noqa: N802
        """Transform each micro-batch with ``func``, an iterator of ``pyarrow.RecordBatch`` to an
        iterator of them, as PySpark's ``DataFrame.mapInArrow`` (a stateless step).
        """
        return self._stateless("MapInArrow", getattr(func, "__name__", "func"), lambda df: df.mapInArrow(func, schema, barrier, profile))

    def unpivot(self, ids: Any, values: Any, variableColumnName: str, valueColumnName: str) -> "DataFrame":  # noqa: N803
        """Turn value columns into rows of ``(variable, value)``; also ``melt``, as PySpark's ``DataFrame.unpivot``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Expand", "unpivot", lambda df: df.unpivot(ids, values, variableColumnName, valueColumnName))

    melt = unpivot

    def to(self, schema: "StructType") -> "DataFrame":
        """The columns reconciled to ``schema`` (by name, with casts), as PySpark's ``DataFrame.to``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Project", schema.simpleString(), lambda df: df.to(schema))

    def withMetadata(self, columnName: str, metadata: dict[str, Any]) -> "DataFrame":  # noqa: N802,N803
        """The stream with new metadata on one column, as PySpark's ``DataFrame.withMetadata``."""
        return self._stateless("Project", f"[{columnName}]", lambda df: df.withMetadata(columnName, metadata))

    def sampleBy(self, col: Any, fractions: dict[Any, float], seed: int | None = None) -> "DataFrame":  # noqa: N802
        """A stratified sample of each micro-batch's rows (a fraction per value of ``col``), as PySpark's ``DataFrame.sampleBy``: a stateless step, run on each micro-batch's rows."""
        return self._stateless("Filter", "sampleBy", lambda df: df.sampleBy(col, fractions, seed))

    def randomSplit(self, weights: list[float], seed: int | None = None) -> list["DataFrame"]:  # noqa: N802
        """PySpark's ``randomSplit``: one stream per weight (each batch split with the same seed)."""
        import random

        seed = seed if seed is not None else random.randint(0, 2**31 - 1)
        n = len(self._plan.template.randomSplit(weights, seed))  # PySpark's own argument checks

        def split(i: int) -> Callable[["SparkDataFrame"], "SparkDataFrame"]:
            return lambda df: df.randomSplit(weights, seed)[i]

        return [self._stateless("Sample", f"randomSplit[{i}]", split(i)) for i in range(n)]

    def colRegex(self, colName: str) -> Column:  # noqa: N802,N803
        """The columns whose names match the regex (a back-quoted name), as PySpark's ``DataFrame.colRegex``."""
        return self._plan.template.colRegex(colName)

    def isLocal(self) -> bool:  # noqa: N802
        """``False``: a stream is never local (PySpark's ``DataFrame.isLocal``)."""
        return False

    def sameSemantics(self, other: Any) -> bool:  # noqa: N802
        """Whether the two DataFrames' plans do the same, as PySpark's ``DataFrame.sameSemantics``;
        statestream compares the two streams' templates (Spark's per-batch plans over empty
        input), not its own streaming plans.
        """
        plan = other._plan.template if isinstance(other, DataFrame) else other  # noqa: SLF001
        return self._plan.template.sameSemantics(plan)

    def semanticHash(self) -> int:  # noqa: N802
        """The semantic hash of the stream's Spark plan template (per-batch plan), as PySpark's ``DataFrame.semanticHash``."""
        return self._plan.template.semanticHash()

    @property
    def storageLevel(self) -> Any:  # noqa: N802
        """The storage level of the stream's template, as PySpark's ``DataFrame.storageLevel``: a stream is never cached."""
        return self._plan.template.storageLevel

    @property
    def stat(self) -> "DataFrameStatFunctions":
        """The ``DataFrameStatFunctions`` of the stream, as PySpark's ``DataFrame.stat``."""
        return DataFrameStatFunctions(self)

    @property
    def plot(self) -> Any:
        """PySpark's plot accessor; a plot collects the DataFrame, so on a stream it is Spark's batch-action error."""
        from pyspark.sql.plot import PySparkPlotAccessor

        return PySparkPlotAccessor(self)  # type: ignore[arg-type]  # its plots collect the DataFrame: Spark's batch-action error

    @property
    def executionInfo(self) -> Any:  # noqa: N802
        """PySpark's ``DataFrame.executionInfo`` (a Spark Connect member): PySpark Classic's own error."""
        return self._plan.template.executionInfo  # PySpark Classic's own error (a Spark Connect member)

    def unpersist(self, blocking: bool = False) -> "DataFrame":
        """Return the stream unchanged: nothing of a stream is cached (Spark's ``cache()`` refuses one)."""
        return self  # nothing is cached (Spark's cache() refuses a stream)

    # ------------------------------------------------------------------ watermark
    def withWatermark(self, eventTime: str, delayThreshold: str) -> "DataFrame":  # noqa: N802,N803
        """Spark's ``withWatermark``: ``eventTime`` must be a timestamp column; the delay is an
        interval string."""
        template = self._plan.template
        field = template.select(eventTime).schema.fields[0]  # Spark's error for an unknown column
        if not isinstance(field.dataType, (TimestampType, TimestampNTZType)):
            raise event_time_not_timestamp_error(field.name, field.dataType.simpleString().upper())
        # a what-if replay (``statestream watermark replay``) runs the query with another delay
        delay = self.sparkSession.conf.get(REPLAY_DELAY_CONF, None) or delayThreshold
        delay_ms = parse_watermark_delay_ms(delay)
        # Spark's EventTimeWatermark keeps its input's attributes (ids) and changes only their
        # metadata, so a column taken from the DataFrame below still resolves, unmarked, above it
        marked = mark_event_time_keeping_ids(template, eventTime, delay_ms)
        node = L.EventTimeWatermark(
            template=marked if marked is not None else mark_event_time(template, field.name, delay_ms),
            child=self._plan,
            column=field.name,
            delay_ms=delay_ms,
            delay_text=str(delay),
        )
        return DataFrame(node, self._session)

    # ------------------------------------------------------------------ stateful
    def _refuse_join_side_names(self, cols: list[Any], member: str) -> None:
        """A stateful operation replays its columns by name in every batch, so a column taken
        from one side of a join whose name both sides have cannot be told apart there yet."""
        for c in cols:
            if isinstance(c, Column) and ambiguous_references(c, self._plan):
                raise not_supported_yet(
                    "DataFrame",
                    member,
                    f"{_describe([c])} names a column that both sides of the join have; select or rename it first",
                )

    def groupBy(self, *cols: Any) -> "GroupedData":  # noqa: N802
        """Group the stream by columns for an aggregation, as PySpark's ``DataFrame.groupBy`` (also
        ``groupby``); the aggregation keeps its state per group across micro-batches.

        Parameters
        ----------
        *cols : str or Column
            The grouping columns (``F.window(...)`` too).

        Returns
        -------
        GroupedData
            Its ``agg``, ``count``, ``sum``, ... give the aggregated stream.

        Raises
        ------
        NotSupportedYetError
            For a column taken from one side of a join whose name both sides have.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("k STRING, v INT")
        >>> ms.add_data([("a", 1), ("a", 2), ("b", 5)])
        0
        >>> sums = ms.toDF().groupBy("k").agg(F.sum("v").alias("total"))
        >>> q = sums.writeStream.outputMode("update").format("memory").queryName("df_group_by").start()
        >>> q.processAllAvailable()
        >>> sorted(spark.table("df_group_by").collect())
        [Row(k='a', total=3), Row(k='b', total=5)]
        >>> q.stop()
        """
        keys = [_col(c) for c in _cols(cols)]
        self._refuse_join_side_names(keys, "groupBy")
        return GroupedData(self, keys)

    groupby = groupBy

    def cube(self, *cols: Any) -> "GroupedData":
        """Spark's ``cube``: one aggregation over every subset of the columns (an ``Expand``
        below the aggregation); the state key gains Spark's ``spark_grouping_id``."""
        keys = [_col(c) for c in _cols(cols)]
        self._refuse_join_side_names(keys, "cube")
        return GroupedData(self, keys, grouping_sets="cube")

    def rollup(self, *cols: Any) -> "GroupedData":
        """Spark's ``rollup``: one aggregation over every prefix of the columns."""
        keys = [_col(c) for c in _cols(cols)]
        self._refuse_join_side_names(keys, "rollup")
        return GroupedData(self, keys, grouping_sets="rollup")

    def agg(self, *exprs: Any) -> "DataFrame":
        """Aggregate the whole stream (no grouping columns), as PySpark's ``DataFrame.agg``: ``groupBy().agg(...)``."""
        return self.groupBy().agg(*exprs)

    def count(self) -> Any:
        """PySpark's ``DataFrame.count`` runs the query now, so on a stream it is Spark's error:
        count with ``groupBy().count()`` and a ``writeStream`` instead.

        Raises
        ------
        AnalysisException
            Spark's error of a batch action on a streaming DataFrame.
        """
        raise self._batch_action_error()

    def orderBy(self, *cols: Any, **kwargs: Any) -> "DataFrame":  # noqa: N802
        """Sort the stream, as PySpark's ``DataFrame.orderBy`` (also ``sort``): as in Spark, allowed
        only after an aggregation in complete output mode (checked at ``start()``).
        """
        cs = _cols(cols)
        fn = lambda df: df.orderBy(*cs, **kwargs)  # noqa: E731
        node = L.Sort(template=fn(self._plan.template), child=self._plan, transform=fn, description=_describe(cs))
        return DataFrame(node, self._session)

    sort = orderBy

    def sortWithinPartitions(self, *cols: Any, **kwargs: Any) -> "DataFrame":  # noqa: N802
        """Sort the stream as ``orderBy`` does (a total sort, refused where ``orderBy`` is); PySpark's
        ``DataFrame.sortWithinPartitions`` sorts within each partition only."""
        return self.orderBy(*cols, **kwargs)

    def limit(self, num: int) -> "DataFrame":
        """The first ``num`` rows of the stream, as PySpark's ``DataFrame.limit``; as in Spark, refused at ``start()`` in update output mode."""
        return DataFrame(L.Limit(template=self._plan.template.limit(num), child=self._plan, n=int(num)), self._session)

    def dropDuplicates(self, subset: list[str] | None = None) -> "DataFrame":  # noqa: N802
        # PySpark's own checks and resolution first (an empty list means "no key", as in Spark)
        """Drop rows seen before (in any earlier micro-batch too), as PySpark's
        ``DataFrame.dropDuplicates`` (also ``drop_duplicates``): the keys seen are kept as state,
        and with a watermark on a key column Spark's eviction of old keys applies.

        Parameters
        ----------
        subset : list of str, optional
            The columns that make a row a duplicate; all columns when omitted.
        """
        template = self._plan.template.dropDuplicates(subset)
        return DataFrame(L.Deduplicate(template=template, child=self._plan, keys=self._dedup_keys(template, subset)), self._session)

    drop_duplicates = dropDuplicates

    def distinct(self) -> "DataFrame":
        """Drop rows seen before, over all columns, as PySpark's ``DataFrame.distinct`` (``dropDuplicates()``)."""
        return self.dropDuplicates()

    def dropDuplicatesWithinWatermark(self, subset: list[str] | None = None) -> "DataFrame":  # noqa: N802
        # the template is a batch DataFrame, on which Spark refuses dropDuplicatesWithinWatermark
        """Drop rows whose key was seen within the watermark delay, as PySpark's
        ``DataFrame.dropDuplicatesWithinWatermark`` (the stream needs a ``withWatermark``).
        """
        try:
            template = self._plan.template.dropDuplicates(subset)
        except AnalysisException as exc:
            # Spark's batch dropDuplicates refuses map keys, its DeduplicateWithinWatermark takes
            # them: the input's template stands in (the same columns), keys resolved in Python
            if exc.getCondition() != "UNSUPPORTED_FEATURE.SET_OPERATION_ON_MAP_TYPE":
                raise
            template = self._plan.template
        node = L.Deduplicate(template=template, child=self._plan, keys=self._dedup_keys(template, subset), within_watermark=True)
        return DataFrame(node, self._session)

    def _dedup_keys(self, template: "SparkDataFrame", subset: list[str] | None) -> tuple[str, ...]:
        """The key columns as Spark resolved them (case-insensitively, in Spark's order); an
        empty tuple stands for all columns."""
        resolved = analysed_key_names(template)
        if resolved:
            return resolved
        return tuple(subset) if subset else tuple(self.columns)

    # ------------------------------------------------------------------ output
    @property
    def writeStream(self) -> "DataStreamWriter":  # noqa: N802
        """The ``DataStreamWriter`` that starts this stream's query, as PySpark's ``DataFrame.writeStream``.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,)])
        0
        >>> q = ms.toDF().writeStream.format("memory").queryName("df_write_stream").start()
        >>> q.processAllAvailable()
        >>> spark.table("df_write_stream").collect()
        [Row(a=1)]
        >>> q.stop()
        """
        return DataStreamWriter(self._plan, self._session)

    def explain(self, extended: bool | str | None = None, mode: str | None = None) -> None:
        """Print the physical plan in Spark's shape (as Spark does for a streaming DataFrame
        that has not started: state info with an unknown checkpoint)."""
        if isinstance(extended, str):  # PySpark: explain("formatted") is the mode
            extended, mode = None, extended
        print(self._explain_string(extended=bool(extended), mode=mode))  # noqa: T201 - explain prints, like PySpark

    def _explain_string(self, extended: bool = False, mode: str | None = None) -> str:
        schema_line = ", ".join(f"{f.name}: {f.dataType.simpleString()}" for f in self.schema.fields)
        outline = logical_tree_string(self._plan)
        logical: str | dict[str, str] = outline
        if (mode or ("extended" if extended else "simple")).lower() in ("extended", "cost"):
            # Spark's own logical plans, section by section where they can be composed
            # (statestream's outline for the others)
            composed = logical_sections(self._plan, optimized_plan(self._plan)) or {}
            logical = {key: composed.get(key, outline) for key in ("parsed", "analyzed", "optimized", "cost")}
        return explain_string(
            plan_for_explain(self._plan, self.sparkSession, "append"),
            extended=extended,
            logical=logical,
            mode=mode,
            schema_line=schema_line,
        )

    # ------------------------------------------------------------------ batch actions are errors
    def _batch_action_error(self) -> Exception:
        return check_batch_action_on_stream()

    def collect(self) -> Any:
        """PySpark's ``DataFrame.collect`` runs the query now, so on a stream it is Spark's error:
        use ``writeStream`` (the ``memory`` sink, or ``foreachBatch``) instead.

        Raises
        ------
        AnalysisException
            Spark's error of a batch action on a streaming DataFrame.
        """
        raise self._batch_action_error()

    def _batch_action(name: str) -> Callable[..., Any]:  # type: ignore[misc]  # noqa: N805
        def method(self: "DataFrame", *args: Any, **kwargs: Any) -> Any:
            raise self._batch_action_error()

        method.__name__ = name
        method.__doc__ = f"``{name}`` runs the query now, so on a stream it is Spark's error: use ``writeStream``."
        return method

    for _name in (
        "approxQuantile", "cache", "checkpoint", "corr", "cov", "foreach", "foreachPartition", "inputFiles",
        "isEmpty", "localCheckpoint", "persist", "tail", "toArrow", "toJSON", "toLocalIterator",
    ):  # fmt: skip
        locals()[_name] = _batch_action(_name)
    del _name, _batch_action

    @property
    def rdd(self) -> Any:
        """Spark's error of a batch action on a streaming DataFrame (PySpark's ``DataFrame.rdd``)."""
        raise self._batch_action_error()

    @property
    def write(self) -> Any:
        """Spark's error (``write`` cannot be called on a streaming DataFrame): use ``writeStream``."""
        raise call_on_streaming_dataset_unsupported_error("write")

    def writeTo(self, table: str) -> Any:  # noqa: N802
        """Spark's error (``writeTo`` cannot be called on a streaming DataFrame): use ``writeStream.toTable``."""
        raise call_on_streaming_dataset_unsupported_error("writeTo")

    def mergeInto(self, table: str, condition: Any) -> Any:  # noqa: N802
        """Spark's error (``mergeInto`` cannot be called on a streaming DataFrame)."""
        raise call_on_streaming_dataset_unsupported_error("mergeInto")

    def crosstab(self, col1: str, col2: str) -> Any:
        """Spark's error: ``crosstab`` is a pivot, which Spark refuses on a stream."""
        raise pivot_on_stream_error()

    # ------------------------------------------------------------------ not yet
    #: PySpark methods Spark runs on streams that statestream does not (each raises
    #: ``NotSupportedYetError`` naming itself)
    NOT_YET = {
        "lateralJoin": "join the stream with a static DataFrame with join()",
        "exceptAll": "",
        "intersect": "",
        "intersectAll": "",
        "subtract": "",
        "describe": "compute the statistics with agg()",
        "summary": "compute the statistics with agg()",
        "freqItems": "",
        "groupingSets": "use cube() or rollup()",
        "metadataColumn": "",
        "exists": "",
        "scalar": "",
        "asTable": "",
        "transpose": "",
        "pandas_api": "",
    }

    def _not_yet(name: str, hint: str) -> Callable[..., Any]:  # type: ignore[misc]  # noqa: N805
        def method(self: "DataFrame", *args: Any, **kwargs: Any) -> Any:
            if name not in _NOT_PROBED:
                _same_on_template(getattr(self._plan.template, name), args, kwargs)  # Spark's own argument errors first
            raise not_supported_yet("DataFrame", name, hint)

        method.__name__ = name
        return method

    for _name, _hint in NOT_YET.items():
        if _name not in locals():
            locals()[_name] = _not_yet(_name, _hint)
    del _name, _hint, _not_yet

    def show(self, *args: Any, **kwargs: Any) -> Any:
        """Spark's error of a batch action on a streaming DataFrame: use the ``console`` sink instead."""
        raise self._batch_action_error()

    def toPandas(self) -> Any:  # noqa: N802
        """Spark's error of a batch action on a streaming DataFrame: ``foreachBatch`` gives each batch's DataFrame."""
        raise self._batch_action_error()

    def take(self, num: int) -> Any:
        """Spark's error of a batch action on a streaming DataFrame (PySpark's ``DataFrame.take``)."""
        raise self._batch_action_error()

    def first(self) -> Any:
        """Spark's error of a batch action on a streaming DataFrame (PySpark's ``DataFrame.first``)."""
        raise self._batch_action_error()

    def head(self, n: int | None = None) -> Any:
        """Spark's error of a batch action on a streaming DataFrame (PySpark's ``DataFrame.head``)."""
        raise self._batch_action_error()

    def __repr__(self) -> str:
        return "DataFrame[" + ", ".join(f"{n}: {t}" for n, t in self.dtypes) + "]"


def _with_finality_columns(node: L.Aggregate) -> L.AggregationFinality:
    """An aggregation built with ``FINALITY_CONF`` on: its DataFrame is the aggregation's
    columns then ``revision`` (long) and ``is_final`` (boolean), so that the user's code can
    select and filter them. The state step computes both (``AggregationStateStep``); the
    projection adds them to the schema only, and hands each batch's rows on as they are."""
    case_sensitive = str(node.template.sparkSession.conf.get("spark.sql.caseSensitive", "false")).strip().lower() == "true"
    taken = {c if case_sensitive else c.lower(): c for c in node.template.columns}
    for name in (REVISION_COLUMN, IS_FINAL_COLUMN):
        if name in taken:  # the two names are lower case
            raise finality_column_conflict_error(taken[name], FINALITY_CONF)
    if node.is_session_window():
        raise finality_session_window_error(FINALITY_CONF)
    template = node.template.withColumns({REVISION_COLUMN: F.lit(1).cast("bigint"), IS_FINAL_COLUMN: F.lit(True)})
    description = f"[{REVISION_COLUMN}, {IS_FINAL_COLUMN}]"
    return L.AggregationFinality(template=template, child=node, op="Project", description=description, transform=_rows_as_they_are)


def _rows_as_they_are(df: "SparkDataFrame") -> "SparkDataFrame":
    """The identity: a batch's rows already carry what the projection adds to the schema."""
    return df


@hands_over
class GroupedData:
    """``groupBy(...)``, ``cube(...)`` or ``rollup(...)`` on a streaming DataFrame.

    Every method also runs on the template's own PySpark ``GroupedData``, so result column names
    (``count``, ``sum(x)``, ``count(1)``, ``avg(x)`` for ``mean``...) and errors (a non-numeric
    column) are Spark's, not re-derived here."""

    def __init__(self, df: DataFrame, cols: list[Column], grouping_sets: str | None = None) -> None:
        self._df = df
        self._cols = cols
        self._grouping_sets = grouping_sets  # None (groupBy), "cube" or "rollup"

    def _template(self) -> Any:
        """The same grouping on the template (a PySpark ``GroupedData``). A grouping column taken
        from another statestream DataFrame (``words.timestamp`` after ``words.withWatermark``)
        is bound to that DataFrame's attribute here, as Spark binds it, so the template's keys
        carry the event-time marker exactly when Spark's would; the replay keeps the names."""
        plan = self._df._plan  # noqa: SLF001
        t = plan.template
        groupings: dict[str | None, Callable[..., Any]] = {None: t.groupBy, "cube": t.cube, "rollup": t.rollup}
        return groupings[self._grouping_sets](*(bind_for_template(c, plan) for c in self._cols))

    def _aggregate(self, template: Any, aggs: list[Any]) -> DataFrame:
        self._df._refuse_join_side_names(aggs, "agg")  # noqa: SLF001
        plan = self._df._plan  # noqa: SLF001
        finality = str(template.sparkSession.conf.get(FINALITY_CONF, "false")).strip().lower() == "true"
        node = L.Aggregate(
            template=template,
            child=plan,
            grouping=tuple(self._cols),
            aggregates=tuple(aggs),
            grouping_sets=self._grouping_sets,
            finality=finality,
        )
        if not finality:
            return DataFrame(node, self._df._session)  # noqa: SLF001
        return DataFrame(_with_finality_columns(node), self._df._session)  # noqa: SLF001

    def agg(self, *exprs: Any) -> DataFrame:
        """The aggregated stream, as PySpark's ``GroupedData.agg``: aggregate columns, or one
        ``{column: function}`` dict; result names are Spark's.

        Parameters
        ----------
        *exprs : Column or dict
            Aggregate expressions (``F.sum("v")``, ...), or one dict.

        Returns
        -------
        DataFrame
            The stream of the grouping columns and the aggregates.

        Raises
        ------
        ValueError
            PySpark's ``CANNOT_BE_EMPTY``, without any expression.
        """
        if len(exprs) == 1 and isinstance(exprs[0], dict):
            return self._agg_dict(dict(exprs[0]))
        aggs = list(_cols(exprs))
        if not aggs:
            raise ValueError("[CANNOT_BE_EMPTY] At least one agg expression must be specified.")
        return self._aggregate(self._template().agg(*aggs), aggs)

    def _agg_dict(self, spec: dict[str, str]) -> DataFrame:
        """``agg({"col": "fn"})``: Spark's template fixes the result names and their order (the
        order of a JVM hash map); each of our columns is matched to its name."""
        template = self._template().agg(spec)
        out_names = template.columns[len(self._cols) :]
        by_name: dict[str, Column] = {}
        in_order = []
        for c, fn in spec.items():
            col = _dict_aggregate(c, fn)
            name = self._template().agg(col).columns[-1]
            by_name.setdefault(name, col)
            in_order.append(col)
        if all(n in by_name for n in out_names):
            aggs = [by_name[n].alias(n) for n in out_names]
        else:  # pragma: no cover - a name Spark spells differently per call; keep the dict's order
            aggs = [c.alias(n) for c, n in zip(in_order, out_names)]
        return self._aggregate(template, aggs)

    def count(self) -> DataFrame:
        """The number of rows per group, in a column ``count``, as PySpark's ``GroupedData.count``.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("k STRING")
        >>> ms.add_data([("a",), ("b",), ("a",)])
        0
        >>> counts = ms.toDF().groupBy("k").count()
        >>> q = counts.writeStream.outputMode("complete").format("memory").queryName("grouped_count").start()
        >>> q.processAllAvailable()
        >>> sorted(spark.table("grouped_count").collect())
        [Row(k='a', count=2), Row(k='b', count=1)]
        >>> q.stop()
        """
        return self._aggregate(self._template().count(), [F.count(F.lit(1)).alias("count")])

    def _numeric(self, fn: str, cols: tuple[str, ...]) -> DataFrame:
        """``sum``/``avg``/``min``/``max`` over the named columns, or without names over every
        numeric column of the DataFrame in schema order (grouping columns included, as in Spark)."""
        template = getattr(self._template(), fn)(*cols)
        names = template.columns[len(self._cols) :]
        if cols:
            targets = [F.col(c) for c in cols]
        else:
            from pyspark.sql.types import NumericType

            targets = [F.col(f"`{f.name}`") for f in self._df.schema.fields if isinstance(f.dataType, NumericType)]
        function = {"mean": "avg"}.get(fn, fn)
        aggs = [getattr(F, function)(c).alias(n) for c, n in zip(targets, names)]
        return self._aggregate(template, aggs)

    def sum(self, *cols: str) -> DataFrame:
        """The sum of each named numeric column (all numeric columns without names) per group, as PySpark's ``GroupedData.sum``."""
        return self._numeric("sum", cols)

    def avg(self, *cols: str) -> DataFrame:
        """The mean of each named numeric column (all numeric columns without names) per group, as PySpark's ``GroupedData.avg``."""
        return self._numeric("avg", cols)

    def mean(self, *cols: str) -> DataFrame:
        """The mean of each named numeric column per group, as PySpark's ``GroupedData.mean`` (columns named ``avg(...)``)."""
        return self._numeric("mean", cols)

    def min(self, *cols: str) -> DataFrame:
        """The minimum of each named numeric column (all numeric columns without names) per group, as PySpark's ``GroupedData.min``."""
        return self._numeric("min", cols)

    def max(self, *cols: str) -> DataFrame:
        """The maximum of each named numeric column (all numeric columns without names) per group, as PySpark's ``GroupedData.max``."""
        return self._numeric("max", cols)

    def pivot(self, pivot_col: str, values: Any = None) -> Any:
        """Spark's error: a pivot is not supported on a streaming DataFrame."""
        raise pivot_on_stream_error()

    def _not_yet(name: str, hint: str) -> Callable[..., Any]:  # type: ignore[misc]  # noqa: N805
        def method(self: "GroupedData", *args: Any, **kwargs: Any) -> Any:
            if name in ("apply", "applyInArrow", "applyInPandas"):
                _same_on_template(getattr(self._template(), name), args, kwargs)  # PySpark's UDF-type checks
            raise not_supported_yet("GroupedData", name, hint)

        method.__name__ = name
        return method

    def applyInPandasWithState(  # noqa: N802
        self,
        func: Callable[..., Any],
        outputStructType: Any,  # noqa: N803
        stateStructType: Any,  # noqa: N803
        outputMode: str,  # noqa: N803
        timeoutConf: str,  # noqa: N803
    ) -> DataFrame:
        """PySpark's ``applyInPandasWithState``: the same call on the template checks the
        arguments with PySpark's own errors and gives the output schema; the node keeps the
        function, both schemas and the modes (``plan/flat_map_groups_with_state.py`` plans it)."""
        template = self._template().applyInPandasWithState(func, outputStructType, stateStructType, outputMode, timeoutConf)
        if isinstance(stateStructType, str):
            stateStructType = self._df._plan.template.sparkSession._parse_ddl(stateStructType)  # noqa: SLF001, N806 - PySpark's argument name, parsed as PySpark parses it
        keys = _grouping_attribute_names(template)
        if keys is None:
            raise not_supported_yet("GroupedData", "applyInPandasWithState", "grouping by expressions (group by column names)")
        node = L.FlatMapGroupsWithState(
            template=template,
            child=self._df._plan,  # noqa: SLF001
            keys=tuple(keys),
            func=func,
            output_schema=template.schema,
            state_schema=stateStructType,
            output_mode=str(outputMode).lower(),
            timeout_conf=timeoutConf,
        )
        return DataFrame(node, self._df._session)  # noqa: SLF001

    def transformWithStateInPandas(  # noqa: N802
        self,
        statefulProcessor: Any,  # noqa: N803
        outputStructType: Any,  # noqa: N803
        outputMode: str,  # noqa: N803
        timeMode: str,  # noqa: N803
        initialState: Any = None,  # noqa: N803
        eventTimeColumnName: str = "",  # noqa: N803
    ) -> DataFrame:
        """PySpark's ``transformWithStateInPandas``: the processor gets pandas DataFrames and
        yields them (``plan/transform_with_state.py`` plans it)."""
        return self._transform_with_state(
            "transformWithStateInPandas", statefulProcessor, outputStructType, outputMode, timeMode,
            initialState, eventTimeColumnName,
        )

    def transformWithState(  # noqa: N802
        self,
        statefulProcessor: Any,  # noqa: N803
        outputStructType: Any,  # noqa: N803
        outputMode: str,  # noqa: N803
        timeMode: str,  # noqa: N803
        initialState: Any = None,  # noqa: N803
        eventTimeColumnName: str = "",  # noqa: N803
    ) -> DataFrame:
        """PySpark's ``transformWithState``: the same processor API with ``Row`` objects in and
        out instead of pandas DataFrames."""
        return self._transform_with_state(
            "transformWithState", statefulProcessor, outputStructType, outputMode, timeMode,
            initialState, eventTimeColumnName,
        )

    def _transform_with_state(
        self, method: str, processor: Any, output: Any, output_mode: str, time_mode: str, initial: Any, event_time: str
    ) -> DataFrame:
        """The same call on the template checks the arguments with Spark's own errors (an
        unknown time mode, an unknown event-time column) and gives the output schema; the node
        keeps the processor and the modes."""
        from pyspark.sql.group import GroupedData as SparkGroupedData

        if initial is not None and isinstance(initial, GroupedData):
            raise not_supported_yet("GroupedData", method, "a streaming initial state (give a batch DataFrame's groupBy)")
        # the event-time column is marked here: Spark finds the watermark it reassigns in the
        # query's EventTimeWatermark node, which a template has only as column metadata
        template = getattr(self._template(), method)(processor, output, output_mode, time_mode, initial, "")
        if event_time:
            template = self._mark_output_event_time(template, event_time)
        keys = _grouping_attribute_names(template, "TransformWithStateInPySpark")
        if keys is None:
            raise not_supported_yet("GroupedData", method, "grouping by expressions (group by column names)")
        initial_keys: tuple[str, ...] = ()
        if initial is not None:
            if not isinstance(initial, SparkGroupedData):
                msg = f"initialState must be a GroupedData (df.groupBy(...)), got {type(initial).__name__}"
                raise TypeError(msg)
            found = _grouping_attribute_names(template, "TransformWithStateInPySpark", initial=True)
            if found is None:
                raise not_supported_yet("GroupedData", method, "an initial state grouped by expressions (group by column names)")
            initial_keys = tuple(found)
        node = L.TransformWithState(
            template=template,
            child=self._df._plan,  # noqa: SLF001
            keys=tuple(keys),
            processor=processor,
            output_schema=template.schema,
            output_mode=str(output_mode).lower(),
            time_mode=str(time_mode).lower(),
            use_pandas=method == "transformWithStateInPandas",
            initial_state=initial._df if initial is not None else None,  # noqa: SLF001
            initial_state_keys=initial_keys,
            event_time_column=event_time or "",
        )
        return DataFrame(node, self._df._session)  # noqa: SLF001

    def _mark_output_event_time(self, template: Any, column: str) -> Any:
        """``eventTimeColumnName``: the output column takes the input's event-time marker (and
        its delay), with Spark's errors for a query without a watermark or an unknown column."""
        plan = self._df._plan  # noqa: SLF001
        marked = [f for f in plan.schema.fields if L.WATERMARK_DELAY_KEY in (f.metadata or {})]
        if not marked:
            raise event_time_without_watermark_error()
        name = template.select(column).columns[0]  # Spark's error for an unknown column
        return mark_event_time(template, name, int(marked[0].metadata[L.WATERMARK_DELAY_KEY]))

    #: grouped operations on Python state and co-grouping (issue 13)
    for _name in ("apply", "applyInArrow", "applyInPandas", "cogroup"):  # fmt: skip
        locals()[_name] = _not_yet(_name, "")
    del _name, _not_yet

    def __getattr__(self, name: str) -> Any:
        if _is_pyspark_member("GroupedData", name):
            raise not_supported_yet_attribute("GroupedData", name)
        raise AttributeError(f"'GroupedData' object has no attribute '{name}'")


def _grouping_attribute_names(
    template: Any, node_name: str = "FlatMapGroupsInPandasWithState", initial: bool = False
) -> list[str] | None:
    """The grouping columns of an analysed ``node_name`` template (the top node, or the first
    one below it: an event-time column update sits above a transformWithState), as names of its
    input's columns; ``None`` when a grouping key is an expression, not an input column."""
    try:
        node = java_dataframe(template).queryExecution().analyzed()
        while node.nodeName() != node_name and node.children().size() >= 1:
            node = node.children().apply(0)
        if node.nodeName() != node_name:
            return None
        if node_name == "TransformWithStateInPySpark":
            # each side is a projection of the grouping attributes, then every input column
            side = node.right() if initial else node.left()
            n = node.initGroupingAttrsLen() if initial else node.groupingAttributesLen()
            attrs = jvm_seq(side.output())
            data_ids = {a.exprId().id() for a in attrs[n:]}
            if any(a.exprId().id() not in data_ids for a in attrs[:n]):
                return None  # a grouping expression, not an input column
            return [a.name() for a in attrs[:n]]
        ids = {a.exprId().id(): a.name() for a in jvm_seq(node.child().output())}
        names = []
        for attr in jvm_seq(node.groupingAttributes()):
            if attr.exprId().id() not in ids:
                return None
            names.append(ids[attr.exprId().id()])
        return names
    except Exception:  # noqa: BLE001 - not a classic JVM DataFrame
        return None


def _dict_aggregate(column: str, function: str) -> Column:
    """One ``agg({column: function})`` entry as a column, as Spark's ``strToExpr`` reads it."""
    fn = function.lower()
    if fn in ("count", "size"):
        return F.count(F.lit(1)) if column == "*" else F.count(F.col(column))
    arg = F.col(column)
    if fn in ("avg", "average", "mean"):
        return F.avg(arg)
    if fn in ("stddev", "std"):
        return F.stddev(arg)
    return F.call_function(fn, arg)


@hands_over
class DataFrameNaFunctions:
    """``df.na`` of a streaming DataFrame: PySpark's ``drop``/``fill``/``replace``."""

    def __init__(self, df: DataFrame) -> None:
        self._df = df

    def drop(self, how: str = "any", thresh: int | None = None, subset: Any = None) -> DataFrame:
        """Drop the rows with nulls, as PySpark's ``DataFrameNaFunctions.drop`` (``df.dropna``)."""
        return self._df.dropna(how, thresh, subset)

    def fill(self, value: Any, subset: Any = None) -> DataFrame:
        """Replace nulls with a value, as PySpark's ``DataFrameNaFunctions.fill`` (``df.fillna``)."""
        return self._df.fillna(value, subset)

    def replace(self, to_replace: Any, value: Any = _NoValue, subset: Any = None) -> DataFrame:
        """Replace values, as PySpark's ``DataFrameNaFunctions.replace`` (``df.replace``)."""
        return self._df.replace(to_replace, value, subset)

    def __getattr__(self, name: str) -> Any:
        from pyspark.sql.dataframe import DataFrameNaFunctions as _PySpark

        raise missing_member("DataFrameNaFunctions", _PySpark, name)


@hands_over
class DataFrameStatFunctions:
    """``df.stat`` of a streaming DataFrame: ``sampleBy`` runs on each batch; the others are
    batch actions (Spark's error) or a pivot (``crosstab``)."""

    def __init__(self, df: DataFrame) -> None:
        self._df = df

    def sampleBy(self, col: Any, fractions: dict[Any, float], seed: int | None = None) -> DataFrame:  # noqa: N802
        """A stratified sample of each micro-batch, as PySpark's ``DataFrameStatFunctions.sampleBy`` (``df.sampleBy``)."""
        return self._df.sampleBy(col, fractions, seed)

    def approxQuantile(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
        """Spark's error of a batch action on a streaming DataFrame (``df.approxQuantile``)."""
        return self._df.approxQuantile(*args, **kwargs)  # type: ignore[operator]  # a method DataFrame's class body makes (mypy sees __getattr__)

    def corr(self, *args: Any, **kwargs: Any) -> Any:
        """Spark's error of a batch action on a streaming DataFrame (``df.corr``)."""
        return self._df.corr(*args, **kwargs)  # type: ignore[operator]  # a method DataFrame's class body makes (mypy sees __getattr__)

    def cov(self, *args: Any, **kwargs: Any) -> Any:
        """Spark's error of a batch action on a streaming DataFrame (``df.cov``)."""
        return self._df.cov(*args, **kwargs)  # type: ignore[operator]  # a method DataFrame's class body makes (mypy sees __getattr__)

    def crosstab(self, col1: str, col2: str) -> Any:
        """Spark's error: ``crosstab`` is a pivot, which Spark refuses on a stream (``df.crosstab``)."""
        return self._df.crosstab(col1, col2)

    def freqItems(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
        """``NotSupportedYetError``: statestream does not run ``freqItems`` on a stream yet (``df.freqItems``)."""
        return self._df.freqItems(*args, **kwargs)  # type: ignore[operator]  # a method DataFrame's class body makes (mypy sees __getattr__)

    def __getattr__(self, name: str) -> Any:
        from pyspark.sql.dataframe import DataFrameStatFunctions as _PySpark

        raise missing_member("DataFrameStatFunctions", _PySpark, name)
