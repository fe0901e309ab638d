"""Broker -> bookie gRPC over TLS: a ``BookieServer`` with a certificate (optionally
requiring client certificates) serves a ``BookieClient`` configured the way the broker
configures it from ``bookkeeper_tls_*``; a plain or wrongly trusting client is refused."""

from __future__ import annotations

import pathlib

import crc32c
import pytest
from support.security import issue, make_ca

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient
from magnetar.bookie.errors import BookieError
from magnetar.bookie.server import BookieServer, BookieService
from magnetar.bookie.testing import MemoryBookieStorage
from magnetar.bookie.tls import GrpcTls
from magnetar.broker.config import BrokerConfig
from magnetar.broker.runtime import bookie_tls

pytestmark = pytest.mark.integration


def _req(entry_id: int, payload: bytes) -> AddRequest:
    return AddRequest(1, entry_id, entry_id - 1, crc32c.crc32c(payload), payload, b"key")


@pytest.mark.parametrize("client_auth", [False, True])
async def test_bookie_grpc_over_tls(tmp_path: pathlib.Path, client_auth: bool) -> None:
    ca, ca_path = make_ca(tmp_path, "bk")
    server_files = issue(ca, ca_path, tmp_path, "bookie", "127.0.0.1", "localhost")
    broker_files = issue(ca, ca_path, tmp_path, "broker", "broker", common_name="broker")
    server = BookieServer(
        BookieService(MemoryBookieStorage("b1")),
        "127.0.0.1",
        0,
        tls=GrpcTls(server_files.cert, server_files.key, ca_path, require_client_auth=client_auth),
    )
    await server.start()
    config = BrokerConfig(
        bookkeeper_tls_trust_certs_file_path=ca_path,
        bookkeeper_tls_client_authentication=client_auth,
        bookkeeper_tls_certificate_file_path=broker_files.cert,
        bookkeeper_tls_key_file_path=broker_files.key,
    )
    good = BookieClient(server.address, timeout_ms=5_000, tls=bookie_tls(config))
    plain = BookieClient(server.address, timeout_ms=2_000)
    _, other_ca = make_ca(tmp_path, "other")
    wrong = BookieClient(server.address, timeout_ms=2_000, tls=GrpcTls(trust_certs_file=other_ca))
    try:
        await good.add(_req(0, b"over tls"))
        assert (await good.read_entry(1, 0)).payload == b"over tls"
        for bad in (plain, wrong):
            with pytest.raises(BookieError):
                await bad.read_entry(1, 0)
        if client_auth:  # trusted CA but no client certificate
            anonymous = BookieClient(
                server.address, timeout_ms=2_000, tls=GrpcTls(trust_certs_file=ca_path)
            )
            try:
                with pytest.raises(BookieError):
                    await anonymous.read_entry(1, 0)
            finally:
                await anonymous.close()
    finally:
        for c in (good, plain, wrong):
            await c.close()
        await server.stop(0)


def test_bookie_tls_is_off_by_default() -> None:
    assert bookie_tls(BrokerConfig()) is None


def test_bookie_with_tls_refuses_a_fast_add_port(tmp_path: pathlib.Path) -> None:
    """The fast add transport is plaintext: a TLS bookie asked for one refuses to start
    (clear message, exit code 2, no traceback) instead of serving adds unencrypted."""
    import subprocess
    import sys

    from support.net import free_port

    ca, ca_path = make_ca(tmp_path, "bk")
    files = issue(ca, ca_path, tmp_path, "bookie", "127.0.0.1", "localhost")
    conf = tmp_path / "bookie.yaml"
    conf.write_text(
        f"tls_certificate_path: {files.cert}\ntls_key_path: {files.key}\n"
        f"tls_trust_store_path: {ca_path}\n"
    )
    args = [sys.executable, "-m", "magnetar.bookie", "--config", str(conf)]
    args += ["--data-dir", str(tmp_path / "data"), "--metadata", "none"]
    args += ["--port", str(free_port()), "--fast-add-port", str(free_port())]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "fast_add_port is a plaintext transport" in done.stderr
    assert "Traceback" not in done.stderr


async def test_broker_with_bookie_tls_never_uses_a_fast_add_port(tmp_path: pathlib.Path) -> None:
    """A broker with TLS to its bookies adds over gRPC/TLS even to a bookie announcing a fast
    add port; without TLS it uses the port."""
    from magnetar.broker.runtime import BrokerRuntime
    from magnetar.zk import paths
    from magnetar.zk.memory import MemoryMetadataServer

    _, ca_path = make_ca(tmp_path, "bk")
    announced = b'{"address": "127.0.0.1:3181", "host": "127.0.0.1", "fast_add_port": 4000}'
    transports = []
    for config in (BrokerConfig(bookkeeper_tls_trust_certs_file_path=ca_path), BrokerConfig()):
        store = MemoryMetadataServer().connect()
        await store.put(paths.bookie_registration("b1"), announced)
        runtime = BrokerRuntime(config, store)
        registry = runtime.factory.ledger_client.registry
        await registry.resolve(["b1"])
        assert registry.add_address("127.0.0.1:3181") == "127.0.0.1:4000"
        client = registry.client("b1")
        assert isinstance(client, BookieClient)
        transports.append(client.add_transport)
        await client.close()
    assert transports == ["grpc", "tcp"]
