"""State schema file, operator metadata file, and the restart checks built on them (driver side).

Spark: ``StateSchemaCompatibilityChecker`` / ``SchemaHelper`` (the schema file) and
``OperatorStateMetadata`` (the operator metadata file); the checks run while planning the first
batch of every run. The files are byte-compatible with Spark 4.1 so that a checkpoint written by
either engine is judged the same way by both, and the error texts are Spark's, so a user sees the
message they would get from Spark.

Schemas are Spark ``StructType`` JSON values (``{"type": "struct", "fields": [...]}``), the form
PySpark's ``StructType.jsonValue()`` produces.

Pure module: no pyspark import.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors.state import (
    StateSchemaNotCompatibleError,
    key_schema_not_compatible_error,
    operator_metadata_corrupt_error,
    operator_metadata_version_error,
    operator_not_match_error,
    operator_properties_corrupt_error,
    state_schema_file_corrupt_error,
    state_schema_file_version_error,
    state_schema_file_without_version_error,
    value_schema_not_compatible_error,
)

__all__ = [
    "SCHEMA_FILE_VERSION",
    "OPERATOR_METADATA_VERSION",
    "StateSchema",
    "StateStoreMetadata",
    "OperatorStateMetadata",
    "operator_properties_path",
    "FIRST_BATCH_PROPERTY",
    "read_operator_properties",
    "read_stores_first_batch",
    "DORMANT_PROPERTY",
    "read_dormant_stores",
    "write_operator_properties",
    "schema_file_path",
    "operator_metadata_path",
    "encode_schema_file",
    "decode_schema_file",
    "read_state_schema",
    "write_state_schema",
    "schemas_compatible",
    "check_state_schema",
    "validate_and_write_state_schema",
    "render_data_type",
    "write_operator_metadata",
    "read_operator_metadata",
    "read_all_operator_metadata",
    "check_operator_metadata",
    "write_java_utf",
    "read_java_utf",
]

log = logging.getLogger(__name__)

#: The schema file format this module writes (Spark writes v2 for every operator in scope).
SCHEMA_FILE_VERSION = 2
_READABLE_SCHEMA_VERSIONS = (1, 2)
#: The operator metadata format this module reads and writes.
OPERATOR_METADATA_VERSION = 1
#: Longest piece of encoded text one Java ``writeUTF`` call accepts.
_MAX_UTF_BYTES = 65535

# -- Java modified UTF-8 (DataOutputStream.writeUTF / DataInputStream.readUTF) -----------------------


def _modified_utf8(text: str) -> bytes:
    """Java's "modified UTF-8": UTF-16 code units, U+0000 as two bytes, no 4-byte sequences."""
    out = bytearray()
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        c = (units[i] << 8) | units[i + 1]
        if 0x01 <= c <= 0x7F:
            out.append(c)
        elif c <= 0x7FF:
            out += bytes((0xC0 | (c >> 6), 0x80 | (c & 0x3F)))
        else:
            out += bytes((0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)))
    return bytes(out)


