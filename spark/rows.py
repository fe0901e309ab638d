"""Rows: the source's schema, messages to Arrow record batches, and rows to messages.

Owns: ``SOURCE_SCHEMA`` (pulsar-spark's columns: ``value``, ``__key``, ``__topic``,
``__messageId`` (binary, as ``MessageId.serialize``), plus ``__messageIdString`` (the readable
``ledger:entry:batch``), ``__publishTime``, ``__eventTime``, ``__messageProperties``), the
Arrow batch builder the readers yield, and the sink's mapping of a row to a message
(``OutgoingRow``): ``value`` binary or string is the payload; without a lone ``value`` column
the other columns are packed as one JSON object; ``__topic``, ``__key``, ``__eventTime`` and
``__messageProperties`` are honoured; the read-only metadata columns (``__messageId``,
``__messageIdString``, ``__publishTime``) are dropped so a read can be written back unchanged.

Must not know: the network, offsets.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

SOURCE_DDL = (
    "value BINARY, __key BINARY, __topic STRING, __messageId BINARY, __messageIdString STRING, "
    "__publishTime TIMESTAMP, __eventTime TIMESTAMP, __messageProperties MAP<STRING, STRING>"
)

META_COLUMNS = ("__topic", "__key", "__eventTime", "__messageProperties")
READ_ONLY_COLUMNS = ("__messageId", "__messageIdString", "__publishTime")


class SchemaError(ValueError):
    """A DataFrame that cannot be written to Magnetar (a column of the wrong type)."""


def arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("value", pa.binary()),
            ("__key", pa.binary()),
            ("__topic", pa.string()),
            ("__messageId", pa.binary()),
            ("__messageIdString", pa.string()),
            ("__publishTime", pa.timestamp("us", tz="UTC")),
            ("__eventTime", pa.timestamp("us", tz="UTC")),
            ("__messageProperties", pa.map_(pa.string(), pa.string())),
        ]
    )


class BatchBuilder:
    """Columns of received messages, turned into one ``pyarrow.RecordBatch`` at a time.
    With a ``typed`` schema (``typed.TopicSchema``) the payload becomes the schema's value
    columns instead of ``value BINARY``."""

    def __init__(self, topic: str, typed: Any = None) -> None:
        self.topic = topic
        self.typed = typed
        self._schema = arrow_schema()
        if typed is not None:
            import pyarrow as pa

            meta = [f for f in self._schema if f.name != "value"]
            self._schema = pa.schema([*typed.value_fields(), *meta])
        self.clear()

    def clear(self) -> None:
        self.decoded: list[dict[str, Any]] = []
        self.values: list[bytes] = []
        self.keys: list[bytes | None] = []
        self.ids: list[bytes] = []
        self.id_strings: list[str] = []
        self.publish: list[int] = []
        self.event: list[int | None] = []
        self.props: list[list[tuple[str, str]] | None] = []
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.values)

    def add(self, msg: Any, writer: Any = None) -> None:
        """``writer``: the ``pb.Schema`` that wrote ``msg`` (typed reads)."""
        mid = msg.message_id()
        data = msg.data()
        if self.typed is not None:
            self.decoded.append(self.typed.decode(data, writer))
        self.values.append(data)
        self.nbytes += len(data)
        self.keys.append(msg.partition_key().encode() if msg.has_key() else None)
        self.ids.append(mid.serialize())
        self.id_strings.append(f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}")
        self.publish.append(msg.publish_timestamp() * 1000)
        et = msg.event_timestamp()
        self.event.append(et * 1000 if et else None)
        props = msg.properties()
        self.props.append(list(props.items()) if props else None)

    def build(self) -> Any:
        import pyarrow as pa

        s = self._schema
        n = len(self.values)
        if self.typed is not None:
            columns = [
                pa.array([row.get(f.name) for row in self.decoded], f.type)
                for f in s
                if not f.name.startswith("__")
            ]
            typed = pa.RecordBatch.from_arrays(
                [
                    *columns,
                    pa.array(self.keys, s.field("__key").type),
                    pa.array([self.topic] * n, s.field("__topic").type),
                    pa.array(self.ids, s.field("__messageId").type),
                    pa.array(self.id_strings, s.field("__messageIdString").type),
                    pa.array(self.publish, s.field("__publishTime").type),
                    pa.array(self.event, s.field("__eventTime").type),
                    pa.array(self.props, s.field("__messageProperties").type),
                ],
                schema=s,
            )
            self.clear()
            return typed
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.values, s.field("value").type),
                pa.array(self.keys, s.field("__key").type),
                pa.array([self.topic] * n, s.field("__topic").type),
                pa.array(self.ids, s.field("__messageId").type),
                pa.array(self.id_strings, s.field("__messageIdString").type),
                pa.array(self.publish, s.field("__publishTime").type),
                pa.array(self.event, s.field("__eventTime").type),
                pa.array(self.props, s.field("__messageProperties").type),
            ],
            schema=s,
        )
        self.clear()
        return batch


# ---------------------------------------------------------------------------- the sink


@dataclass(frozen=True, slots=True)
class OutgoingRow:
    topic: str | None
    payload: bytes | None
    """The lone ``value`` column's bytes; None: the data columns (``record``) are packed,
    as JSON (``json_payload``) or by the target topic's record schema."""
    record: dict[str, Any]
    """The data columns by name (every column but the metadata ones)."""
    key: str | None
    event_time_ms: int | None
    properties: dict[str, str] | None


