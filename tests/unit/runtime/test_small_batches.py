"""Small batches: when a batch runs all of an operator's state partitions in one task, and the
function that does it (``runtime.small_batches``, ``state_step.AllStatePartitions``), without
Spark."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from statestream.operators.aggregate import PARTITION_ID_COLUMN
from statestream.operators.state_step import ROUTE_COLUMN, AllStatePartitions, StateStep
from statestream.runtime.small_batches import (
    DEFAULT_SINGLE_STATE_TASK_MAX_ROWS,
    SINGLE_STATE_TASK_MAX_ROWS_CONF,
    fixed_size_buffers,
    routes_at_materialisation,
    rows_emitted,
    shuffled_rows,
    single_state_task,
    single_state_task_max_rows,
)


def progress(input_rows: int, *state_rows: int) -> dict:
    return {"numInputRows": input_rows, "stateOperators": [{"numRowsTotal": n} for n in state_rows]}


@pytest.mark.parametrize(
    ("last", "max_rows", "expected"),
    [
        (None, 100, False),  # the first batch of a run
        (progress(20, 5), 100, True),
        (progress(100, 100), 100, True),
        (progress(101, 5), 100, False),  # the last batch's input was large
        (progress(20, 5, 101), 100, False),  # one operator's state is large
        (progress(20, 5), 0, False),  # turned off
        ({"numInputRows": 3, "stateOperators": []}, 100, False),  # no state
    ],
)
def test_single_state_task_looks_at_the_last_batch(last, max_rows, expected):
    assert single_state_task(last, last, max_rows) is expected


@pytest.mark.parametrize(
    ("with_input", "newest", "expected"),
    [
        # a large batch, then a no-data batch whose state is small: the next batch is large too
        (progress(1_000, 5), progress(0, 5), False),
        # small batches with no-data batches between them stay in one task
        (progress(20, 5), progress(0, 5), True),
        # an idle trigger's progress (no state figures) does not hide the last batch's state
        (progress(20, 500), {"numInputRows": 0, "stateOperators": [{}]}, False),
        (progress(20, 5), {"numInputRows": 0, "stateOperators": [{}]}, True),
        # a batch that read nothing but grew the state (timers): the newest state counts too
        (progress(20, 5), progress(0, 500), False),
        # only no-data batches so far in this run (a restart): one task per partition
        (None, progress(0, 5), False),
    ],
)
def test_single_state_task_looks_past_batches_that_read_nothing(with_input, newest, expected):
    assert single_state_task(with_input, newest, 100) is expected


@pytest.mark.parametrize(
    ("last", "shuffled", "expected"),
    [
        # a million rows over a few keys: the partial step left a few dozen rows to shuffle
        (progress(1_000_000, 5), 28, True),
        (progress(1_000_000, 5), 100, True),
        (progress(1_000_000, 5), 101, False),
        (progress(1_000_000, 5), None, False),  # not measured (another operator, a skipped step)
        (progress(20, 5), 5_000, True),  # few rows read: that measure is enough
        (progress(1_000_000, 500), 28, False),  # the state is large all the same
        (None, 28, False),
    ],
)
def test_single_state_task_takes_the_rows_a_batch_shuffled_when_fewer(last, shuffled, expected):
    assert single_state_task(last, last, 100, shuffled) is expected


class _Option:
    def __init__(self, value=None):
        self.value_ = value

    def isDefined(self):
        return self.value_ is not None

    def get(self):
        return type("Metric", (), {"value": lambda _self: self.value_})()


class _Seq(list):
    def size(self):
        return len(self)

    def apply(self, i):
        return self[i]


class _Node:
    """A JVM plan node as py4j shows it: ``children()``, ``metrics().get(name)`` and
    ``outputPartitioning()``."""

    def __init__(self, *children, partitioning="hashpartitioning(k#1, 4)", **metrics):
        self._children = _Seq(children)
        self._metrics = metrics
        self._partitioning = partitioning

    def children(self):
        return self._children

    def outputPartitioning(self):
        return type("Partitioning", (), {"toString": lambda _self: self._partitioning})()

    def metrics(self):
        return type("Metrics", (), {"get": lambda _self, name: _Option(self._metrics.get(name))})()


class _Result:
    def __init__(self, plan):
        executed = type("QueryExecution", (), {"executedPlan": lambda _self: plan})()
        self._jdf = type("Dataset", (), {"queryExecution": lambda _self: executed})()


def test_shuffled_rows_sums_the_exchanges_into_the_state_stage():
    scan = _Node(numOutputRows=1_000_000)
    exchange = _Node(_Node(scan, numOutputRows=28), shuffleRecordsWritten=28)
    other = _Node(_Node(scan), shuffleRecordsWritten=12)
    assert shuffled_rows(_Result(_Node(_Node(exchange), other))) == 40
    # a one-task batch's output going back to its partitions is not the state stage's input
    routes = _Node(_Node(exchange), partitioning=f"hashpartitioning({ROUTE_COLUMN}#9, 4)", shuffleRecordsWritten=14)
    assert shuffled_rows(_Result(_Node(routes))) == 28
    assert shuffled_rows(_Result(_Node(_Node(scan)))) is None  # no exchange: not a measure
    assert shuffled_rows(_Result(_Node(_Node(scan), _Node(shuffleRecordsWritten=0)))) == 0
    assert shuffled_rows(object()) is None  # not a classic DataFrame


@dataclass
class _Call:
    merge_groups: tuple


def test_only_fixed_size_buffers_make_the_shuffled_rows_a_measure():
    assert fixed_size_buffers([_Call((("sum0", ("c",)),)), _Call((("moments", ("n", "avg", "m2")), ("max", ("hi",))))])
    assert fixed_size_buffers([])
    # the values kept in a list or a set: a few shuffled rows may carry every row
    assert not fixed_size_buffers([_Call((("sum0", ("c",)),)), _Call((("concat", ("vs",)),))])
    assert not fixed_size_buffers([_Call((("union", ("vs",)),))])
    # a rule that is an object (HyperLogLog's registers, fed by a list of hashes)
    assert not fixed_size_buffers([_Call(((object(), ("r0", "r1")),))])


def test_single_state_task_max_rows_from_the_conf():
    assert single_state_task_max_rows(lambda k, d: d) == DEFAULT_SINGLE_STATE_TASK_MAX_ROWS
    assert single_state_task_max_rows(lambda k, d: " 0 ") == 0
    assert single_state_task_max_rows({SINGLE_STATE_TASK_MAX_ROWS_CONF: "500"}.get) == 500
    for bad in ("-1", "many", "1e3"):
        with pytest.raises(ValueError, match=SINGLE_STATE_TASK_MAX_ROWS_CONF):
            single_state_task_max_rows(lambda k, d, bad=bad: bad)


@dataclass(frozen=True)
class _Recording(StateStep):
    """A step that returns, per partition, its rows with the partition it was run for."""

    operator_id: int = 0
    input_schema: pa.Schema = field(default_factory=lambda: pa.schema([("v", pa.int64()), (PARTITION_ID_COLUMN, pa.int32())]))

    def process(self, partition, batches):
        table = self.partition_input(batches, partition, "test")
        out = pa.table({"ran": pa.array(np.full(table.num_rows + 1, partition), pa.int32()), "v": pa.concat_arrays([table.column("v").combine_chunks(), pa.array([None], pa.int64())])})
        return out, {"partition": partition}


def _batch(values, pids) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(values, pa.int64()), pa.array(pids, pa.int32())], names=["v", PARTITION_ID_COLUMN])


def test_all_state_partitions_runs_every_partition_with_its_own_rows_in_order():
    step = _Recording()
    batches = [_batch([1, 2, 3], [2, 0, 2]), _batch([], []), _batch([4, 5], [0, 2])]
    out = pa.Table.from_batches(list(AllStatePartitions(step, (10, 11, 12, 13))(iter(batches))))
    assert [r - 10 for r in out.column(ROUTE_COLUMN).to_pylist()] == out.column("ran").to_pylist()  # each row's route
    got: dict[int, list] = {}
    for ran, v in zip(out.column("ran").to_pylist(), out.column("v").to_pylist()):
        got.setdefault(ran, []).append(v)
    # partitions 1 and 3 had no rows and ran all the same (one None each: the step's marker)
    assert got == {0: [2, 4, None], 1: [None], 2: [1, 3, 5, None], 3: [None]}
    assert out.column("ran").to_pylist() == sorted(out.column("ran").to_pylist())  # one after another


def test_all_state_partitions_without_rows_runs_every_partition():
    out = pa.Table.from_batches(list(AllStatePartitions(_Recording(), (0, 1, 2))(iter([]))))
    assert out.column("ran").to_pylist() == [0, 1, 2]


def test_all_state_partitions_refuses_a_row_of_a_partition_it_does_not_have():
    with pytest.raises(RuntimeError, match=r"state partitions \[5\].*operator 0 \(it has 4\)"):
        list(AllStatePartitions(_Recording(), (0, 1, 2, 3))(iter([_batch([1, 2], [0, 5])])))
    with pytest.raises(RuntimeError, match=r"state partitions \[-1\]"):
        list(AllStatePartitions(_Recording(), (0, 1, 2, 3))(iter([_batch([1, 2], [0, -1])])))


# -- where a one-task batch's rows take their partitions -------------------------------------------


def _aggregation(keys: tuple[str, ...] = ("__k0",), recompute: bool = False, saver: type | None = None):
    from statestream.operators.aggregate import AggregationInfo, StreamingAggregateExec
    from statestream.operators.stateful import StateStoreSaveExec

    call = SimpleNamespace(spec=SimpleNamespace(recompute=recompute))
    info = AggregationInfo(grouping=(), grouping_names=keys, key_columns=keys, calls=(call,), output_schema=None)  # type: ignore[arg-type]
    return StreamingAggregateExec(child=(saver or StateStoreSaveExec)(info=info), info=info, mode="Final")


def test_a_keyed_aggregation_at_the_root_takes_its_partitions_after_the_job():
    from statestream.operators.session_window import SessionWindowStateStoreSaveExec

    assert routes_at_materialisation(_aggregation(), 4)
    assert routes_at_materialisation(_aggregation(saver=SessionWindowStateStoreSaveExec), 4)


def test_a_deduplication_at_the_root_takes_its_partitions_after_the_job():
    from statestream.operators.dedup import StreamingDeduplicateExec, StreamingDeduplicateWithinWatermarkExec

    assert routes_at_materialisation(StreamingDeduplicateExec(), 2)
    assert routes_at_materialisation(StreamingDeduplicateWithinWatermarkExec(), 2)


def test_the_rows_take_their_partitions_in_the_job_where_something_may_read_them():
    from statestream.operators.aggregate import StreamingAggregateExec
    from statestream.operators.basic import StatelessExec

    assert not routes_at_materialisation(_aggregation(), 1)  # one partition: nothing to route
    assert not routes_at_materialisation(_aggregation(keys=()), 4)  # a global aggregation
    # a call finished by an aggregation of its own by the keys (a percentile): it shuffles
    assert not routes_at_materialisation(_aggregation(recompute=True), 4)
    # a projection of the user's may read the partition (spark_partition_id())
    assert not routes_at_materialisation(StatelessExec(child=_aggregation(), op="Project"), 4)
    # the Final step over something else than the state store's save
    final = _aggregation()
    assert not routes_at_materialisation(StreamingAggregateExec(child=StatelessExec(child=final.child), info=final.info, mode="Final"), 4)


def test_two_stateful_operators_keep_the_route_in_the_job():
    """The flag reaches every state step of the batch: a deduplication above an aggregation
    would get the aggregation's rows in one partition, route column and all."""
    from statestream.operators.dedup import StreamingDeduplicateExec

    assert not routes_at_materialisation(StreamingDeduplicateExec(child=_aggregation()), 4)
    below = StreamingDeduplicateExec()
    agg = _aggregation()
    over_dedup = type(agg)(child=type(agg.child)(child=below, info=agg.info), info=agg.info, mode="Final")
    assert not routes_at_materialisation(over_dedup, 4)