def _decode_modified_utf8(data: bytes) -> str:
    units = bytearray()
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            c, i = b, i + 1
        elif b >> 5 == 0x6 and i + 1 < n:
            c, i = ((b & 0x1F) << 6) | (data[i + 1] & 0x3F), i + 2
        elif b >> 4 == 0xE and i + 2 < n:
            c, i = ((b & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F), i + 3
        else:
            raise ValueError(f"malformed modified UTF-8 at byte {i}")
        units += bytes((c >> 8, c & 0xFF))
    return bytes(units).decode("utf-16-be", "surrogatepass")


def write_java_utf(text: str) -> bytes:
    """The bytes ``DataOutputStream.writeUTF(text)`` produces (2-byte length + modified UTF-8)."""
    body = _modified_utf8(text)
    if len(body) > _MAX_UTF_BYTES:
        raise ValueError(f"string too long for writeUTF: {len(body)} encoded bytes")
    return struct.pack(">H", len(body)) + body


def read_java_utf(data: bytes, pos: int) -> tuple[str, int]:
    """Read one ``writeUTF`` string at ``pos``; returns the text and the position after it."""
    if pos + 2 > len(data):
        raise ValueError("unexpected end of data reading a string length")
    (length,) = struct.unpack_from(">H", data, pos)
    end = pos + 2 + length
    if end > len(data):
        raise ValueError("unexpected end of data reading a string")
    return _decode_modified_utf8(data[pos + 2 : end]), end


def _utf_chunks(text: str) -> list[str]:
    """Split ``text`` into pieces that each fit one ``writeUTF`` call (Spark splits by 65535
    characters; splitting by encoded size is identical for ASCII JSON and safe otherwise)."""
    chunks: list[str] = []
    start, size = 0, 0
    for i, ch in enumerate(text):
        w = len(_modified_utf8(ch)) if ord(ch) > 0x7F or ch == "\x00" else 1
        if size + w > _MAX_UTF_BYTES:
            chunks.append(text[start:i])
            start, size = i, 0
        size += w
    chunks.append(text[start:])
    return chunks


# -- schema file ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateSchema:
    """The key and value schema recorded for one stateful operator (Spark StructType JSON)."""

    key_schema: dict[str, Any]
    value_schema: dict[str, Any]
    format_version: int = SCHEMA_FILE_VERSION


def schema_file_path(operator_id: int) -> str:
    """Schema file path relative to the state root: only partition 0's directory holds it."""
    return f"{operator_id}/0/_metadata/schema"


def operator_metadata_path(operator_id: int) -> str:
    """Operator metadata path relative to the state root."""
    return f"{operator_id}/_metadata/metadata"


def operator_properties_path(operator_id: int) -> str:
    """Path (relative to the state root) of the operator's restart-relevant settings, such as a
    transformWithState's time and output modes (Spark keeps them in its v2 operator metadata;
    the v1 file this module writes has no place for them)."""
    return f"{operator_id}/_metadata/properties"


#: the operator property recording, per store, the batch that first declared it (a
#: transformWithState variable added on restart begins empty at that batch)
FIRST_BATCH_PROPERTY = "storesFirstBatch"
#: the operator property recording the stores that the running query does not declare (a
#: transformWithState variable an older run declared): name -> [the version its files stop at,
#: the batch that declared it again or null]; see ``stores_dormant`` in the operator
DORMANT_PROPERTY = "storesDormant"
#: the operator property holding, for a transformWithState, per run (by its first batch) the
#: JSON text that Spark's v2 operator metadata of that run records as ``operatorPropertiesJson``
#: (modes and the run's variables): the state readers take the run of the batch they read
OPERATOR_PROPERTIES_PROPERTY = "operatorPropertiesByRun"


def operator_properties_by_run(props: Mapping[str, str] | None) -> dict[int, str]:
    """The recorded ``operatorPropertiesJson`` text of each run, by the run's first batch."""
    raw = (props or {}).get(OPERATOR_PROPERTIES_PROPERTY)
    return {int(b): str(t) for b, t in json.loads(raw).items()} if raw else {}


def operator_properties_of_batch(props: Mapping[str, str] | None, batch_id: int) -> str | None:
    """The ``operatorPropertiesJson`` of the run that ran ``batch_id`` (the record of the latest
    run that started at or before it, as Spark picks its v2 metadata file), None if unrecorded."""
    runs = {b: t for b, t in operator_properties_by_run(props).items() if b <= batch_id}
    return runs[max(runs)] if runs else None


def with_run_properties(props: Mapping[str, str] | None, first_batch: int, text: str) -> str:
    """The property value after a run starting at ``first_batch`` records ``text`` (records of
    runs at or after that batch, undone by a rerun or a rollback, are dropped)."""
    runs = {b: t for b, t in operator_properties_by_run(props).items() if b < first_batch}
    runs[first_batch] = text
    return json.dumps({str(b): runs[b] for b in sorted(runs)})


def read_operator_properties(state_root: str, operator_id: int) -> dict[str, str] | None:
    """The recorded settings of ``operator_id``, or None if the checkpoint has none."""
    files = CheckpointFileManager(state_root)
    rel = operator_properties_path(operator_id)
    if not files.exists(rel):
        return None
    try:
        value = json.loads(files.read_bytes(rel).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise operator_properties_corrupt_error(files.display(rel), exc) from exc
    if not isinstance(value, dict):
        raise operator_properties_corrupt_error(files.display(rel))
    return {str(k): str(v) for k, v in value.items()}


def read_stores_first_batch(state_root: str, operator_id: int) -> dict[str, int] | None:
    """The batch that first declared each store (:data:`FIRST_BATCH_PROPERTY`), or None for a
    checkpoint that does not record it."""
    props = read_operator_properties(state_root, operator_id) or {}
    if FIRST_BATCH_PROPERTY not in props:
        return None
    return {name: int(batch) for name, batch in json.loads(props[FIRST_BATCH_PROPERTY]).items()}


def read_dormant_stores(state_root: str, operator_id: int) -> dict[str, tuple[int, int | None]]:
    """The stores left undeclared by a run (:data:`DORMANT_PROPERTY`): name -> (the version
    their content is frozen at, the batch that declared them again or None)."""
    props = read_operator_properties(state_root, operator_id) or {}
    recorded = json.loads(props.get(DORMANT_PROPERTY, "{}"))
    return {name: (int(frozen), None if again is None else int(again)) for name, (frozen, again) in recorded.items()}


def write_operator_properties(state_root: str, operator_id: int, properties: Mapping[str, str]) -> None:
    """Write (atomically) the settings of ``operator_id``."""
    CheckpointFileManager(state_root).write_atomic(
        operator_properties_path(operator_id), json.dumps(dict(properties), sort_keys=True).encode("utf-8")
    )


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode_schema_file(key_schema: Mapping[str, Any], value_schema: Mapping[str, Any]) -> bytes:
    """Spark's schema file, format v2.

    Layout: ``writeUTF("v2")``; then, for the key schema and then the value schema, an int32
    (big-endian) count of chunks followed by that many ``writeUTF`` chunks of the compact
    StructType JSON.
    """
    out = bytearray(write_java_utf(f"v{SCHEMA_FILE_VERSION}"))
    for schema in (key_schema, value_schema):
        chunks = _utf_chunks(_compact_json(schema))
        out += struct.pack(">i", len(chunks))
        for chunk in chunks:
            out += write_java_utf(chunk)
    return bytes(out)


def decode_schema_file(data: bytes, where: str) -> StateSchema:
    """Parse a schema file (v1: two ``writeUTF`` JSON strings; v2: chunked, see above)."""
    try:
        version_text, pos = read_java_utf(data, 0)
    except ValueError as exc:
        raise state_schema_file_corrupt_error(where, exc) from exc
    if not (version_text.startswith("v") and version_text[1:].isdigit()):
        raise state_schema_file_without_version_error(where, version_text)
    version = int(version_text[1:])
    if version not in _READABLE_SCHEMA_VERSIONS:
        raise state_schema_file_version_error(where, version, _READABLE_SCHEMA_VERSIONS, SCHEMA_FILE_VERSION)
    try:
        texts: list[str] = []
        for _ in range(2):
            if version == 1:
                text, pos = read_java_utf(data, pos)
            else:
                if pos + 4 > len(data):
                    raise ValueError("unexpected end of data reading a chunk count")
                (count,) = struct.unpack_from(">i", data, pos)
                pos += 4
                if count < 0:
                    raise ValueError(f"negative chunk count {count}")
                parts = []
                for _ in range(count):
                    part, pos = read_java_utf(data, pos)
                    parts.append(part)
                text = "".join(parts)
            texts.append(text)
        key_schema, value_schema = (json.loads(t) for t in texts)
    except (ValueError, struct.error) as exc:
        raise state_schema_file_corrupt_error(where, exc) from exc
    return StateSchema(key_schema, value_schema, version)


def read_state_schema(state_root: str, operator_id: int) -> StateSchema | None:
    """The schema recorded for ``operator_id`` under ``state_root`` (``<ckpt>/state``), or None."""
    files = CheckpointFileManager(state_root)
    rel = schema_file_path(operator_id)
    if not files.exists(rel):
        return None
    return decode_schema_file(files.read_bytes(rel), files.display(rel))


def store_schema_file_path(operator_id: int, store_name: str) -> str:
    """Where Spark keeps the schema of a named store (a join's four): in partition 0's store
    directory."""
    return f"{operator_id}/0/{store_name}/_metadata/schema"


def write_store_schema(
    state_root: str, operator_id: int, store_name: str, key_schema: Mapping[str, Any], value_schema: Mapping[str, Any]
) -> None:
    """Write (atomically) the v2 schema file of one named store of ``operator_id``."""
    CheckpointFileManager(state_root).write_atomic(
        store_schema_file_path(operator_id, store_name), encode_schema_file(key_schema, value_schema)
    )


def read_store_schema(state_root: str, operator_id: int, store_name: str) -> StateSchema | None:
    """The schema of a named store (see ``store_schema_file_path``), or None."""
    files = CheckpointFileManager(state_root)
    rel = store_schema_file_path(operator_id, store_name)
    if not files.exists(rel):
        return None
    return decode_schema_file(files.read_bytes(rel), files.display(rel))


def write_state_schema(
    state_root: str, operator_id: int, key_schema: Mapping[str, Any], value_schema: Mapping[str, Any]
) -> None:
    """Write (atomically) the v2 schema file of ``operator_id``."""
    CheckpointFileManager(state_root).write_atomic(schema_file_path(operator_id), encode_schema_file(key_schema, value_schema))


# -- Spark data types: parse, compare, render ------------------------------------------------------

_SIMPLE_TYPES = {
    "long": "LongType",
    "integer": "IntegerType",
    "short": "ShortType",
    "byte": "ByteType",
    "double": "DoubleType",
    "float": "FloatType",
    "boolean": "BooleanType",
    "binary": "BinaryType",
    "date": "DateType",
    "timestamp": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
    "void": "NullType",
    "null": "NullType",
    "variant": "VariantType",
    "interval": "CalendarIntervalType",
}
_DAY_TIME_UNITS = {"day": 0, "hour": 1, "minute": 2, "second": 3}
_YEAR_MONTH_UNITS = {"year": 0, "month": 1}
_COLLATIONS_KEY = "__COLLATIONS"

# Normalised type: a tuple whose first item is the kind.
#   ("simple", "LongType") | ("string", collation|None) | ("decimal", p, s) | ("char", n) |
#   ("varchar", n) | ("dayTime", start, end) | ("yearMonth", start, end) | ("time", p) |
#   ("struct", ((name, type, nullable), ...)) | ("array", elem, contains_null) |
#   ("map", key, value, value_contains_null) | ("udt", class_name, sql_type)
_Type = tuple


def _parse_interval(name: str, units: dict[str, int], kind: str) -> _Type | None:
    words = name.split()
    if len(words) == 2 and words[1] in units:
        return (kind, units[words[1]], units[words[1]])
    if len(words) == 4 and words[2] == "to" and words[1] in units and words[3] in units:
        return (kind, units[words[1]], units[words[3]])
    return None


def _parse_type(value: Any, collation: str | dict[str, str] | None = None) -> _Type:
    if isinstance(value, str):
        name = value.strip()
        lower = name.lower()
        if lower == "string":
            return ("string", collation)
        if lower.startswith("string collate "):
            return ("string", name.split(None, 2)[2])
        if lower in _SIMPLE_TYPES:
            return ("simple", _SIMPLE_TYPES[lower])
        if lower == "decimal":
            return ("decimal", 10, 0)
        for prefix, sized in (("decimal(", "decimal"), ("char(", "char"), ("varchar(", "varchar"), ("time(", "time")):
            if lower.startswith(prefix) and lower.endswith(")"):
                args = tuple(int(a) for a in lower[len(prefix) : -1].split(","))
                return (sized, *args)
        if lower.startswith("interval "):
            parsed = _parse_interval(lower, _DAY_TIME_UNITS, "dayTime") or _parse_interval(lower, _YEAR_MONTH_UNITS, "yearMonth")
            if parsed is not None:
                return parsed
        return ("simple", name)  # unknown atomic type: compared and shown by its JSON name
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "struct":
            return _parse_struct(value)
        if kind == "array":
            return ("array", _parse_type(value["elementType"], _sub(collation, "element")), bool(value.get("containsNull", True)))
        if kind == "map":
            return (
                "map",
                _parse_type(value["keyType"], _sub(collation, "key")),
                _parse_type(value["valueType"], _sub(collation, "value")),
                bool(value.get("valueContainsNull", True)),
            )
        if kind == "udt":
            cls = value.get("class") or value.get("pyClass") or "UserDefinedType"
            return ("udt", str(cls), _parse_type(value.get("sqlType", "null")))
    raise ValueError(f"not a Spark data type JSON value: {value!r}")


def _sub(collations: Any, suffix: str) -> Any:
    """Collations of nested strings are keyed ``<field>.element`` / ``.key`` / ``.value``; this passes
    the relevant map down (as a dict of remaining path -> collation)."""
    if not isinstance(collations, dict):
        return None
    out = {}
    for path, coll in collations.items():
        if path == suffix:
            return coll
        if path.startswith(suffix + "."):
            out[path[len(suffix) + 1 :]] = coll
    return out or None


def _parse_struct(value: Mapping[str, Any]) -> _Type:
    fields = []
    for f in value.get("fields", []):
        name = f.get("name", "")
        colls = (f.get("metadata") or {}).get(_COLLATIONS_KEY) or {}
        here: Any = None
        nested: dict[str, str] = {}
        for path, coll in colls.items():
            if path == name:
                here = coll
            elif path.startswith(name + "."):
                nested[path[len(name) + 1 :]] = coll
        ftype = f["type"]
        collation = here if isinstance(ftype, str) else (nested or None)
        fields.append((name, _parse_type(ftype, collation), bool(f.get("nullable", True))))
    return ("struct", tuple(fields))


def _render(t: _Type) -> str:
    kind = t[0]
    if kind == "simple":
        return t[1]
    if kind == "string":
        coll = t[1]
        if coll is None:
            return "StringType"
        short = coll.split(".", 1)[1] if "." in coll else coll
        return "StringType" if short.upper() == "UTF8_BINARY" else f"StringType({short})"
    if kind == "decimal":
        return f"DecimalType({t[1]},{t[2]})"
    if kind == "char":
        return f"CharType({t[1]})"
    if kind == "varchar":
        return f"VarcharType({t[1]})"
    if kind == "time":
        return f"TimeType({t[1]})"
    if kind == "dayTime":
        return f"DayTimeIntervalType({t[1]},{t[2]})"
    if kind == "yearMonth":
        return f"YearMonthIntervalType({t[1]},{t[2]})"
    if kind == "struct":
        return "StructType(" + ",".join(f"StructField({n},{_render(ft)},{str(nl).lower()})" for n, ft, nl in t[1]) + ")"
    if kind == "array":
        return f"ArrayType({_render(t[1])},{str(t[2]).lower()})"
    if kind == "map":
        return f"MapType({_render(t[1])},{_render(t[2])},{str(t[3]).lower()})"
    if kind == "udt":
        return t[1].rsplit(".", 1)[-1]
    raise ValueError(f"unknown type {t!r}")


def render_data_type(value: Mapping[str, Any] | str) -> str:
    """A Spark type JSON value as Spark's ``toString`` shows it, e.g.
    ``StructType(StructField(count,LongType,false))`` (the form used in error messages)."""
    return _render(_parse_type(value))


def _collation_key(t: _Type) -> _Type:
    if t[0] == "string" and t[1] is not None:
        short = t[1].split(".", 1)[1] if "." in t[1] else t[1]
        return ("string", None if short.upper() == "UTF8_BINARY" else short.upper())
    return t


def _compatible(new: _Type, stored: _Type) -> bool:
    """Same shape and types, names ignored; a nullable flag may go from true (stored) to false
    (new) but not the other way round."""
    if new[0] != stored[0]:
        return False
    kind = new[0]
    if kind == "struct":
        if len(new[1]) != len(stored[1]):
            return False
        return all(
            _compatible(nt, st) and (s_null or not n_null)
            for (_, nt, n_null), (_, st, s_null) in zip(new[1], stored[1])
        )
    if kind == "array":
        return _compatible(new[1], stored[1]) and (stored[2] or not new[2])
    if kind == "map":
        return _compatible(new[1], stored[1]) and _compatible(new[2], stored[2]) and (stored[3] or not new[3])
    if kind == "udt":
        return new[1] == stored[1] and _compatible(new[2], stored[2])
    return _collation_key(new) == _collation_key(stored)


def schemas_compatible(stored: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether state written with ``stored`` can be read as ``new`` (Spark's rule, §6.6)."""
    return _compatible(_parse_type(new), _parse_type(stored))


#: the prefix of the state fields statestream adds to Spark's (``__statestream_revision``)
OWN_FIELD_PREFIX = "__statestream_"


def _own_fields(schema: Mapping[str, Any]) -> list[str]:
    """The names of statestream's own top-level fields of a state schema (StructType JSON)."""
    return [f.get("name", "") for f in schema.get("fields", []) if str(f.get("name", "")).startswith(OWN_FIELD_PREFIX)]


def check_state_schema(
    stored: StateSchema,
    key_schema: Mapping[str, Any],
    value_schema: Mapping[str, Any],
    check_value: bool = True,
) -> None:
    """Raise Spark's error if the new schemas cannot continue the stored state.

    Identical schemas pass at once; otherwise the key is checked first, then (unless
    ``check_value`` is false, as for deduplication) the value.
    """
    if _parse_type(stored.key_schema) == _parse_type(key_schema) and _parse_type(stored.value_schema) == _parse_type(value_schema):
        return
    if check_value and _own_fields(stored.value_schema) != _own_fields(value_schema):
        # statestream's own fields (an aggregation's emission counter) are told by name, not by
        # position and type: a counter read as a buffer of the same type would pass Spark's rule
        raise value_schema_not_compatible_error(render_data_type(stored.value_schema), render_data_type(value_schema))
    if not schemas_compatible(stored.key_schema, key_schema):
        raise key_schema_not_compatible_error(render_data_type(stored.key_schema), render_data_type(key_schema))
    if check_value and not schemas_compatible(stored.value_schema, value_schema):
        raise value_schema_not_compatible_error(render_data_type(stored.value_schema), render_data_type(value_schema))


def validate_and_write_state_schema(
    state_root: str,
    operator_id: int,
    key_schema: Mapping[str, Any],
    value_schema: Mapping[str, Any],
    check_value: bool = True,
    schema_check_enabled: bool = True,
) -> bool:
    """The first-batch-of-a-run step: create the schema file, or check the new schemas against it.

    Returns True if the file was written. With ``schema_check_enabled=False``
    (``spark.sql.streaming.stateStore.stateSchemaCheck``) an incompatibility is only logged.
    A compatible but different schema does not rewrite the file.
    """
    stored = read_state_schema(state_root, operator_id)
    if stored is None:
        write_state_schema(state_root, operator_id, key_schema, value_schema)
        return True
    try:
        check_state_schema(stored, key_schema, value_schema, check_value)
    except StateSchemaNotCompatibleError as exc:
        if schema_check_enabled:
            raise
        log.warning("state schema check disabled; ignoring: %s", exc)
    return False


# -- operator metadata -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StateStoreMetadata:
    """One state store of an operator, as recorded in the operator metadata file."""

    store_name: str = "default"
    num_cols_prefix_key: int = 0
    num_partitions: int = 0


@dataclass(frozen=True)
class OperatorStateMetadata:
    """Spark's operator metadata file, format v1.

    Layout: the line ``v1``, then compact JSON
    ``{"operatorInfo":{"operatorId":..,"operatorName":..},"stateStoreInfo":[{"storeName":..,
    "numColsPrefixKey":..,"numPartitions":..}]}``. Operator names are the physical operators'
    short names: ``stateStoreSave``, ``sessionWindowStateStoreSaveExec``, ``dedupe``,
    ``dedupeWithinWatermark``, ``globalLimit``.
    """

    operator_id: int
    operator_name: str
    state_store_info: tuple[StateStoreMetadata, ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        return _compact_json(
            {
                "operatorInfo": {"operatorId": self.operator_id, "operatorName": self.operator_name},
                "stateStoreInfo": [
                    {"storeName": s.store_name, "numColsPrefixKey": s.num_cols_prefix_key, "numPartitions": s.num_partitions}
                    for s in self.state_store_info
                ],
            }
        )

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "OperatorStateMetadata":
        info = value["operatorInfo"]
        stores = tuple(
            StateStoreMetadata(str(s["storeName"]), int(s["numColsPrefixKey"]), int(s["numPartitions"]))
            for s in value.get("stateStoreInfo", [])
        )
        return cls(int(info["operatorId"]), str(info["operatorName"]), stores)


def write_operator_metadata(state_root: str, metadata: OperatorStateMetadata) -> None:
    """Write (atomically) ``<state_root>/<opId>/_metadata/metadata``."""
    text = f"v{OPERATOR_METADATA_VERSION}\n{metadata.to_json()}"
    CheckpointFileManager(state_root).write_atomic(operator_metadata_path(metadata.operator_id), text.encode("utf-8"))


#: operators whose state is one partition whatever the shuffle partitions (their input is
#: brought to one partition first)
SINGLE_PARTITION_OPERATORS = frozenset({"globalLimit"})


def set_operator_partitions(state_root: str, num_partitions: int) -> None:
    """Record ``num_partitions`` in every operator's metadata (a repartition, or a rollback to a
    batch before one); a single-partition operator's stores keep theirs."""
    from dataclasses import replace

    for md in read_all_operator_metadata(state_root).values():
        if md.operator_name in SINGLE_PARTITION_OPERATORS:
            continue
        if any(s.num_partitions != num_partitions for s in md.state_store_info):
            write_operator_metadata(
                state_root, replace(md, state_store_info=tuple(replace(s, num_partitions=num_partitions) for s in md.state_store_info))
            )


def read_operator_metadata(state_root: str, operator_id: int) -> OperatorStateMetadata | None:
    """The metadata of ``operator_id``, or None if the checkpoint has none."""
    files = CheckpointFileManager(state_root)
    rel = operator_metadata_path(operator_id)
    if not files.exists(rel):
        return None
    where = files.display(rel)
    try:
        text = files.read_bytes(rel).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise operator_metadata_corrupt_error(where, exc) from exc
    first, _, rest = text.partition("\n")
    first = first.strip()
    if first != f"v{OPERATOR_METADATA_VERSION}":
        raise operator_metadata_version_error(where, first, OPERATOR_METADATA_VERSION)
    try:
        return OperatorStateMetadata.from_json(json.loads(rest))
    except (ValueError, KeyError, TypeError) as exc:
        raise operator_metadata_corrupt_error(where, exc) from exc


def read_all_operator_metadata(state_root: str) -> dict[int, OperatorStateMetadata]:
    """Metadata of every operator directory under ``state_root`` that has a metadata file."""
    files = CheckpointFileManager(state_root)
    out: dict[int, OperatorStateMetadata] = {}
    for name in files.list():
        if name.isdigit():
            md = read_operator_metadata(state_root, int(name))
            if md is not None:
                out[md.operator_id] = md
    return out


def _ops_text(ops: Mapping[int, str]) -> str:
    return ", ".join(f"(OperatorId: {op_id} -> OperatorName: {name})" for op_id, name in sorted(ops.items()))


def check_operator_metadata(in_metadata: Mapping[int, str], in_current_batch: Mapping[int, str]) -> None:
    """Raise Spark's error if ``{opId: operatorName}`` of the checkpoint and of the new plan differ.

    A checkpoint without operator metadata (written before Spark recorded it) is not checked.
    """
    if not in_metadata:
        return
    if dict(in_metadata) == dict(in_current_batch):
        return
    raise operator_not_match_error(_ops_text(in_metadata), _ops_text(in_current_batch))
