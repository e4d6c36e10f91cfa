"""The randomized differential tester: random streaming queries (``random_queries.py``) run on
Spark's engine and on statestream, compared batch by batch.

For each drawn case both engines get the same input files, one micro-batch each; the harness
compares every batch's rows, output columns, ``numInputRows``, watermark and event-time stats,
and each state operator's row counts (``numRowsTotal``, ``numRowsUpdated``, ``numRowsRemoved``,
``numRowsDroppedByWatermark``). When Spark's engine refuses or fails the query, statestream must
fail too, with the same error condition.

CI runs a fixed-seed sample (``--fuzz-examples``, default 12, ``--fuzz-seed``, default 0);
``scripts/fuzz.sh N`` runs N cases from a random seed, which it prints. A failure shrinks to a
small case (Hypothesis), printed with its input batches; ``--fuzz-seed`` with the printed seed
replays the run. With ``STATESTREAM_FUZZ_LEDGER`` set (``scripts/fuzz.sh`` sets it), a run
without a difference is appended to that ledger (:func:`record_run`).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from pyspark.errors import PySparkException

from tests.differential.harness import StreamRun, assert_same_batches, error_text, rows_match, run_stream
from tests.differential.random_queries import FAMILIES, Case, cases
from tests.spark_confs import session_confs

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"

_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")


#: the condition Spark wraps an error in when the batch's plan runs inside the sink's function
FOREACH_BATCH_WRAPPER = "FOREACH_BATCH_USER_FUNCTION_ERROR"


def error_conditions(exc: BaseException) -> list[str]:
    """The error conditions named in a failure's text, outermost first, without the wrappers
    every failed query has (``STREAM_FAILED``)."""
    return [c for c in _CONDITION.findall(str(exc)) if c != "STREAM_FAILED"]


def _kind(exc: BaseException) -> str:
    """The PySpark exception class a failure is an instance of (statestream's errors subclass
    PySpark's), else the exception's own class."""
    for cls in type(exc).__mro__:
        if cls.__module__.startswith("pyspark.errors") and issubclass(cls, PySparkException):
            return cls.__name__
    return type(exc).__name__


def _run(engine, case: Case, root) -> StreamRun:
    """``case`` on one engine: its batches in one run, or in two with a restart between."""
    parts = [case.batches[: case.restart_at], case.batches[case.restart_at :]] if case.restart_at else [case.batches]
    got: list = []
    for part in parts:
        run = run_stream(engine, case.build(), part, case.schema, case.mode, root, workdir=root / "w", **case.run_options())
        got += run.batches
    return StreamRun(run.engine, got, checkpoint=run.checkpoint)


def _state_rows(reader, checkpoint: str, options: dict[str, str]) -> list[dict]:
    """A state store's rows as of the last batch, through the ``statestore`` reader."""
    return [r.asDict(recursive=True) for r in reader.format("statestore").options(**options).load(checkpoint).collect()]


def run_case(spark, ours, case: Case, workdir, strict_wrappers: bool = False) -> None:
    """Run ``case`` on both engines and fail on any difference: the batches, then the state.

    A failure Spark wraps in ``FOREACH_BATCH_USER_FUNCTION_ERROR`` (its plan runs lazily inside
    the harness's foreachBatch) is compared by what it wraps: the declared difference of
    ``test_fuzz_findings.py::test_an_overflow_in_the_state_step_under_a_foreach_batch_sink``
    (``strict_wrappers``: compare the wrapper too, as that declared case does)."""
    confs = {"spark.sql.shuffle.partitions": str(case.partitions)}
    if case.provider == "rocksdb" or case.family.startswith("transform_with_state"):
        confs[PROVIDER] = ROCKSDB  # transformWithState always: Spark's engine needs it
    engines = {"spark": spark, "statestream": ours()}
    outcome = {}
    with session_confs(spark, confs):
        for name, engine in engines.items():
            try:
                outcome[name] = _run(engine, case, workdir / f"{name}-{uuid.uuid4().hex[:8]}")
            except Exception as exc:  # noqa: BLE001 - a failure is compared with the other engine's
                outcome[name] = exc
    expected, actual = outcome["spark"], outcome["statestream"]
    where = "\n" + case.describe()
    if isinstance(expected, BaseException) or isinstance(actual, BaseException):
        if not isinstance(expected, BaseException):
            raise AssertionError(f"statestream failed where Spark's engine ran the query: {error_text(actual)[:3000]}{where}") from actual
        if not isinstance(actual, BaseException):
            raise AssertionError(f"Spark's engine failed where statestream ran the query: {error_text(expected)[:3000]}{where}")
        spark_conditions, our_conditions = error_conditions(expected), error_conditions(actual)
        if not strict_wrappers and spark_conditions[:1] == [FOREACH_BATCH_WRAPPER] and our_conditions[:1] != [FOREACH_BATCH_WRAPPER]:
            spark_conditions = spark_conditions[1:]
        if spark_conditions[:1] != our_conditions[:1] or (not spark_conditions and _kind(expected) != _kind(actual)):
            raise AssertionError(
                f"both engines failed, differently:\nspark: {_kind(expected)} {error_text(expected)[:2000]}\n"
                f"statestream: {_kind(actual)} {error_text(actual)[:2000]}{where}"
            )
        return
    try:
        assert_same_batches(expected, actual)
    except AssertionError as diff:
        raise AssertionError(f"{diff}{where}") from None
    if not any(b.state for b in expected.batches):
        return  # a stateless query (no state operator in its progress): no state to read
    if case.family.startswith("dedup") and any("<" in t for t in case.dedup_key_types):
        # declared: test_fuzz_findings.py::test_state_after_the_query[dedup_on_an_array]
        return
    if any(name.startswith("sorted_collect") for name, _ in case.aggregates):
        # declared: test_fuzz_findings.py::test_state_after_the_query[collect_list]
        return
    for options in case.state_reads():
        theirs = _state_rows(spark.read, expected.checkpoint, options)
        ours_rows = _state_rows(engines["statestream"].read, actual.checkpoint, options)
        if not rows_match(theirs, ours_rows):
            raise AssertionError(
                f"the state ({options or 'operator 0'}) differs after the last batch:\n"
                f"spark: {sorted(map(repr, theirs))}\nstatestream: {sorted(map(repr, ours_rows))}{where}"
            )


def test_random_queries_agree_with_spark(spark, ours, tmp_path, request):
    """The fixed-seed sample of random queries (CI); ``--fuzz-examples``/``--fuzz-seed`` for more."""
    examples = request.config.getoption("--fuzz-examples")
    chosen_seed = request.config.getoption("--fuzz-seed")
    families = tuple(f for f in request.config.getoption("--fuzz-families").split(",") if f) or FAMILIES
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise pytest.UsageError(f"--fuzz-families: no family {sorted(unknown)}; the families are {', '.join(FAMILIES)}")
    print(f"random queries: {examples} cases from seed {chosen_seed}, families {', '.join(families)}")

    @seed(chosen_seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        print_blob=True,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
    @given(cases(families))
    def check(case: Case) -> None:
        ran[0] += 1
        run_case(spark, ours, case, tmp_path / uuid.uuid4().hex[:8])

    ran = [0]
    check()
    print(f"random queries: {ran[0]} cases ran, none differed")
    ledger = os.environ.get("STATESTREAM_FUZZ_LEDGER")
    if ledger:
        record_run(Path(ledger), chosen_seed, ran[0], families)


def record_run(ledger: Path, seed_value: int, cases_run: int, families: tuple[str, ...]) -> None:
    """Append a passed run to the ledger (``scripts/fuzz.sh`` keeps ``fuzz-ledger.tsv``): the
    date, the commit it ran on (``+`` when the tree had changes), the seed, the cases and the
    families, so that runs of many sessions add up to a count of cases without a difference."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+"
    new = not ledger.exists()
    with ledger.open("a", encoding="utf-8") as out:
        if new:
            out.write("date\tcommit\tseed\tcases\tfamilies\n")
        when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
        out.write(f"{when}\t{commit}\t{seed_value}\t{cases_run}\t{','.join(families) if set(families) != set(FAMILIES) else 'all'}\n")

