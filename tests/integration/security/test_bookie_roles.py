"""Bookies check the role of their clients (BookKeeper's ``BookieAuthZFactory`` with
``authorizedRoles``): two real bookie processes serving gRPC over TLS with client
authentication and ``authorizedRoles: broker``, real ``magnetar broker`` processes and the
official client. A broker whose certificate's CN is ``broker`` writes and reads; a broker with
a certificate of the same CA but another CN is refused with a clear error, and nothing
crashes."""

from __future__ import annotations

import pathlib
import time
import uuid

import grpc
import pulsar
import pytest
import yaml
from support.bookies import BookieFactory, BookieProcess
from support.broker_process import BrokerProcess
from support.security import TlsFiles, issue, make_ca
from support.zookeeper import ZooKeeperServer

from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.proto import bookie_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration


def _health(address: str, ca: str, client: TlsFiles) -> pb.HealthResponse:
    creds = grpc.ssl_channel_credentials(
        root_certificates=pathlib.Path(ca).read_bytes(),
        private_key=pathlib.Path(client.key).read_bytes(),
        certificate_chain=pathlib.Path(client.cert).read_bytes(),
    )
    with grpc.secure_channel(address, creds) as channel:
        return pb_grpc.BookieStub(channel).Health(pb.HealthRequest(), timeout=2)


def _wait_healthy(b: BookieProcess, ca: str, client: TlsFiles, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert b.running, b.log_tail()
        try:
            if _health(b.address, ca, client).serving:
                return
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)  # polling interval of a deadline-bounded readiness check


def _broker_config(ca: str, files: TlsFiles) -> str:
    return (
        f"bookkeeperTLSTrustCertsFilePath={ca}\n"
        "bookkeeperTLSClientAuthentication=true\n"
        f"bookkeeperTLSCertificateFilePath={files.cert}\n"
        f"bookkeeperTLSKeyFilePath={files.key}\n"
    )


def test_only_authorized_roles_use_the_bookies(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> None:
    metadata = f"{zookeeper_server.url}/bookie-roles-{uuid.uuid4().hex[:8]}"
    ca, ca_path = make_ca(tmp_path, "bk")
    bookie_files = issue(ca, ca_path, tmp_path, "bookie", "127.0.0.1", "localhost")
    broker_files = issue(ca, ca_path, tmp_path, "broker", "broker", common_name="broker")
    intruder = issue(ca, ca_path, tmp_path, "intruder", "intruder", common_name="intruder")
    conf = tmp_path / "bookie-tls.yaml"
    conf.write_text(
        yaml.safe_dump(
            {
                "tls_certificate_path": bookie_files.cert,
                "tls_key_path": bookie_files.key,
                "tls_trust_store_path": ca_path,
                "tls_client_authentication": True,
                "authorizedRoles": "broker,autorecovery",
            }
        )
    )
    bookies = [
        bookie_factory.create(metadata=metadata, extra_args=["--config", str(conf)])
        for _ in range(2)
    ]
    for b in bookies:
        b.spawn()
    for b in bookies:
        _wait_healthy(b, ca_path, broker_files)

    # another CN of the same CA: refused on every RPC, with the reason
    with pytest.raises(grpc.RpcError) as refused:
        _health(bookies[0].address, ca_path, intruder)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "role 'intruder' is not authorized" in str(refused.value.details())

    made: list[BrokerProcess] = []
    try:
        good = BrokerProcess(
            tmp_path, "broker-ok", metadata, extra_config=_broker_config(ca_path, broker_files)
        )
        made.append(good.start(timeout_s=60))
        client = pulsar.Client(good.service_url, operation_timeout_seconds=60)
        try:
            topic = "persistent://public/default/roles-ok"
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"written by an authorized role")
            assert consumer.receive(60_000).data() == b"written by an authorized role"
        finally:
            client.close()
        good.kill()  # the next owner fences and recovers the ledger through the role check

        again = BrokerProcess(
            tmp_path, "broker-ok-2", metadata, extra_config=_broker_config(ca_path, broker_files)
        )
        made.append(again.start(timeout_s=60))
        client = pulsar.Client(again.service_url, operation_timeout_seconds=60)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"after the hand-over")
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            got = [reader.read_next(60_000).data() for _ in range(2)]
            assert got == [b"written by an authorized role", b"after the hand-over"]
        finally:
            client.close()
        again.stop()

        bad = BrokerProcess(
            tmp_path, "broker-intruder", metadata, extra_config=_broker_config(ca_path, intruder)
        )
        made.append(bad.start(timeout_s=60))
        client = pulsar.Client(bad.service_url, operation_timeout_seconds=15)
        try:
            # the topic may open (a ledger is created in the metadata); no entry is written
            with pytest.raises(pulsar.PulsarException):
                producer = client.create_producer(
                    "persistent://public/default/roles-refused",
                    batching_enabled=False,
                    send_timeout_millis=15_000,
                )
                producer.send(b"refused")
        finally:
            client.close()
        assert bad.running
        assert "bookie refused this client" in bad.log_text(), bad.log_text()[-3000:]
        assert "role 'intruder' is not authorized" in bad.log_text()
        assert all(b.running for b in bookies)
        bookie_logs = bookies[0].log_text() + bookies[1].log_text()
        assert "refused a client with role 'intruder'" in bookie_logs
    finally:
        for b in made:
            b.kill()
