"""Schema'd topics as columns, as pulsar-spark lays them out.

Owns: ``TopicSchema`` (the latest schema of the first topic read, fetched on the driver when
the source's schema is asked for), the columns it gives (AVRO / JSON records: each record
field is a top-level column; STRING and the primitives: a typed ``value`` column; then the
metadata columns ``__key``, ``__topic``, ``__messageId``, ...), the Avro -> Spark DDL and
Avro -> Arrow type mappings, and ``decode`` (one payload into the value columns, with the
schema version that wrote it when known, resolved to the topic's latest: old and new versions
land in the same columns).

Topics without a schema (or BYTES), topic patterns, and schemas we cannot map (PROTOBUF,
PROTOBUF_NATIVE, KEY_VALUE) keep the raw layout (``value BINARY``). Avro types with no Spark
column type of their own (enums, fixed) arrive as strings / binary.
The sink's side: ``TopicSchema.encode`` makes one row's data columns (a dict) a payload of
the topic's AVRO or JSON record schema (Avro binary / JSON text), after ``check_columns``
refused columns the schema has no field for (they would be dropped), and
``RegisteredSchema`` is the topic's registered schema, byte for byte, for the producer.
Must not know: offsets, how messages are fetched or sent.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from typing import Any

from magnetar.client.schema import Schema
from magnetar.spark.rows import json_payload

META_DDL = (
    "__key BINARY, __topic STRING, __messageId BINARY, __messageIdString STRING, "
    "__publishTime TIMESTAMP, __eventTime TIMESTAMP, __messageProperties MAP<STRING, STRING>"
)

_PRIMITIVE_DDL = {
    "string": "STRING",
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "bytes": "BINARY",
    "enum": "STRING",
    "fixed": "BINARY",
}
_SCHEMA_TYPE_DDL = {  # pb.Schema.Type names of the primitive schemas -> the value column
    "String": "STRING",
    "Bool": "BOOLEAN",
    "Int8": "TINYINT",
    "Int16": "SMALLINT",
    "Int32": "INT",
    "Int64": "BIGINT",
    "Float": "FLOAT",
    "Double": "DOUBLE",
}
_RECORD_TYPES = ("Avro", "Json")


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _nullable_inner(avro: Any) -> Any:
    """``["null", T]`` -> ``T``; other unions are not mapped (a string of their JSON)."""
    if isinstance(avro, list):
        rest = [t for t in avro if t != "null"]
        return rest[0] if len(rest) == 1 else "string"
    return avro


def spark_ddl(avro: Any) -> str:
    t = _nullable_inner(avro)
    if isinstance(t, str):
        return _PRIMITIVE_DDL.get(t, "STRING")
    kind = t.get("type")
    if kind == "array":
        return f"ARRAY<{spark_ddl(t['items'])}>"
    if kind == "map":
        return f"MAP<STRING, {spark_ddl(t['values'])}>"
    if kind == "record":
        inner = ", ".join(f"{_quote(f['name'])}: {spark_ddl(f['type'])}" for f in t["fields"])
        return f"STRUCT<{inner}>"
    return _PRIMITIVE_DDL.get(kind, "STRING")


def arrow_type(avro: Any) -> Any:
    import pyarrow as pa

    t = _nullable_inner(avro)
    kind = t if isinstance(t, str) else t.get("type")
    simple = {
        "string": pa.string(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "bytes": pa.binary(),
        "enum": pa.string(),
        "fixed": pa.binary(),
    }
    if kind == "array":
        return pa.list_(arrow_type(t["items"]))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(t["values"]))
    if kind == "record":
        return pa.struct([(f["name"], arrow_type(f["type"])) for f in t["fields"]])
    return simple.get(kind, pa.string())


@dataclass(frozen=True, slots=True)
class TopicSchema:
    """The schema whose columns a read produces (``type_name``: a ``pb.Schema.Type`` name)."""

    type_name: str
    definition: str

    @classmethod
    def of(cls, schema: Any) -> TopicSchema | None:
        """From a ``pb.Schema``; None when the raw layout applies."""
        from magnetar.client.protocol import pb

        name = pb.Schema.Type.Name(schema.type)
        if name in _RECORD_TYPES:
            try:
                doc = json.loads(schema.schema_data)
            except ValueError:
                return None
            if isinstance(doc, dict) and doc.get("type") == "record":
                return cls(name, schema.schema_data.decode())
            return None
        if name in _SCHEMA_TYPE_DDL:
            return cls(name, "")
        return None

    @property
    def record(self) -> dict[str, Any] | None:
        if self.type_name not in _RECORD_TYPES:
            return None
        doc: dict[str, Any] = json.loads(self.definition)
        return doc

    def value_ddl(self) -> str:
        record = self.record
        if record is None:
            return f"value {_SCHEMA_TYPE_DDL[self.type_name]}"
        return ", ".join(f"{_quote(f['name'])} {spark_ddl(f['type'])}" for f in record["fields"])

    def ddl(self) -> str:
        return f"{self.value_ddl()}, {META_DDL}"

    def value_fields(self) -> list[tuple[str, Any]]:
        """(column, Arrow type) of the value columns."""
        import pyarrow as pa

        record = self.record
        if record is not None:
            return [(f["name"], arrow_type(f["type"])) for f in record["fields"]]
        arrow = {
            "String": pa.string(),
            "Bool": pa.bool_(),
            "Int8": pa.int8(),
            "Int16": pa.int16(),
            "Int32": pa.int32(),
            "Int64": pa.int64(),
            "Float": pa.float32(),
            "Double": pa.float64(),
        }
        return [("value", arrow[self.type_name])]

    def check_columns(self, columns: list[str]) -> None:
        """Writing: every data column must be a field of the record (ValueError names the
        others: written, they would be lost)."""
        record = self.record
        if record is None:
            raise ValueError(f"a {self.type_name} schema takes no record columns")
        fields = [f["name"] for f in record["fields"]]
        extra = [c for c in columns if c not in fields]
        if extra:
            raise ValueError(
                f"column(s) {', '.join(map(repr, extra))} are not fields of the topic's "
                f"{self.type_name.upper()} schema (fields: {', '.join(fields)})"
            )

    def encode(self, row: dict[str, Any]) -> bytes:
        """Writing: one row's data columns as a payload of this record schema (fields the row
        lacks take their default; ValueError / TypeError when a value does not fit)."""
        record, parsed = _writer_of(self.type_name, self.definition)
        plain = _plain(record, row)
        if parsed is None:  # JSON
            return json_payload(plain)
        import fastavro

        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, plain)
        return out.getvalue()

    def decode(self, data: bytes, writer: Any = None) -> dict[str, Any]:
        """The value columns of one payload; ``writer``: the ``pb.Schema`` that wrote it."""
        if self.type_name not in _RECORD_TYPES:
            return {"value": _primitive(self.type_name, data)}
        written = writer.schema_data if writer is not None and writer.schema_data else None
        names, parsed_writer, parsed_reader = _reader_of(self.type_name, self.definition, written)
        if parsed_reader is None:  # JSON
            doc = json.loads(data)
        else:
            import fastavro

            doc = fastavro.schemaless_reader(io.BytesIO(data), parsed_writer, parsed_reader)
            assert isinstance(doc, dict)
        return {name: doc.get(name) for name in names}

    def decode_column(
        self,
        payloads: list[bytes],
        run_of_row: Any,
        versions: list[bytes],
        writer_of: Any,
    ) -> list[Any]:
        """The value columns (Arrow arrays) of many payloads at once: row ``i`` was written
        with schema version ``versions[run_of_row[i]]`` (``writer_of(version)``: its
        ``pb.Schema``, None when unknown). Primitive schemas convert the joined payloads
        in one step; records decode per writer version, a whole group at a time (Avro: one
        container block read by fastavro, JSON: ``json.loads``)."""
        import numpy as np
        import pyarrow as pa

        fields = self.value_fields()
        if self.record is None:
            return [_primitive_column(self.type_name, payloads, fields[0][1])]
        codes: dict[bytes, int] = {}
        run_codes = np.array([codes.setdefault(v, len(codes)) for v in versions], dtype=np.int64)
        row_codes = run_codes[run_of_row] if len(run_codes) else run_codes
        docs: list[Any] = [None] * len(payloads)
        for version, code in codes.items():
            rows: list[int] = (
                np.nonzero(row_codes == code)[0].tolist()
                if len(codes) > 1
                else list(range(len(payloads)))
            )
            writer = writer_of(version) if version and writer_of is not None else None
            written = writer.schema_data if writer is not None and writer.schema_data else None
            got = self.decode_many([payloads[i] for i in rows], written)
            for i, doc in zip(rows, got, strict=True):
                docs[i] = doc
        return [pa.array([d.get(name) for d in docs], kind) for name, kind in fields]

    def decode_many(self, payloads: list[bytes], written: bytes | None) -> list[dict[str, Any]]:
        """Record payloads of one writer schema (``written``: its definition, None: this
        one) as dicts of the record's fields, resolved to this schema."""
        if self.type_name == "Json":
            return [json.loads(p) for p in payloads]
        import fastavro

        names, _, parsed_reader = _reader_of(self.type_name, self.definition, written)
        writer_doc = json.loads(written) if written else json.loads(self.definition)
        writer_doc["name"] = json.loads(self.definition).get("name")
        block = _avro_container(json.dumps(writer_doc), payloads)
        out: list[dict[str, Any]] = []
        for doc in fastavro.reader(io.BytesIO(block), reader_schema=parsed_reader):
            assert isinstance(doc, dict)
            out.append({name: doc.get(name) for name in names})
        return out


