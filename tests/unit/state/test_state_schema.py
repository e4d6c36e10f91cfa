"""Unit tests of the state schema file, operator metadata and the restart checks (no Spark)."""

from __future__ import annotations

import pytest

from statestream.errors import IncompatibleRestartError, StateStoreError
from statestream.state.schema import (
    OperatorStateMetadata,
    StateSchema,
    StateStoreMetadata,
    check_operator_metadata,
    check_state_schema,
    decode_schema_file,
    encode_schema_file,
    read_all_operator_metadata,
    read_java_utf,
    read_operator_metadata,
    read_state_schema,
    render_data_type,
    schemas_compatible,
    validate_and_write_state_schema,
    write_java_utf,
    write_operator_metadata,
)


def field(name, type_, nullable=True, metadata=None):
    return {"name": name, "type": type_, "nullable": nullable, "metadata": metadata or {}}


def struct(*fields):
    return {"type": "struct", "fields": list(fields)}


WINDOW = struct(field("start", "timestamp"), field("end", "timestamp"))
KEY = struct(field("window", WINDOW, False), field("k", "string"))
VALUE = struct(field("count", "long", False))


# -- file formats ---------------------------------------------------------------------------------


def test_schema_file_v2_bytes():
    data = encode_schema_file(KEY, VALUE)
    # writeUTF("v2"), then int32 chunk count 1, then writeUTF(json)
    assert data[:8] == b"\x00\x02v2\x00\x00\x00\x01"
    key_json = '{"type":"struct","fields":[{"name":"window","type":{"type":"struct","fields":[{"name":"start","type":"timestamp","nullable":true,"metadata":{}},{"name":"end","type":"timestamp","nullable":true,"metadata":{}}]},"nullable":false,"metadata":{}},{"name":"k","type":"string","nullable":true,"metadata":{}}]}'
    assert data[8:10] == len(key_json).to_bytes(2, "big")
    assert data[10 : 10 + len(key_json)] == key_json.encode()
    assert decode_schema_file(data, "x") == StateSchema(KEY, VALUE, 2)


def test_schema_file_long_schema_is_chunked():
    many = struct(*[field(f"c{i:05d}_" + "x" * 40, "long") for i in range(2000)])
    data = encode_schema_file(many, VALUE)
    count = int.from_bytes(data[4:8], "big")
    assert count >= 2
    assert decode_schema_file(data, "x").key_schema == many


def test_schema_file_v1_and_unknown_version(tmp_path):
    v1 = write_java_utf("v1") + write_java_utf('{"type":"struct","fields":[]}') + write_java_utf(
        '{"type":"struct","fields":[]}'
    )
    assert decode_schema_file(v1, "f").format_version == 1
    with pytest.raises(StateStoreError) as err:
        decode_schema_file(write_java_utf("v7") + b"\x00", "/ck/state/0/0/_metadata/schema")
    msg = str(err.value)
    assert "/ck/state/0/0/_metadata/schema" in msg and "format version 7" in msg and "version 2" in msg
    with pytest.raises(StateStoreError, match="corrupt"):
        decode_schema_file(b"\x00\x02v2\x00\x00\x00\x05", "f")


def test_java_modified_utf8_round_trip():
    text = "a\x00é€😀"
    data = write_java_utf(text)
    assert data[2:4] == b"a" + b"\xc0"  # U+0000 is written as C0 80
    assert read_java_utf(data, 0) == (text, len(data))


def test_read_write_schema_file_under_state_root(tmp_path):
    root = str(tmp_path / "state")
    assert read_state_schema(root, 0) is None
    assert validate_and_write_state_schema(root, 0, KEY, VALUE) is True
    assert (tmp_path / "state" / "0" / "0" / "_metadata" / "schema").exists()
    assert read_state_schema(root, 0) == StateSchema(KEY, VALUE, 2)
    assert validate_and_write_state_schema(root, 0, KEY, VALUE) is False


# -- rendering ------------------------------------------------------------------------------------


