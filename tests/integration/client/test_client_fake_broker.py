"""Client behaviours provoked with the scriptable fake broker (see conftest.py)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from support.client_fake_broker import FakeBroker, FakeConnection

from magnetar.client import (
    AuthenticationToken,
    Client,
    ConsumerBusy,
    Timeout,
)
from magnetar.client.protocol import Command, CommandType, ServerError, commands, pb


async def test_token_authentication_in_connect_and_challenge(fake_broker: FakeBroker) -> None:
    tokens = iter(["first-token", "refreshed-token"])

    def on_connect(b: FakeBroker, cnx: FakeConnection, ev: Command) -> list[pb.BaseCommand]:
        challenge = pb.CommandAuthChallenge(server_version="fake", protocol_version=20)
        challenge.challenge.auth_method_name = "token"
        challenge.challenge.auth_data = b"refresh"
        return [commands.make_command(CommandType.AUTH_CHALLENGE, challenge)]

    def on_auth(b: FakeBroker, cnx: FakeConnection, ev: Command) -> list[pb.BaseCommand]:
        return [commands.connected("fake", 20)]

    fake_broker.handlers[CommandType.CONNECT] = on_connect
    fake_broker.handlers[CommandType.AUTH_RESPONSE] = on_auth
    async with Client(fake_broker.url, AuthenticationToken(lambda: next(tokens))) as client:
        producer = await client.create_producer("t")
        await producer.send(b"x")
    connect = fake_broker.of_type(CommandType.CONNECT)[0].base.connect
    assert connect.auth_method_name == "token"
    assert connect.auth_data == b"first-token"
    auth = fake_broker.of_type(CommandType.AUTH_RESPONSE)[0].base.authResponse
    assert auth.response.auth_data == b"refreshed-token"


async def test_authentication_refused_is_not_retried(fake_broker: FakeBroker) -> None:
    from magnetar.client import AuthenticationError

    def refuse(b: FakeBroker, cnx: FakeConnection, ev: Command) -> list[pb.BaseCommand]:
        return [commands.error(-1, ServerError.AuthenticationError, "bad token")]

    fake_broker.handlers[CommandType.CONNECT] = refuse
    async with Client(fake_broker.url, AuthenticationToken("bad"), 5) as client:
        with pytest.raises(AuthenticationError):
            await client.create_producer("t")
    assert len(fake_broker.of_type(CommandType.CONNECT)) == 1


async def test_lookup_follows_redirects() -> None:
    owner = await FakeBroker().start()
    front = await FakeBroker().start()
    front.lookup_target = owner.url
    try:
        async with Client(front.url) as client:
            producer = await client.create_producer("t")
            await producer.send(b"x")
        assert front.of_type(CommandType.PRODUCER) == []
        assert len(owner.of_type(CommandType.SEND)) == 1
        follow_up = owner.of_type(CommandType.LOOKUP)[0].base.lookupTopic
        assert follow_up.authoritative  # the Redirect said authoritative=True
    finally:
        await owner.close()
        await front.close()


async def test_keepalive_drops_a_silent_connection_and_reconnects(fake_broker: FakeBroker) -> None:
    fake_broker.answer_ping = False
    async with Client(fake_broker.url, keep_alive_interval_seconds=0.05) as client:
        producer = await client.create_producer("t")
        await fake_broker.wait_for(lambda: fake_broker.connects >= 2)
        assert len(fake_broker.of_type(CommandType.PING)) >= 1
        fake_broker.answer_ping = True
        await fake_broker.wait_for(lambda: len(fake_broker.of_type(CommandType.PRODUCER)) >= 2)
        epochs = [c.base.producer.epoch for c in fake_broker.of_type(CommandType.PRODUCER)]
        assert epochs[:2] == [0, 1]  # same producer id, next epoch
        await asyncio.wait_for(producer.send(b"after"), 5)


async def test_send_timeout_fails_pending_messages(fake_broker: FakeBroker) -> None:
    fake_broker.handlers[CommandType.SEND] = lambda b, c, e: []  # never answer
    async with Client(fake_broker.url) as client:
        producer = await client.create_producer("t", send_timeout_millis=200)
        with pytest.raises(Timeout):
            await producer.send(b"lost")
        assert producer.statistics()[0].pending_messages == 0


async def test_out_of_order_receipt_reconnects_and_resends(fake_broker: FakeBroker) -> None:
    first = True

    def on_send(b: FakeBroker, cnx: FakeConnection, ev: Command) -> list[pb.BaseCommand]:
        nonlocal first
        if first:
            first = False
            cnx.send_receipt(ev.base.send.producer_id, ev.base.send.sequence_id + 5)
            return []
        cnx.send_receipt(ev.base.send.producer_id, ev.base.send.sequence_id)
        return []

    fake_broker.handlers[CommandType.SEND] = on_send
    async with Client(fake_broker.url) as client:
        producer = await client.create_producer("t")
        mid = await asyncio.wait_for(producer.send(b"x"), 10)
        assert mid.entry_id() >= 1
    assert fake_broker.connects >= 2
    assert [s.base.send.sequence_id for s in fake_broker.of_type(CommandType.SEND)] == [0, 0]


async def test_retriable_refusal_is_retried_fatal_one_is_not(fake_broker: FakeBroker) -> None:
    attempts = 0

    def not_ready_once(b: FakeBroker, cnx: FakeConnection, ev: Command) -> list[pb.BaseCommand]:
        nonlocal attempts
        attempts += 1
        rid = ev.base.producer.request_id
        if attempts == 1:
            return [commands.error(rid, ServerError.ServiceNotReady, "loading")]
        return [commands.producer_success(rid, "p")]

    fake_broker.handlers[CommandType.PRODUCER] = not_ready_once
    fake_broker.handlers[CommandType.SUBSCRIBE] = lambda b, c, e: [
        commands.error(e.base.subscribe.request_id, ServerError.ConsumerBusy, "busy")
    ]
    async with Client(fake_broker.url, operation_timeout_seconds=5) as client:
        await client.create_producer("t")
        assert attempts == 2
        with pytest.raises(ConsumerBusy):
            await client.subscribe("t", "s")
    assert len(fake_broker.of_type(CommandType.SUBSCRIBE)) == 1


async def test_unreachable_broker_times_out_after_operation_timeout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=0.5) as client:
        with pytest.raises(Timeout):
            await client.create_producer("t")


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_service_url(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    broker = await FakeBroker(ctx).start()
    try:
        async with Client(
            broker.url, tls_trust_certs_file_path=str(cert), tls_validate_hostname=True
        ) as client:
            producer = await client.create_producer("t")
            await producer.send(b"secret")
        assert len(broker.of_type(CommandType.SEND)) == 1
        async with Client(broker.url, operation_timeout_seconds=0.5) as untrusting:
            with pytest.raises(Timeout):  # the self-signed certificate is refused
                await untrusting.create_producer("t")
    finally:
        await broker.close()
