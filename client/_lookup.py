"""Topic lookup: partitioned metadata, owner broker, topics of a namespace.

Owns: ``BinaryLookupService`` (PARTITIONED_METADATA, LOOKUP with up to ``max_redirects``
Redirects, GET_TOPICS_OF_NAMESPACE over service-URL connections, reference §3.4) and
``HttpLookupService`` (the same three questions over the REST paths of reference §4, with a
tiny HTTP/1.1 GET on asyncio streams so the base install needs no HTTP library). Both return
``LookupResult(logical_url, physical_url)``: connect to ``physical_url`` and present
``logical_url`` (they differ only when the broker asks to be reached through the proxy).

Errors: a Failed response raises the exception of its ``ServerError`` (``for_code``).
Must not know: producers, consumers, retry policy (callers retry retriable errors).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast
from urllib.parse import quote

from magnetar.client._errors import (
    ConnectError,
    LookupError_,
    Timeout,
    TopicNotFound,
    for_code,
)
from magnetar.client._pool import ConnectionPool, ServiceAddress
from magnetar.client.protocol import CommandType, TopicName, commands, pb


@dataclass(frozen=True, slots=True)
class LookupResult:
    logical_url: str
    physical_url: str


class LookupService(Protocol):
    async def partitioned_metadata(self, topic: TopicName) -> int: ...
    async def lookup(self, topic: TopicName) -> LookupResult: ...
    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]: ...
    async def get_schema(self, topic: TopicName, version: int | None) -> SchemaAnswer | None: ...


@dataclass(frozen=True, slots=True)
class SchemaAnswer:
    """A topic's schema version as the broker stores it (GET_SCHEMA / the schema REST path)."""

    version: int
    schema: pb.Schema


_REST_TYPES = {
    "BYTES": "NONE",
    "STRING": "String",
    "JSON": "Json",
    "PROTOBUF": "Protobuf",
    "AVRO": "Avro",
    "BOOLEAN": "Bool",
    "INT8": "Int8",
    "INT16": "Int16",
    "INT32": "Int32",
    "INT64": "Int64",
    "FLOAT": "Float",
    "DOUBLE": "Double",
    "KEY_VALUE": "KeyValue",
    "PROTOBUF_NATIVE": "ProtobufNative",
}


class BinaryLookupService:
    def __init__(
        self,
        address: ServiceAddress,
        pool: ConnectionPool,
        next_request_id: Callable[[], int],
        *,
        listener_name: str = "",
        max_redirects: int = 20,
    ) -> None:
        self._address = address
        self._pool = pool
        self._next_request_id = next_request_id
        self._listener_name = listener_name
        self._max_redirects = max_redirects
        self._index = 0

    def _service_url(self) -> str:
        return self._address.url(self._index)

    def _rotate(self) -> None:
        self._index += 1

    async def partitioned_metadata(self, topic: TopicName) -> int:
        try:
            cnx = await self._pool.get(self._service_url())
        except ConnectError:
            self._rotate()
            raise
        rid = self._next_request_id()
        event = await cnx.request(commands.partitioned_metadata(topic.full_name, rid), rid)
        resp = event.base.partitionMetadataResponse
        if not resp.HasField("response") or resp.response != resp.Success:
            raise for_code(resp.error, resp.message or "partitioned metadata failed")
        return int(resp.partitions)

    async def lookup(self, topic: TopicName) -> LookupResult:
        url = self._service_url()
        authoritative = False
        for _ in range(self._max_redirects + 1):
            try:
                cnx = await self._pool.get(url)
            except ConnectError:
                self._rotate()
                raise
            rid = self._next_request_id()
            event = await cnx.request(
                commands.lookup(
                    topic.full_name,
                    rid,
                    authoritative=authoritative,
                    advertised_listener_name=self._listener_name,
                ),
                rid,
            )
            resp = event.base.lookupTopicResponse
            kind = pb.CommandLookupTopicResponse
            if not resp.HasField("response") or resp.response == kind.Failed:
                raise for_code(resp.error, resp.message or "lookup failed")
            target = resp.brokerServiceUrlTls if self._address.use_tls else resp.brokerServiceUrl
            if not target:
                target = resp.brokerServiceUrl or resp.brokerServiceUrlTls
            if not target:
                raise LookupError_("lookup response without a broker URL")
            if resp.response == kind.Connect:
                if resp.proxy_through_service_url:
                    return LookupResult(target, self._service_url())
                return LookupResult(target, target)
            url = target
            authoritative = resp.authoritative
        raise LookupError_(f"too many lookup redirects for {topic}")

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        cnx = await self._pool.get(self._service_url())
        rid = self._next_request_id()
        event = await cnx.request(commands.get_topics_of_namespace(rid, namespace, mode=mode), rid)
        return list(event.base.getTopicsOfNamespaceResponse.topics)

    async def get_schema(self, topic: TopicName, version: int | None) -> SchemaAnswer | None:
        """The schema ``version`` of ``topic`` (None: the latest); None when there is none."""
        cnx = await self._pool.get(self._service_url())
        rid = self._next_request_id()
        body = pb.CommandGetSchema(request_id=rid, topic=topic.full_name)
        if version is not None:
            body.schema_version = struct.pack(">q", version)
        event = await cnx.request(commands.make_command(CommandType.GET_SCHEMA, body), rid)
        resp = event.base.getSchemaResponse
        if resp.HasField("error_code"):
            if resp.error_code == pb.TopicNotFound:
                return None
            raise for_code(resp.error_code, resp.error_message)
        (number,) = struct.unpack(">q", resp.schema_version)
        return SchemaAnswer(number, resp.schema)


