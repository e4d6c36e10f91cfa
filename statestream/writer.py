"""DataStreamWriter (``DataFrame.writeStream``) with PySpark's names, arguments and chaining;
``start()`` hands the query to the runtime's ``MicroBatchExecution``.

The writer holds the DataFrame's logical plan and session, not the DataFrame: ``dataframe.py``
imports this module, so this module imports neither it nor ``session.py`` (the session is typed
with ``StreamingSessionLike``).
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable

from statestream.sources.options import option_string

if TYPE_CHECKING:
    from statestream.plan import logical as L
    from statestream.query import StreamingQuery
    from statestream.runtime.interfaces import StreamingSessionLike

logger = logging.getLogger(__name__)

__all__ = ["DataStreamWriter"]


class DataStreamWriter:
    """``DataFrame.writeStream``."""

    def __init__(self, plan: "L.LogicalPlan", session: "StreamingSessionLike") -> None:
        self._plan = plan
        self._session = session
        self._mode = "append"
        self._format = "console"
        self._options: dict[str, str] = {}
        self._query_name: str | None = None
        self._trigger: Any = None
        self._foreach_batch: Callable | None = None
        self._foreach_writer: Any = None
        self._partition_by: list[str] = []

    def outputMode(self, outputMode: str) -> "DataStreamWriter":  # noqa: N802,N803
        mode = outputMode.lower() if isinstance(outputMode, str) else outputMode
        if mode not in ("append", "update", "complete"):
            msg = (
                f"[STREAMING_OUTPUT_MODE.INVALID] Invalid streaming output mode: {outputMode}. SQLSTATE: 42KDE"
            )
            from statestream.errors import analysis_error

            raise analysis_error("STREAMING_OUTPUT_MODE.INVALID", msg, "42KDE", outputMode=str(outputMode))
        self._mode = mode
        return self

    def format(self, source: str) -> "DataStreamWriter":
        self._format = source.lower()
        return self

    def option(self, key: str, value: Any) -> "DataStreamWriter":
        self._options[key] = option_string(value)
        return self

    def options(self, **options: Any) -> "DataStreamWriter":
        for k, v in options.items():
            self.option(k, v)
        return self

    def partitionBy(self, *cols: str) -> "DataStreamWriter":  # noqa: N802
        self._partition_by = list(cols[0]) if len(cols) == 1 and isinstance(cols[0], (list, tuple)) else list(cols)
        return self

    def queryName(self, queryName: str) -> "DataStreamWriter":  # noqa: N802,N803
        if not queryName or not isinstance(queryName, str) or not queryName.strip():
            raise ValueError("[VALUE_NOT_NON_EMPTY_STR] Value for `queryName` must be a non-empty string, got '%s'." % queryName)
        self._query_name = queryName
        return self

    def trigger(
        self,
        *,
        processingTime: str | None = None,  # noqa: N803
        once: bool | None = None,
        continuous: str | None = None,
        availableNow: bool | None = None,  # noqa: N803
    ) -> "DataStreamWriter":
        from statestream.runtime.microbatch import Trigger

        given = [x for x in (processingTime, once, continuous, availableNow) if x is not None]
        if len(given) != 1:
            raise ValueError("[ONLY_ALLOW_SINGLE_TRIGGER] Only a single trigger is allowed.")
        if continuous is not None:
            raise NotImplementedError("statestream runs micro-batches only: the continuous trigger is not supported")
        if processingTime is not None:
            from statestream.runtime.intervals import parse_trigger_interval_ms

            self._trigger = Trigger("processingTime", parse_trigger_interval_ms(processingTime))
        elif once:
            self._trigger = Trigger("once")
        elif availableNow:
            self._trigger = Trigger("availableNow")
        else:
            raise ValueError("[VALUE_NOT_TRUE] Value for `once` or `availableNow` must be True.")
        return self

    def foreachBatch(self, func: Callable) -> "DataStreamWriter":  # noqa: N802
        self._foreach_batch = func
        self._format = "foreachbatch"
        return self

    def foreach(self, f: Any) -> "DataStreamWriter":
        from statestream.sinks.foreach import partition_task

        partition_task(f)  # PySpark refuses a writer without a callable process() right here
        self._foreach_writer = f
        self._foreach_batch = None
        self._format = "foreach"
        return self

    def _set(self, format: str | None, outputMode: str | None, partitionBy: Any, queryName: str | None, options: dict) -> None:  # noqa: A002,N803
        """The settings ``start()`` and ``toTable()`` take as arguments, applied as their setters
        would (an argument left ``None`` keeps the setter's value)."""
        if format is not None:
            self.format(format)
        if outputMode is not None:
            self.outputMode(outputMode)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if queryName is not None:
            self.queryName(queryName)
        self.options(**options)

    def toTable(  # noqa: N802 - PySpark's name and arguments
        self,
        tableName: str,  # noqa: N803
        format: str | None = None,  # noqa: A002
        outputMode: str | None = None,  # noqa: N803
        partitionBy: Any = None,  # noqa: N803
        queryName: str | None = None,  # noqa: N803
        **options: Any,
    ) -> "StreamingQuery":
        from statestream.sinks.table import prepare_table

        self._set(format, outputMode, partitionBy, queryName, options)
        # this writer's default format is console; Spark's is spark.sql.sources.default
        requested = None if self._format == "console" else self._format
        target = prepare_table(
            self._session.sparkSession, tableName, requested, dict(self._options), self._partition_by, self._plan.schema
        )
        self._format = target.format
        return self.start(path=target.path)

    def start(
        self,
        path: str | None = None,
        format: str | None = None,  # noqa: A002
        outputMode: str | None = None,  # noqa: N803
        partitionBy: Any = None,  # noqa: N803
        queryName: str | None = None,  # noqa: N803
        **options: Any,
    ) -> "StreamingQuery":
        from statestream.plan.analysis import check_for_streaming
        from statestream.query import StreamingQuery
        from statestream.runtime.microbatch import MicroBatchExecution, Trigger
        from statestream.sinks import create_sink

        self._set(format, outputMode, partitionBy, queryName, options)
        if path is not None:
            self._options["path"] = path
        spark = self._session.sparkSession
        conf = {k: v for k, v in spark.conf.getAll.items()} if hasattr(spark.conf, "getAll") else {}
        check_for_streaming(self._plan, self._mode, conf)
        sink = create_sink(
            self._format,
            dict(self._options),
            self._query_name,
            spark,
            foreach_batch=self._foreach_batch,
            foreach_writer=self._foreach_writer,
            output_mode=self._mode,
            partition_by=self._partition_by,
        )
        checkpoint = self._options.get("checkpointLocation")
        temporary_checkpoint = False
        if checkpoint is None:
            root = spark.conf.get("spark.sql.streaming.checkpointLocation", None)
            if root:
                checkpoint = os.path.join(root, self._query_name or __import__("uuid").uuid4().hex)
        if checkpoint is None:
            if self._format in ("parquet", "json", "csv", "orc", "text"):
                from statestream.errors import analysis_error

                raise analysis_error(
                    "_LEGACY_ERROR_TEMP_1298",
                    "checkpointLocation must be specified either through option(\"checkpointLocation\", ...) or "
                    "SparkSession.conf.set(\"spark.sql.streaming.checkpointLocation\", ...).",
                )
            checkpoint = tempfile.mkdtemp(prefix="statestream-checkpoint-")
            temporary_checkpoint = True
            logger.info("using temporary checkpoint location %s", checkpoint)
        ex = MicroBatchExecution(
            session=self._session,
            plan=self._plan,
            sink=sink,
            output_mode=self._mode,
            trigger=self._trigger or Trigger(),
            checkpoint_location=checkpoint,
            query_name=self._query_name,
            delete_checkpoint_on_stop=temporary_checkpoint,
        )
        query = StreamingQuery(ex)
        ex.start()
        self._session.streams._register(query)  # noqa: SLF001
        return query
