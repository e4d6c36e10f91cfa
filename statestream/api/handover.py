"""Handing a query that statestream cannot run to Spark's own engine.

A job run unchanged (``statestream run``, ``statestream.enable``) must run whole. When one of its
queries asks for something statestream does not run yet (a ``NotSupportedYetError``: the
continuous trigger, ``exceptAll``, ``applyInPandas`` on a stream, ...), that query is rebuilt on
Spark's engine from where it began, and the job goes on there, with one warning naming the
reason. Every other query of the job stays on statestream.

How: each object of statestream's streaming API made by a call of the API (a ``DataFrame``, a
``GroupedData``, ``df.na``/``df.stat``, a ``DataStreamWriter``) remembers the call that made it
(``_handover``: its parent object, the member's name and the arguments). The Spark twin of an
object is the same chain of calls replayed on Spark's ``readStream`` (``spark_twin``); the call
that statestream refused is then made on the twin, and its result (a PySpark object, on Spark's
engine) is given back. A chain that begins elsewhere (a ``MemoryStream``, SQL over a streaming
view) has no twin, and the refusal stands.

``spark.statestream.handOverToSpark`` (default ``true``) set to ``false`` makes every such
refusal an error, for users who want to know. Sessions not served by ``statestream.enable``
(an explicit ``StreamingSession(spark)``) never hand over.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Callable

from statestream.errors import NotSupportedYetError

__all__ = ["HANDOVER_CONF", "hands_over", "spark_twin", "remember", "root"]

logger = logging.getLogger(__name__)

#: the session conf that allows the hand-over (``false``: the refusal is raised)
HANDOVER_CONF = "spark.statestream.handOverToSpark"

#: nesting of API calls on this thread: only the outermost call records and hands over
_DEPTH = threading.local()

#: the API classes whose objects record how they were made (those given to ``hands_over``)
_RECORDED: set[type] = set()


def root(obj: Any, make_twin: Callable[[], Any]) -> Any:
    """Mark ``obj`` (a DataFrame a reader made) as the start of a chain whose twin
    ``make_twin()`` makes on Spark's engine; returns ``obj``."""
    obj.__dict__["_handover"] = ("root", make_twin)
    return obj


def remember(result: Any, parent: Any, name: str, args: tuple, kwargs: dict, attribute: bool = False) -> Any:
    """Record on ``result`` the call that made it, when it is an object of one of the API's
    classes that has no record of its own yet."""
    if type(result) in _RECORDED and "_handover" not in result.__dict__:
        result.__dict__["_handover"] = ("attr", parent, name) if attribute else ("call", parent, name, args, kwargs)
    return result


def _twin_argument(value: Any) -> Any:
    """An argument of a replayed call: an API object becomes its twin (LookupError when it has
    none); plain lists, tuples and dicts are looked into; anything else goes as it is."""
    if type(value) in (list, tuple):
        return type(value)(_twin_argument(v) for v in value)
    if type(value) is dict:
        return {k: _twin_argument(v) for k, v in value.items()}
    if type(value) in _RECORDED:
        return spark_twin(value)
    return value


def spark_twin(obj: Any) -> Any:
    """The object of PySpark's API on Spark's engine that the same calls would have made
    (cached: a DataFrame used twice, as in a self-join, is one twin)."""
    cached = obj.__dict__.get("_spark_twin")
    if cached is not None:
        return cached
    record = obj.__dict__.get("_handover")
    if record is None:
        raise LookupError(f"{type(obj).__name__} was not made by a chain of calls from spark.readStream")
    if record[0] == "root":
        twin = record[1]()
    elif record[0] == "attr":
        twin = getattr(spark_twin(record[1]), record[2])
    else:
        _, parent, name, args, kwargs = record
        twin = getattr(spark_twin(parent), name)(*_twin_argument(args), **_twin_argument(kwargs))
    for name, args, kwargs in obj.__dict__.get("_handover_calls", ()):  # a writer's settings, in order
        result = getattr(twin, name)(*_twin_argument(args), **_twin_argument(kwargs))
        twin = result if result is not None else twin
    obj.__dict__["_spark_twin"] = twin
    return twin


def _served_spark(obj: Any) -> Any:
    """The SparkSession of an API object when ``statestream.enable`` serves it, else None (a
    DataFrame and a writer hold the session; GroupedData, ``na`` and ``stat`` their DataFrame)."""
    holder = obj.__dict__.get("_df", obj)
    session = holder.__dict__.get("_session")
    spark = getattr(session, "sparkSession", None)
    return spark if spark is not None and getattr(type(spark), "_statestream_served", False) else None


def _allowed(obj: Any) -> bool:
    spark = _served_spark(obj)
    if spark is None:
        return False
    try:
        return str(spark.conf.get(HANDOVER_CONF, "true")).strip().lower() != "false"
    except Exception:  # noqa: BLE001 - a conf that cannot be read: the default
        return True


def _hand_over(obj: Any, name: str, args: tuple, kwargs: dict, error: NotSupportedYetError) -> Any:
    try:
        twin = spark_twin(obj)
        twin_args, twin_kwargs = _twin_argument(args), _twin_argument(kwargs)
    except LookupError as missing:
        logger.debug("no hand-over of %s: %s", name, missing)
        raise error from None
    logger.warning(
        "statestream cannot run this query (%s); it runs on Spark's own engine. Set %s=false to make this an error.",
        error, HANDOVER_CONF,
    )
    # the session's query manager waits for and listens to Spark's engine's queries from now on
    _served_spark(obj).streams._handed_over()  # noqa: SLF001
    result = getattr(twin, name)(*twin_args, **twin_kwargs)
    if getattr(type(obj), "_handover_builder", False):  # a writer: its later calls go to Spark's writer too
        obj.__dict__["_handed_over"] = result if result is not None else twin
    return result


def hands_over(cls: type) -> type:
    """Class decorator: on a served session, every public method (and property) of ``cls``
    records the call that made its result, and a ``NotSupportedYetError`` it raises becomes the
    same call on the object's Spark twin. A builder whose methods return itself (the writer)
    keeps the calls made on it, in order, as its settings to replay, and once it has handed over
    sends every later call to Spark's writer."""
    _RECORDED.add(cls)
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property) and member.fget is not None:
            setattr(cls, name, property(_wrapped(member.fget, name, attribute=True), member.fset, member.fdel, member.__doc__))
        elif callable(member) and not isinstance(member, (staticmethod, classmethod, type)):
            setattr(cls, name, _wrapped(member, name))
    return cls


def _wrapped(function: Callable[..., Any], name: str, attribute: bool = False) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        handed = self.__dict__.get("_handed_over")
        if handed is not None:  # a writer that handed over: Spark's writer takes the rest
            return getattr(handed, name) if attribute else getattr(handed, name)(*_twin_argument(args), **_twin_argument(kwargs))
        depth = getattr(_DEPTH, "value", 0)
        _DEPTH.value = depth + 1
        try:
            result = function(self, *args, **kwargs)
        except NotSupportedYetError as error:
            if depth or not _allowed(self):
                raise
            _DEPTH.value = depth  # the twin's own calls are Spark's, not nested in ours
            return _hand_over(self, name, args, kwargs, error)
        finally:
            _DEPTH.value = depth
        if depth == 0 and _served_spark(self) is not None:
            if result is self and not attribute:  # a builder's setting (writer.format(...), ...)
                self.__dict__.setdefault("_handover_calls", []).append((name, args, kwargs))
                self.__dict__.pop("_spark_twin", None)
            elif result is not self:
                remember(result, self, name, args, kwargs, attribute=attribute)
        return result

    call.__wrapped__ = function
    return call
