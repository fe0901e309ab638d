"""The schema registry on the binary protocol: PRODUCER / SUBSCRIBE schemas, GET_SCHEMA,
GET_OR_CREATE_SCHEMA.

Owns: converting ``pb.Schema`` to and from ``SchemaData`` (an unknown type number is
``InvalidSchemaData``, answered as IncompatibleSchema), the version bytes of PRODUCER_SUCCESS
(Pulsar's 8-byte big-endian ``LongSchemaVersion``; the client copies them into every
message's metadata, and ``Message.schema_version()`` returns them), and the GET_SCHEMA /
GET_OR_CREATE_SCHEMA responses (built with the codec's builders), errors included (they
travel in each command's own response: the C++ client does not match ERROR against them).
``SchemaError``s carry their ServerError code; storage trouble is ServiceNotReady
(retriable).
Must not know: sockets, the connection's state, HTTP.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from magnetar.broker.errors import ServerError
from magnetar.broker.naming import InvalidTopicName, TopicName
from magnetar.broker.schema.model import (
    SchemaData,
    SchemaError,
    SchemaStorageError,
    SchemaType,
    version_bytes,
    version_of,
)
from magnetar.broker.schema.topics import TopicSchemas, schema_id, topic_is_idle
from magnetar.broker.topics.contract import Topic
from magnetar.client.protocol import commands
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)


def from_wire(schema: pb.Schema) -> SchemaData:
    kind = SchemaType.from_wire(int(schema.type))
    pairs: list[Any] = list(schema.properties)
    props = tuple(sorted((str(p.key), str(p.value)) for p in pairs))
    return SchemaData(kind, bytes(schema.schema_data), props)


def to_wire(name: str, schema: SchemaData) -> pb.Schema:
    out = pb.Schema(name=name, schema_data=schema.data, type=cast(Any, schema.type.value))
    for key, value in schema.properties:
        out.properties.add(key=key, value=value)
    return out


async def producer_version(
    schemas: TopicSchemas, topic: TopicName, req: pb.CommandProducer
) -> bytes | None:
    """PRODUCER_SUCCESS.schema_version for this producer (None: it has no schema);
    raises ``SchemaError``."""
    schema = from_wire(req.schema) if req.HasField("schema") else None
    try:
        version = await schemas.for_producer(topic, schema)
    except SchemaError:
        raise
    except Exception as exc:  # metadata or ledgers unavailable: retriable, never a traceback
        log.warning("schema of producer on %s: %s: %s", topic, type(exc).__name__, exc)
        raise SchemaStorageError(f"cannot check the schema: {exc}") from None
    return None if version is None else version_bytes(version)


async def check_consumer(schemas: TopicSchemas, topic: Topic, req: pb.CommandSubscribe) -> None:
    """Register or check a SUBSCRIBE's schema on ``topic`` (a loaded topic); raises
    ``SchemaError``."""
    if not req.HasField("schema"):
        return
    name = topic.name
    schema = from_wire(req.schema)
    try:
        await schemas.for_consumer(name, schema, topic_is_idle(topic))
    except SchemaError:
        raise
    except Exception as exc:
        log.warning("schema of consumer on %s: %s: %s", name, type(exc).__name__, exc)
        raise SchemaStorageError(f"cannot check the schema: {exc}") from None


async def get_schema_response(schemas: TopicSchemas, req: pb.CommandGetSchema) -> pb.BaseCommand:
    rid = req.request_id
    try:
        topic = TopicName.parse(req.topic)
        version = version_of(req.schema_version) if req.HasField("schema_version") else None
        found = await schemas.get(topic, version)
    except InvalidTopicName as exc:
        return commands.get_schema_error(rid, ServerError.InvalidTopicName, str(exc))
    except SchemaError as exc:
        return commands.get_schema_error(rid, exc.code, exc.message)
    except Exception as exc:
        log.exception("GET_SCHEMA of %s failed", req.topic)
        return commands.get_schema_error(
            rid, ServerError.ServiceNotReady, f"cannot read the schema: {exc}"
        )
    return commands.get_schema_response(
        rid, to_wire(schema_id(topic), found.schema), version_bytes(found.version)
    )


def get_schema_denied(req: pb.CommandGetSchema, reason: str) -> pb.BaseCommand:
    """The AuthorizationError answer to GET_SCHEMA."""
    return commands.get_schema_error(req.request_id, ServerError.AuthorizationError, reason)


def get_or_create_denied(req: pb.CommandGetOrCreateSchema, reason: str) -> pb.BaseCommand:
    """The AuthorizationError answer to GET_OR_CREATE_SCHEMA."""
    return commands.get_or_create_schema_error(
        req.request_id, ServerError.AuthorizationError, reason
    )


async def get_or_create_response(
    schemas: TopicSchemas, req: pb.CommandGetOrCreateSchema
) -> pb.BaseCommand:
    rid = req.request_id
    try:
        topic = TopicName.parse(req.topic)
        version = await schemas.get_or_create(topic, from_wire(req.schema))
    except InvalidTopicName as exc:
        return commands.get_or_create_schema_error(rid, ServerError.InvalidTopicName, str(exc))
    except SchemaError as exc:
        return commands.get_or_create_schema_error(rid, exc.code, exc.message)
    except Exception as exc:
        log.exception("GET_OR_CREATE_SCHEMA of %s failed", req.topic)
        return commands.get_or_create_schema_error(
            rid, ServerError.ServiceNotReady, f"cannot store the schema: {exc}"
        )
    return commands.get_or_create_schema_response(rid, version_bytes(version))


__all__ = [
    "check_consumer",
    "from_wire",
    "get_or_create_denied",
    "get_or_create_response",
    "get_schema_denied",
    "get_schema_response",
    "producer_version",
    "to_wire",
]
