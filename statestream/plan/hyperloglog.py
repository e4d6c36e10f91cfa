"""``approx_count_distinct`` planned with Spark's buffer: HyperLogLog++ register words.

Spark's ``HyperLogLogPlusPlus`` is a declarative aggregate over ``MS[0]`` ... ``MS[W-1]`` (longs),
so its streaming state holds the sketch, bounded whatever a key's input. statestream keeps the
same words (``operators/hyperloglog.py`` has the sketch arithmetic):

* batch side: Spark hashes every non-null value as HyperLogLog++ does (``xxhash64``, seed 42,
  floats normalised) and collects each key's hashes (``collect_list``, so one Spark aggregation
  still computes every call's partial buffers);
* state step: the hashes become words, merged register-wise with the stored words
  (``HyperLogLogRule``);
* session windows: each row's words are computed by Spark expressions (one register set);
* final: the estimate, a scalar Arrow UDF over the words, with the threshold and bias tables
  read from the running Spark's ``HyperLogLogPlusPlusHelper`` (facts of the algorithm, never
  copied into this code).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statestream._jvm.calls import jvm_view
from statestream.operators.hyperloglog import (
    MAX_BIAS_PRECISION,
    REGISTER_SIZE,
    REGISTERS_PER_WORD,
    BiasTables,
    HyperLogLogFinisher,
    HyperLogLogRule,
    estimate,
    num_words,
    precision_of,
)
from statestream.operators.python_worker import releasing_zip_importers
from statestream.plan.aggregate_functions import BufferField
from statestream.errors import UnsupportedAggregateError, approx_count_distinct_rsd_error
from statestream.plan.aggregates import AggregateCall

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["HyperLogLogPlusPlusCall", "as_hyperloglog", "bias_tables", "DEFAULT_RSD"]

#: Spark's default relative standard deviation of ``approx_count_distinct``
DEFAULT_RSD = 0.05


@functools.lru_cache(maxsize=None)
def bias_tables(p: int) -> BiasTables:
    """The running Spark's HyperLogLog++ tables for precision ``p`` (read once per ``p``)."""
    if p > MAX_BIAS_PRECISION:
        return BiasTables(p)
    from pyspark import SparkContext

    jvm = jvm_view(SparkContext)
    helper = jvm.org.apache.spark.sql.catalyst.util.HyperLogLogPlusPlusHelper
    raw = helper.RAW_ESTIMATE_DATA()[p - 4]
    bias = helper.BIAS_DATA()[p - 4]
    threshold = helper.THRESHOLDS()[p - 4]
    return BiasTables(p, tuple(float(x) for x in raw), tuple(float(x) for x in bias), float(threshold))


