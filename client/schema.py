"""Typed messages for ``magnetar.client``, shaped like the official ``pulsar.schema``.

    from magnetar.client.schema import AvroSchema, Integer, JsonSchema, Record, String

    class User(Record):
        name = String()
        age = Integer()

    producer = await client.create_producer("users", schema=AvroSchema(User))
    await producer.send(User(name="ada", age=36))
    consumer = await client.subscribe("users", "s", schema=AvroSchema(User))
    (await consumer.receive()).value()      # User(name="ada", age=36)

Owns: ``Record`` and its field types (the Avro definition a record class describes, written
exactly as the official client writes it, so both clients register the same schema version),
and the schemas: ``BytesSchema`` (the default: no schema on the wire), ``StringSchema``,
``JsonSchema`` and ``AvroSchema`` (a record class, or a definition dict with plain dicts as
values). Each schema gives the ``pb.Schema`` sent on PRODUCER / SUBSCRIBE (``schema_info``)
and turns values into bytes and back. Avro encoding uses ``fastavro`` (the ``avro`` extra:
``pip install magnetar[avro]``), imported only when an ``AvroSchema`` is made.
``AvroSchema`` and ``AutoConsumeSchema`` decode each message with the schema version that
wrote it (the consumer fetches it with GET_SCHEMA before handing the message over).
Enums: an ``enum.Enum`` class as a field (or ``CustomEnum(EnumClass)``), an Avro ``enum``
of its member names, as the official client writes it. Not here (yet): fixed, logical types,
PROTOBUF, KEY_VALUE.
Must not know: connections, producers, consumers.
"""

from __future__ import annotations

import enum
import io
import json
from typing import Any, ClassVar, cast

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


