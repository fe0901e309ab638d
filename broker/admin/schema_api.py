"""The schema registry's admin REST paths (Pulsar's ``SchemasResource``), with Pulsar's JSON.

Owns, under ``/admin/v2/schemas/{tenant}/{namespace}/{topic}``:
- ``GET /schema`` and ``GET /schema/{version}`` -> ``GetSchemaResponse``
  ``{"version", "type", "timestamp", "data", "properties"}`` (404 ``Schema not found``);
  a KEY_VALUE schema's ``data`` (and a posted KEY_VALUE ``schema``) is Pulsar's JSON form
  ``{"key": <definition or "">, "value": <definition or "">}`` ("" for a primitive half),
  stored in the binary layout the clients send;
- ``GET /schemas`` -> ``{"getSchemaResponses": [...]}`` (the versions since the last delete);
- ``POST /schema`` with a ``PostSchemaPayload`` ``{"type", "schema", "properties"}`` ->
  ``{"version": {"version": n}}`` (409 incompatible, 422 malformed definition);
- ``DELETE /schema[?force=true]`` -> ``{"version": n}`` (a deleted marker; ``force`` removes
  every version from storage);
- ``POST /compatibility`` -> ``{"isCompatibility", "schemaCompatibilityStrategy"}``;
- ``POST /version`` -> ``{"version": n}`` of an identical stored definition (404 if none).
Errors are ``{"reason": ...}`` with the error's status, as every admin path.
Must not know: frames, how schemas are stored.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from magnetar.broker.admin.http_guard import BadRequest, read_json
from magnetar.broker.naming import InvalidTopicName, TopicName
from magnetar.broker.schema.model import (
    IncompatibleSchema,
    InvalidSchemaData,
    SchemaData,
    SchemaError,
    SchemaNotFound,
    SchemaType,
    VersionedSchema,
)
from magnetar.broker.schema.topics import TopicSchemas, schema_id
from magnetar.broker.schema.validation import join_key_value, split_key_value

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BASE = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type="application/json"
    )


def get_schema_response(found: VersionedSchema) -> dict[str, Any]:
    s = found.schema
    return {
        "version": found.version,
        "type": s.type.rest_name,
        "timestamp": s.timestamp_ms,
        "data": rest_data(s),
        "properties": s.props,
    }


def rest_data(s: SchemaData) -> str:
    """The definition as the REST API shows it (``GetSchemaResponse.data``)."""
    if s.type is SchemaType.KEY_VALUE:
        try:
            key, value = split_key_value(s)
        except InvalidSchemaData:
            return s.data.decode("utf-8", "replace")
        return json.dumps({"key": _half_json(key), "value": _half_json(value)})
    return s.data.decode("utf-8", "replace")


def _half_json(half: SchemaData) -> Any:
    if half.type.is_primitive or not half.data:
        return ""
    try:
        return json.loads(half.data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return half.data.decode("utf-8", "replace")


def _key_value_definition(definition: str) -> bytes:
    """A posted KEY_VALUE definition (Pulsar's JSON form) in the stored binary layout."""
    try:
        doc = json.loads(definition)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or "key" not in doc or "value" not in doc:
        raise InvalidSchemaData(
            'Invalid KEY_VALUE schema definition: expected {"key": ..., "value": ...}'
        )

    def half(value: Any) -> bytes:
        if value == "" or value is None:
            return b""
        return (value if isinstance(value, str) else json.dumps(value)).encode()

    return join_key_value(half(doc["key"]), half(doc["value"]))


def payload_schema(body: Any) -> SchemaData:
    """A ``PostSchemaPayload`` as ``SchemaData`` (``InvalidSchemaData`` when malformed)."""
    if not isinstance(body, dict):
        raise InvalidSchemaData("The body must be a PostSchemaPayload JSON object")
    kind = SchemaType.from_name(body.get("type", ""))
    definition = body.get("schema", "")
    if definition is None:
        definition = ""
    if not isinstance(definition, str):
        raise InvalidSchemaData("schema must be a string (the schema definition)")
    props = body.get("properties") or {}
    if not isinstance(props, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in props.items()
    ):
        raise InvalidSchemaData("properties must map strings to strings")
    data = (
        _key_value_definition(definition) if kind is SchemaType.KEY_VALUE else definition.encode()
    )
    return SchemaData(kind, data, tuple(sorted(props.items())))


class SchemaAdminRoutes:
    def __init__(self, schemas: TopicSchemas) -> None:
        self.schemas = schemas

    def add_routes(self, r: web.UrlDispatcher) -> None:
        r.add_get(BASE + "/schema", self._wrap(self.get_latest))
        r.add_get(BASE + "/schema/{version}", self._wrap(self.get_version))
        r.add_get(BASE + "/schemas", self._wrap(self.get_all))
        r.add_post(BASE + "/schema", self._wrap(self.post))
        r.add_delete(BASE + "/schema", self._wrap(self.delete))
        r.add_post(BASE + "/compatibility", self._wrap(self.compatibility))
        r.add_post(BASE + "/version", self._wrap(self.version_of))

    @staticmethod
    def _wrap(fn: Handler) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                return await fn(request)
            except SchemaError as exc:
                return _json({"reason": exc.message}, status=exc.http_status)
            except BadRequest as exc:
                return _json({"reason": exc.reason}, status=exc.status)

        return handle

    @staticmethod
    def _topic(request: web.Request) -> TopicName:
        m = request.match_info
        try:
            return TopicName.parse(
                f"persistent://{m['tenant']}/{m['namespace']}/{unquote(m['topic'])}"
            )
        except InvalidTopicName as exc:
            raise InvalidSchemaData(str(exc)) from None

    async def get_latest(self, request: web.Request) -> web.StreamResponse:
        return _json(get_schema_response(await self.schemas.get(self._topic(request), None)))

    async def get_version(self, request: web.Request) -> web.StreamResponse:
        raw = request.match_info["version"]
        if not raw.isdigit():
            raise InvalidSchemaData(f"Invalid schema version {raw!r}")
        found = await self.schemas.get(self._topic(request), int(raw))
        return _json(get_schema_response(found))

    async def get_all(self, request: web.Request) -> web.StreamResponse:
        live = await self.schemas.registry.live_versions(schema_id(self._topic(request)))
        return _json({"getSchemaResponses": [get_schema_response(v) for v in live]})

    async def post(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        schema = payload_schema(await read_json(request))
        policy = await self.schemas.policy(topic)
        version = await self.schemas.registry.put_if_absent(
            schema_id(topic), schema, policy.strategy, allow_auto_update=True
        )
        return _json({"version": {"version": version}})

    async def delete(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        sid = schema_id(topic)
        if request.query.get("force", "false") == "true":
            latest = await self.schemas.registry.get(sid)
            if not await self.schemas.registry.delete_storage(sid):
                raise SchemaNotFound("Schema not found")
            return _json({"version": -1 if latest is None else latest.version})
        version = await self.schemas.registry.delete(sid)
        if version is None:
            raise SchemaNotFound("Schema not found")
        return _json({"version": version})

    async def compatibility(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        schema = payload_schema(await read_json(request))
        policy = await self.schemas.policy(topic)
        try:
            await self.schemas.registry.check_compatible(schema_id(topic), schema, policy.strategy)
            ok = True
        except IncompatibleSchema:
            ok = False
        return _json({"isCompatibility": ok, "schemaCompatibilityStrategy": policy.strategy.name})

    async def version_of(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        schema = payload_schema(await read_json(request))
        version = await self.schemas.registry.find_version(schema_id(topic), schema)
        if version < 0:
            raise SchemaNotFound("Schema not found")
        return _json({"version": version})


__all__ = ["SchemaAdminRoutes", "get_schema_response", "payload_schema"]
