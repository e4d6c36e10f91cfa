"""Every aggregate function statestream can run in a streaming aggregation, as Spark defines it:
its aggregation buffer (names, in Spark's order), how one batch's buffer is computed by Spark,
how one row's buffer looks (for session windows), the merge rule, and the final expression.

Spark: the ``aggBufferAttributes``, ``updateExpressions``, ``mergeExpressions`` and
``evaluateExpression`` of each ``DeclarativeAggregate`` (and the buffer of the collecting
``TypedImperativeAggregate`` s). A batch's buffer comes from Spark's own batch aggregation: the
exact aggregates that make up the buffer (``count``, ``avg``, ``var_pop`` times ``n``...) are
computed by Spark, so a batch's buffer is Spark's up to floating-point rounding; state buffers
are merged by ``operators/aggregate_merge.py``; the final value is computed by Spark from the
merged buffers with the same guards as Spark's ``evaluateExpression`` (a division by zero that
Spark does not guard fails here as there: ``corr`` of a constant column under ANSI).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from statestream.operators.python_worker import releasing_zip_importers

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "BufferField",
    "DecimalArg",
    "FilterCondition",
    "WithinGroup",
    "decimal_arg",
    "FunctionSpec",
    "FUNCTIONS",
    "ALIASES",
    "DISTINCT_AGGREGATION_CONF",
    "LEGACY_DISTINCT_AGGREGATION_CONF",
    "distinct_aggregation_enabled",
    "distinct_spec",
]

#: statestream's opt-in (Spark refuses distinct aggregates on streams): exact distinct aggregates,
#: the distinct values kept in state with their group
DISTINCT_AGGREGATION_CONF = "spark.statestream.aggregation.distinct.enabled"
#: its first name, still read (without the ``spark.`` prefix that statestream's other confs have)
LEGACY_DISTINCT_AGGREGATION_CONF = "statestream.sql.streaming.distinctAggregation.enabled"


def distinct_aggregation_enabled(get: Callable[[str, str], Any]) -> bool:
    """Whether a session's confs (``get(key, default)``) turn exact distinct aggregates on,
    under :data:`DISTINCT_AGGREGATION_CONF` or its legacy name.

    >>> distinct_aggregation_enabled({"statestream.sql.streaming.distinctAggregation.enabled": "TRUE"}.get)
    True
    >>> distinct_aggregation_enabled({}.get)
    False
    """
    return any(str(get(key, "false")).strip().lower() == "true" for key in (DISTINCT_AGGREGATION_CONF, LEGACY_DISTINCT_AGGREGATION_CONF))


@dataclass(frozen=True)
class BufferField:
    """One aggregation-buffer column: its Spark-side name in the state schema (``count``,
    ``sum``, ``m2``...), the internal column name, the merge rule of its group and the group's
    position among the call's buffers (a rule such as ``moments`` spans several columns)."""

    spark_name: str
    column: str
    merge: str
    group: int = 0


Cols = Sequence["Column"]


@dataclass(frozen=True)
class FunctionSpec:
    """One aggregate function. ``layout(arg_types)`` lists ``(spark_name, rule, group)`` per
    buffer column; ``partial(args, options)`` the Spark aggregates computing a batch's buffers;
    ``row(args, options)`` one row's buffers; ``final(buffers, options)`` the result."""

    name: str
    arity: tuple[int, int]
    layout: Callable[[Sequence[Any]], list[tuple[str, str, int]]]
    partial: Callable[[Cols, tuple], list["Column"]]
    row: Callable[[Cols, tuple], list["Column"]]
    final: Callable[[Cols, tuple], "Column"]
    #: literal arguments after the columns (e.g. ``ignorenulls`` of ``first``)
    literal_args: int = 0
    #: the buffer keeps the values themselves and the final value is Spark's own function over
    #: them (see ``RECOMPUTED``)
    recompute: bool = False


def _F():  # noqa: N802 - the usual alias of pyspark.sql.functions
    from pyspark.sql import functions as F

    return F


def _fixed(*fields: tuple[str, str, int]):
    return lambda _types: list(fields)


def _dbl(c: "Column") -> "Column":
    return c.cast("double")


def _ind(cond: "Column") -> "Column":
    """1 where ``cond`` holds, else 0 (a row's count)."""
    F = _F()
    return F.when(cond, F.lit(1)).otherwise(F.lit(0)).cast("long")


# -- count, sum, avg, min, max -----------------------------------------------------------------


def _count_arg(args: Cols) -> "Column":
    F = _F()
    if not args:
        return F.lit(1)
    if len(args) == 1:
        return args[0]
    cond = args[0].isNotNull()
    for a in args[1:]:
        cond = cond & a.isNotNull()
    return F.when(cond, F.lit(1))


