"""A Spark Connect client's streaming plan, rebuilt as statestream DataFrame calls.

A client's ``writeStream...start()`` sends its whole plan tree (``spark.connect.Relation``).
:class:`ConnectPlanReader` walks it from the leaves: each streaming node becomes the same call on
statestream's DataFrame API, over a :class:`~statestream.api.session.StreamingSession` of the
client's own server-side session (its confs and temporary views). Expressions become classic
columns through :class:`~statestream.connect.expressions.ColumnBuilder`. A subtree that reads no
stream (the static side of a join) is planned whole by Spark's Connect planner, as a classic
DataFrame.

A node this reader does not rebuild is refused with a :class:`~statestream.errors.
NotSupportedYetError` naming it (:func:`~statestream.errors.connect_node_not_supported`), never
run differently: the endpoint then hands the query to Spark's own engine, or returns the error.

Column references tied to one DataFrame (``df["x"]``, which carry the DataFrame's plan id) become
the same reference on that DataFrame's rebuilt twin (:meth:`ConnectPlanReader.dataframe`), so that
a join's ``left["k"] == right["k"]`` reads each side's ``k``.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import pyspark.sql.connect.proto as pb
from pyspark.serializers import CloudPickleSerializer
from pyspark.sql.connect.types import proto_schema_to_pyspark_data_type
from pyspark.sql.types import _parse_datatype_json_string
from pyspark.util import PythonEvalType

from statestream._jvm.connect import ClientSession
from statestream.connect.expressions import ColumnBuilder
from statestream.connect.messages import bound_names, reads_a_stream
from statestream.errors import connect_node_not_supported

__all__ = ["ConnectPlanReader"]

#: the join types of ``spark.connect.Join.JoinType``, as ``DataFrame.join``'s ``how`` names them
_JOIN_TYPES = {
    pb.Join.JOIN_TYPE_INNER: "inner",
    pb.Join.JOIN_TYPE_FULL_OUTER: "full_outer",
    pb.Join.JOIN_TYPE_LEFT_OUTER: "left_outer",
    pb.Join.JOIN_TYPE_RIGHT_OUTER: "right_outer",
    pb.Join.JOIN_TYPE_LEFT_ANTI: "left_anti",
    pb.Join.JOIN_TYPE_LEFT_SEMI: "left_semi",
    pb.Join.JOIN_TYPE_CROSS: "cross",
}

#: the eval types of a ``group_map`` carrying ``transform_with_state_info``, and the statestream
#: method each one is (pandas DataFrames or ``Row`` objects; with or without an initial state)
_TRANSFORM_WITH_STATE = {
    PythonEvalType.SQL_TRANSFORM_WITH_STATE_PANDAS_UDF: "transformWithStateInPandas",
    PythonEvalType.SQL_TRANSFORM_WITH_STATE_PANDAS_INIT_STATE_UDF: "transformWithStateInPandas",
    PythonEvalType.SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF: "transformWithState",
    PythonEvalType.SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_INIT_STATE_UDF: "transformWithState",
}


class ConnectPlanReader:
    """Rebuilds a client's streaming ``Relation`` as statestream DataFrame calls.

    Parameters
    ----------
    client : statestream._jvm.connect.ClientSession
        The client's server-side session: its expressions' planner and its static relations.
    streaming : statestream.StreamingSession
        statestream's session over ``client.session``.

    Examples
    --------
    >>> reader = ConnectPlanReader(client, StreamingSession(client.session))  # doctest: +SKIP
    >>> df = reader.dataframe(request.plan.command.write_stream_operation_start.input)  # doctest: +SKIP
    >>> df.isStreaming  # doctest: +SKIP
    True
    """

    def __init__(self, client: ClientSession, streaming: Any) -> None:
        self.client = client
        self.streaming = streaming
        #: plan id -> its node's rebuilt DataFrame, for column references bound to it (``df["k"]``)
        self._rebuilt: dict[int, Any] = {}
        self._columns = ColumnBuilder(client, self._rebuilt)
        self._nodes: dict[str, Callable[[Any], Any]] = {
            "read": self._read,
            "with_watermark": lambda r: self.dataframe(r.input).withWatermark(r.event_time, r.delay_threshold),
            "project": lambda r: self.dataframe(r.input).select(*self.columns(r.expressions)),
            "filter": lambda r: self.dataframe(r.input).where(self.column(r.condition)),
            "aggregate": self._aggregate,
            "deduplicate": self._deduplicate,
            "with_columns": self._with_columns,
            "with_columns_renamed": self._with_columns_renamed,
            "drop": self._drop,
            "to_df": lambda r: self.dataframe(r.input).toDF(*r.column_names),
            "subquery_alias": lambda r: self.dataframe(r.input).alias(r.alias),
            "limit": lambda r: self.dataframe(r.input).limit(r.limit),
            "set_op": self._set_op,
            "join": self._join,
            "apply_in_pandas_with_state": self._apply_in_pandas_with_state,
            "group_map": self._group_map,
        }

    def read(self, relation: pb.Relation) -> Any:
        """The statestream DataFrame of a client's whole streaming plan ``relation``.

        Raises
        ------
        NotSupportedYetError
            A streaming node this reader does not rebuild, named.
        """
        self._rebuilt.clear()
        return self.dataframe(relation)

    def dataframe(self, relation: pb.Relation) -> Any:
        """The DataFrame of one node of the plan :meth:`read` reads: statestream's for a streaming
        node, a classic one planned by Spark's Connect planner for a part that reads no stream.
        It is kept by the node's plan id: a column reference bound to that id (``df["k"]``)
        becomes the same reference on it, so that ``left["k"] == right["k"]`` names each side's
        ``k`` as Spark's plan-id resolution does."""
        if not reads_a_stream(relation):
            df = self.client.dataframe(relation.SerializeToString())
        else:
            kind = relation.WhichOneof("rel_type") or "unknown"
            build = self._nodes.get(kind)
            if build is None:
                raise connect_node_not_supported(kind)
            df = build(getattr(relation, kind))
        if relation.HasField("common") and relation.common.HasField("plan_id"):
            self._rebuilt[relation.common.plan_id] = df
        return df

    def column(self, expression: pb.Expression) -> Any:
        """The classic column of one Connect expression (references bound to a DataFrame: see
        :meth:`dataframe`)."""
        return self._columns.column(expression)

    def columns(self, expressions: Any) -> list[Any]:
        """:meth:`column` of each expression, in order."""
        return [self.column(e) for e in expressions]

    def _read(self, read: pb.Read) -> Any:
        reader = self.streaming.readStream
        if read.HasField("named_table"):
            table = read.named_table
            return reader.options(**dict(table.options)).table(table.unparsed_identifier)
        source = read.data_source
        if source.predicates:
            raise connect_node_not_supported("read.data_source.predicates")
        if source.HasField("format"):
            reader = reader.format(source.format)
        if source.schema:
            reader = reader.schema(_schema(source.schema))
        reader = reader.options(**dict(source.options))
        paths = list(source.paths)
        if len(paths) > 1:
            raise connect_node_not_supported("read.data_source with several paths")
        return reader.load(paths[0]) if paths else reader.load()

    def _aggregate(self, agg: pb.Aggregate) -> Any:
        df = self.dataframe(agg.input)
        keys = self.columns(agg.grouping_expressions)
        grouped = {
            pb.Aggregate.GROUP_TYPE_GROUPBY: df.groupBy,
            pb.Aggregate.GROUP_TYPE_ROLLUP: df.rollup,
            pb.Aggregate.GROUP_TYPE_CUBE: df.cube,
        }.get(agg.group_type)
        if grouped is None:
            raise connect_node_not_supported(f"aggregate ({pb.Aggregate.GroupType.Name(agg.group_type)})")
        return grouped(*keys).agg(*self.columns(agg.aggregate_expressions))

    def _deduplicate(self, dedup: pb.Deduplicate) -> Any:
        df = self.dataframe(dedup.input)
        subset = None if dedup.all_columns_as_keys else list(dedup.column_names)
        if dedup.within_watermark:
            return df.dropDuplicatesWithinWatermark(subset)
        return df.dropDuplicates(subset)

    def _with_columns(self, rel: pb.WithColumns) -> Any:
        df = self.dataframe(rel.input)
        columns = {}
        for alias in rel.aliases:
            if len(alias.name) != 1 or alias.HasField("metadata"):
                raise connect_node_not_supported("with_columns (a multi-part name or column metadata)")
            columns[alias.name[0]] = self.column(alias.expr)
        return df.withColumns(columns)

    def _with_columns_renamed(self, rel: pb.WithColumnsRenamed) -> Any:
        renames = dict(rel.rename_columns_map)
        renames.update({r.col_name: r.new_col_name for r in rel.renames})
        return self.dataframe(rel.input).withColumnsRenamed(renames)

    def _drop(self, rel: pb.Drop) -> Any:
        return self.dataframe(rel.input).drop(*list(rel.column_names), *self.columns(rel.columns))

    def _set_op(self, op: pb.SetOperation) -> Any:
        if op.set_op_type != pb.SetOperation.SET_OP_TYPE_UNION or not op.is_all:
            raise connect_node_not_supported(f"set_op ({pb.SetOperation.SetOpType.Name(op.set_op_type)}, is_all={op.is_all})")
        left, right = self.dataframe(op.left_input), self.dataframe(op.right_input)
        if op.by_name:
            return left.unionByName(right, allowMissingColumns=op.allow_missing_columns)
        return left.union(right)

    def _join(self, join: pb.Join) -> Any:
        if join.HasField("join_data_type"):
            raise connect_node_not_supported("join (join_data_type)")
        how = _JOIN_TYPES.get(join.join_type)
        if how is None:
            raise connect_node_not_supported(f"join ({pb.Join.JoinType.Name(join.join_type)})")
        left, right = self.dataframe(join.left), self.dataframe(join.right)
        shared = {c.lower() for c in left.columns} & {c.lower() for c in right.columns}
        if join.HasField("join_condition") and bound_names(join.join_condition) & shared:
            # Spark tells the sides' equal names apart by the DataFrames' plan ids; the rebuilt
            # sides have the same attribute ids (a self-join) or no plan ids to tell them by
            raise connect_node_not_supported("join whose condition names a column of both sides through df[...]")
        if join.using_columns:
            return left.join(right, list(join.using_columns), how)
        if join.HasField("join_condition"):
            return left.join(right, self.column(join.join_condition), how)
        return left.crossJoin(right) if how in ("inner", "cross") else left.join(right, how=how)

    def _apply_in_pandas_with_state(self, rel: pb.ApplyInPandasWithState) -> Any:
        func = _python_function(rel.func, "apply_in_pandas_with_state", (PythonEvalType.SQL_GROUPED_MAP_PANDAS_UDF_WITH_STATE,))
        grouped = self.dataframe(rel.input).groupBy(*self.columns(rel.grouping_expressions))
        return grouped.applyInPandasWithState(func, _schema(rel.output_schema), _schema(rel.state_schema), rel.output_mode, rel.timeout_conf)

    def _group_map(self, rel: pb.GroupMap) -> Any:
        """``transformWithStateInPandas`` / ``transformWithState`` (a ``group_map`` with
        ``transform_with_state_info``): the client's processor is the one its pickled function
        wraps (PySpark's ``TransformWithStateInPandasUdfUtils`` holds it)."""
        if not rel.HasField("transform_with_state_info"):
            raise connect_node_not_supported("group_map (applyInPandas or flatMapGroupsWithState)")
        func = _python_function(rel.func, "group_map", tuple(_TRANSFORM_WITH_STATE))
        processor = getattr(getattr(func, "__self__", None), "_stateful_processor", None)
        if processor is None:
            raise connect_node_not_supported("group_map (a function that holds no StatefulProcessor)")
        info = rel.transform_with_state_info
        grouped = self.dataframe(rel.input).groupBy(*self.columns(rel.grouping_expressions))
        initial = None
        if rel.HasField("initial_input"):
            initial = self.dataframe(rel.initial_input).groupBy(*self.columns(rel.initial_grouping_expressions))
        method = getattr(grouped, _TRANSFORM_WITH_STATE[rel.func.python_udf.eval_type])
        return method(processor, _data_type(info.output_schema), rel.output_mode, info.time_mode, initial, info.event_time_column_name)