async def fetch(client: Any, topics: tuple[str, ...]) -> TopicSchema | None:
    """The columns' schema: the latest of the first topic named (None: the raw layout)."""
    if not topics:
        return None
    answer = await client.get_schema_info(topics[0])
    return None if answer is None else TopicSchema.of(answer.schema)


def topic_schema(opts: Any) -> TopicSchema | None:
    """``fetch`` for read options, on its own event loop (the driver's planning calls)."""
    import asyncio

    from magnetar.spark import cluster

    if opts.selection.pattern is not None:
        return None

    async def go() -> TopicSchema | None:
        client = cluster.open_client(opts.client)
        try:
            return await fetch(client, opts.selection.topics)
        finally:
            await client.close()

    return asyncio.run(go())


@functools.lru_cache(maxsize=32)
def _writer_of(type_name: str, definition: str) -> tuple[dict[str, Any], Any]:
    """The record schema and, for Avro, fastavro's parsed form: once per schema, not per row
    (the sink encodes every row with the same one)."""
    record: dict[str, Any] = json.loads(definition)
    if type_name == "Json":
        return record, None
    import fastavro

    return record, fastavro.parse_schema(json.loads(definition))


@functools.lru_cache(maxsize=64)
def _reader_of(
    type_name: str, definition: str, writer_data: bytes | None
) -> tuple[tuple[str, ...], Any, Any]:
    """Reading: the record's field names and, for Avro, fastavro's parsed writer and reader
    schemas; once per (reader, writer) pair, not per message."""
    record: dict[str, Any] = json.loads(definition)
    names = tuple(f["name"] for f in record["fields"])
    if type_name == "Json":
        return names, None, None
    import fastavro

    written = record
    if writer_data:
        written = json.loads(writer_data)
        written["name"] = record.get("name")  # resolution matches records by name
    return names, fastavro.parse_schema(written), fastavro.parse_schema(json.loads(definition))