COUNT = FunctionSpec(
    "count",
    (0, 99),
    _fixed(("count", "sum0", 0)),
    lambda a, o: [_F().count(_count_arg(a))],
    lambda a, o: [_ind(_count_arg(a).isNotNull())],
    lambda b, o: b[0],
)
# -- decimals: Spark's buffers depend on the precision ---------------------------------------------
#
# sum/try_sum of decimal(p, s): with p + 10 <= 18 Spark's optimizer (DecimalAggregates) sums the
# unscaled longs (buffer ``sum: long``); otherwise the buffer is ``sum: decimal(p + 10, s)`` (at
# most 38 digits) and ``isEmpty``. avg/try_avg: with p + 4 <= 15 the optimizer averages the
# unscaled values as doubles (buffer ``sum: double, count``, as for any number); otherwise
# ``sum: decimal(p + 10, s), count`` and the result is the decimal division cast to
# decimal(p + 4, s + 4).

MAX_LONG_DIGITS = 18
MAX_DOUBLE_DIGITS = 15


@dataclass(frozen=True)
class DecimalArg:
    """The last option of a sum/avg call over a decimal column (``decompose_aggregate`` adds
    it): the argument's precision and scale."""

    precision: int
    scale: int

    @property
    def sum_type(self) -> str:
        return f"decimal({min(38, self.precision + 10)},{self.scale})"

    @property
    def unscaled_sum(self) -> bool:
        return self.precision + 10 <= MAX_LONG_DIGITS

    @property
    def decimal_avg(self) -> bool:
        return self.precision + 4 > MAX_DOUBLE_DIGITS

    @property
    def avg_type(self) -> str:
        return f"decimal({min(38, self.precision + 4)},{min(38, self.scale + 4)})"


@dataclass(frozen=True)
class IntervalArg:
    """The last option of an avg call over an ANSI interval column (``decompose_aggregate`` adds
    it). Spark's ``Average`` keeps such a column's sum as the interval type's widest form
    (``sql_type``: DAY TO SECOND or YEAR TO MONTH, starting at ``zero``) beside the count, and
    divides the sum by the count (an interval again, null for no rows), not as doubles."""

    sql_type: str
    zero: str


def interval_arg(types: Sequence[Any]) -> IntervalArg | None:
    """The :class:`IntervalArg` of a call whose first argument is an ANSI interval, else None."""
    from pyspark.sql.types import DayTimeIntervalType, YearMonthIntervalType

    if types and isinstance(types[0], DayTimeIntervalType):
        return IntervalArg("interval day to second", "INTERVAL '0 00:00:00' DAY TO SECOND")
    if types and isinstance(types[0], YearMonthIntervalType):
        return IntervalArg("interval year to month", "INTERVAL '0-0' YEAR TO MONTH")
    return None


def _interval(o: tuple) -> IntervalArg | None:
    return o[-1] if o and isinstance(o[-1], IntervalArg) else None


def decimal_arg(types: Sequence[Any]) -> DecimalArg | None:
    from pyspark.sql.types import DecimalType

    if types and isinstance(types[0], DecimalType):
        return DecimalArg(types[0].precision, types[0].scale)
    return None


def _decimal(o: tuple) -> DecimalArg | None:
    return o[-1] if o and isinstance(o[-1], DecimalArg) else None


def _sum_layout(types: Sequence[Any]) -> list[tuple[str, str, int]]:
    d = decimal_arg(types)
    if d is None or d.unscaled_sum:
        return [("sum", "sum", 0)]
    return [("sum", "decimal_sum", 0), ("isEmpty", "decimal_sum", 0)]


def _unscaled(x: "Column", d: DecimalArg) -> "Column":
    return (x * _F().lit(10**d.scale)).cast("long")


def _sum_partial(a: Cols, o: tuple) -> list["Column"]:
    F, d = _F(), _decimal(o)
    if d is None:
        return [F.sum(a[0])]
    if d.unscaled_sum:
        return [F.sum(_unscaled(a[0], d))]
    empty = F.count(a[0]) == 0
    return [F.when(empty, F.lit(0).cast(d.sum_type)).otherwise(F.sum(a[0])).cast(d.sum_type), empty]


def _sum_row(a: Cols, o: tuple) -> list["Column"]:
    F, d = _F(), _decimal(o)
    if d is None:
        return [a[0]]
    if d.unscaled_sum:
        return [_unscaled(a[0], d)]
    return [F.coalesce(a[0].cast(d.sum_type), F.lit(0).cast(d.sum_type)), a[0].isNull()]


def _sum_final(b: Cols, o: tuple) -> "Column":
    F, d = _F(), _decimal(o)
    if d is None:
        return b[0]
    if d.unscaled_sum:
        return (b[0].cast(f"decimal({MAX_LONG_DIGITS},0)") / F.lit(10**d.scale)).cast(d.sum_type)
    return F.when(b[1], F.lit(None)).otherwise(b[0])


SUM = FunctionSpec("sum", (1, 1), _sum_layout, _sum_partial, _sum_row, _sum_final)


