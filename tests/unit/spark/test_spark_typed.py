"""``TopicSchema.decode``: record payloads into value columns (Avro with schema resolution
against the writer's schema, JSON), with the schemas parsed once per pair, not per message."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from magnetar.client.protocol import pb
from magnetar.spark import typed

READER = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "label", "type": "string", "default": "none"},
    ],
}
WRITER = {"type": "record", "name": "Old", "fields": [{"name": "id", "type": "long"}]}


def avro(schema: dict[str, object], value: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def test_avro_payloads_decode_against_their_writer_schema_parsed_once() -> None:
    schema = typed.TopicSchema("Avro", json.dumps(READER))
    writer = pb.Schema(type=pb.Schema.Type.Avro, schema_data=json.dumps(WRITER).encode())
    typed._reader_of.cache_clear()
    rows = [schema.decode(avro(WRITER, {"id": i}), writer) for i in range(50)]
    assert rows == [{"id": i, "label": "none"} for i in range(50)]  # the reader's default
    same = schema.decode(avro(READER, {"id": 7, "label": "x"}))
    assert same == {"id": 7, "label": "x"}
    info = typed._reader_of.cache_info()
    assert info.misses == 2 and info.hits == 49  # one parse per (reader, writer) pair


def test_json_payloads_keep_the_schema_fields_only() -> None:
    schema = typed.TopicSchema("Json", json.dumps(READER))
    got = schema.decode(b'{"id": 3, "label": "a", "extra": true}')
    assert got == {"id": 3, "label": "a"}
    assert schema.decode(b'{"id": 4}') == {"id": 4, "label": None}


def test_primitive_payloads_are_one_value_column() -> None:
    assert typed.TopicSchema("String", "").decode(b"hi") == {"value": "hi"}
    with pytest.raises(ValueError):
        typed.TopicSchema("Json", json.dumps(READER)).decode(b"not json")