def _plain(t: Any, v: Any) -> Any:
    """A value as Arrow's ``to_pylist`` gives it, shaped for Avro type ``t``: Arrow maps come
    as lists of (key, value) pairs; Avro maps (and JSON objects) are dicts."""
    if v is None:
        return None
    if isinstance(t, list):  # a union: the first branch the value can be shaped for
        branches = [b for b in t if b != "null"]
        return _plain(branches[0], v) if len(branches) == 1 else v
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "record" and isinstance(v, dict):
            return {
                f["name"]: _plain(f["type"], v.get(f["name"]))
                for f in t["fields"]
                if f["name"] in v
            }
        if kind == "array" and isinstance(v, list):
            return [_plain(t["items"], x) for x in v]
        if kind == "map":
            pairs = v.items() if isinstance(v, dict) else v
            return {k: _plain(t["values"], x) for k, x in pairs}
    return v


class RegisteredSchema(Schema):
    """The topic's registered schema (a ``pb.Schema``), sent byte for byte on PRODUCER so
    the broker finds its version; values arrive encoded (``TopicSchema.encode``) and pass
    through."""

    def __init__(self, info: Any) -> None:
        self.info = info

    def schema_info(self) -> Any:
        return self.info

    def encode(self, value: Any) -> bytes:
        return bytes(value)

    def decode(self, data: bytes) -> Any:
        return data