#: Spark's decimal division keeps this many fraction digits (half up) before the result's rounding
_DIVISION_SCALE = 39


def decimal_averages(sums: Sequence[Any], counts: Sequence[Any], precision: int, scale: int, ansi: bool) -> list[Any]:
    """Spark's decimal average of each (sum, count): the quotient rounded half up to 39 fraction
    digits (Spark's ``Decimal`` division), then half up to the result's ``scale``
    (``toPrecision``); ``None`` for a zero count, and for a result over ``precision`` digits
    unless ``ansi`` (then Spark's ANSI error). Exact integer arithmetic in Python, because
    Spark's ``/`` on decimal columns picks its own result scale and rounds there first, so a cast
    of its result would round at another digit."""
    import decimal

    wide = decimal.Context(prec=120)
    quantum = decimal.Decimal(1).scaleb(-scale)
    limit = decimal.Decimal(10) ** (precision - scale)
    out: list[Any] = []
    for total, n in zip(sums, counts):
        if total is None or not n:
            out.append(None)
            continue
        sign, digits, exponent = decimal.Decimal(total).as_tuple()
        unscaled = int("".join(map(str, digits)) or "0")
        numerator = unscaled * 10 ** (_DIVISION_SCALE + int(exponent))
        whole, rest = divmod(numerator, abs(int(n)))
        if 2 * rest >= abs(int(n)):
            whole += 1
        negative = bool(sign) != (int(n) < 0)
        quotient = decimal.Decimal((1 if negative and whole else 0, tuple(int(c) for c in str(whole)), -_DIVISION_SCALE))
        q = quotient.quantize(quantum, decimal.ROUND_HALF_UP, wide)
        if abs(q) >= limit:
            if ansi:
                raise ArithmeticError(
                    f"[NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION]  {quotient} cannot be represented as "
                    f"Decimal({precision}, {scale}). If necessary set \"spark.sql.ansi.enabled\" to \"false\" to "
                    "bypass this error, and return NULL instead. SQLSTATE: 22003"
                )
            out.append(None)
            continue
        out.append(q)
    return out


