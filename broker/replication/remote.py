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

Not done here yet: registering a schema on the remote (``schema_version_for`` refuses with
a reason shown in stats; entries with a schema version wait).
Must not know: cursors, topics, the replicator's states.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging

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
from magnetar.client.protocol import pb

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 10.0
"""How long closing a producer may wait for the receipts still due."""
SCHEMA_NOT_WIRED = (
    "replicating entries with a schema is not wired yet: the remote cluster's version of "
    "the schema cannot be registered"
)


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
        raise ReplicationError(SCHEMA_NOT_WIRED)

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
        connection_timeout_ms: int = 10_000,
        operation_timeout_s: float = 30.0,
    ) -> None:
        self.data = data
        self.producer_queue_size = producer_queue_size
        self.send_timeout_ms = send_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.operation_timeout_s = operation_timeout_s
        self._client: Client | None = None

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
        )
        return self._client

    async def create_producer(self, topic: str, producer_name: str) -> ClientRemoteProducer:
        client = self.client()
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

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


__all__ = [
    "SCHEMA_NOT_WIRED",
    "ClientRemoteCluster",
    "ClientRemoteProducer",
    "replication_auth",
]
