"""Schema compatibility: may a new definition join the versions a topic already has?

Owns: ``check`` (a producer's new schema against the stored versions under a strategy) and
``check_reader`` (a consumer's schema), decided with Avro's reader/writer schema resolution
(``avro.compatibility.ReaderWriterCompatibilityChecker``, the Python port of Java's
``SchemaCompatibility``): never a hand-written approximation. One difference is made, to
decide as Pulsar does: Pulsar's ``AvroSchemaBasedCompatibilityCheck`` validates with Avro's
``SchemaValidatorBuilder``, whose ``canRead`` resolves the schemas with Avro's
``ResolvingGrammarGenerator``, which does not compare the names of records (only of fixed and
enum types). So a record may change its name (``User1`` -> ``User2``, ``Example`` ->
``ExampleRequiredDefault``, as classes of the official Python client do) when its fields
resolve.

Strategies, as Pulsar's ``AvroSchemaBasedCompatibilityCheck``:
- BACKWARD: the new schema can read data written with the latest version (new = reader);
- FORWARD: the latest version can read data written with the new one (new = writer);
- FULL: both; the ``_TRANSITIVE`` forms check every version since the last delete instead of
  only the latest; ALWAYS_COMPATIBLE accepts anything, ALWAYS_INCOMPATIBLE refuses any change.
Primitive types are compared by type only; a change of type is refused (except under
ALWAYS_COMPATIBLE); KEY_VALUE checks its key and value halves separately; PROTOBUF_NATIVE
keeps Pulsar's default rule (the root message type may not change; field-level checks of the
descriptors are not done).
Pure: no I/O. Must not know: storage, topics, the wire codec.
"""

from __future__ import annotations

from collections.abc import Sequence

from avro.compatibility import (
    ReaderWriterCompatibilityChecker,
    SchemaCompatibilityResult,
    SchemaCompatibilityType,
)
from avro.schema import RecordSchema, Schema

from magnetar.broker.schema.model import (
    CompatibilityStrategy,
    IncompatibleSchema,
    SchemaData,
    SchemaType,
)
from magnetar.broker.schema.validation import (
    parse_avro,
    protobuf_native_root,
    split_key_value,
)

S = CompatibilityStrategy
_READ_BY_NEW = frozenset({S.BACKWARD, S.BACKWARD_TRANSITIVE, S.FULL, S.FULL_TRANSITIVE})
_READ_BY_OLD = frozenset({S.FORWARD, S.FORWARD_TRANSITIVE, S.FULL, S.FULL_TRANSITIVE})
REASONS_MAX = 5
"""Incompatibilities named in one error message."""


class _ResolvingChecker(ReaderWriterCompatibilityChecker):
    """Avro's reader/writer check as Avro's ``SchemaValidator`` (Pulsar's) resolves it:
    records are matched by their fields, not their names."""

    def calculate_compatibility(
        self, reader: Schema, writer: Schema, location: list[str]
    ) -> SchemaCompatibilityResult:
        if reader.type == writer.type == "record":
            assert isinstance(reader, RecordSchema) and isinstance(writer, RecordSchema)
            return self.check_reader_writer_record_fields(reader, writer, location)
        return super().calculate_compatibility(reader, writer, location)


def _can_read(reader: SchemaData, writer: SchemaData) -> None:
    """Raise ``IncompatibleSchema`` unless data written with ``writer`` resolves to
    ``reader`` (Avro schema resolution)."""
    r = parse_avro(reader.data, reader.type.name)
    w = parse_avro(writer.data, writer.type.name)
    result = _ResolvingChecker().get_compatibility(r, w)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return
    kinds = sorted({kind.value for kind in result.incompatibilities})[:REASONS_MAX]
    where = sorted(result.locations)[:REASONS_MAX]
    detail = f"{', '.join(kinds) or 'incompatible'} at {', '.join(where) or '/'}"
    raise IncompatibleSchema(
        f"Unable to read schema: {writer.data.decode('utf-8', 'replace')} using schema: "
        f"{reader.data.decode('utf-8', 'replace')} ({detail})"
    )


def _check_pair(existing: SchemaData, new: SchemaData, strategy: CompatibilityStrategy) -> None:
    if existing.type is not new.type:
        raise IncompatibleSchema(
            f"Incompatible schema: exists schema type {existing.type.rest_name}, "
            f"new schema type {new.type.rest_name}"
        )
    if existing.type.is_primitive or existing.data == new.data:
        return
    if strategy is S.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema(
            "Schema compatibility strategy is ALWAYS_INCOMPATIBLE: the schema cannot change"
        )
    if existing.type is SchemaType.KEY_VALUE:
        old_key, old_value = split_key_value(existing)
        new_key, new_value = split_key_value(new)
        _check_pair(old_key, new_key, strategy)
        _check_pair(old_value, new_value, strategy)
        return
    if existing.type is SchemaType.PROTOBUF_NATIVE:
        # Pulsar's ProtobufNativeSchemaCompatibilityCheck: the root message may not change
        old_root, new_root = protobuf_native_root(existing.data), protobuf_native_root(new.data)
        if old_root != new_root:
            raise IncompatibleSchema(
                f"The root message of the PROTOBUF_NATIVE schema changed: {old_root} -> {new_root}"
            )
        return
    if not existing.type.is_struct:
        raise IncompatibleSchema(
            f"Incompatible {existing.type.rest_name} schema: only an identical definition "
            "is compatible"
        )
    if strategy in _READ_BY_NEW:
        _can_read(new, existing)
    if strategy in _READ_BY_OLD:
        _can_read(existing, new)


def check(existing: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> None:
    """Raise ``IncompatibleSchema`` unless ``new`` may follow ``existing`` (oldest first,
    deleted versions already trimmed) under ``strategy``."""
    if not existing or strategy is S.ALWAYS_COMPATIBLE:
        return
    against = existing if strategy.transitive else existing[-1:]
    for old in reversed(against):
        _check_pair(old, new, strategy)


def check_reader(
    existing: Sequence[SchemaData], reader: SchemaData, strategy: CompatibilityStrategy
) -> None:
    """Raise ``IncompatibleSchema`` unless a consumer with ``reader`` can read the topic:
    an identical stored definition always can; otherwise ``reader`` must resolve the latest
    version (every version under a transitive strategy), as Pulsar's
    ``checkConsumerCompatibility`` (BACKWARD against the writers)."""
    if not existing:
        raise IncompatibleSchema("Trying to subscribe with incompatible schema")
    if any(old.type is reader.type and old.data == reader.data for old in existing):
        return
    if strategy is S.ALWAYS_COMPATIBLE:
        return
    if strategy is S.ALWAYS_INCOMPATIBLE:
        _check_pair(existing[-1], reader, strategy)
        return
    rule = S.BACKWARD_TRANSITIVE if strategy.transitive else S.BACKWARD
    check(existing, reader, rule)


__all__ = ["check", "check_reader"]