def _decimal_avg(s: "Column", c: "Column", d: DecimalArg, try_mode: bool) -> "Column":
    """``decimal_averages`` over the buffers, as a scalar Arrow UDF."""
    import warnings

    import pyarrow as pa
    from pyspark.sql import SparkSession

    F = _F()
    precision, scale = min(38, d.precision + 4), min(38, d.scale + 4)
    session = SparkSession.getActiveSession()
    ansi = not try_mode and session is not None and str(session.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"

    def average(sums: pa.Array, counts: pa.Array) -> pa.Array:
        values = decimal_averages(sums.to_pylist(), counts.to_pylist(), precision, scale, ansi)
        return pa.array(values, pa.decimal128(precision, scale))

    average.__name__ = "avg_decimal_final"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        udf = F.arrow_udf(releasing_zip_importers(average), d.avg_type, F.ArrowUDFType.SCALAR)
    return udf(s, c)


def _avg_final(b: Cols, o: tuple, try_mode: bool = False) -> "Column":
    F, d = _F(), _decimal(o)
    s, c = b
    if d is not None and d.decimal_avg:
        return F.when(c == 0, F.lit(None)).otherwise(_decimal_avg(s, c, d, try_mode))
    if d is not None and not try_mode:
        # DecimalAggregates: the buffer averages the unscaled values; the result scales back
        return F.when(c == 0, F.lit(None)).otherwise((s / c) / F.lit(float(10**d.scale)))
    return F.when(c == 0, F.lit(None)).otherwise(s / c)


def _avg_partial(a: Cols, o: tuple) -> list["Column"]:
    F, d, i = _F(), _decimal(o), _interval(o)
    if i is not None:
        return [F.coalesce(F.sum(a[0].cast(i.sql_type)), F.expr(i.zero)), F.count(a[0])]
    if d is not None and d.decimal_avg:
        return [F.coalesce(F.sum(a[0]).cast(d.sum_type), F.lit(0).cast(d.sum_type)), F.count(a[0])]
    if d is not None:  # Spark's DecimalAggregates: the unscaled values averaged as doubles
        return [F.coalesce(F.sum(_dbl(_unscaled(a[0], d))), F.lit(0.0)), F.count(a[0])]
    # Spark's Average starts its sum at 0 and skips null inputs: the buffer is 0.0, not null,
    # for a group whose inputs are all null (the state reader shows it)
    return [F.coalesce(F.sum(_dbl(a[0])), F.lit(0.0)), F.count(a[0])]


def _try_avg_row(a: Cols, o: tuple) -> list["Column"]:
    """try_avg's one-row buffers: as avg's, but a small decimal's value as it is (Spark's
    DecimalAggregates rewrites avg, not try_avg)."""
    F, d = _F(), _decimal(o)
    if d is not None and not d.decimal_avg:
        return [F.coalesce(_dbl(a[0]), F.lit(0.0)), _ind(a[0].isNotNull())]
    return _avg_row(a, o)


def _avg_row(a: Cols, o: tuple) -> list["Column"]:
    F, d, i = _F(), _decimal(o), _interval(o)
    if i is not None:
        return [F.coalesce(a[0].cast(i.sql_type), F.expr(i.zero)), _ind(a[0].isNotNull())]
    if d is not None and d.decimal_avg:
        return [F.coalesce(a[0].cast(d.sum_type), F.lit(0).cast(d.sum_type)), _ind(a[0].isNotNull())]
    if d is not None:  # Spark's DecimalAggregates: the unscaled values averaged as doubles
        return [F.coalesce(_dbl(_unscaled(a[0], d)), F.lit(0.0)), _ind(a[0].isNotNull())]
    return [F.coalesce(_dbl(a[0]), F.lit(0.0)), _ind(a[0].isNotNull())]


AVG = FunctionSpec("avg", (1, 1), _fixed(("sum", "sum", 0), ("count", "sum0", 1)), _avg_partial, _avg_row, _avg_final)
MIN = FunctionSpec("min", (1, 1), _fixed(("min", "min", 0)), lambda a, o: [_F().min(a[0])], lambda a, o: [a[0]], lambda b, o: b[0])
MAX = FunctionSpec("max", (1, 1), _fixed(("max", "max", 0)), lambda a, o: [_F().max(a[0])], lambda a, o: [a[0]], lambda b, o: b[0])
#: count_if(p) is Spark's count(nullif(p, false))
COUNT_IF = FunctionSpec(
    "count_if",
    (1, 1),
    _fixed(("count", "sum0", 0)),
    lambda a, o: [_F().count(_F().when(a[0], _F().lit(1)))],
    lambda a, o: [_ind(_F().coalesce(a[0], _F().lit(False)))],
    lambda b, o: b[0],
)


# -- first / last / any_value -------------------------------------------------------------------


@dataclass(frozen=True)
class FilterCondition:
    """The last option of a ``first``/``last`` call without ``IGNORE NULLS`` that has a
    ``FILTER (WHERE cond)``: rows failing ``cond`` are not seen at all (a null value of a row that
    passes is still taken), so the filter cannot be folded into the value as for other calls."""

    condition: Any = field(compare=False)


@dataclass(frozen=True)
class WithinGroup:
    """The last option of ``mode() WITHIN GROUP (ORDER BY x)`` or ``listagg(e, d) WITHIN GROUP
    (ORDER BY o)``: the finishing SQL over the kept values, ``{v}`` standing for them (``listagg``
    keeps ``struct(v, o)`` per row, so its order may differ from its value)."""

    template: str


def _filter_condition(o: tuple) -> "Column | None":
    return o[-1].condition if o and isinstance(o[-1], FilterCondition) else None


def _first_last(name: str) -> FunctionSpec:
    def partial(a: Cols, o: tuple) -> list["Column"]:
        F = _F()
        ignore = bool(o[0]) if o and not isinstance(o[0], FilterCondition) else False
        fn = F.first if name == "first" else F.last
        cond = _filter_condition(o)
        if cond is not None:
            # the first (last) row passing the filter, its value null or not: wrapped in a struct,
            # which is never null, so that ignoring nulls skips only the rows filtered out
            picked = fn(F.when(cond, F.struct(a[0].alias("v"))), True).getField("v")
            return [picked, F.count(F.when(cond, F.lit(1))) > 0]
        # set once a row (a non-null value, ignoring nulls) was seen: a global aggregation over
        # no rows keeps Spark's initial buffer, valueSet false
        value_set = (F.count(a[0]) > 0) if ignore else (F.count(F.lit(1)) > 0)
        return [fn(a[0], ignore), value_set]

    def row(a: Cols, o: tuple) -> list["Column"]:
        F = _F()
        ignore = bool(o[0]) if o and not isinstance(o[0], FilterCondition) else False
        cond = _filter_condition(o)
        if cond is not None:
            passed = F.coalesce(cond, F.lit(False))
            return [F.when(passed, a[0]), passed]
        return [a[0], a[0].isNotNull() if ignore else F.lit(True)]

    return FunctionSpec(name, (1, 1), _fixed((name, name, 0), ("valueSet", name, 0)), partial, row, lambda b, o: b[0], literal_args=1)


FIRST = _first_last("first")
LAST = _first_last("last")


# -- max_by / min_by ----------------------------------------------------------------------------


def _max_min_by(name: str) -> FunctionSpec:
    def partial(a: Cols, o: tuple) -> list["Column"]:
        F = _F()
        if name == "max_by":
            return [F.max_by(a[0], a[1]), F.max(a[1])]
        return [F.min_by(a[0], a[1]), F.min(a[1])]

    def row(a: Cols, o: tuple) -> list["Column"]:
        F = _F()
        return [F.when(a[1].isNotNull(), a[0]), a[1]]

    layout = _fixed(("valueWithExtremumOrdering", name, 0), ("extremumOrdering", name, 0))
    return FunctionSpec(name, (2, 2), layout, partial, row, lambda b, o: b[0])


# -- bitwise ------------------------------------------------------------------------------------


def _bit(name: str) -> FunctionSpec:
    return FunctionSpec(
        name,
        (1, 1),
        _fixed((name, name, 0)),
        lambda a, o: [getattr(_F(), name)(a[0])],
        lambda a, o: [a[0]],
        lambda b, o: b[0],
    )


# -- central moments: stddev, variance, skewness, kurtosis --------------------------------------

_MOMENT_NAMES = ("n", "avg", "m2", "m3", "m4")


def _running_mean(x: "Column") -> "Column":
    """The mean that Spark's central-moment and covariance buffers hold (``avg``, ``xAvg``,
    ``yAvg``) for a batch's values ``x`` (doubles; null: not counted). Spark updates it value by
    value (``avg += (x - avg) / n``), in the order the rows come, where ``avg(x)`` divides a sum.
    The two agree (to rounding) but for infinities: a mean that has become infinite turns NaN at
    the next value (``inf - inf``), so it is infinite only when the one infinite value is the
    last (``last`` follows the rows' order, as Spark's update does), and NaN when there are more
    infinite values, or a NaN anywhere."""
    F = _F()
    infinite = F.abs(x) == F.lit(float("inf"))
    count_infinite = F.sum(_ind(F.coalesce(infinite, F.lit(False))))
    count_nan = F.sum(_ind(F.coalesce(F.isnan(x), F.lit(False))))
    last = F.last(x, ignorenulls=True)
    nan = F.lit(float("nan"))
    return (
        F.when((count_infinite == 0) | (count_nan > 0), F.avg(x))
        .when((count_infinite == 1) & (F.abs(last) == F.lit(float("inf"))), last)
        .otherwise(nan)
    )


def _moment_partial(x: "Column", order: int) -> list["Column"]:
    """A batch's ``n, avg, m2[, m3[, m4]]`` from Spark's own aggregates over the batch:
    ``m2 = var_pop * n``, ``m3`` from ``skewness``, ``m4`` from ``kurtosis``; a group with no
    value has Spark's initial buffer (all zero)."""
    F = _F()
    x = _dbl(x)
    n = F.count(x).cast("double")
    zero = F.lit(0.0)
    m2 = F.var_pop(x) * n
    cols = [n, F.coalesce(_running_mean(x), zero), F.coalesce(m2, zero)]
    if order >= 3:
        cols.append(F.coalesce(F.when(n > 0, F.skewness(x) * F.pow(m2, 1.5) / F.sqrt(n)), zero))
    if order >= 4:
        cols.append(F.coalesce(F.when(n > 0, (F.kurtosis(x) + F.lit(3.0)) * (m2 * m2) / n), zero))
    return cols


def _moment_row(x: "Column", order: int) -> list["Column"]:
    F = _F()
    cols = [F.when(x.isNotNull(), F.lit(1.0)).otherwise(F.lit(0.0)), F.coalesce(_dbl(x), F.lit(0.0))]
    return cols + [F.lit(0.0)] * (order - 1)


def _moments(name: str, order: int, final: Callable[[Cols], "Column"]) -> FunctionSpec:
    layout = _fixed(*((_MOMENT_NAMES[i], "moments", 0) for i in range(order + 1)))
    return FunctionSpec(
        name,
        (1, 1),
        layout,
        lambda a, o: _moment_partial(a[0], order),
        lambda a, o: _moment_row(a[0], order),
        lambda b, o: final(b),
    )


def _null() -> "Column":
    return _F().lit(None).cast("double")


def _var_pop(b: Cols) -> "Column":
    F = _F()
    n, _, m2 = b[:3]
    return F.when(n == 0, _null()).otherwise(m2 / n)


def _var_samp(b: Cols) -> "Column":
    F = _F()
    n, _, m2 = b[:3]
    return F.when(n == 0, _null()).when(n == 1, _null()).otherwise(m2 / (n - 1))


def _skewness(b: Cols) -> "Column":
    F = _F()
    n, _, m2, m3 = b[:4]
    return F.when(n == 0, _null()).when(m2 == 0, _null()).otherwise(F.sqrt(n) * m3 / F.sqrt(m2 * m2 * m2))


def _kurtosis(b: Cols) -> "Column":
    F = _F()
    n, _, m2, _m3, m4 = b[:5]
    return F.when(n == 0, _null()).when(m2 == 0, _null()).otherwise(n * m4 / (m2 * m2) - F.lit(3.0))


def _sqrt(fn: Callable[[Cols], "Column"]) -> Callable[[Cols], "Column"]:
    return lambda b: _F().sqrt(fn(b))


# -- covariance, correlation, regression ---------------------------------------------------------

_COV_NAMES = ("n", "xAvg", "yAvg", "ck", "xMk", "yMk")


def _pairs(x: "Column", y: "Column") -> tuple["Column", "Column"]:
    """Both values as doubles where both are non-null (the rows the co-moments count)."""
    F = _F()
    both = x.isNotNull() & y.isNotNull()
    return F.when(both, _dbl(x)), F.when(both, _dbl(y))


def _cov_partial(x: "Column", y: "Column", corr: bool) -> list["Column"]:
    F = _F()
    xf, yf = _pairs(x, y)
    n = F.count(xf).cast("double")
    zero = F.lit(0.0)
    cols = [n, F.coalesce(_running_mean(xf), zero), F.coalesce(_running_mean(yf), zero), F.coalesce(F.covar_pop(xf, yf) * n, zero)]
    if corr:
        cols += [F.coalesce(F.var_pop(xf) * n, zero), F.coalesce(F.var_pop(yf) * n, zero)]
    return cols


def _cov_row(x: "Column", y: "Column", corr: bool) -> list["Column"]:
    F = _F()
    xf, yf = _pairs(x, y)
    zero = F.lit(0.0)
    cols = [F.when(xf.isNotNull(), F.lit(1.0)).otherwise(zero), F.coalesce(xf, zero), F.coalesce(yf, zero), zero]
    return cols + ([zero, zero] if corr else [])


def _cov(name: str, corr: bool, final: Callable[[Cols], "Column"], swap: bool = False) -> FunctionSpec:
    """``swap``: the regr_* functions take ``(y, x)`` and Spark builds their covariance over
    ``(y, x)`` or ``(x, y)`` as noted per function."""
    k = 6 if corr else 4
    layout = _fixed(*((_COV_NAMES[i], "covariance", 0) for i in range(k)))

    def order(a: Cols) -> tuple["Column", "Column"]:
        return (a[1], a[0]) if swap else (a[0], a[1])

    return FunctionSpec(
        name,
        (2, 2),
        layout,
        lambda a, o: _cov_partial(*order(a), corr),
        lambda a, o: _cov_row(*order(a), corr),
        lambda b, o: final(b),
    )


def _covar_pop(b: Cols) -> "Column":
    F = _F()
    return F.when(b[0] == 0, _null()).otherwise(b[3] / b[0])


def _covar_samp(b: Cols) -> "Column":
    F = _F()
    n = b[0]
    return F.when(n == 0, _null()).when(n == 1, _null()).otherwise(b[3] / (n - 1))


def _corr(b: Cols) -> "Column":
    F = _F()
    n, _, _, ck, xmk, ymk = b
    # no guard for a zero variance: Spark divides, and fails under ANSI as this does
    return F.when(n == 0, _null()).when(n == 1, _null()).otherwise(ck / F.sqrt(xmk * ymk))


def _regr_r2(b: Cols) -> "Column":
    """Over ``PearsonCorrelation(y, x)``: ``xMk`` is y's and ``yMk`` x's sum of squares; no
    variance of x: null; no variance of y: 1."""
    F = _F()
    n, _, _, ck, ymk, xmk = b
    r = ck / F.sqrt(ymk * xmk)
    return F.when(n == 0, _null()).when(xmk == 0, _null()).when(ymk == 0, F.lit(1.0)).otherwise(r * r)


def _regr_sxy(b: Cols) -> "Column":
    F = _F()
    return F.when(b[0] == 0, _null()).otherwise(b[3])


def _regr_m2(b: Cols) -> "Column":
    F = _F()
    return F.when(b[0] == 0, _null()).otherwise(b[2])


def _regr_moments(name: str, pick_x: bool) -> FunctionSpec:
    """regr_sxx / regr_syy: the second central moment of x (y) over the complete pairs."""

    def value(a: Cols) -> "Column":
        y, x = a
        xf, yf = _pairs(x, y)
        return xf if pick_x else yf

    layout = _fixed(*((_MOMENT_NAMES[i], "moments", 0) for i in range(3)))
    return FunctionSpec(
        name,
        (2, 2),
        layout,
        lambda a, o: _moment_partial(value(a), 2),
        lambda a, o: _moment_row(value(a), 2),
        lambda b, o: _regr_m2(b),
    )


def _regr_line(name: str) -> FunctionSpec:
    """regr_slope / regr_intercept: ``covar_pop(x, y)``'s buffers then ``var_pop(x)``'s, both
    over the complete pairs (two merge groups)."""
    layout = _fixed(
        *((_COV_NAMES[i], "covariance", 0) for i in range(4)), *((_MOMENT_NAMES[i], "moments", 1) for i in range(3))
    )

    def partial(a: Cols, o: tuple) -> list["Column"]:
        y, x = a
        xf, _ = _pairs(x, y)
        return _cov_partial(x, y, False) + _moment_partial(xf, 2)

    def row(a: Cols, o: tuple) -> list["Column"]:
        y, x = a
        xf, _ = _pairs(x, y)
        return _cov_row(x, y, False) + _moment_row(xf, 2)

    def final(b: Cols, o: tuple) -> "Column":
        F = _F()
        _, xavg, yavg, ck, _, _, m2 = b
        slope = ck / m2
        value = slope if name == "regr_slope" else yavg - slope * xavg
        return F.when(m2 == 0, _null()).otherwise(value)

    return FunctionSpec(name, (2, 2), layout, partial, row, final)


def _regr_avg(name: str, pick_x: bool) -> FunctionSpec:
    def value(a: Cols, o: tuple) -> "Column":
        y, x = a
        if _decimal(o) is not None:  # avg's decimal buffers: keep the decimal value
            return _F().when(x.isNotNull() & y.isNotNull(), x if pick_x else y)
        xf, yf = _pairs(x, y)
        return xf if pick_x else yf

    return FunctionSpec(
        name,
        (2, 2),
        AVG.layout,
        lambda a, o: AVG.partial([value(a, o)], o),
        lambda a, o: AVG.row([value(a, o)], o),
        AVG.final,
    )


REGR_COUNT = FunctionSpec(
    "regr_count", (2, 2), COUNT.layout, lambda a, o: COUNT.partial(a, o), lambda a, o: COUNT.row(a, o), COUNT.final
)


# -- collect_list / collect_set ------------------------------------------------------------------


def _collect(name: str, rule: str) -> FunctionSpec:
    def row(a: Cols, o: tuple) -> list["Column"]:
        F = _F()
        return [F.array_compact(F.array(a[0]))]

    return FunctionSpec(
        name,
        (1, 1),
        _fixed(("buf", rule, 0)),
        lambda a, o: [getattr(_F(), name)(a[0])],
        row,
        lambda b, o: b[0],
    )


# -- try_sum / try_avg ---------------------------------------------------------------------------


def _is_integral(t: Any) -> bool:
    from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType

    return isinstance(t, (ByteType, ShortType, IntegerType, LongType))


def _try_sum_layout(types: Sequence[Any]) -> list[tuple[str, str, int]]:
    if types and _is_integral(types[0]):
        return [("sum", "try_sum", 0), ("isEmpty", "try_sum", 0)]
    d = decimal_arg(types)
    if d is not None and not d.unscaled_sum:
        return [("sum", "try_decimal_sum", 0), ("isEmpty", "try_decimal_sum", 0)]
    return [("sum", "sum", 0)]


def _try_sum_partial(a: Cols, o: tuple) -> list["Column"]:
    F, d = _F(), _decimal(o)
    if d is not None:
        if d.unscaled_sum:
            return [F.try_sum(_unscaled(a[0], d))]
        empty = F.count(a[0]) == 0
        return [F.when(empty, F.lit(0).cast(d.sum_type)).otherwise(F.try_sum(a[0])).cast(d.sum_type), empty]
    if o and o[-1] == "integral":
        empty = F.count(a[0]) == 0
        return [F.when(empty, F.lit(0).cast("long")).otherwise(F.try_sum(a[0])), empty]
    return [F.try_sum(a[0])]


def _try_sum_row(a: Cols, o: tuple) -> list["Column"]:
    F = _F()
    if _decimal(o) is not None:
        return _sum_row(a, o)
    if o and o[-1] == "integral":
        return [F.coalesce(a[0].cast("long"), F.lit(0).cast("long")), a[0].isNull()]
    return [a[0]]


def _try_sum_final(b: Cols, o: tuple) -> "Column":
    F = _F()
    if _decimal(o) is not None:
        return _sum_final(b, o)
    if o and o[-1] == "integral":
        return F.when(b[1], F.lit(None)).otherwise(b[0])
    return b[0]


TRY_SUM = FunctionSpec("try_sum", (1, 1), _try_sum_layout, _try_sum_partial, _try_sum_row, _try_sum_final)
TRY_AVG = FunctionSpec(
    "try_avg",
    (1, 1),
    AVG.layout,
    lambda a, o: [_F().try_sum(_dbl(a[0])), _F().count(a[0])] if not ((d := _decimal(o)) and d.decimal_avg) else _avg_partial(a, o),
    _try_avg_row,
    lambda b, o: _avg_final(b, o, try_mode=True),
)


# -- functions Spark finishes from an opaque sketch or map ----------------------------------------


def _recomputed(name: str, literal_args: int) -> FunctionSpec:
    """A function whose Spark buffer is an opaque binary (a ``TypedImperativeAggregate``: the
    percentile maps, the quantile digest, sketches, listagg). (``approx_count_distinct`` is
    listed for its arity; ``plan/hyperloglog.py`` replaces its call with one that keeps Spark's
    register words.) statestream keeps the key's non-null input values in a list
    (merged by concatenation, stored first) and computes the result with Spark's own function
    over all of them when the key is emitted. Every one of these results depends only on the
    multiset of values (``approx_count_distinct``, ``count_min_sketch``, the exact percentiles,
    ``mode`` without ties) or, for digests, equals Spark's while the input is below the digest's
    compression size; ``listagg`` keeps the stored-then-new order. The price is state that grows
    with the key's values instead of a bounded sketch."""
    return FunctionSpec(
        name,
        (1, 1),
        _fixed(("buf", "concat", 0)),
        lambda a, o: [_F().collect_list(a[0])],
        lambda a, o: [_F().array_compact(_F().array(a[0]))],
        lambda b, o: b[0],
        literal_args=literal_args,
        recompute=True,
    )


#: name -> how many literal arguments may follow the value column
RECOMPUTED: dict[str, int] = {
    "percentile": 2,
    "median": 0,
    "percentile_approx": 2,
    "approx_percentile": 2,
    "mode": 1,
    "approx_count_distinct": 1,
    "count_min_sketch": 3,
    "hll_sketch_agg": 1,
    "histogram_numeric": 1,
    "listagg": 1,
    "string_agg": 1,
    "kll_sketch_agg_bigint": 1,
    "kll_sketch_agg_double": 1,
    "kll_sketch_agg_float": 1,
    "kll_merge_agg_bigint": 1,
    "kll_merge_agg_double": 1,
    "kll_merge_agg_float": 1,
    "theta_intersection_agg": 0,
    "theta_sketch_agg": 1,
    "approx_top_k": 2,
    "hll_union_agg": 1,
    "theta_union_agg": 1,
    "bitmap_construct_agg": 0,
    "bitmap_or_agg": 0,
    "bitmap_and_agg": 0,
    # WITHIN GROUP (ORDER BY x [DESC]): the fraction's SQL and the direction (plan/aggregate_expressions.py)
    "percentile_cont": 2,
    "percentile_disc": 2,
}


#: ``product(x)``: Spark's ``Product`` buffer (``product``, a double; nulls skipped)
PRODUCT = FunctionSpec(
    "product",
    (1, 1),
    _fixed(("product", "product", 0)),
    lambda a, o: [_F().product(a[0])],
    lambda a, o: [_dbl(a[0])],
    lambda b, o: b[0],
)


FUNCTIONS: dict[str, FunctionSpec] = {
    s.name: s
    for s in (
        COUNT,
        SUM,
        AVG,
        MIN,
        MAX,
        COUNT_IF,
        FIRST,
        LAST,
        _max_min_by("max_by"),
        _max_min_by("min_by"),
        _bit("bit_and"),
        _bit("bit_or"),
        _bit("bit_xor"),
        _moments("stddev_samp", 2, _sqrt(_var_samp)),
        _moments("stddev_pop", 2, _sqrt(_var_pop)),
        _moments("var_samp", 2, _var_samp),
        _moments("var_pop", 2, _var_pop),
        _moments("skewness", 3, _skewness),
        _moments("kurtosis", 4, _kurtosis),
        _cov("covar_pop", False, _covar_pop),
        _cov("covar_samp", False, _covar_samp),
        _cov("corr", True, _corr),
        REGR_COUNT,
        _regr_avg("regr_avgx", True),
        _regr_avg("regr_avgy", False),
        _regr_moments("regr_sxx", True),
        _regr_moments("regr_syy", False),
        # regr_sxy is Spark's Covariance(y, x) and regr_r2 its PearsonCorrelation(y, x)
        _cov("regr_sxy", False, _regr_sxy),
        _cov("regr_r2", True, _regr_r2),
        _regr_line("regr_slope"),
        _regr_line("regr_intercept"),
        _collect("collect_list", "concat"),
        _collect("collect_set", "union"),
        TRY_SUM,
        TRY_AVG,
        PRODUCT,
        *(_recomputed(name, n) for name, n in RECOMPUTED.items()),
    )
}

#: other names of the same functions (Spark's function registry aliases and replacements)
ALIASES: dict[str, str] = {
    "mean": "avg",
    "first_value": "first",
    "any_value": "first",
    "last_value": "last",
    "bool_and": "min",
    "every": "min",
    "bool_or": "max",
    "some": "max",
    "any": "max",
    "stddev": "stddev_samp",
    "std": "stddev_samp",
    "variance": "var_samp",
    "array_agg": "collect_list",
}


def distinct_spec(name: str) -> FunctionSpec:
    """``name(DISTINCT x)`` under ``DISTINCT_AGGREGATION_CONF``: the key's distinct non-null
    values are kept as a set (merged by union) and the result is Spark's ``name`` over them,
    which is the distinct aggregate's value; the set leaves state with its group."""
    return FunctionSpec(
        name,
        (1, 1),
        _fixed(("distinct", "union", 0)),
        lambda a, o: [_F().collect_set(a[0])],
        lambda a, o: [_F().array_compact(_F().array(a[0]))],
        lambda b, o: b[0],
        recompute=True,
    )