def test_render_matches_spark_to_string():
    schema = struct(
        field("a", "long", False),
        field("w", struct(field("start", "timestamp"))),
        field("arr", {"type": "array", "elementType": "integer", "containsNull": True}),
        field("m", {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": False}),
        field("d", "decimal(10,2)"),
        field("c", "char(5)"),
        field("i", "interval day to second"),
        field("y", "interval year to month"),
        field("t", "timestamp_ntz"),
        field("b", "binary"),
        field("s", "string", metadata={"__COLLATIONS": {"s": "spark.UTF8_LCASE"}}),
        field("e", struct()),
        field("v", "variant"),
        field("n", "void"),
        field("sh", "short"),
        field("by", "byte"),
        field("f", "float"),
        field("bo", "boolean"),
        field("da", "date"),
        field("vc", "varchar(3)"),
    )
    # the string Spark 4.1's StructType.toString printed for this schema
    expected = (
        "StructType(StructField(a,LongType,false),StructField(w,StructType(StructField(start,TimestampType,true)),true),"
        "StructField(arr,ArrayType(IntegerType,true),true),StructField(m,MapType(StringType,DoubleType,false),true),"
        "StructField(d,DecimalType(10,2),true),StructField(c,CharType(5),true),StructField(i,DayTimeIntervalType(0,3),true),"
        "StructField(y,YearMonthIntervalType(0,1),true),StructField(t,TimestampNTZType,true),StructField(b,BinaryType,true),"
        "StructField(s,StringType(UTF8_LCASE),true),StructField(e,StructType(),true),StructField(v,VariantType,true),"
        "StructField(n,NullType,true),StructField(sh,ShortType,true),StructField(by,ByteType,true),"
        "StructField(f,FloatType,true),StructField(bo,BooleanType,true),StructField(da,DateType,true),"
        "StructField(vc,VarcharType(3),true))"
    )
    assert render_data_type(schema) == expected


# -- compatibility --------------------------------------------------------------------------------


def test_compatibility_rules():
    # names are ignored
    assert schemas_compatible(VALUE, struct(field("cnt", "long", False)))
    # nullability may tighten (stored nullable -> new non-nullable) ...
    assert schemas_compatible(struct(field("x", "long", True)), struct(field("x", "long", False)))
    # ... but not loosen
    assert not schemas_compatible(struct(field("x", "long", False)), struct(field("x", "long", True)))
    # field count and types matter, recursively
    assert not schemas_compatible(VALUE, struct(field("count", "long", False), field("s", "long")))
    assert not schemas_compatible(VALUE, struct(field("count", "integer", False)))
    nested_new = struct(field("w", struct(field("a", "timestamp"), field("b", "date"))))
    assert not schemas_compatible(struct(field("w", WINDOW)), nested_new)
    assert schemas_compatible(struct(field("w", WINDOW)), struct(field("x", struct(field("s", "timestamp", False), field("e", "timestamp")))))
    arr = lambda cn: struct(field("a", {"type": "array", "elementType": "long", "containsNull": cn}))  # noqa: E731
    assert schemas_compatible(arr(True), arr(False)) and not schemas_compatible(arr(False), arr(True))
    assert not schemas_compatible(struct(field("d", "decimal(10,2)")), struct(field("d", "decimal(12,2)")))
    lcase = struct(field("s", "string", metadata={"__COLLATIONS": {"s": "spark.UTF8_LCASE"}}))
    assert not schemas_compatible(struct(field("s", "string")), lcase)


def test_value_schema_error_has_spark_text():
    stored = StateSchema(struct(field("k", "string")), VALUE)
    new_value = struct(field("sum", "long"), field("max", "long"))
    with pytest.raises(IncompatibleRestartError) as err:
        check_state_schema(stored, struct(field("k", "string")), new_value)
    e = err.value
    assert e.getCondition() == "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
    assert e.getSqlState() == "XXKST"
    assert str(e) == (
        "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state value schema.\n"
        "Please check number and type of fields.\n"
        "Existing value_schema=StructType(StructField(count,LongType,false)) and new "
        "value_schema=StructType(StructField(sum,LongType,true),StructField(max,LongType,true)).\n"
        "If you want to force running the query without schema validation, please set "
        "spark.sql.streaming.stateStore.stateSchemaCheck to false.\n"
        "However, please note that running the query with incompatible schema could cause non-deterministic behavior. "
        "SQLSTATE: XXKST"
    )
    assert e.getMessageParameters() == {
        "storedValueSchema": "StructType(StructField(count,LongType,false))",
        "newValueSchema": "StructType(StructField(sum,LongType,true),StructField(max,LongType,true))",
    }


def test_key_schema_error_has_spark_text_and_wins_over_value():
    stored = StateSchema(struct(field("k", "string")), VALUE)
    with pytest.raises(IncompatibleRestartError) as err:
        check_state_schema(stored, struct(field("k", "long")), struct(field("a", "string")))
    e = err.value
    assert e.getCondition() == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert str(e) == (
        "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key schema.\n"
        "Please check number and type of fields.\n"
        "Existing key_schema=StructType(StructField(k,StringType,true)) and new "
        "key_schema=StructType(StructField(k,LongType,true)).\n"
        "If you want to force running the query without schema validation, please set "
        "spark.sql.streaming.stateStore.stateSchemaCheck to false.\n"
        "However, please note that running the query with incompatible schema could cause non-deterministic behavior. "
        "SQLSTATE: XXKST"
    )


def test_value_check_can_be_skipped_and_check_disabled_only_logs(tmp_path, caplog):
    stored = StateSchema(KEY, VALUE)
    check_state_schema(stored, KEY, struct(field("x", "string")), check_value=False)
    root = str(tmp_path / "state")
    validate_and_write_state_schema(root, 3, KEY, VALUE)
    with pytest.raises(IncompatibleRestartError):
        validate_and_write_state_schema(root, 3, KEY, struct(field("x", "string")))
    caplog.set_level("WARNING")
    assert validate_and_write_state_schema(root, 3, KEY, struct(field("x", "string")), schema_check_enabled=False) is False
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in caplog.text
    # a compatible but different schema does not rewrite the stored one
    validate_and_write_state_schema(root, 3, KEY, struct(field("renamed", "long", False)))
    assert read_state_schema(root, 3).value_schema == VALUE


# -- operator metadata ----------------------------------------------------------------------------


def test_operator_metadata_file_round_trip(tmp_path):
    root = str(tmp_path / "state")
    md = OperatorStateMetadata(0, "stateStoreSave", (StateStoreMetadata("default", 0, 2),))
    write_operator_metadata(root, md)
    raw = (tmp_path / "state" / "0" / "_metadata" / "metadata").read_bytes()
    assert raw == (
        b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
        b'"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}'
    )
    assert read_operator_metadata(root, 0) == md
    assert read_operator_metadata(root, 1) is None
    write_operator_metadata(root, OperatorStateMetadata(1, "dedupe", (StateStoreMetadata(),)))
    assert {k: v.operator_name for k, v in read_all_operator_metadata(root).items()} == {0: "stateStoreSave", 1: "dedupe"}


def test_operator_metadata_unknown_version(tmp_path):
    d = tmp_path / "state" / "0" / "_metadata"
    d.mkdir(parents=True)
    (d / "metadata").write_text('v9\n{"operatorInfo":{}}')
    with pytest.raises(StateStoreError) as err:
        read_operator_metadata(str(tmp_path / "state"), 0)
    assert str(d / "metadata") in str(err.value) and "v9" in str(err.value) and "v1" in str(err.value)


def test_operator_mismatch_message():
    check_operator_metadata({0: "stateStoreSave"}, {0: "stateStoreSave"})
    check_operator_metadata({}, {0: "dedupe"})  # no metadata recorded: nothing to compare
    with pytest.raises(IncompatibleRestartError) as err:
        check_operator_metadata({0: "stateStoreSave"}, {1: "dedupe", 0: "stateStoreSave"})
    e = err.value
    assert e.getCondition() == "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"
    assert e.getSqlState() == "42K03"
    assert str(e) == (
        "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming stateful operator name does not match "
        "with the operator in state metadata. This likely to happen when user adds/removes/changes stateful operator "
        "of existing streaming query.\n"
        "Stateful operators in the metadata: [(OperatorId: 0 -> OperatorName: stateStoreSave)]; Stateful operators "
        "in current batch: [(OperatorId: 0 -> OperatorName: stateStoreSave), (OperatorId: 1 -> OperatorName: dedupe)]. "
        "SQLSTATE: 42K03"
    )
    with pytest.raises(IncompatibleRestartError):
        check_operator_metadata({0: "stateStoreSave", 1: "dedupe"}, {0: "stateStoreSave"})


def test_statestreams_own_fields_are_told_by_name():
    """An aggregation's emission counter (finality columns) is a long like a count buffer: a
    restart that swaps one for the other has Spark's field count and types but is refused."""
    counted = StateSchema(struct(field("k", "string")), struct(field("count", "long"), field("__statestream_revision", "long", False)))
    with pytest.raises(IncompatibleRestartError, match="__statestream_revision"):
        check_state_schema(counted, struct(field("k", "string")), struct(field("count", "long"), field("sum", "long", False)))
    with pytest.raises(IncompatibleRestartError):
        check_state_schema(
            StateSchema(struct(field("k", "string")), struct(field("count", "long"), field("sum", "long"))),
            struct(field("k", "string")),
            struct(field("count", "long"), field("__statestream_revision", "long")),
        )
    # the same fields pass, and a value check turned off ignores them
    check_state_schema(counted, struct(field("k", "string")), struct(field("count", "long"), field("__statestream_revision", "long", False)))
    check_state_schema(counted, struct(field("k", "string")), struct(field("count", "long")), check_value=False)