def test_an_output_expression_around_the_calls_keeps_the_route_in_the_job():
    """``count(*) + spark_partition_id()``: Spark's Final step evaluates it in the state partition."""
    from statestream.operators.aggregate import AggregationInfo, StreamingAggregateExec
    from statestream.operators.stateful import StateStoreSaveExec

    plain = SimpleNamespace(spec=SimpleNamespace(recompute=False))
    around = SimpleNamespace(spec=None, final_over=lambda values: values[0], inner=(plain,))
    info = AggregationInfo(grouping=(), grouping_names=("k",), key_columns=("__k0",), calls=(plain, around), output_schema=None)  # type: ignore[arg-type]
    assert not routes_at_materialisation(StreamingAggregateExec(child=StateStoreSaveExec(info=info), info=info, mode="Final"), 4)


def test_rows_emitted_takes_each_partitions_last_report():
    reports = [
        {"operatorId": 0, "partition": 0, "numOutputRows": 3},
        {"operatorId": 0, "partition": 1, "numOutputRows": 5},
        {"operatorId": 0, "partition": 0, "numOutputRows": 4},  # a retried task
    ]
    assert rows_emitted(reports) == 9
    assert rows_emitted([]) == 0
    assert rows_emitted([{"operatorId": 0, "partition": 0}]) is None
