"""Schema definitions checked before anything is stored (Pulsar's ``SchemaDataValidator``).

Owns: ``validate`` (a definition Pulsar would refuse raises ``InvalidSchemaData`` with a
clear message, never a library traceback), ``parse_avro`` (AVRO, JSON and PROTOBUF
definitions are Avro schemas, parsed with the ``avro`` library) and the KEY_VALUE layout
(``split_key_value``: Pulsar's ``KeyValueSchemaInfo`` encoding, ``[int32 len][key
definition][int32 len][value definition]`` with ``key.schema.type`` / ``value.schema.type``
properties).
Rules, as Pulsar's validators: primitives carry no definition bytes (STRING: none, or the
``null`` the Python client sends); struct
definitions must be valid Avro JSON (a record for AVRO/JSON); PROTOBUF_NATIVE is Pulsar's
JSON ``{"fileDescriptorSet", "rootMessageTypeName", ...}`` whose descriptor set parses and
names the root message; KEY_VALUE halves are validated as their own types.
Pure: no I/O. Must not know: storage, the wire codec, HTTP.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from typing import Any

import avro.errors
import avro.schema
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from magnetar.broker.schema.model import InvalidSchemaData, SchemaData, SchemaType

DEFINITION_BYTES_MAX = 1 << 20
"""Largest definition accepted (a schema is metadata, not payload)."""

NESTED_MESSAGES_MAX = 10_000
"""Message types looked at in one PROTOBUF_NATIVE descriptor set (a bound)."""
_LEN = struct.Struct(">i")
_PY_NONE = b"null"


def parse_avro(data: bytes, what: str = "") -> avro.schema.Schema:
    label = f"{what} schema" if what else "schema"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSchemaData(f"Invalid {label} definition: not UTF-8") from None
    try:
        return avro.schema.parse(text)
    except (avro.errors.AvroException, json.JSONDecodeError, TypeError, ValueError) as exc:
        raise InvalidSchemaData(f"Invalid {label} definition: {exc}") from None
    except RecursionError:
        raise InvalidSchemaData(f"Invalid {label} definition: nested too deeply") from None


def split_key_value(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """The key and value schemas of a KEY_VALUE schema."""
    data = schema.data
    try:
        (klen,) = _LEN.unpack_from(data, 0)
        key = data[4 : 4 + klen]
        (vlen,) = _LEN.unpack_from(data, 4 + klen)
        value = data[8 + klen : 8 + klen + vlen]
    except struct.error:
        raise InvalidSchemaData("Invalid KEY_VALUE schema definition: truncated") from None
    if klen < 0 or vlen < 0 or len(key) != klen or len(value) != vlen:
        raise InvalidSchemaData("Invalid KEY_VALUE schema definition: bad lengths")
    props = schema.props

    def kind(prefix: str) -> SchemaType:
        name = props.get(f"{prefix}.schema.type", "BYTES")
        return SchemaType.from_name(name)

    return SchemaData(kind("key"), key), SchemaData(kind("value"), value)


def join_key_value(key: bytes, value: bytes) -> bytes:
    """The KEY_VALUE definition of two halves (``split_key_value``'s inverse)."""
    return _LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value


def protobuf_native_root(data: bytes) -> str:
    """The ``rootMessageTypeName`` of a (validated) PROTOBUF_NATIVE definition."""
    root: Any = json.loads(data.decode("utf-8")).get("rootMessageTypeName")
    return str(root)


def _validate_protobuf_native(data: bytes) -> None:
    try:
        doc: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InvalidSchemaData("Invalid PROTOBUF_NATIVE schema definition: not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidSchemaData("Invalid PROTOBUF_NATIVE schema definition: not an object")
    root = doc.get("rootMessageTypeName")
    encoded = doc.get("fileDescriptorSet")
    if not isinstance(root, str) or not isinstance(encoded, str):
        raise InvalidSchemaData(
            "Invalid PROTOBUF_NATIVE schema definition: fileDescriptorSet and "
            "rootMessageTypeName are required"
        )
    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(base64.b64decode(encoded, validate=True))
    except (binascii.Error, DecodeError, ValueError):
        raise InvalidSchemaData(
            "Invalid PROTOBUF_NATIVE schema definition: fileDescriptorSet does not parse"
        ) from None
    names: set[str] = set()
    for f in files.file:
        pending = [(f"{f.package}." if f.package else "", m) for m in f.message_type]
        while pending and len(names) < NESTED_MESSAGES_MAX:
            prefix, m = pending.pop()
            names.add(prefix + m.name)
            pending.extend((f"{prefix}{m.name}.", n) for n in m.nested_type)
    if root not in names:
        raise InvalidSchemaData(
            f"Invalid PROTOBUF_NATIVE schema definition: no message {root!r} in the descriptor"
        )


def validate(schema: SchemaData) -> None:
    """Raise ``InvalidSchemaData`` if Pulsar would refuse ``schema``'s definition."""
    kind, data = schema.type, schema.data
    if len(data) > DEFINITION_BYTES_MAX:
        raise InvalidSchemaData(
            f"Schema definition of {len(data)} bytes is over {DEFINITION_BYTES_MAX}"
        )
    if kind is SchemaType.AUTO_CONSUME:
        raise InvalidSchemaData("AUTO_CONSUME is not a schema that can be stored")
    if kind is SchemaType.STRING:
        if data and data != _PY_NONE:  # the Python client sends json.dumps(None)
            shown = data.decode("utf-8", "replace")
            raise InvalidSchemaData(f"Invalid schema definition data for string schema : '{shown}'")
        return
    if kind.is_primitive:
        if data:
            raise InvalidSchemaData(
                "Invalid schema definition data for primitive schemas: length of schema "
                f"data should be zero, but {len(data)} bytes is found"
            )
        return
    if kind.is_struct:
        parsed = parse_avro(data, kind.name)
        if kind in (SchemaType.AVRO, SchemaType.JSON) and parsed.type != "record":
            raise InvalidSchemaData(
                f"Invalid {kind.name} schema definition: a record is expected, got {parsed.type}"
            )
        return
    if kind is SchemaType.PROTOBUF_NATIVE:
        _validate_protobuf_native(data)
        return
    if kind is SchemaType.KEY_VALUE:
        key, value = split_key_value(schema)
        for half in (key, value):
            if half.type in (SchemaType.KEY_VALUE, SchemaType.AUTO_CONSUME):
                raise InvalidSchemaData("Invalid KEY_VALUE schema: nested KEY_VALUE")
            validate(half)


__all__ = [
    "DEFINITION_BYTES_MAX",
    "join_key_value",
    "parse_avro",
    "protobuf_native_root",
    "split_key_value",
    "validate",
]