@dataclass(frozen=True, slots=True)
class SinkLayout:
    """Which columns of the written DataFrame mean what (checked once, on the driver)."""

    value_column: str | None  # the lone value column, or None: pack ``data_columns``
    data_columns: tuple[str, ...]  # every column but the metadata ones
    has_topic: bool
    has_key: bool
    has_event_time: bool
    has_properties: bool


def sink_layout(schema: Any, topic_option: str | None) -> SinkLayout:
    """Check a Spark ``StructType`` for writing; ``SchemaError`` names the bad column."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        MapType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    fields = {f.name: f.dataType for f in schema.fields}
    if "__topic" in fields and not isinstance(fields["__topic"], StringType):
        raise SchemaError("column '__topic' must be a string")
    if topic_option is None and "__topic" not in fields:
        raise SchemaError("the 'topic' option is required when no '__topic' column is present")
    if "__key" in fields and not isinstance(fields["__key"], StringType | BinaryType):
        raise SchemaError("column '__key' must be a string or binary")
    if "__eventTime" in fields and not isinstance(
        fields["__eventTime"], TimestampType | TimestampNTZType | LongType
    ):
        raise SchemaError("column '__eventTime' must be a timestamp or a long (ms since epoch)")
    if "__messageProperties" in fields:
        t = fields["__messageProperties"]
        if not (
            isinstance(t, MapType)
            and isinstance(t.keyType, StringType)
            and isinstance(t.valueType, StringType)
        ):
            raise SchemaError("column '__messageProperties' must be a map<string,string>")
    payload = [n for n in fields if n not in META_COLUMNS and n not in READ_ONLY_COLUMNS]
    if not payload:
        raise SchemaError("nothing to write: the DataFrame has no 'value' or other data column")
    value_column = None
    if payload == ["value"]:
        if not isinstance(fields["value"], BinaryType | StringType):
            raise SchemaError(
                "column 'value' must be binary or string (other columns are packed as JSON)"
            )
        value_column = "value"
    return SinkLayout(
        value_column=value_column,
        data_columns=tuple(payload),
        has_topic="__topic" in fields,
        has_key="__key" in fields,
        has_event_time="__eventTime" in fields,
        has_properties="__messageProperties" in fields,
    )


def _json_default(v: Any) -> Any:
    if isinstance(v, bytes | bytearray):
        return base64.b64encode(v).decode()
    if isinstance(v, datetime.datetime | datetime.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    raise TypeError(f"cannot encode {type(v).__name__} as JSON")


def _ms(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.UTC)
        return int(v.timestamp() * 1000)
    return int(v)


def json_payload(record: dict[str, Any]) -> bytes:
    """The data columns packed as one JSON object (binary as base64, times as ISO 8601)."""
    return json.dumps(record, default=_json_default, separators=(",", ":")).encode()


def rows_of(batch: Any, layout: SinkLayout) -> Iterator[OutgoingRow]:
    """The messages of one Arrow record batch, in row order."""
    cols: dict[str, Sequence[Any]] = {}
    names = batch.schema.names

    def col(name: str) -> Sequence[Any]:
        if name not in cols:
            cols[name] = batch.column(names.index(name)).to_pylist()
        return cols[name]

    n = batch.num_rows
    none = [None] * n
    topics = col("__topic") if layout.has_topic else none
    keys = col("__key") if layout.has_key else none
    events = col("__eventTime") if layout.has_event_time else none
    props = col("__messageProperties") if layout.has_properties else none
    data_cols = [(c, col(c)) for c in layout.data_columns]
    if layout.value_column is not None:
        values = col(layout.value_column)
        payloads: Sequence[Any] = [
            v.encode() if isinstance(v, str) else (b"" if v is None else v) for v in values
        ]
    else:
        payloads = none
    for i in range(n):
        key = keys[i]
        p = props[i]
        yield OutgoingRow(
            topic=topics[i],
            payload=payloads[i],
            record={c: vals[i] for c, vals in data_cols},
            key=key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else key,
            event_time_ms=_ms(events[i]),
            properties=dict(p) if p else None,
        )


__all__ = [
    "META_COLUMNS",
    "READ_ONLY_COLUMNS",
    "SOURCE_DDL",
    "BatchBuilder",
    "OutgoingRow",
    "SchemaError",
    "SinkLayout",
    "arrow_schema",
    "json_payload",
    "rows_of",
    "sink_layout",
]
