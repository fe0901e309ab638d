"""The schema registry (Pulsar's ``SchemaRegistryService``): typed topics, versioned schemas
stored in ledgers with an index in metadata, compatibility checked with Avro schema
resolution. See docs/schema.md.

Modules: ``model`` (types, strategies, versions, errors), ``validation`` (definitions),
``compatibility`` (strategies over Avro resolution), ``storage`` (ledgers + metadata index),
``registry`` (versions of one schema id), ``topics`` (policies and the producer / consumer
rules), ``protocol`` (binary commands), ``admin_api`` (REST), ``wiring`` (the broker's).
"""

from magnetar.broker.schema.model import (
    CompatibilityStrategy,
    IncompatibleSchema,
    InvalidSchemaData,
    SchemaData,
    SchemaError,
    SchemaNotFound,
    SchemaPolicy,
    SchemaType,
    VersionedSchema,
)
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.broker.schema.topics import TopicSchemas
from magnetar.broker.schema.wiring import topic_schemas_for

__all__ = [
    "CompatibilityStrategy",
    "IncompatibleSchema",
    "InvalidSchemaData",
    "SchemaData",
    "SchemaError",
    "SchemaNotFound",
    "SchemaPolicy",
    "SchemaRegistry",
    "SchemaType",
    "TopicSchemas",
    "VersionedSchema",
    "topic_schemas_for",
]
