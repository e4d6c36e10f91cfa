"""Known differences from Spark's engine, declared in one place (ibis-style ``notyet`` markers).

Each entry names the exception the test raises and the measured difference, and is applied as
``xfail(strict=True, raises=...)``: the test still runs, a failure with another exception is
still reported, and a gap that gets fixed fails the run until its entry is removed here.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import PythonException

from statestream.errors import NotSupportedYetError, StatestreamStreamingQueryException


class Gap(NamedTuple):
    """One declared difference: the exception its test raises, and what differs."""

    raises: type[BaseException]
    reason: str


KNOWN_GAPS: dict[str, Gap] = {
    'tests/differential/test_transform_with_state.py::test_list_and_map_change_feed[seen]': Gap(AssertionError,
        "change feed of a transformWithState list: Spark's lists one row per store call (batch 2, key a: append 3, "
        "append 4, then the put that replaced the list as one 'update' row); statestream's delta files hold each key's "
        "net change per batch, so a batch that appends then puts shows only the 'update' (12 rows against Spark's 14); "
        "appends alone and clears are equal"
    ),
    'tests/differential/test_transform_with_state.py::test_list_and_map_change_feed[counts]': Gap(AssertionError,
        "change feed of a transformWithState map: Spark's lists one row per store call (batch 0, key a: entry 1 "
        "updated to 1, then to 2; batch 1, key b: entry 2 updated to 2, then removed by clear); statestream's delta "
        "files hold each entry's net change per batch (entry 1 = 2; entry 2 deleted), 11 rows against Spark's 13"
    ),
    'tests/differential/test_state_readers.py::test_state_as_of_every_batch[join-joinSide=right]': Gap(AssertionError,
        "state reader of a stream-stream join's right side: Spark's value struct has 'rts' NOT NULL (its physical plan filters isnotnull(rts), inferred from the range condition, below the join, and the state schema takes that child's output); statestream records the input's nullability (nullable), so the schemas differ in that one flag; the rows are equal"
    ),
    'tests/differential/test_state_readers.py::test_state_as_of_every_batch[join-storeName=right-keyWithIndexToValue]': Gap(AssertionError,
        "state reader of a stream-stream join's right side: Spark's value struct has 'rts' NOT NULL (its physical plan filters isnotnull(rts), inferred from the range condition, below the join, and the state schema takes that child's output); statestream records the input's nullability (nullable), so the schemas differ in that one flag; the rows are equal"
    ),
    'tests/differential/test_state_readers.py::test_join_store_change_feed[left-keyToNumValues]': Gap(AssertionError,
        "change feed of a stream-stream join's stores: Spark's lists every put a batch made (key 1 in batch 0: count 1, then 2; a left row put with matched=false, then again with matched=true); statestream's delta files hold each key's net change in the batch (count 2; matched=true), so Spark's feed has the extra intermediate rows"
    ),
    'tests/differential/test_state_readers.py::test_join_store_change_feed[left-keyWithIndexToValue]': Gap(AssertionError,
        "change feed of a stream-stream join's stores: Spark's lists every put a batch made (key 1 in batch 0: count 1, then 2; a left row put with matched=false, then again with matched=true); statestream's delta files hold each key's net change in the batch (count 2; matched=true), so Spark's feed has the extra intermediate rows"
    ),
    'tests/differential/test_state_readers.py::test_join_store_change_feed[right-keyToNumValues]': Gap(AssertionError,
        "change feed of a stream-stream join's stores: Spark's lists every put a batch made (key 1 in batch 0: count 1, then 2; a left row put with matched=false, then again with matched=true); statestream's delta files hold each key's net change in the batch (count 2; matched=true), so Spark's feed has the extra intermediate rows"
    ),
    'tests/differential/test_state_readers.py::test_join_store_change_feed[right-keyWithIndexToValue]': Gap(AssertionError,
        "change feed of a stream-stream join's stores: Spark's lists every put a batch made (key 1 in batch 0: count 1, then 2; a left row put with matched=false, then again with matched=true); statestream's delta files hold each key's net change in the batch (count 2; matched=true), so Spark's feed has the extra intermediate rows"
    ),
    "tests/differential/test_apply_in_pandas_with_state.py::test_explain_matches_spark": Gap(AssertionError,
        "explain() of applyInPandasWithState: Spark shows '!FlatMapGroupsInPandasWithState <udf>(<input "
        "attributes>), [keys], [output attributes], [state fields], state info [...] stateStoreCkptIds = None, 2, "
        "Append, EventTimeTimeout, 0, <late wm>, <eviction wm>, false' over '*(2) Sort [k ASC NULLS FIRST], false, 0'; "
        "statestream shows its own line 'FlatMapGroupsInPandasWithState [k], Append, EventTimeTimeout, state info "
        "[...]' and no Sort (its step groups with Arrow, no sort); the exchange and the nodes below are Spark's"
    ),
    "tests/differential/test_transform_with_state.py::test_explain_matches_spark": Gap(AssertionError,
        "explain() of transformWithStateInPandas: Spark shows '!TransformWithStateInPySpark "
        "transformWithStateUDF(<input attributes>)#N, [keys], [output attributes], Update, NoTime, state info [...] "
        "stateStoreCkptIds = None, 0, <late wm>, <eviction wm>, pandas, true, false, [keys]' over '*(2) Sort [k ASC "
        "NULLS FIRST]', the exchange, '*(1) Project [k, k, v]' and a second child 'PlanLater LocalRelation <empty>' "
        "(the absent initial state); statestream shows its own line 'TransformWithStateInPySpark [k], Update, NoTime, "
        "state info [...]' over the exchange and the relation (no sort: its step groups with Arrow)"
    ),
    "tests/spark/test_explain.py::test_explain_matches_spark[join_then_windowed_aggregate]": Gap(AssertionError,
        "explain() of a window aggregation over a stream-static join: Spark's optimizer pushes the window's "
        "Filter isnotnull(timestamp#N-T20000ms) through the join to the streaming side (just above the "
        "EventTimeWatermark); statestream asks Spark for the aggregation's text over the join's output, so the "
        "filter shows above the join, in the optimised logical plan (~Filter over ~Join) and in the physical "
        "plan (Filter over BroadcastHashJoin); every other line is Spark's"
    ),
    "tests/differential/test_stream_joins.py::test_query_explain_of_a_window_aggregation_after_the_join": Gap(AssertionError,
        "StreamingQuery.explain() of a window aggregation over a stream-stream join, after a no-data batch: "
        "Spark's plan of that batch reads each side as 'LocalTableScan <empty>, [k, lts]' (pruned to the "
        "columns used) under the EventTimeWatermark; statestream shows the sides' Project (keeping the unused "
        "'v AS lv'), Filter and 'StreamingRelation FileSource[...]'; statestream also shows the window's "
        "'Filter isnotnull(lts-T10000ms)' above the join (Spark elides it), so its codegen stage ids run 2 "
        "higher; the join, state store and aggregate lines are otherwise Spark's"
    ),
    "tests/differential/test_aggregation.py::test_complete_mode_order_by": Gap(AssertionError,
        "Spark's state metrics double: the range-partitioning sample of the Sort above the aggregation "
        "runs its stateful stage twice and the SQL metrics add up; statestream reports each row once (rows match)"
    ),
    "tests/differential/test_aggregation.py::test_complete_mode_windowed_order_by": Gap(AssertionError,
        "same as test_complete_mode_order_by: Spark counts the state metrics of the sampled stage twice"
    ),
    "tests/differential/test_stateless.py::test_json_input_stateless": Gap(AssertionError,
        "numInputRows of the JSON file source: Spark pushes the query's filter into the JSON scan and counts "
        "only the rows the scan emits; statestream counts the batch's rows with an observe() above the scan, "
        "which also keeps the filter out of the scan"
    ),
    "tests/differential/test_semantics_gaps.py::test_event_time_avg_is_spark_running_mean": Gap(AssertionError,
        "eventTime.avg: Spark folds a running mean row by row in each task's row order "
        "(EventTimeStats.add) and truncates; statestream's observe() divides the exact sum, so it reports "
        "one ms more when the running mean falls just below a whole ms (110.125 s vs Spark's 110.124 s)"
    ),
    "tests/differential/test_aggregate_functions.py::test_histogram_numeric_of_merged_batches": Gap(AssertionError,
        "histogram_numeric: Spark merges each batch's partial histogram into the stored one, so equal "
        "points of two batches stay two bins ([7.0, 1.0], [7.0, 1.0] for key b in batch 2); statestream "
        "keeps the values and recomputes the histogram, which folds them into one bin ([7.0, 2.0]). "
        "Both are within the function's documented approximation"
    ),
    "tests/differential/test_guide_examples.py::test_sql_count_over_a_streaming_view": Gap(NotSupportedYetError,
        "SQL that aggregates over a streaming temporary view: Spark plans it as a streaming aggregation "
        "(complete mode: n = 3, 5, 6 after the three batches); statestream's ss.sql runs only stateless SQL over a "
        "stream and refuses this with NotSupportedYetError (write the aggregation with the DataFrame API)"
    ),
    "tests/differential/test_watermark_binding.py::test_update_mode_raw_pre_watermark_key_matches_spark": Gap(AssertionError,
        "groupBy(<pre-watermark DataFrame>.timestamp) in update mode: Spark's analysed key has no event-time "
        "marker, but in data batches its optimizer re-points the key at the watermark's output attribute (after "
        "removing the source's renaming projection), so late keys are dropped and state evicted only in data "
        "batches; statestream follows the analysed plan in every batch (never drops, never evicts)"
    ),
    "tests/differential/test_fuzz_findings.py::test_an_overflow_in_the_state_step_under_a_foreach_batch_sink": Gap(AssertionError,
        "an aggregate that overflows in a batch written by foreachBatch: both engines fail with ARITHMETIC_OVERFLOW, "
        "Spark's wrapped in FOREACH_BATCH_USER_FUNCTION_ERROR (its aggregation runs lazily inside the user's function, "
        "here the test's collect), statestream's alone (its state step runs before the sink)"
    ),
    "tests/differential/test_sinks_more.py::test_foreach_batch_failure_traceback_frames_like_spark": Gap(AssertionError,
        "FOREACH_BATCH_USER_FUNCTION_ERROR quotes the Python traceback of the user's function; Spark's comes back "
        "through Py4J and starts with PySpark's frames (clientserver.py:_call_proxy, utils.py:call, utils.py:call), "
        "statestream calls the function in-process and shows its own (foreach_batch.py:add_batch); the user's frames, "
        "the exception line and the rest of the message are Spark's"
    ),
    "tests/spark/test_query_lifecycle.py::test_duplicate_id_error_type_like_spark": Gap(AssertionError,
        "a second run of an active query id with spark.sql.streaming.stopActiveRunOnRestart=false: Spark's JVM "
        "IllegalStateException reaches PySpark unconverted, as py4j's Py4JJavaError (a proxy of the JVM exception); "
        "statestream raises StatestreamIllegalStateException (a RuntimeError) with the same message"
    ),
    "tests/differential/test_sources_more.py::test_file_source_option_set_to_none[max-file-age]": Gap(AssertionError,
        "option('maxFileAge', None): both queries fail when they start, but Spark's file source dereferences the null "
        "and fails with a JVM NullPointerException ('Cannot invoke \"String.toLowerCase(java.util.Locale)\" because "
        "\"str\" is null'); statestream fails with its time-string error ('... Failed to parse time string: null')"
    ),
    "tests/differential/test_sources_more.py::test_file_source_option_set_to_none[clean-source]": Gap(AssertionError,
        "option('cleanSource', None): both queries fail when they start, but Spark's file source dereferences the null "
        "and fails with a JVM NullPointerException ('Cannot invoke \"String.toUpperCase(java.util.Locale)\" because "
        "\"v$1\" is null'); statestream fails with its invalid-mode error ('Invalid mode for clean source option "
        "Some(null). Must be one of ARCHIVE,DELETE,OFF')"
    ),
    'tests/spark_suite/test_streaming_foreach_batch.py::test_batch_as_global_view[statestream]': Gap(Py4JJavaError,
        "foreachBatch's DataFrame read after its batch (a global temporary view of it, read by the test once processAllAvailable() returned): Spark's batch DataFrame is a plan over the batch's input, readable again (2 rows: hello, this); statestream's is the batch's local checkpoint, released when the batch ends, so the read fails with Py4JJavaError [CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND] Checkpoint block rdd_N_0 not found. Reads inside the function are equal"
    ),
    'tests/spark_suite/test_streaming_foreach_batch.py::test_batch_temp_view_in_the_batch_session[statestream]': Gap(Py4JJavaError,
        "foreachBatch's DataFrame read after its batch (a global temporary view of it, read by the test once processAllAvailable() returned): Spark's batch DataFrame is a plan over the batch's input, readable again (2 rows: hello, this); statestream's is the batch's local checkpoint, released when the batch ends, so the read fails with Py4JJavaError [CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND] Checkpoint block rdd_N_0 not found. Reads inside the function are equal"
    ),
    "tests/differential/test_fuzz_findings.py::test_grouping_by_a_nested_key[map<string,int> with a null value]": Gap(AssertionError,
        "a map grouping key with a null value ({'a': null}) beside {'a': 1} in one batch: Spark's engine puts them in "
        "one group ({'a': 1}, n=2, s=9; its batch engine keeps them apart), statestream outputs the null-valued "
        "key as {'a': 0} (n=1, s=4) and {'a': 1} apart (n=1, s=5); maps without null values agree (found by "
        "test_random_queries)"
    ),
    "tests/differential/test_fuzz_findings.py::test_state_after_the_query[dedup_on_an_array]": Gap(PythonException,
        "the state reader over a deduplication keyed by an array: statestream keeps the key binary comparable and "
        "has no decoding for arrays, so reading the state raises 'the state reader cannot show the deduplication "
        "key column of type array ... yet'; Spark shows the key (the query's output is equal; found by "
        "test_random_queries, which skips the state comparison of such cases for this reason)"
    ),
    "tests/spark_suite/test_transform_with_state.py::test_value_state_metadata_and_change_feed[statestream]": Gap(PythonException,
        "the statestore reader with snapshotStartBatchId=0 (and snapshotPartitionId, batchId=0) over a transformWithState "
        "value state: Spark's RocksDB provider (changelog checkpointing on) has a snapshot of version 1 and returns the "
        "partition's rows (key 0: 1, key 1: 2, as the change feed of batch 0 lists them); statestream's store keeps deltas "
        "until its 10th version, so its reader fails with [CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] no snapshot of version 1 "
        "of state variable 'numViolations' in state partition N of operator 0; the query's rows, the state-metadata "
        "variables and the change feed are equal (the reader is statestream/tools/python_state_reader.py)"
    ),
    "tests/spark_suite/test_transform_with_state.py::test_schema_evolution[statestream-pandas]": Gap(StatestreamStreamingQueryException,
        "value state schema evolution with spark.sql.streaming.stateStore.encodingFormat=avro: Spark's engine restarts "
        "the query with three fields added to the value state (the stored row reads with count, active, score null), then "
        "removed, reordered and id widened to long; statestream has no Avro state encoding and refuses the first change "
        "(the second run) with [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Existing value_schema=StructType(StructField(id,"
        "IntegerType,true),StructField(name,StringType,true)) and new value_schema=StructType(... count, active, score)"
    ),
    "tests/spark_suite/test_transform_with_state.py::test_schema_evolution[statestream-rows]": Gap(StatestreamStreamingQueryException,
        "the same as test_schema_evolution[statestream-pandas] for transformWithState: statestream refuses the second run "
        "with [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] where Spark's Avro encoding reads the stored row with the added "
        "fields null"
    ),
    "tests/spark_suite/test_transform_with_state.py::test_schema_evolution_refuses_a_narrowed_type[statestream-pandas]": Gap(StatestreamStreamingQueryException,
        "value state schema evolution with the Avro state encoding: Spark's engine accepts the second run (five fields "
        "down to id long, name) and refuses only the third, which narrows id back to int, with "
        "[STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION] ... Schema evolution is not possible; statestream (no Avro "
        "encoding) already refuses the second run with [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE]"
    ),
    "tests/spark_suite/test_transform_with_state.py::test_schema_evolution_refuses_a_narrowed_type[statestream-rows]": Gap(StatestreamStreamingQueryException,
        "the same as test_schema_evolution_refuses_a_narrowed_type[statestream-pandas] for transformWithState: statestream "
        "refuses the second run with [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE], Spark only the third with "
        "[STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION]"
    ),
    "tests/differential/test_fuzz_findings.py::test_state_after_the_query[map_key]": Gap(AssertionError,
        "the state reader over an aggregation grouped by a map: Spark's state key field is named "
        "'_groupingmapsort' (its analyzer's alias of the sorted map), statestream's is the column's name ('m'); "
        "the values and the query's output are equal (found by test_random_queries)"
    ),
    "tests/differential/test_fuzz_findings.py::test_a_sort_based_aggregate_over_a_map_key_fails_as_on_spark": Gap(pytest.fail.Exception,
        "first(array) grouped by a map: Spark's engine plans a sort-based aggregation and fails "
        "([DATATYPE_MISMATCH.INVALID_ORDERING_TYPE] on '_groupingmapsort ASC NULLS FIRST'); statestream's "
        "state step groups with Arrow, needs no sort and runs the query (found by test_random_queries)"
    ),
    "tests/differential/test_fuzz_findings.py::test_state_after_the_query[collect_list]": Gap(AssertionError,
        "the state reader over collect_list (and collect_set): Spark's buffer is the serialized array (binary 'buf', "
        "e.g. b'\\x00...\\x08...' for an empty list), statestream keeps the array itself ('buf': []); the query's output "
        "is equal (found by test_random_queries, which skips the state comparison of these functions for this reason)"
    ),
    "tests/differential/test_fuzz_findings.py::test_input_rows_of_a_file_of_null_join_keys[stream_stream]": Gap(AssertionError,
        "numInputRows of a stream-stream join's batch whose file has only null join keys: Spark's engine pushes the "
        "join's inferred isnotnull(k) filter to the Parquet scan, skips the file's row group and counts 0 input rows; "
        "statestream counts the rows it read (2 rows, read once per side: 4); the joined rows and state are equal "
        "(found by test_random_queries, which keeps a non-null key in every file of its join cases for this reason)"
    ),
    "tests/differential/test_fuzz_findings.py::test_input_rows_of_a_file_of_null_join_keys[stream_static]": Gap(AssertionError,
        "numInputRows of a stream-static inner join's batch whose file has only null join keys: Spark's engine pushes the "
        "join's inferred isnotnull(k) filter to the Parquet scan, skips the file's row group and counts 0 input rows; "
        "statestream counts the rows it read (2); the joined rows are equal (found by test_random_queries, which keeps "
        "a non-null key in every file of its join cases)"
    ),
    "tests/differential/test_fuzz_findings.py::test_year_month_interval_through_the_state": Gap(StatestreamStreamingQueryException,
        "a year-month interval column through a stateful operator (dropDuplicates on make_ym_interval(0, v)): Spark's "
        "engine runs it (rows 0 and 2); statestream's state steps exchange rows with Spark as Arrow, which PySpark cannot "
        "convert: [UNSUPPORTED_DATA_TYPE_FOR_ARROW_CONVERSION] YearMonthIntervalType(0, 1) is not supported in "
        "conversion to Arrow. The random tester draws day-time intervals only"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_struct_key_timers[pandas-struct]": Gap(AssertionError,
        "transformWithStateInPandas grouped by a struct key ({a: 1, b: 'x'}) whose event-time timer fires in a "
        "later batch: Spark's engine fails when it sets the expired timer's key as the implicit key (PySpark's "
        "_serialize_to_bytes rebuilds the struct, a Row from the JVM, from a generator: PicklingError 'cannot pickle "
        "\'generator\' object', wrapped in FOREACH_BATCH_USER_FUNCTION_ERROR); statestream fires the timer and emits the "
        "key's final row. A null struct key works on both. Found by the random tester (seed 15), which draws no timer "
        "for transformWithState over struct keys"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_struct_key_timers[pandas-struct_of_nulls]": Gap(AssertionError,
        "transformWithStateInPandas grouped by a struct key ({a: null, b: null}) whose event-time timer fires in a "
        "later batch: Spark's engine fails when it sets the expired timer's key as the implicit key (PySpark's "
        "_serialize_to_bytes rebuilds the struct, a Row from the JVM, from a generator: PicklingError 'cannot pickle "
        "\'generator\' object', wrapped in FOREACH_BATCH_USER_FUNCTION_ERROR); statestream fires the timer and emits the "
        "key's final row. A null struct key works on both. Found by the random tester (seed 15), which draws no timer "
        "for transformWithState over struct keys"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_struct_key_timers[rows-struct]": Gap(AssertionError,
        "transformWithState (rows) grouped by a struct key ({a: 1, b: 'x'}) whose event-time timer fires in a "
        "later batch: Spark's engine fails when it sets the expired timer's key as the implicit key (PySpark's "
        "_serialize_to_bytes rebuilds the struct, a Row from the JVM, from a generator: PicklingError 'cannot pickle "
        "\'generator\' object', wrapped in FOREACH_BATCH_USER_FUNCTION_ERROR); statestream fires the timer and emits the "
        "key's final row. A null struct key works on both. Found by the random tester (seed 15), which draws no timer "
        "for transformWithState over struct keys"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_struct_key_timers[rows-struct_of_nulls]": Gap(AssertionError,
        "transformWithState (rows) grouped by a struct key ({a: null, b: null}) whose event-time timer fires in a "
        "later batch: Spark's engine fails when it sets the expired timer's key as the implicit key (PySpark's "
        "_serialize_to_bytes rebuilds the struct, a Row from the JVM, from a generator: PicklingError 'cannot pickle "
        "\'generator\' object', wrapped in FOREACH_BATCH_USER_FUNCTION_ERROR); statestream fires the timer and emits the "
        "key's final row. A null struct key works on both. Found by the random tester (seed 15), which draws no timer "
        "for transformWithState over struct keys"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_key_types[pandas-null_timestamp]": Gap(AssertionError,
        "transformWithStateInPandas grouped by a null TIMESTAMP key (two rows): Spark's engine fails (pandas holds the "
        "key as NaT, and PySpark's worker cannot set it as the implicit key: PythonException 'ValueError: NaTType does "
        "not support timetuple'); statestream runs the query (k=None, n=1 then n=2: a NaT key is unequal to itself, so "
        "one call per row). The random tester draws no null timestamp key for this family"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_key_types[pandas-null_timestamp_ntz]": Gap(AssertionError,
        "transformWithStateInPandas grouped by a null TIMESTAMP_NTZ key (two rows): Spark's engine fails as for a null "
        "TIMESTAMP key (PythonException 'ValueError: NaTType does not support timetuple'); statestream runs the query"
    ),
    "tests/differential/test_stream_joins.py::test_condition_on_alias_qualified_columns": Gap(StatestreamStreamingQueryException,
        "a stream-stream join of two aliased sides (df.alias('a'), df.alias('b')) whose condition names a.k, b.ts...: "
        "Spark's engine runs it and emits the matches of SHORT_INPUT; statestream's first batch fails with "
        "[AMBIGUOUS_REFERENCE] Reference `ts` is ambiguous (the stand-in sides of its join now carry the aliases, but "
        "a later step of the join still names the event-time column unqualified). Found in session 46"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_pandas_null_integer_key_beside_zero[tinyint]": Gap(AssertionError,
        "transformWithStateInPandas grouped by an integer key that is null in one row and 0 in another (one batch): "
        "Spark's engine keeps one state for both (pandas holds the null key as a float NaN, which becomes 0 when "
        "PySpark's worker sets it as the implicit key): key 0's row says n=2 and the operator 1 state row; "
        "statestream keeps one state per grouping key (n=1 for each, 2 state rows). Found by the random tester "
        "(seed 36), which draws no null integer key for this family"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_pandas_null_integer_key_beside_zero[bigint]": Gap(AssertionError,
        "transformWithStateInPandas grouped by an integer key that is null in one row and 0 in another (one batch): "
        "Spark's engine keeps one state for both (pandas holds the null key as a float NaN, which becomes 0 when "
        "PySpark's worker sets it as the implicit key): key 0's row says n=2 and the operator 1 state row; "
        "statestream keeps one state per grouping key (n=1 for each, 2 state rows). Found by the random tester "
        "(seed 36), which draws no null integer key for this family"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_key_types[pandas-null_string]": Gap(AssertionError,
        "transformWithStateInPandas grouped by a null STRING key, the processor writing the key back: pandas 3 gives the "
        "key as a float NaN, and both engines fail converting the output (TypeError: Expected Array, got ChunkedArray). "
        "Spark's error carries FOREACH_BATCH_USER_FUNCTION_ERROR, because its operator runs lazily inside the test's "
        "foreachBatch collect; statestream's state step runs before the sink, so its error is the Python worker's alone. "
        "The random tester draws no null string key for this family"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_key_types[pandas-array]": Gap(AssertionError,
        "transformWithStateInPandas grouped by an array key ([1, 2], two rows): Spark's engine fails (PySpark's worker "
        "compares the numpy arrays pandas gives for the key: ValueError: The truth value of an array with more than "
        "one element is ambiguous, or for one element arrays an unpicklable key in 'Error setting implicit key'); "
        "statestream runs the query (k=[1, 2], n=2). The random tester draws no array key for this family"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_key_types[pandas-interval]": Gap(AssertionError,
        "transformWithStateInPandas grouped by a day-time interval: Spark's engine fails with 'Unexpected type "
        "DayTimeIntervalType(0,3). SQLSTATE: XXKST' (no error condition); statestream runs the query (k=0:00:05, n=2). "
        "The random tester draws no interval key for transformWithState"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_key_types[rows-interval]": Gap(AssertionError,
        "transformWithState grouped by a day-time interval: Spark's engine fails with 'Unexpected type "
        "DayTimeIntervalType(0,3). SQLSTATE: XXKST'; statestream runs the query (k=0:00:05, n=2)"
    ),
    "tests/differential/test_fuzz_findings.py::test_transform_with_state_key_types[rows-year_month_interval]": Gap(AssertionError,
        "transformWithState grouped by a year-month interval: both engines fail, Spark's with 'Unexpected type "
        "YearMonthIntervalType(0,1). SQLSTATE: XXKST' (no condition), statestream's with "
        "[UNSUPPORTED_DATA_TYPE_FOR_ARROW_CONVERSION] YearMonthIntervalType(0, 1) is not supported in conversion to Arrow"
    ),
}


def apply(items) -> None:
    """Mark every collected test with a declared gap as a strict xfail of its exception."""
    for item in items:
        gap = KNOWN_GAPS.get(item.nodeid)
        if gap is not None:
            item.add_marker(pytest.mark.xfail(reason=gap.reason, strict=True, raises=gap.raises))