def _avro_long(n: int) -> bytes:
    """Avro's long: zig-zag, then a base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SYNC = b"magnetar-spark!!"  # any 16 bytes: the container's sync marker


def _avro_container(writer_schema: str, payloads: list[bytes]) -> bytes:
    """An Avro object container (the spec's file layout) holding ``payloads``, each one
    record in Avro binary, as one uncompressed block: fastavro reads all of them in one
    call (schema resolution included) instead of one ``schemaless_reader`` call per row."""
    meta = {"avro.schema": writer_schema.encode(), "avro.codec": b"null"}
    header = [b"Obj\x01", _avro_long(len(meta))]
    for k, v in meta.items():
        header += [_avro_long(len(k)), k.encode(), _avro_long(len(v)), v]
    body = b"".join(payloads)
    return b"".join(
        [
            *header,
            _avro_long(0),
            _SYNC,
            _avro_long(len(payloads)),
            _avro_long(len(body)),
            body,
            _SYNC,
        ]
    )


_WIDTHS = {
    "Int8": ">i1",
    "Int16": ">i2",
    "Int32": ">i4",
    "Int64": ">i8",
    "Float": ">f4",
    "Double": ">f8",
}


def _primitive_column(type_name: str, payloads: list[bytes], kind: Any) -> Any:
    """A primitive schema's ``value`` column from many payloads at once (big-endian numbers
    read with numpy, strings validated as UTF-8 by Arrow); payloads of an unexpected size,
    or invalid UTF-8, go the per-row way (``_primitive``)."""
    import numpy as np
    import pyarrow as pa

    from magnetar.spark.columns import binary_array

    lengths = {len(p) for p in payloads}
    if type_name == "String":
        arr = binary_array(payloads, pa.string())
        try:
            arr.validate(full=True)
            return arr
        except pa.ArrowInvalid:
            pass
    elif type_name == "Bool" and lengths <= {1}:
        return pa.array(np.frombuffer(b"".join(payloads), dtype=np.uint8) != 0, kind)
    elif type_name in _WIDTHS:
        dtype = np.dtype(_WIDTHS[type_name])
        if lengths <= {dtype.itemsize}:
            return pa.array(
                np.frombuffer(b"".join(payloads), dtype=dtype).astype(dtype.newbyteorder("=")), kind
            )
    return pa.array([_primitive(type_name, p) for p in payloads], kind)


def _primitive(type_name: str, data: bytes) -> Any:
    import struct

    if type_name == "String":
        return data.decode("utf-8", "replace")
    if type_name == "Bool":
        return data != b"\x00"
    fmt = {"Int8": ">b", "Int16": ">h", "Int32": ">i", "Int64": ">q", "Float": ">f", "Double": ">d"}
    return struct.unpack(fmt[type_name], data)[0]


__all__ = [
    "META_DDL",
    "RegisteredSchema",
    "TopicSchema",
    "arrow_type",
    "fetch",
    "spark_ddl",
    "topic_schema",
]
