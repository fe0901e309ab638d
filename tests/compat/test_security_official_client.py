"""The official pulsar-client against a broker with TLS, token authentication and
authorization on: its TLS and token settings work unchanged, and each kind of refusal gets
the right error while other clients keep working.

Certificates come from ``trustme``; keys and tokens from ``magnetar tokens``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

import pulsar
import pytest
import trustme
from support.broker import InProcessBroker
from support.security import TlsFiles, TokenKit, issue, make_ca, make_token_kit

from magnetar.broker.naming import TopicName

pytestmark = pytest.mark.compat


@dataclass
class SecureBroker:
    broker: InProcessBroker
    tls: TlsFiles
    tokens: TokenKit
    tmp: pathlib.Path

    @property
    def url(self) -> str:
        assert self.broker.service is not None
        return self.broker.service.namespaces.service_url_tls

    def client(self, token: str | None, *, ca: str | None = None, **kw: object) -> pulsar.Client:
        return pulsar.Client(
            self.url,
            authentication=None if token is None else pulsar.AuthenticationToken(token),
            tls_trust_certs_file_path=ca or self.tls.ca,
            connection_timeout_ms=5000,
            log_conf_file_path=None,
            **{"operation_timeout_seconds": 10, **kw},  # type: ignore[arg-type]
        )

    def grant(self, namespace: str, role: str, actions: list[str]) -> None:
        assert self.broker.service is not None
        authz = self.broker.service.authz
        tenant, ns = namespace.split("/")
        self.broker.call(lambda: authz.grant_namespace(tenant, ns, role, actions))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    tmp = tmp_path_factory.mktemp("security")
    ca, ca_path = make_ca(tmp, "server")
    tls = issue(ca, ca_path, tmp, "broker", "localhost", "127.0.0.1")
    kit = make_token_kit(tmp)
    broker = InProcessBroker(
        broker_service_port_tls=0,
        tls_certificate_file_path=tls.cert,
        tls_key_file_path=tls.key,
        tls_trust_certs_file_path=tls.ca,
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=kit.url,
        authorization_enabled=True,
        superuser_roles="admin",
    ).start()
    sb = SecureBroker(broker, tls, kit, tmp)
    sb.grant("public/default", "app", ["produce", "consume"])
    sb.grant("public/default", "reader", ["consume"])
    try:
        yield sb
    finally:
        broker.stop()


def _refused_authentication(secure: SecureBroker, client: pulsar.Client, topic: str) -> None:
    """The broker answers a bad CONNECT with ERROR(AuthenticationError) and closes, as Pulsar;
    this C++ client closes on any reply but CONNECTED and retries, so its caller sees a
    timeout. That the broker refused the credentials is read from its failure counter."""
    service = secure.broker.service
    assert service is not None
    before = service.authn.failures
    with pytest.raises((pulsar.AuthenticationError, pulsar.Timeout, pulsar.ConnectError)):
        client.create_producer(topic)
    assert service.authn.failures > before


def _roundtrip(client: pulsar.Client, topic: str, sub: str = "s") -> None:
    consumer = client.subscribe(topic, sub)
    producer = client.create_producer(topic)
    producer.send(b"hello over TLS")
    msg = consumer.receive(timeout_millis=10_000)
    assert msg.data() == b"hello over TLS"
    consumer.acknowledge(msg)


def test_lookup_answers_carry_the_tls_url(secure: SecureBroker) -> None:
    service = secure.broker.service
    assert service is not None
    got = secure.broker.call(lambda: service.namespaces.lookup("persistent://public/default/lk"))
    assert got.broker_url_tls == secure.url
    assert got.broker_url_tls.startswith("pulsar+ssl://")


def test_official_client_produces_and_consumes_over_tls_with_a_token(
    secure: SecureBroker,
) -> None:
    client = secure.client(secure.tokens.token("app", "1h"))
    try:
        _roundtrip(client, "persistent://public/default/tls-token")
    finally:
        client.close()


def test_superuser_needs_no_grant(secure: SecureBroker) -> None:
    client = secure.client(secure.tokens.token("admin"))
    try:
        _roundtrip(client, "persistent://public/default/tls-admin")
    finally:
        client.close()


def test_wrong_ca_fails_while_others_keep_working(secure: SecureBroker) -> None:
    _, other_ca = make_ca(secure.tmp, "other")
    good = secure.client(secure.tokens.token("app"))
    bad = secure.client(secure.tokens.token("app"), ca=other_ca, operation_timeout_seconds=3)
    try:
        producer = good.create_producer("persistent://public/default/wrong-ca")
        with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
            bad.create_producer("persistent://public/default/wrong-ca")
        producer.send(b"still fine")
    finally:
        bad.close()
        good.close()


def test_expired_token_is_an_authentication_error(secure: SecureBroker) -> None:
    from magnetar.broker.security.tokens import create_token

    key = secure.tokens.secret_key_file.read_bytes()
    expired = create_token("app", secret_key=key, expires_in_s=-60)
    good = secure.client(secure.tokens.token("app"))
    bad = secure.client(expired, operation_timeout_seconds=3)
    try:
        producer = good.create_producer("persistent://public/default/expired")
        _refused_authentication(secure, bad, "persistent://public/default/expired")
        producer.send(b"still fine")
    finally:
        bad.close()
        good.close()


def test_token_signed_with_another_key_is_an_authentication_error(
    secure: SecureBroker, tmp_path: pathlib.Path
) -> None:
    other = make_token_kit(tmp_path)
    bad = secure.client(other.token("app"), operation_timeout_seconds=3)
    try:
        _refused_authentication(secure, bad, "persistent://public/default/forged")
    finally:
        bad.close()


def test_no_token_is_an_authentication_error(secure: SecureBroker) -> None:
    bad = secure.client(None, operation_timeout_seconds=3)
    try:
        _refused_authentication(secure, bad, "persistent://public/default/anon")
    finally:
        bad.close()


def test_token_for_another_role_is_not_authorized(secure: SecureBroker) -> None:
    good = secure.client(secure.tokens.token("app"))
    stranger = secure.client(secure.tokens.token("stranger"))
    try:
        producer = good.create_producer("persistent://public/default/other-role")
        with pytest.raises(pulsar.AuthorizationError):
            stranger.create_producer("persistent://public/default/other-role")
        with pytest.raises(pulsar.AuthorizationError):
            stranger.subscribe("persistent://public/default/other-role", "s")
        producer.send(b"still fine")
    finally:
        stranger.close()
        good.close()


def test_consume_grant_does_not_allow_producing(secure: SecureBroker) -> None:
    reader = secure.client(secure.tokens.token("reader"))
    try:
        consumer = reader.subscribe("persistent://public/default/read-only", "s")
        with pytest.raises(pulsar.AuthorizationError):
            reader.create_producer("persistent://public/default/read-only")
        consumer.close()
    finally:
        reader.close()


def test_topic_level_grant(secure: SecureBroker) -> None:
    service = secure.broker.service
    assert service is not None
    tn = TopicName.parse("persistent://public/default/granted-topic")
    secure.broker.call(lambda: service.authz.grant_topic(tn, "topic-writer", ["produce"]))
    client = secure.client(secure.tokens.token("topic-writer"))
    try:
        client.create_producer(tn.full).send(b"x")
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://public/default/not-granted")
    finally:
        client.close()


def test_subscription_restricted_to_listed_roles(secure: SecureBroker) -> None:
    service = secure.broker.service
    assert service is not None
    secure.broker.call(
        lambda: service.authz.grant_subscription("public", "default", "private-sub", ["owner"])
    )
    secure.grant("public/default", "owner", ["consume"])
    owner = secure.client(secure.tokens.token("owner"))
    app = secure.client(secure.tokens.token("app"))
    try:
        owner.subscribe("persistent://public/default/sub-auth", "private-sub").close()
        with pytest.raises(pulsar.AuthorizationError):
            app.subscribe("persistent://public/default/sub-auth", "private-sub")
        app.subscribe("persistent://public/default/sub-auth", "open-sub").close()
    finally:
        owner.close()
        app.close()


@pytest.fixture
def mtls_broker(tmp_path: pathlib.Path) -> Iterator[tuple[InProcessBroker, trustme.CA, str]]:
    ca, ca_path = make_ca(tmp_path, "ca")
    tls = issue(ca, ca_path, tmp_path, "broker", "localhost", "127.0.0.1")
    broker = InProcessBroker(
        broker_service_port_tls=0,
        tls_certificate_file_path=tls.cert,
        tls_key_file_path=tls.key,
        tls_trust_certs_file_path=tls.ca,
        tls_require_trusted_client_cert_on_connect=True,
        authentication_enabled=True,
        authentication_providers="tls",
        authorization_enabled=True,
        superuser_roles="ops",
    ).start()
    try:
        yield broker, ca, ca_path
    finally:
        broker.stop()


def test_client_certificate_required(
    mtls_broker: tuple[InProcessBroker, trustme.CA, str], tmp_path: pathlib.Path
) -> None:
    broker, ca, ca_path = mtls_broker
    assert broker.service is not None
    url = broker.service.namespaces.service_url_tls
    ops = issue(ca, ca_path, tmp_path, "ops", "ops.example", common_name="ops")
    with_cert = pulsar.Client(
        url,
        authentication=pulsar.AuthenticationTLS(ops.cert, ops.key),
        tls_trust_certs_file_path=ca_path,
        operation_timeout_seconds=10,
        log_conf_file_path=None,
    )
    without = pulsar.Client(
        url,
        tls_trust_certs_file_path=ca_path,
        operation_timeout_seconds=5,
        connection_timeout_ms=3000,
        log_conf_file_path=None,
    )
    try:
        _roundtrip(with_cert, "persistent://public/default/mtls")  # role "ops" from the CN
        with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
            without.create_producer("persistent://public/default/mtls")
    finally:
        without.close()
        with_cert.close()


def test_client_certificate_role_is_authorized_by_cn(
    mtls_broker: tuple[InProcessBroker, trustme.CA, str], tmp_path: pathlib.Path
) -> None:
    broker, ca, ca_path = mtls_broker
    assert broker.service is not None
    guest = issue(ca, ca_path, tmp_path, "guest", "guest.example", common_name="guest")
    client = pulsar.Client(
        broker.service.namespaces.service_url_tls,
        authentication=pulsar.AuthenticationTLS(guest.cert, guest.key),
        tls_trust_certs_file_path=ca_path,
        operation_timeout_seconds=10,
        log_conf_file_path=None,
    )
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://public/default/mtls-guest")
    finally:
        client.close()


def test_pattern_subscription_needs_a_namespace_grant(secure: SecureBroker) -> None:
    """A regex subscription lists the namespace's topics (GET_TOPICS_OF_NAMESPACE)."""
    import re

    app = secure.client(secure.tokens.token("app"))
    stranger = secure.client(secure.tokens.token("stranger"))
    try:
        app.subscribe(re.compile("persistent://public/default/pattern-.*"), "s").close()
        service = secure.broker.service
        assert service is not None
        before = service.authz.denials
        # the broker answers ERROR(AuthorizationError); this client reports every failure of
        # that request as LookupError
        with pytest.raises((pulsar.AuthorizationError, pulsar.LookupError)):
            stranger.subscribe(re.compile("persistent://public/default/pattern-.*"), "s")
        assert service.authz.denials > before
    finally:
        stranger.close()
        app.close()