def _python_function(udf: pb.CommonInlineUserDefinedFunction, node: str, eval_types: tuple[int, ...]) -> Any:
    """The client's Python function in ``udf``, unpickled as PySpark's worker unpickles it (the
    endpoint's driver plays the worker's part for a state function: statestream's operators take
    the function or processor itself)."""
    if not udf.HasField("python_udf") or udf.python_udf.eval_type not in eval_types:
        raise connect_node_not_supported(f"{node} (a function of another kind)")
    here = "%d.%d" % sys.version_info[:2]
    if udf.python_udf.python_ver != here:
        raise connect_node_not_supported(f"{node} (a function pickled by Python {udf.python_udf.python_ver}, the endpoint runs {here})")
    try:
        func, _ = CloudPickleSerializer().loads(udf.python_udf.command)
    except Exception as e:  # e.g. a module the client sent as an artifact, which Spark's worker has
        raise connect_node_not_supported(f"{node} (a function the endpoint's driver cannot unpickle: {type(e).__name__}: {e})") from e
    return func


def _data_type(proto: pb.DataType) -> Any:
    """A schema the client sends as a ``spark.connect.DataType`` (a DDL string when unparsed)."""
    if proto.HasField("unparsed"):
        return proto.unparsed.data_type_string
    return proto_schema_to_pyspark_data_type(proto)


def _schema(text: str) -> Any:
    """A reader's schema as a client sends it: a ``StructType``'s JSON, or DDL (Spark's Connect
    planner takes either)."""
    if text.lstrip().startswith("{"):
        return _parse_datatype_json_string(text)
    return text
