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
