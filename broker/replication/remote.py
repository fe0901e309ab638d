"""The remote cluster as replicators reach it: a ``magnetar.client`` client per cluster.

Owns: ``ClientRemoteCluster`` (one client per remote cluster, as Pulsar keeps one
replication client per cluster, built from that cluster's ``ClusterData``: its binary URL,
TLS when its URL is a TLS one or ``brokerClientTlsEnabled``, the trust and key files, and
the credentials named by ``authenticationPlugin`` / ``authenticationParameters``) and
``ClientRemoteProducer``, a ``RemoteProducer`` over one client producer that sends
``Republished`` entries unchanged (``Producer.send_entry_async``) strictly in the order
given, batching off, at most ``producer_queue_size`` pending and no send timeout: while
the remote is unreachable the client reconnects and sends again in order, and only a
refusal fails an entry (the replicator then closes the producer, backs off and sends
again from its cursor: the remote recognises what it stored). A send timeout would let an
entry fail while later ones are still stored, which recognition by highest position could
not tell from a duplicate.

Before a producer is made on a partition, the partitioned topic is made on the remote with
this cluster's partition count, or its count raised to it (``RemoteAdmin``, the remote's
admin REST, ``PUT`` / ``POST .../partitions``; with a shared configuration store it already
is). A schema is registered on the remote through the producer's connection
(``GET_OR_CREATE_SCHEMA``, as Pulsar's replicator does): the remote's version of it is what
the replicated entries carry there.
Must not know: cursors, topics, the replicator's states.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import quote

import aiohttp

from magnetar.broker.namespace.cluster_data import ClusterData
from magnetar.broker.replication.contracts import ReplicationError
from magnetar.broker.replication.republish import Republished
from magnetar.broker.security.broker_client import BrokerClientAuth, BrokerClientConfigError
from magnetar.client import (
    Authentication,
    AuthenticationBasic,
    AuthenticationToken,
    Client,
    MessageId,
    Producer,
    PulsarException,
)
from magnetar.client.protocol import TopicName, pb

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 2.0
"""How long closing a producer may wait for the receipts still due (what is not receipted is
sent again by the next replicator, and recognised: a close never waits for a remote that
stopped answering)."""
ADMIN_TIMEOUT_S = 10.0
RECONNECT_BACKOFF_MAX_MS = 2_000
"""The longest wait between two attempts to reach a remote that went away: a remote coming
back is replicated to within 2 s (a client's default, 60 s, would hold a catch-up back)."""
OPERATION_TIMEOUT_S = 5.0
"""How long making the producer on the remote may take (lookups and connections retried
meanwhile) before the replicator shows why and backs off: a remote down is visible in its
stats within seconds."""

PartitionCount = Callable[[str], Awaitable[int]]
"""This cluster's partition count of a partitioned topic (its full name)."""


def replication_auth(data: ClusterData) -> BrokerClientAuth:
    """The credentials and TLS files ``data`` names; ``ReplicationError`` if unusable."""
    try:
        return BrokerClientAuth.from_settings(
            data.authentication_plugin,
            data.authentication_parameters,
            tls_enabled=data.uses_tls,
            trust_certs_file=data.trust_certs_file_path,
            cert_file=data.certificate_file_path,
            key_file=data.key_file_path,
        )
    except BrokerClientConfigError as exc:
        raise ReplicationError(f"cluster {data.name}: {exc}") from None


def _authentication(auth: BrokerClientAuth) -> Authentication | None:
    if auth.basic:
        user, _, password = base64.b64decode(auth.basic).decode().partition(":")
        return AuthenticationBasic(user, password)
    if auth.token or auth.token_file:
        return AuthenticationToken(auth.current_token)
    return None


class ClientRemoteProducer:
    """A ``RemoteProducer`` over one ``magnetar.client`` producer."""

    def __init__(self, producer: Producer, cluster: str) -> None:
        self._producer = producer
        self._cluster = cluster
        self._queue: asyncio.Queue[tuple[Republished, asyncio.Future[None]]] = asyncio.Queue()
        self._sender = asyncio.get_running_loop().create_task(self._send_in_order())
        self._error = ""

    def __repr__(self) -> str:
        return f"<ClientRemoteProducer {self._producer.topic()} on {self._cluster}>"

    @property
    def connected(self) -> bool:
        return self._producer.is_connected()

    @property
    def address(self) -> str:
        cnx = self._producer.partitions[0].cnx
        return cnx.logical_url if cnx is not None else ""

    @property
    def last_error(self) -> str:
        failure = self._producer.partitions[0].failure
        if failure is not None:
            return str(failure)
        if not self.connected:
            return f"not connected to cluster {self._cluster}: reconnecting"
        return self._error

    def send(self, entry: Republished) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((entry, done))
        return done

    async def _send_in_order(self) -> None:
        while True:
            entry, done = await self._queue.get()
            try:
                receipt = await self._producer.send_entry_async(
                    entry.headers_and_payload,
                    sequence_id=entry.sequence_id,
                    num_messages=entry.num_messages,
                    is_chunk=entry.is_chunk,
                )
            except PulsarException as exc:
                self._fail(done, f"sending to cluster {self._cluster}: {exc}")
                continue
            receipt.add_done_callback(functools.partial(self._receipted, done=done))

    def _receipted(self, receipt: asyncio.Future[MessageId], *, done: asyncio.Future[None]) -> None:
        if done.done():
            return
        if receipt.cancelled():
            self._fail(done, f"send to cluster {self._cluster} cancelled")
        elif receipt.exception() is not None:
            self._fail(done, f"sending to cluster {self._cluster}: {receipt.exception()}")
        else:
            done.set_result(None)

    def _fail(self, done: asyncio.Future[None], reason: str) -> None:
        self._error = reason
        if not done.done():
            done.set_exception(ReplicationError(reason))
            done.add_done_callback(lambda f: f.exception())

    async def schema_version_for(self, schema: pb.Schema) -> bytes:
        try:
            return await self._producer.get_or_create_schema(schema)
        except PulsarException as exc:
            raise ReplicationError(
                f"schema of {self._producer.topic()} refused by cluster {self._cluster}: {exc}"
            ) from None

    async def close(self) -> None:
        self._sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sender
        while not self._queue.empty():
            _, done = self._queue.get_nowait()
            self._fail(done, "producer closed")
        try:  # bounded: a remote that stopped answering must not hold a topic's unload
            await asyncio.wait_for(self._producer.close(), CLOSE_TIMEOUT_S)
        except (PulsarException, TimeoutError) as exc:
            log.debug("closing the replicator producer on %s: %s", self._cluster, exc)


class ClientRemoteCluster:
    """A ``RemoteCluster`` for the cluster ``data`` registers; ``close()`` when done."""

    def __init__(
        self,
        data: ClusterData,
        *,
        producer_queue_size: int = 1000,
        send_timeout_ms: int = 0,
        connection_timeout_ms: int = 5_000,
        operation_timeout_s: float = OPERATION_TIMEOUT_S,
        partitions_of: PartitionCount | None = None,
    ) -> None:
        self.data = data
        self.producer_queue_size = producer_queue_size
        self.send_timeout_ms = send_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.operation_timeout_s = operation_timeout_s
        self._client: Client | None = None
        self._partitions_of = partitions_of
        self._admin: RemoteAdmin | None = None

    def __repr__(self) -> str:
        return f"<ClientRemoteCluster {self.data.name} {self.data.replication_service_url}>"

    @property
    def name(self) -> str:
        return self.data.name

    def client(self) -> Client:
        """The client to the cluster (made on first use); ``ReplicationError`` when the
        cluster has no binary URL or unusable credentials."""
        if self._client is not None:
            return self._client
        url = self.data.replication_service_url
        if not url:
            raise ReplicationError(
                f"cluster {self.data.name} has no brokerServiceUrl (or brokerServiceUrlTls)"
            )
        auth = replication_auth(self.data)
        self._client = Client(
            url,
            _authentication(auth),
            self.operation_timeout_s,
            connection_timeout_ms=self.connection_timeout_ms,
            use_tls=url.startswith("pulsar+ssl://"),
            tls_trust_certs_file_path=auth.trust_certs_file or None,
            tls_allow_insecure_connection=self.data.tls_allow_insecure_connection,
            tls_certificate_file_path=auth.cert_file or None,
            tls_private_key_file_path=auth.key_file or None,
            listener_name=self.data.listener_name or None,
            max_backoff_interval_ms=RECONNECT_BACKOFF_MAX_MS,
        )
        return self._client

    async def create_producer(self, topic: str, producer_name: str) -> ClientRemoteProducer:
        client = self.client()
        name = TopicName.parse(topic)
        if name.partition_index >= 0 and self._partitions_of is not None:
            base = name.partitioned_topic_name
            await self.admin().ensure_partitions(
                TopicName.parse(base), await self._partitions_of(base)
            )
        try:
            producer = await client.create_producer(
                topic,
                producer_name=producer_name,
                send_timeout_millis=self.send_timeout_ms,
                max_pending_messages=self.producer_queue_size,
                block_if_queue_full=True,
                batching_enabled=False,
            )
        except PulsarException as exc:
            raise ReplicationError(
                f"cannot create the replicator producer on cluster {self.name}: {exc}"
            ) from None
        return ClientRemoteProducer(producer, self.name)

    def admin(self) -> RemoteAdmin:
        if self._admin is None:
            self._admin = RemoteAdmin(self.data)
        return self._admin

    async def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


class RemoteAdmin:
    """The remote cluster's admin REST, as its replicators need it (its ``serviceUrl`` or
    ``serviceUrlTls``, each host in turn, with the cluster's credentials)."""

    def __init__(self, data: ClusterData) -> None:
        self.data = data
        self._session: aiohttp.ClientSession | None = None
        self._ensured: dict[str, int] = {}
        """Partitioned topics known to have at least that many partitions there."""

    def __repr__(self) -> str:
        return f"<RemoteAdmin {self.data.name} {self.data.admin_url}>"

    def _urls(self) -> list[str]:
        url = self.data.admin_url
        if not url:
            raise ReplicationError(
                f"cluster {self.data.name} has no serviceUrl (or serviceUrlTls): its "
                "partitioned topics cannot be made"
            )
        scheme, _, hosts = url.partition("://")
        return [f"{scheme}://{h.strip().rstrip('/')}" for h in hosts.split(",") if h.strip()]

    async def _call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=ADMIN_TIMEOUT_S)
            )
        options = replication_auth(self.data).request_options()
        last = ""
        for base in self._urls():
            try:
                async with self._session.request(method, base + path, json=body, **options) as resp:
                    text = await resp.text()
                    try:
                        answer: object = await resp.json(content_type=None) if text else None
                    except ValueError:
                        answer = text
                    return resp.status, answer
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last = f"{base}: {exc or type(exc).__name__}"
        raise ReplicationError(f"cluster {self.data.name} admin unreachable ({last})")

    async def ensure_partitions(self, topic: TopicName, partitions: int) -> None:
        """The remote has ``topic`` partitioned into at least ``partitions`` (made, or its
        count raised); ``ReplicationError`` when it cannot be done."""
        if partitions <= 0 or self._ensured.get(topic.full_name, 0) >= partitions:
            return
        path = (
            f"/admin/v2/{topic.domain}/{topic.tenant}/{topic.namespace_portion}/"
            f"{quote(topic.local_name, safe='')}/partitions"
        )
        status, answer = await self._call("GET", path)
        have = answer.get("partitions", 0) if status == 200 and isinstance(answer, dict) else 0
        if not isinstance(have, int):
            have = 0
        if have < partitions:
            method = "PUT" if have == 0 else "POST"
            status, answer = await self._call(method, path, partitions)
            if status == 409 and method == "PUT":  # made meanwhile: raise it if needed
                status, answer = await self._call("POST", path, partitions)
            if status not in (200, 204, 409):
                raise ReplicationError(
                    f"cannot make {topic.full_name} with {partitions} partitions on cluster "
                    f"{self.data.name}: {status} {answer}"
                )
        self._ensured[topic.full_name] = partitions

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


__all__ = [
    "ClientRemoteCluster",
    "ClientRemoteProducer",
    "PartitionCount",
    "RemoteAdmin",
    "replication_auth",
]