class Field:
    """A record field: its Avro type and its Python value."""

    avro_type: ClassVar[str] = ""
    python_types: ClassVar[tuple[type, ...]] = ()

    def __init__(
        self, default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        self._default = default
        self._required = required
        self._required_default = required_default

    def default(self) -> Any:
        return self._default

    def schema_info(self, defined: set[str]) -> Any:
        return self.avro_type

    def validate(self, name: str, value: Any) -> Any:
        if value is None:
            if self._required:
                raise TypeError(f"field {name!r} is required")
            return self._default
        if self.python_types and not isinstance(value, self.python_types):
            raise TypeError(f"field {name!r}: {type(value).__name__} is not {self.avro_type}")
        return value

    def to_plain(self, value: Any) -> Any:
        return value

    def from_plain(self, value: Any) -> Any:
        return value


class Boolean(Field):
    avro_type = "boolean"
    python_types = (bool,)


class Integer(Field):
    avro_type = "int"
    python_types = (int,)


class Long(Field):
    avro_type = "long"
    python_types = (int,)


class Float(Field):
    avro_type = "float"
    python_types = (float, int)


class Double(Field):
    avro_type = "double"
    python_types = (float, int)


class Bytes(Field):
    avro_type = "bytes"
    python_types = (bytes,)


class String(Field):
    avro_type = "string"
    python_types = (str,)


class CustomEnum(Field):
    """An ``enum.Enum`` class as a field: an Avro ``enum`` of the member names (a value may be
    given as a member, its name or its value), as the official client's ``CustomEnum``."""

    avro_type = "enum"

    def __init__(self, enum_type: type[enum.Enum], **kwargs: Any) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise TypeError(f"{enum_type!r} is not an Enum class")
        super().__init__(**kwargs)
        self.enum_type = enum_type

    def schema_info(self, defined: set[str]) -> Any:
        name = self.enum_type.__name__
        if name in defined:
            return name
        defined.add(name)
        return {"type": "enum", "name": name, "symbols": [m.name for m in self.enum_type]}

    def validate(self, name: str, value: Any) -> Any:
        if value is None or isinstance(value, self.enum_type):
            return super().validate(name, value)
        if isinstance(value, str) and value in self.enum_type.__members__:
            return self.enum_type.__members__[value]
        for member in self.enum_type:
            if not isinstance(value, str) and member.value == value:
                return member
        names = ", ".join(self.enum_type.__members__)
        raise TypeError(f"field {name!r}: {value!r} is not one of {names}")

    def to_plain(self, value: Any) -> Any:
        return value.name if isinstance(value, enum.Enum) else value

    def from_plain(self, value: Any) -> Any:
        return self.enum_type[value] if isinstance(value, str) else value


class Array(Field):
    avro_type = "array"
    python_types = (list,)

    def __init__(self, items: Field | Record, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.items = items

    def schema_info(self, defined: set[str]) -> Any:
        return {"type": "array", "items": _schema_of(self.items, defined)}

    def to_plain(self, value: Any) -> Any:
        return None if value is None else [_to_plain(self.items, v) for v in value]

    def from_plain(self, value: Any) -> Any:
        return None if value is None else [_from_plain(self.items, v) for v in value]


class Map(Field):
    avro_type = "map"
    python_types = (dict,)

    def __init__(self, values: Field | Record, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.values = values

    def schema_info(self, defined: set[str]) -> Any:
        return {"type": "map", "values": _schema_of(self.values, defined)}

    def to_plain(self, value: Any) -> Any:
        return None if value is None else {k: _to_plain(self.values, v) for k, v in value.items()}

    def from_plain(self, value: Any) -> Any:
        if value is None:
            return None
        return {k: _from_plain(self.values, v) for k, v in value.items()}


def _schema_of(kind: Field | Record, defined: set[str]) -> Any:
    if isinstance(kind, Record):
        return type(kind).schema_info(defined)
    return kind.schema_info(defined)


def _to_plain(kind: Field | Record, value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(kind, Field):
        return kind.to_plain(value)
    return value


def _from_plain(kind: Field | Record, value: Any) -> Any:
    if isinstance(kind, Record) and isinstance(value, dict):
        return type(kind).from_dict(value)
    if isinstance(kind, Field):
        return kind.from_plain(value)
    return value


class Record:
    """A record type: its fields are the ``Field`` (or nested ``Record``) class attributes, in
    declaration order (``_sorted_fields = True``: by name), as the official client."""

    _default: Any
    _required: bool
    _required_default: bool

    _avro_namespace: ClassVar[str | None] = None
    _sorted_fields: ClassVar[bool] = False
    _fields: ClassVar[dict[str, Field | Record]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: dict[str, Field | Record] = {}
        for base in reversed(cls.__mro__[1:]):
            fields.update(getattr(base, "_fields", {}))
        for name, declared in list(vars(cls).items()):
            # an Enum class as a field stands for CustomEnum(it), as in the official client
            kind = (
                CustomEnum(cast(type[enum.Enum], declared))
                if isinstance(declared, enum.EnumMeta)
                else declared
            )
            if isinstance(kind, (Field, Record)) and not name.startswith("_"):
                fields[name] = kind
        cls._fields = fields

    def __init__(
        self, default: Any = None, required: bool = False, required_default: bool = False, **kw: Any
    ) -> None:
        # as a nested field declaration, ``Address()`` takes the same options as a Field
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_required", required)
        object.__setattr__(self, "_required_default", required_default)
        for name, kind in self._fields.items():
            if name in kw:
                setattr(self, name, kw.pop(name))
            elif isinstance(kind, Record):
                object.__setattr__(self, name, None)
            else:
                object.__setattr__(self, name, kind.default())
        if kw:
            raise AttributeError(f"{type(self).__name__} has no field {sorted(kw)[0]!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        kind = self._fields.get(name)
        if kind is None:
            raise AttributeError(f"Cannot set undeclared field {name} on record")
        if isinstance(kind, Record):
            if isinstance(value, dict):
                value = type(kind).from_dict(value)
            if value is not None and not isinstance(value, type(kind)):
                raise TypeError(f"field {name!r} must be a {type(kind).__name__}")
        else:
            value = kind.validate(name, value)
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Record)
            and type(other) is type(self)
            and (self.to_dict() == other.to_dict())
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._fields)
        return f"{type(self).__name__}({inner})"

    # -- the Avro definition --------------------------------------------------------------------
    @classmethod
    def schema(cls) -> dict[str, Any]:
        out: dict[str, Any] = cls.schema_info(set())
        return out

    @classmethod
    def schema_info(cls, defined: set[str]) -> Any:
        full = f"{cls._avro_namespace}.{cls.__name__}" if cls._avro_namespace else cls.__name__
        if full in defined:
            return full
        defined.add(full)
        out: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace is not None:
            out["namespace"] = cls._avro_namespace
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        fields = []
        for name in names:
            kind = cls._fields[name]
            avro = _schema_of(kind, defined)
            entry: dict[str, Any] = {
                "name": name,
                "type": avro if kind._required else ["null", avro],
            }
            if kind._required_default:
                default = kind._default
                if isinstance(default, enum.Enum):
                    default = default.name
                entry = {"name": name, "default": default, "type": entry["type"]}
            fields.append(entry)
        out["fields"] = fields
        return out

    # -- plain values -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {name: _to_plain(kind, getattr(self, name)) for name, kind in self._fields.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        values = {
            name: _from_plain(kind, data[name])
            for name, kind in cls._fields.items()
            if name in data
        }
        return cls(**values)


WRITERS_MAX = 1000
"""Writer schemas one schema object remembers (per topic and version)."""


def _writer_key(topic: str, version: bytes) -> tuple[str, bytes]:
    head, sep, tail = topic.rpartition("-partition-")
    return (head if sep and tail.isdigit() else topic), version


class Schema:
    """What travels with PRODUCER / SUBSCRIBE, and how values become bytes."""

    schema_type: ClassVar[int] = pb.Schema.NONE
    name: ClassVar[str] = "BYTES"
    wants_writer: ClassVar[bool] = False
    """Decodes with the schema each message was written with: the consumer fetches it
    (GET_SCHEMA) before handing the message over."""

    def knows_writer(self, topic: str, version: bytes) -> bool:
        writers: dict[tuple[str, bytes], pb.Schema] = self.__dict__.get("_writers", {})
        return _writer_key(topic, version) in writers

    def remember_writer(self, topic: str, version: bytes, writer: pb.Schema) -> None:
        writers = self.__dict__.setdefault("_writers", {})
        if len(writers) >= WRITERS_MAX:
            writers.pop(next(iter(writers)))
        writers[_writer_key(topic, version)] = writer

    def writer_of(self, topic: str, version: bytes) -> pb.Schema | None:
        writers: dict[tuple[str, bytes], pb.Schema] = self.__dict__.get("_writers", {})
        return writers.get(_writer_key(topic, version))

    def decode_message(self, topic: str, version: bytes, data: bytes) -> Any:
        """A received payload as a value (``decode``, unless the writer's schema matters)."""
        return self.decode(data)

    def definition(self) -> bytes:
        return b""

    def schema_info(self) -> pb.Schema | None:
        """None: send no schema (bytes)."""
        kind: Any = self.schema_type
        return pb.Schema(name=self.name, schema_data=self.definition(), type=kind)

    def encode(self, value: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError


class BytesSchema(Schema):
    def schema_info(self) -> pb.Schema | None:
        return None

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError("BytesSchema sends bytes")
        return bytes(value)

    def decode(self, data: bytes) -> Any:
        return data


class StringSchema(Schema):
    schema_type = pb.Schema.String
    name = "STRING"

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise TypeError("StringSchema sends str")
        return value.encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return data.decode("utf-8")


class _RecordSchema(Schema):
    def __init__(
        self, record_cls: type[Record] | None, schema_definition: dict[str, Any] | None = None
    ) -> None:
        if record_cls is None and schema_definition is None:
            raise ValueError("a record class or a schema definition is needed")
        self.record_cls = record_cls
        self.schema = record_cls.schema() if record_cls is not None else schema_definition
        # the official client's exact text (json.dumps(..., indent=True)): the broker keys
        # versions by the definition's bytes, so both clients share one version
        self._definition = json.dumps(self.schema, indent=True).encode()

    def definition(self) -> bytes:
        return self._definition

    def _plain(self, value: Any) -> dict[str, Any]:
        if self.record_cls is not None:
            if not isinstance(value, self.record_cls):
                raise TypeError(f"expected a {self.record_cls.__name__}")
            return value.to_dict()
        if not isinstance(value, dict):
            raise TypeError("a schema given as a definition sends dicts")
        return value

    def _value(self, plain: dict[str, Any]) -> Any:
        return plain if self.record_cls is None else self.record_cls.from_dict(plain)


class JsonSchema(_RecordSchema):
    schema_type = pb.Schema.Json
    name = "JSON"

    def encode(self, value: Any) -> bytes:
        return json.dumps(self._plain(value), indent=True).encode()

    def decode(self, data: bytes) -> Any:
        return self._value(json.loads(data))


class AvroSchema(_RecordSchema):
    """Avro values; a consumer decodes each message with the schema version that wrote it
    (resolved to this reader schema), as the official client does."""

    schema_type = pb.Schema.Avro
    name = "AVRO"
    wants_writer = True

    def __init__(
        self, record_cls: type[Record] | None, schema_definition: dict[str, Any] | None = None
    ) -> None:
        super().__init__(record_cls, schema_definition)
        try:
            import fastavro
        except ImportError:  # pragma: no cover - depends on the install
            raise ImportError("AvroSchema needs fastavro: pip install 'magnetar[avro]'") from None
        self._fastavro = fastavro
        self._parsed = fastavro.parse_schema(cast(dict[str, Any], self.schema))

    def encode(self, value: Any) -> bytes:
        out = io.BytesIO()
        self._fastavro.schemaless_writer(out, self._parsed, self._plain(value))
        return out.getvalue()

    def decode(self, data: bytes) -> Any:
        plain = self._fastavro.schemaless_reader(io.BytesIO(data), self._parsed)
        return self._value(cast(dict[str, Any], plain))

    def decode_message(self, topic: str, version: bytes, data: bytes) -> Any:
        writer = self.writer_of(topic, version) if version else None
        if writer is None or writer.type != pb.Schema.Avro:
            return self.decode(data)
        written = json.loads(writer.schema_data)
        if isinstance(written, dict) and isinstance(self.schema, dict):
            written["name"] = self.schema.get("name")  # as the official client: names may differ
        plain = self._fastavro.schemaless_reader(
            io.BytesIO(data), self._fastavro.parse_schema(written), self._parsed
        )
        return self._value(cast(dict[str, Any], plain))


class AutoConsumeSchema(Schema):
    """Reads whatever the topic holds (Pulsar's AUTO_CONSUME): each message is decoded with
    the schema version that wrote it: AVRO and JSON records as dicts, STRING as str, anything
    else (and messages written without a schema) as bytes. Sends no schema on SUBSCRIBE, as
    the official clients' C++ core (a broker never checks it)."""

    name = "AUTO_CONSUME"
    wants_writer = True

    def schema_info(self) -> pb.Schema | None:
        return None

    def encode(self, value: Any) -> bytes:
        raise TypeError("AUTO_CONSUME is for consumers")

    def decode(self, data: bytes) -> Any:
        return data

    def decode_message(self, topic: str, version: bytes, data: bytes) -> Any:
        writer = self.writer_of(topic, version) if version else None
        if writer is None:
            return data
        if writer.type == pb.Schema.Avro:
            import fastavro

            parsed = fastavro.parse_schema(json.loads(writer.schema_data))
            return fastavro.schemaless_reader(io.BytesIO(data), parsed)
        if writer.type == pb.Schema.Json:
            return json.loads(data)
        if writer.type == pb.Schema.String:
            return data.decode("utf-8")
        return data


__all__ = [
    "Array",
    "AutoConsumeSchema",
    "AvroSchema",
    "Boolean",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "Integer",
    "JsonSchema",
    "Long",
    "Map",
    "Record",
    "Schema",
    "String",
    "StringSchema",
]
