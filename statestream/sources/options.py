"""What the sources share for reading their options: the unit table of Spark's time strings
(``"5s"``, ``"100ms"``), and how an option value is stored (``option_string``, which
``DataStreamReader.option`` and ``DataStreamWriter.option`` use too). The errors a bad option
raises are in :mod:`statestream.errors.sources_sinks`.

A module of its own so that ``files.py`` and ``rate.py`` both import it instead of each other.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from statestream.errors import time_string_error

__all__ = [
    "TIME_SUFFIX_MS",
    "time_string_as_ms",
    "log_settings",
    "option_string",
    "present_options",
    "default_source",
]

#: Milliseconds per unit of a time string (Spark's ``JavaUtils`` suffixes).
TIME_SUFFIX_MS = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def time_string_as_ms(text: str) -> int:
    """A time string (``"7d"``, ``"10m"``, ``"500"``: milliseconds without a suffix) in
    milliseconds, or Spark's ``NumberFormatException`` text for one it cannot parse."""
    m = re.fullmatch(r"\s*(-?[0-9]+)\s*([a-z]+)?\s*", str(text).lower())
    if m is None or (m.group(2) is not None and m.group(2) not in TIME_SUFFIX_MS):
        raise time_string_error(text)
    return int(int(m.group(1)) * TIME_SUFFIX_MS[m.group(2) or "ms"])


def option_string(value: Any) -> str | None:
    """An option value as Spark keeps it: a string, booleans as ``"true"`` / ``"false"``, and
    ``None`` as ``None``. PySpark hands ``None`` to the JVM as a null value (not the text
    ``"None"``): the option is *set*, to null, and what that means is up to whoever reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return None
    return str(value)


def present_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options whose value is not null. Spark's V2 sources and sinks (``rate``, ``socket``,
    ``console``, ``memory``, ...) read options from a ``CaseInsensitiveStringMap``, where an
    option set to null reads as absent, so there it takes its default."""
    return {k: v for k, v in (options or {}).items() if v is not None}


def default_source(spark: Any) -> str:
    """Spark's default data source (``spark.sql.sources.default``, ``parquet`` unless set): the
    format of a reader or writer whose ``format`` was never called."""
    return str(spark.conf.get("spark.sql.sources.default", "parquet") or "parquet")


def log_settings(spark: Any, which: str) -> dict[str, Any]:
    """A compactible log's settings from Spark's confs ``spark.sql.streaming.<which>.log.*``
    (``which``: ``fileSink`` or ``fileSource``) and ``minBatchesToRetain``."""
    conf = (lambda key, default: default) if spark is None else (lambda key, default: spark.conf.get(key, default) or default)
    return {
        "default_compact_interval": int(conf(f"spark.sql.streaming.{which}.log.compactInterval", "10")),
        "delete_expired": str(conf(f"spark.sql.streaming.{which}.log.deletion", "true")).strip().lower() == "true",
        "cleanup_delay_ms": time_string_as_ms(conf(f"spark.sql.streaming.{which}.log.cleanupDelay", "10m")),
        "min_batches_to_retain": int(conf("spark.sql.streaming.minBatchesToRetain", "100")),
    }
