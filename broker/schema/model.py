"""The schema registry's model: types, strategies, stored schemas, versions and errors.

Owns: ``SchemaType`` (Pulsar's names, with the wire numbers of ``Schema.Type`` in
PulsarApi.proto), ``CompatibilityStrategy`` (Pulsar's ``SchemaCompatibilityStrategy``),
``SchemaData`` (one stored version: type, definition bytes, properties, timestamp, deleted
flag), the version codec (Pulsar's ``LongSchemaVersion``: an 8-byte big-endian long on the
wire), ``schema_id_of`` (all partitions of a partitioned topic, persistent or not, share one
schema: ``tenant/namespace/base-topic``, as Pulsar's ``TopicName.getSchemaName``) and the
typed errors, each with the ServerError code the protocol answers with.
Pure: no I/O. Must not know: storage, the wire codec, HTTP.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from dataclasses import dataclass, field

from magnetar.broker.errors import BrokerError, ServerError

_VERSION = struct.Struct(">q")

NO_VERSION = -1
"""What ``find_version`` answers when no stored version has the same definition."""


class SchemaType(enum.Enum):
    """Pulsar's schema types; the value is the protobuf ``Schema.Type`` number."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    AUTO_CONSUME = 21
    # Pulsar's BYTES is NONE on the wire (a BytesSchema sends no schema at all).

    @classmethod
    def from_wire(cls, number: int) -> SchemaType:
        try:
            return cls(number)
        except ValueError:
            raise InvalidSchemaData(f"Unknown schema type {number}") from None

    @classmethod
    def from_name(cls, name: str) -> SchemaType:
        """Pulsar's JSON names (``AVRO``, ``KEY_VALUE``, ``BYTES`` = NONE, ...)."""
        upper = name.strip().upper() if isinstance(name, str) else ""
        if upper == "BYTES":
            return cls.NONE
        try:
            return cls[upper]
        except KeyError:
            raise InvalidSchemaData(f"Unknown schema type {name!r}") from None

    @property
    def rest_name(self) -> str:
        return "BYTES" if self is SchemaType.NONE else self.name

    @property
    def is_primitive(self) -> bool:
        """Pulsar's ``SchemaType.isPrimitive``: compared by type, not by definition."""
        return self in _PRIMITIVES

    @property
    def is_struct(self) -> bool:
        """Avro-described record schemas, checked with Avro schema resolution."""
        return self in (SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF)


_PRIMITIVES = frozenset(
    {
        SchemaType.NONE,
        SchemaType.STRING,
        SchemaType.BOOLEAN,
        SchemaType.INT8,
        SchemaType.INT16,
        SchemaType.INT32,
        SchemaType.INT64,
        SchemaType.FLOAT,
        SchemaType.DOUBLE,
        SchemaType.DATE,
        SchemaType.TIME,
        SchemaType.TIMESTAMP,
        SchemaType.INSTANT,
        SchemaType.LOCAL_DATE,
        SchemaType.LOCAL_TIME,
        SchemaType.LOCAL_DATE_TIME,
    }
)


class CompatibilityStrategy(enum.Enum):
    """Pulsar's ``SchemaCompatibilityStrategy`` (UNDEFINED: take the broker's setting)."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, value: object) -> CompatibilityStrategy:
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        names = ", ".join(s.name for s in cls)
        raise InvalidSchemaData(f"Unknown schema compatibility strategy {value!r} ({names})")

    @property
    def transitive(self) -> bool:
        return self.name.endswith("_TRANSITIVE")


@dataclass(frozen=True, slots=True)
class SchemaData:
    """One version of a topic's schema, as stored."""

    type: SchemaType
    data: bytes
    properties: tuple[tuple[str, str], ...] = ()
    timestamp_ms: int = 0
    user: str = ""
    deleted: bool = False

    @property
    def fingerprint(self) -> bytes:
        """SHA-256 of the definition: equal definitions are the same version (Pulsar's
        ``putSchemaIfAbsent`` compares these hashes)."""
        return hashlib.sha256(self.data).digest()

    @property
    def props(self) -> dict[str, str]:
        return dict(self.properties)


@dataclass(frozen=True, slots=True)
class VersionedSchema:
    version: int
    schema: SchemaData


@dataclass(frozen=True, slots=True)
class SchemaPolicy:
    """What a topic's schema operations obey (namespace / topic policies over the broker's
    settings)."""

    strategy: CompatibilityStrategy = CompatibilityStrategy.FULL
    allow_auto_update: bool = True
    validation_enforced: bool = False
    properties: dict[str, str] = field(default_factory=dict)


def version_bytes(version: int) -> bytes:
    """Pulsar's ``LongSchemaVersion.bytes()``: 8 bytes, big-endian."""
    return _VERSION.pack(version)


def version_of(raw: bytes) -> int:
    """The version a client sent (8-byte big-endian); ``InvalidSchemaData`` otherwise."""
    if len(raw) != _VERSION.size:
        raise InvalidSchemaData(f"Invalid schema version of {len(raw)} bytes (8 expected)")
    value: int = _VERSION.unpack(raw)[0]
    return value


def schema_id_of(tenant: str, namespace: str, local: str, partition_suffix: str) -> str:
    """``tenant/namespace/topic`` with any ``-partition-N`` suffix removed."""
    head, sep, tail = local.rpartition(partition_suffix)
    if sep and tail.isdigit():
        local = head
    return f"{tenant}/{namespace}/{local}"


class SchemaError(BrokerError):
    """A refused schema operation, answered with ``code`` (protocol) and ``http_status``
    (admin REST)."""


class IncompatibleSchema(SchemaError):
    code = ServerError.IncompatibleSchema
    http_status = 409


class InvalidSchemaData(SchemaError):
    """A malformed definition (Pulsar's ``InvalidSchemaDataException``)."""

    code = ServerError.IncompatibleSchema
    http_status = 422


class SchemaNotFound(SchemaError):
    code = ServerError.TopicNotFound
    http_status = 404


class SchemaStorageError(SchemaError):
    """The ledger or metadata store failed: retriable for the client."""

    code = ServerError.ServiceNotReady
    http_status = 503


__all__ = [
    "NO_VERSION",
    "CompatibilityStrategy",
    "IncompatibleSchema",
    "InvalidSchemaData",
    "SchemaData",
    "SchemaError",
    "SchemaNotFound",
    "SchemaPolicy",
    "SchemaStorageError",
    "SchemaType",
    "VersionedSchema",
    "schema_id_of",
    "version_bytes",
    "version_of",
]