class HttpLookupService:
    """Lookup over the broker's REST API (``http://`` / ``https://`` service URLs)."""

    def __init__(
        self,
        address: ServiceAddress,
        *,
        timeout_ms: int,
        ssl_context: ssl.SSLContext | None = None,
        auth_header: Callable[[], str | None] | None = None,
    ) -> None:
        self._address = address
        self._timeout_ms = timeout_ms
        self._ssl = ssl_context
        self._auth_header = auth_header
        self._index = 0

    async def _get(self, path: str) -> Any:
        host, port = self._address.hosts[self._index % len(self._address.hosts)]
        url = f"{self._address.scheme}://{host}:{port}{path}"
        for _ in range(20):
            try:
                status, headers, body = await asyncio.wait_for(
                    _http_get(url, self._ssl, self._auth_header), self._timeout_ms / 1000
                )
            except TimeoutError:
                raise Timeout(f"HTTP lookup {url} timed out") from None
            except OSError as exc:
                self._index += 1
                raise ConnectError(f"HTTP lookup {url}: {exc}") from None
            if status in (301, 302, 307, 308) and "location" in headers:
                url = headers["location"]
                continue
            if status == 404:
                raise TopicNotFound(body.decode("utf-8", "replace"))
            if status >= 400:
                raise ConnectError(f"HTTP lookup {url}: status {status}")
            try:
                return json.loads(body or b"null")
            except ValueError:
                raise LookupError_(f"HTTP lookup {url}: bad JSON") from None
        raise LookupError_("too many HTTP redirects")

    @staticmethod
    def _path(topic: TopicName) -> str:
        return (
            f"{topic.domain}/{topic.tenant}/{topic.namespace_portion}/"
            f"{quote(topic.local_name, safe='')}"
        )

    async def partitioned_metadata(self, topic: TopicName) -> int:
        data = await self._get(
            f"/admin/v2/{self._path(topic)}/partitions?checkAllowAutoCreation=true"
        )
        return int((data or {}).get("partitions", 0))

    async def lookup(self, topic: TopicName) -> LookupResult:
        data = await self._get(f"/lookup/v2/topic/{self._path(topic)}")
        if not isinstance(data, dict):
            raise LookupError_("bad lookup JSON")
        url = data.get("brokerUrlTls") if self._address.use_tls else data.get("brokerUrl")
        url = url or data.get("brokerUrl") or data.get("brokerUrlSsl")
        if not url:
            raise LookupError_("lookup JSON without brokerUrl")
        return LookupResult(url, url)

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        names = {0: "PERSISTENT", 1: "NON_PERSISTENT", 2: "ALL"}
        data = await self._get(f"/admin/v2/namespaces/{namespace}/topics?mode={names[mode]}")
        return [str(t) for t in data or []]

    async def get_schema(self, topic: TopicName, version: int | None) -> SchemaAnswer | None:
        local = quote(topic.local_name, safe="")
        path = f"/admin/v2/schemas/{topic.tenant}/{topic.namespace_portion}/{local}/schema"
        try:
            data = await self._get(path if version is None else f"{path}/{version}")
        except TopicNotFound:
            return None
        if not isinstance(data, dict) or data.get("type") not in _REST_TYPES:
            raise LookupError_("bad schema JSON")
        props = data.get("properties") or {}
        schema = pb.Schema(
            name=topic.full_name,
            schema_data=str(data.get("data", "")).encode(),
            type=cast(Any, pb.Schema.Type.Value(_REST_TYPES[data["type"]])),
        )
        for k, v in props.items():
            schema.properties.add(key=str(k), value=str(v))
        return SchemaAnswer(int(data.get("version", 0)), schema)


async def _http_get(
    url: str, ctx: ssl.SSLContext | None, auth_header: Callable[[], str | None] | None
) -> tuple[int, dict[str, str], bytes]:
    scheme, rest = url.split("://", 1)
    hostport, _, path = rest.partition("/")
    host, _, port_s = hostport.rpartition(":")
    if not host:
        host, port_s = hostport, ("443" if scheme == "https" else "80")
    reader, writer = await asyncio.open_connection(
        host, int(port_s), ssl=ctx if scheme == "https" else None
    )
    try:
        lines = [
            f"GET /{path} HTTP/1.1",
            f"Host: {hostport}",
            "Accept: application/json",
            f"User-Agent: {__name__}",
            "Connection: close",
        ]
        if auth_header is not None and (value := auth_header()):
            lines.append(f"Authorization: {value}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split()[1])
    headers = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    return status, headers, body


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    pos = 0
    while True:
        end = body.index(b"\r\n", pos)
        size = int(body[pos:end].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2 : end + 2 + size]
        pos = end + 2 + size + 2


__all__ = [
    "BinaryLookupService",
    "HttpLookupService",
    "LookupResult",
    "LookupService",
]