def _hashed(value: "Column", data_type: Any) -> "Column":
    """HyperLogLog++'s hash of a value (null for null): Spark's ``xxhash64`` (seed 42) of the
    value, a float or double normalised first (``-0.0`` hashes as ``0.0``, every NaN as one)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    if isinstance(data_type, (FloatType, DoubleType)):
        t = data_type.simpleString()
        value = (
            F.when(F.isnan(value), F.lit(float("nan")).cast(t))
            .when(value == F.lit(0).cast(t), F.lit(0.0).cast(t))
            .otherwise(value)
        )
    return F.when(value.isNotNull(), F.xxhash64(value))


@dataclass(frozen=True)
class HyperLogLogPlusPlusCall(AggregateCall):
    """``approx_count_distinct(x[, rsd])`` with Spark's sketch words as its buffer."""

    p: int = 9
    input_column: str = ""
    data_type: Any = None  # the argument's Spark type (floats are normalised before hashing)

    @property
    def _columns(self) -> tuple[str, ...]:
        return tuple(b.column for b in self.buffers)

    @property
    def merge_groups(self) -> tuple[tuple[Any, tuple[str, ...]], ...]:
        return ((HyperLogLogRule(self.p, self.input_column, self._columns), self._columns),)

    def partial_columns(self) -> list["Column"]:
        """Each key's value hashes in this batch (nulls are skipped, as HyperLogLog++ skips them)."""
        from pyspark.sql import functions as F

        return [F.collect_list(_hashed(self.args[0], self.data_type)).alias(self.input_column)]

    def partial_names(self) -> list[str]:
        return [self.input_column]

    def state_fields(self) -> list[Any]:
        from pyspark.sql.types import LongType, StructField

        return [StructField(c, LongType(), True) for c in self._columns]

    def row_columns(self) -> list["Column"]:
        """One row's sketch (a session window's rows): the word holding the value's register has
        the register's value, every other word is 0."""
        from pyspark.sql import functions as F

        p = self.p
        h = _hashed(self.args[0], self.data_type)
        idx = F.shiftrightunsigned(h, 64 - p)
        w = F.shiftleft(h, p).bitwiseOR(F.lit(1 << (p - 1)).cast("long"))
        # one more than the leading zeros of w (never 0): 65 minus the length of its binary digits
        value = (F.lit(65) - F.length(F.bin(w))).cast("long")
        word = F.floor(idx / F.lit(REGISTERS_PER_WORD))
        shift = (idx % F.lit(REGISTERS_PER_WORD)) * F.lit(REGISTER_SIZE)
        contribution = F.call_function("shiftleft", value, shift.cast("int"))
        zero = F.lit(0).cast("long")
        return [F.when(word == F.lit(k), contribution).otherwise(zero) for k in range(len(self.buffers))]

    @property
    def finished_column(self) -> str:
        """The estimate's column when the aggregation's state step computes it."""
        return f"{self.input_column}_estimate"

    def step_finisher(self) -> HyperLogLogFinisher:
        """The estimate computed inside the aggregation's state step, from the words it holds."""
        return HyperLogLogFinisher(self._columns, self.finished_column, bias_tables(self.p))

    def final_column(self) -> "Column":
        """The estimate over the merged words, as a scalar Arrow UDF (never null, as Spark's):
        what a session window's state step, which emits the words, is finished with."""
        import warnings

        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql import functions as F

        tables = bias_tables(self.p)
        n = len(self.buffers)

        def finish(words: pa.Array) -> pa.Array:
            columns = [
                np.asarray(pc.fill_null(words.field(k), 0).to_numpy(zero_copy_only=False), dtype=np.int64) for k in range(n)
            ]
            return pa.array(estimate(columns, tables), pa.int64())

        finish.__name__ = "approx_count_distinct_finish"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            udf = F.arrow_udf(releasing_zip_importers(finish), "long", F.ArrowUDFType.SCALAR)
        words = F.struct(*(F.col(c).alias(f"w{k}") for k, c in enumerate(self._columns)))
        return F.coalesce(udf(words), F.lit(0).cast("long"))


def as_hyperloglog(call: AggregateCall, index: int | str, input_df: Any = None) -> AggregateCall:
    """``call`` as a ``HyperLogLogPlusPlusCall`` when it is a plain ``approx_count_distinct``;
    any other call unchanged."""
    if call.function != "approx_count_distinct" or call.is_distinct or not call.args:
        return call
    rsd = call.options[0] if call.options else DEFAULT_RSD
    if rsd is None or isinstance(rsd, bool) or not isinstance(rsd, (int, float)):
        raise approx_count_distinct_rsd_error(call.sql)
    try:
        p = precision_of(float(rsd))
    except ValueError as e:
        raise UnsupportedAggregateError(str(e)) from None
    data_type = None
    if input_df is not None:
        try:
            data_type = input_df.select(call.args[0]).schema.fields[0].dataType
        except Exception:  # noqa: BLE001 - Spark's own analysis of the template reports it
            data_type = None
    buffers = tuple(BufferField(f"MS[{k}]", f"__b{index}_ms{k}", "hll", 0) for k in range(num_words(p)))
    fields = {f.name: getattr(call, f.name) for f in dataclasses.fields(AggregateCall)}
    fields["buffers"] = buffers
    fields["spec"] = None  # every part of the call is its own (no FunctionSpec)
    return HyperLogLogPlusPlusCall(**fields, p=p, input_column=f"__b{index}_hashes", data_type=data_type)
