"""Routing rows to the partition they name, through Spark's own hash partitioning.

``repartition(n, column)`` places a row in ``pmod(hash(column), n)``, Spark's Murmur3 hash
(x86 32-bit, seed 42). A step whose rows already carry their state partition p sends them on
with the column set to an int that hashes to p: the join's state step, and a small batch's one
state task handing its partitions' output back to the partitions Spark's layout has
(``state_step.map_state_partitions``).
"""

from __future__ import annotations

from typing import Any, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

__all__ = ["partition_routes", "exchange_keys", "state_partition_id"]


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an int (Murmur3 x86 32-bit, seed 42), as a signed int."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = rotl(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_routes(n: int) -> list[int]:
    """For each partition p < n, an int that Spark's ``repartition(n, int_column)`` sends to
    partition p (``pmod(hash(int), n) == p``): routes rows to the partition they name."""
    routes: dict[int, int] = {}
    candidate = 0
    while len(routes) < n:
        routes.setdefault(_murmur3_int(candidate) % n, candidate)
        candidate += 1
    return [routes[p] for p in range(n)]


def _has_map(schema_json: Any) -> bool:
    if isinstance(schema_json, dict):
        return schema_json.get("type") == "map" or any(_has_map(v) for v in schema_json.values())
    if isinstance(schema_json, list):
        return any(_has_map(v) for v in schema_json)
    return False


def exchange_keys(df: DataFrame, keys: Sequence[Column], key_schema_json: dict) -> list[Column]:
    """The key columns as Spark's stateful exchange hashes them. Spark groups a map by its
    entries in key order (its analyzer sorts a map-typed grouping key) and its ``hash()``
    refuses a map: a map key is hashed as ``array_sort(map_entries(key))``, whose Murmur3 is
    the sorted map's (a map hashes its keys and values in turn, as an array of (key, value)
    structs does). Other keys are unchanged; ``key_schema_json`` (the state key schema) tells
    whether any key holds a map, so that only such queries pay for reading ``df``'s types."""
    if not _has_map(key_schema_json):
        return list(keys)
    fields = df.select(*keys).schema.fields
    return [F.array_sort(F.map_entries(k)) if isinstance(f.dataType, MapType) else k for k, f in zip(keys, fields)]


def state_partition_id(keys: Sequence[Column], n: int) -> Column:
    """The state partition of a row: ``pmod(hash(keys), n)``, Spark's hash partitioning of its
    stateful exchange (``keys`` from :func:`exchange_keys`)."""
    return F.pmod(F.hash(*keys), F.lit(n)).cast("int")
