"""The CONNECT authentication path on the wire (raw frames): Pulsar's exact refusal, the
AUTH_CHALLENGE refresh of expiring tokens, and a seeded fuzz of malformed credentials that
must only ever get ERROR(AuthenticationError) and a closed connection."""

from __future__ import annotations

import base64
import json
import pathlib
import random
import struct
import time
from collections.abc import Iterator

import jwt
import pytest
from support.broker import InProcessBroker
from support.raw_client import RawClient, T, pb
from support.security import TokenKit, make_token_kit

from magnetar.broker.security.tokens import create_token

pytestmark = pytest.mark.integration
U64 = (1 << 64) - 1


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> TokenKit:
    return make_token_kit(tmp_path_factory.mktemp("tokens"))


@pytest.fixture(scope="module")
def broker(kit: TokenKit) -> Iterator[InProcessBroker]:
    b = InProcessBroker(
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=kit.url,
        authentication_refresh_check_seconds=1,
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _connect(port: int, token: bytes | None, *, refresh: bool = True) -> RawClient:
    rc = RawClient(port)
    rc.sock.settimeout(30)
    connect = pb.CommandConnect(
        client_version="raw",
        protocol_version=20,
        auth_method_name="token" if token is not None else "none",
        feature_flags=pb.FeatureFlags(supports_auth_refresh=refresh),
    )
    if token is not None:
        connect.auth_data = token
    rc.send(T(type=T.CONNECT, connect=connect))
    return rc


def _assert_refused(rc: RawClient) -> None:
    got = rc.recv()
    assert got.type == T.ERROR
    assert got.error.error == pb.AuthenticationError
    assert got.error.request_id == U64
    assert got.error.message == "Unable to authenticate"
    assert rc.is_closed()


def test_valid_token_connects(broker: InProcessBroker, kit: TokenKit) -> None:
    rc = _connect(broker.port, kit.token("app").encode())
    try:
        assert rc.recv().type == T.CONNECTED
        rc.ping_pong()
    finally:
        rc.close()


def test_bad_token_gets_authentication_error_and_a_closed_connection(
    broker: InProcessBroker, kit: TokenKit
) -> None:
    _assert_refused(_connect(broker.port, b"not-a-jwt"))
    _assert_refused(_connect(broker.port, None))
    key = kit.secret_key_file.read_bytes()
    _assert_refused(
        _connect(broker.port, create_token("app", secret_key=key, expires_in_s=-1).encode())
    )


def test_unsigned_token_is_refused(broker: InProcessBroker) -> None:
    token = jwt.encode({"sub": "admin"}, None, algorithm="none")
    _assert_refused(_connect(broker.port, token.encode()))


def _wait_challenge(rc: RawClient) -> pb.BaseCommand:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = rc.recv()
        if got.type == T.AUTH_CHALLENGE:
            return got
        if got.type == T.PING:
            rc.send(T(type=T.PONG, pong=pb.CommandPong()))
    raise AssertionError("no AUTH_CHALLENGE within 30 s")


def _respond(rc: RawClient, token: str) -> None:
    rc.send(
        T(
            type=T.AUTH_RESPONSE,
            authResponse=pb.CommandAuthResponse(
                client_version="raw",
                protocol_version=20,
                response=pb.AuthData(auth_method_name="token", auth_data=token.encode()),
            ),
        )
    )


def test_expiring_token_is_refreshed_through_auth_challenge(
    broker: InProcessBroker, kit: TokenKit
) -> None:
    key = kit.secret_key_file.read_bytes()
    rc = _connect(broker.port, create_token("app", secret_key=key, expires_in_s=2).encode())
    try:
        assert rc.recv().type == T.CONNECTED
        challenge = _wait_challenge(rc)
        assert challenge.authChallenge.challenge.auth_data == b"refresh"
        assert challenge.authChallenge.challenge.auth_method_name == "token"
        _respond(rc, create_token("app", secret_key=key, expires_in_s=3600))
        rc.ping_pong()  # still served after the old token expired
        rc.sock.settimeout(3)  # three more refresh checks pass without a disconnect
        assert not rc.is_closed()
    finally:
        rc.close()


def test_refresh_with_a_bad_or_other_role_token_disconnects(
    broker: InProcessBroker, kit: TokenKit
) -> None:
    key = kit.secret_key_file.read_bytes()
    for answer in (
        create_token("intruder", secret_key=key, expires_in_s=3600),
        create_token("app", secret_key=key, expires_in_s=-5),
        "garbage",
    ):
        rc = _connect(broker.port, create_token("app", secret_key=key, expires_in_s=2).encode())
        try:
            assert rc.recv().type == T.CONNECTED
            _wait_challenge(rc)
            _respond(rc, answer)
            _assert_refused(rc)
        finally:
            rc.close()


def test_client_without_refresh_support_is_disconnected_at_expiry(
    broker: InProcessBroker, kit: TokenKit
) -> None:
    key = kit.secret_key_file.read_bytes()
    token = create_token("app", secret_key=key, expires_in_s=2).encode()
    rc = _connect(broker.port, token, refresh=False)
    try:
        assert rc.recv().type == T.CONNECTED
        deadline = time.monotonic() + 30
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                got = rc.recv()
            except ConnectionError:
                closed = True
                break
            assert got.type != T.AUTH_CHALLENGE
        assert closed
    finally:
        rc.close()


def _malformed(rng: random.Random, valid: str) -> bytes:
    header, body, sig = valid.split(".")
    choice = rng.randrange(9)
    if choice == 0:
        return rng.randbytes(rng.randrange(0, 300))
    if choice == 1:
        return valid[: rng.randrange(len(valid))].encode()
    if choice == 2:  # one flipped character in the signature
        i = rng.randrange(len(sig))
        return f"{header}.{body}.{sig[:i]}{'A' if sig[i] != 'A' else 'B'}{sig[i + 1 :]}".encode()
    if choice == 3:  # claims changed, signature kept
        claims = json.dumps({"sub": "admin"}).encode()
        forged = base64.urlsafe_b64encode(claims).rstrip(b"=").decode()
        return f"{header}.{forged}.{sig}".encode()
    if choice == 4:
        return ".".join(rng.choice(["", "e30", "!!", header]) for _ in range(3)).encode()
    if choice == 5:
        return b"\xff\xfe" + valid.encode()
    if choice == 6:  # non-string role claims
        bad = {"sub": rng.choice([None, 1, [], {}, ""]), "exp": rng.choice(["x", True, None])}
        return jwt.encode(bad, b"wrong-key-wrong-key-wrong-key-00", algorithm="HS256").encode()
    if choice == 7:
        return b"Bearer " * rng.randrange(1, 4)
    return (valid * rng.randrange(2, 40)).encode()


def test_fuzzed_credentials_only_ever_get_authentication_error(
    broker: InProcessBroker, kit: TokenKit, tmp_path: pathlib.Path
) -> None:
    rng = random.Random(19)
    valid = kit.token("app")
    service = broker.service
    assert service is not None
    before = service.authn.failures
    for _ in range(120):
        _assert_refused(_connect(broker.port, _malformed(rng, valid)))
    assert service.authn.failures - before == 120
    rc = _connect(broker.port, valid.encode())  # the broker still serves
    try:
        assert rc.recv().type == T.CONNECTED
        rc.ping_pong()
    finally:
        rc.close()


def test_anonymous_role_admits_clients_without_credentials(kit: TokenKit) -> None:
    b = InProcessBroker(
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=kit.url,
        anonymous_user_role="anonymous",
    ).start()
    try:
        rc = _connect(b.port, None)
        assert rc.recv().type == T.CONNECTED
        rc.close()
        _assert_refused(_connect(b.port, b"bad"))  # bad credentials are still refused
    finally:
        b.stop()


def test_commands_pipelined_after_a_refused_connect_are_never_served(
    broker: InProcessBroker,
) -> None:
    """CONNECT with bad credentials and a PRODUCER in the same write: only the refusal."""
    rc = RawClient(broker.port)
    rc.sock.settimeout(30)
    frames = b""
    for cmd in (
        T(
            type=T.CONNECT,
            connect=pb.CommandConnect(
                client_version="raw",
                protocol_version=20,
                auth_method_name="token",
                auth_data=b"bad",
            ),
        ),
        T(
            type=T.PRODUCER,
            producer=pb.CommandProducer(
                topic="persistent://public/default/sneaky", producer_id=1, request_id=1
            ),
        ),
    ):
        body = cmd.SerializeToString()
        frames += struct.pack(">II", 4 + len(body), len(body)) + body
    rc.send_raw(frames)
    _assert_refused(rc)  # ERROR then EOF: no PRODUCER_SUCCESS or ERROR for request 1
    service = broker.service
    assert service is not None
    assert "persistent://public/default/sneaky" not in service.topics
