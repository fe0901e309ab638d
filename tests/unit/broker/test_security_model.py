"""Pure tests of the security model: tokens (keys, algorithms, expiry on an injected clock),
the connection refresh state machine over every (state, input) pair, authorization decisions
on in-memory metadata, and the TLS context settings."""

from __future__ import annotations

import base64
import pathlib
import ssl

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.namespace.resources import InvalidResource, Resources, TenantInfo
from magnetar.broker.naming import TopicName
from magnetar.broker.security.authentication import (
    AuthenticationError,
    AuthenticationService,
    AuthState,
    ConnectionAuth,
    RefreshAction,
    role_of_certificate,
)
from magnetar.broker.security.authorization import AuthorizationService
from magnetar.broker.security.tls import TlsConfigError, TlsSettings, build_server_context
from magnetar.broker.security.tokens import (
    TokenError,
    TokenValidator,
    create_token,
    generate_key_pair,
    generate_secret_key,
    parse_duration_s,
    read_key_bytes,
    show_token,
)
from magnetar.zk.memory import MemoryMetadataServer

pytestmark = pytest.mark.unit
NOW_S = 1_800_000_000


def _validator(**kw: object) -> TokenValidator:
    return TokenValidator(now_ms=lambda: NOW_S * 1000, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- tokens
def test_hs256_token_round_trip_and_expiry() -> None:
    key = generate_secret_key()
    v = _validator(secret_key=key)
    token = create_token("alice", secret_key=key, expires_in_s=60, now_s=NOW_S)
    claims = v.validate(token)
    assert claims.role == "alice" and claims.expires_at_ms == (NOW_S + 60) * 1000
    expired = create_token("alice", secret_key=key, expires_in_s=-1, now_s=NOW_S)
    with pytest.raises(TokenError, match="expired"):
        v.validate(expired)
    assert v.validate(create_token("bob", secret_key=key)).expires_at_ms is None


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_key_pair_tokens(alg: str) -> None:
    private, public = generate_key_pair(alg)
    v = _validator(public_key=public, public_alg=alg)
    assert v.validate(create_token("svc", private_key=private)).role == "svc"
    other_private, _ = generate_key_pair(alg)
    with pytest.raises(TokenError):
        v.validate(create_token("svc", private_key=other_private))


def test_hmac_token_is_refused_by_a_public_key_validator() -> None:
    _, public = generate_key_pair("RS256")
    v = _validator(public_key=public)
    with pytest.raises(TokenError):
        v.validate(create_token("x", secret_key=public))  # the key-confusion attack


def test_role_claim_and_audience() -> None:
    key = generate_secret_key()
    import jwt

    token = jwt.encode({"role": "r1", "aud": ["pulsar"]}, key, algorithm="HS256")
    assert (
        _validator(secret_key=key, role_claim="role", audience="pulsar").validate(token).role
        == "r1"
    )
    with pytest.raises(TokenError, match="audience"):
        _validator(secret_key=key, role_claim="role", audience="other").validate(token)
    with pytest.raises(TokenError, match="role claim"):
        _validator(secret_key=key).validate(token)


def test_key_settings_as_pulsar_gives_them(tmp_path: pathlib.Path) -> None:
    key = generate_secret_key()
    path = tmp_path / "k"
    path.write_bytes(key)
    b64 = base64.b64encode(key).decode()
    assert read_key_bytes(f"file://{path}") == key
    assert read_key_bytes(str(path)) == key
    assert read_key_bytes(f"data:;base64,{b64}") == key
    assert read_key_bytes(b64) == key
    with pytest.raises(TokenError):
        read_key_bytes("file:///does/not/exist")
    with pytest.raises(TokenError):
        read_key_bytes("not base64 !")


def test_durations_and_show() -> None:
    assert [parse_duration_s(d) for d in ("30", "30s", "2m", "1h", "1d", "1w", "1y")] == [
        30,
        30,
        120,
        3600,
        86400,
        604800,
        31536000,
    ]
    with pytest.raises(TokenError):
        parse_duration_s("soon")
    header, body = show_token(create_token("a", secret_key=b"k" * 32))
    assert header["alg"] == "HS256" and body == {"sub": "a"}


# ------------------------------------------------------------------------------- authentication
class _Clock:
    def __init__(self) -> None:
        self.ms = NOW_S * 1000

    def __call__(self) -> int:
        return self.ms


def _service(clock: _Clock, key: bytes) -> AuthenticationService:
    return AuthenticationService(
        enabled=True, token=TokenValidator(secret_key=key, now_ms=clock), now_ms=clock
    )


def test_refresh_state_machine_every_state_and_input() -> None:
    key = generate_secret_key()
    clock = _Clock()
    svc = _service(clock, key)

    def fresh(role: str = "app", ttl: int = 10) -> bytes:
        return create_token(role, secret_key=key, expires_in_s=ttl, now_s=clock.ms / 1000).encode()

    auth = ConnectionAuth(svc, svc.authenticate("token", fresh()), supports_refresh=True)
    # AUTHENTICATED, not expired -> nothing
    assert auth.on_refresh_check() is RefreshAction.NONE and auth.state is AuthState.AUTHENTICATED
    # AUTHENTICATED + AUTH_RESPONSE (unsolicited) -> refused
    with pytest.raises(AuthenticationError):
        auth.on_auth_response("token", fresh())
    clock.ms += 11_000
    # AUTHENTICATED, expired -> challenge
    assert auth.on_refresh_check() is RefreshAction.CHALLENGE and auth.state is AuthState.CHALLENGED
    # CHALLENGED + good response -> authenticated with the new expiry
    auth.on_auth_response("token", fresh(ttl=100))
    assert auth.state is AuthState.AUTHENTICATED and not auth.expired()
    clock.ms += 101_000
    assert auth.on_refresh_check() is RefreshAction.CHALLENGE
    # CHALLENGED + response for another role -> refused
    with pytest.raises(AuthenticationError, match="role"):
        auth.on_auth_response("token", fresh(role="other"))
    # CHALLENGED + no response by the next check -> close
    assert auth.on_refresh_check() is RefreshAction.CLOSE
    # a client that cannot refresh is closed at expiry
    legacy = ConnectionAuth(svc, svc.authenticate("token", fresh(ttl=1)), supports_refresh=False)
    clock.ms += 2_000
    assert legacy.on_refresh_check() is RefreshAction.CLOSE
    # credentials that never expire are never challenged
    forever = ConnectionAuth(
        svc, svc.authenticate("token", create_token("app", secret_key=key).encode()), True
    )
    clock.ms += 10**9
    assert forever.on_refresh_check() is RefreshAction.NONE


def test_authenticate_refusals_and_methods() -> None:
    key = generate_secret_key()
    svc = _service(_Clock(), key)
    for method, data in (
        ("token", b"\xff"),
        ("token", b""),
        ("none", b""),
        ("basic", b"x"),
        ("tls", b""),
    ):
        with pytest.raises(AuthenticationError) as err:
            svc.authenticate(method, data)
        assert err.value.message == "Unable to authenticate"
    assert svc.failures == 5
    token = create_token("app", secret_key=key)
    assert svc.authenticate_http(f"Bearer {token}", None).role == "app"
    with pytest.raises(AuthenticationError):
        svc.authenticate_http("Basic abc", None)


def test_role_of_certificate() -> None:
    cert = {"subject": ((("organizationName", "x"),), (("commonName", "svc-1"),))}
    assert role_of_certificate(cert) == "svc-1"
    assert role_of_certificate({}) is None and role_of_certificate(None) is None


def test_from_config_rejects_unusable_settings() -> None:
    with pytest.raises(ValueError, match="providers"):
        AuthenticationService.from_config(BrokerConfig(authentication_enabled=True))
    with pytest.raises(ValueError, match="unknown"):
        AuthenticationService.from_config(
            BrokerConfig(authentication_enabled=True, authentication_providers="kerberos")
        )
    with pytest.raises(ValueError, match="token"):
        AuthenticationService.from_config(
            BrokerConfig(authentication_enabled=True, authentication_providers="token")
        )
    assert not AuthenticationService.from_config(BrokerConfig()).enabled


# ------------------------------------------------------------------------------- authorization
async def _authz(**cfg: object) -> AuthorizationService:
    resources = Resources(MemoryMetadataServer().connect(), "standalone")
    await resources.create_tenant("acme", TenantInfo(["boss"], ["standalone"]))
    await resources.create_namespace("acme", "ns")
    return AuthorizationService(
        BrokerConfig(authorization_enabled=True, superuser_roles="root, ops", **cfg),  # type: ignore[arg-type]
        resources,
    )


async def test_authorization_decisions() -> None:
    authz = await _authz()
    t = TopicName.parse("persistent://acme/ns/t")
    part = TopicName.parse("persistent://acme/ns/p-partition-3")
    assert await authz.can_produce(t, "root") and await authz.can_consume(t, "ops", "s")
    assert await authz.can_produce(t, "boss")  # tenant admin
    assert not await authz.can_produce(t, "app") and not await authz.can_lookup(t, "app")
    assert not await authz.can_produce(t, None)
    await authz.grant_namespace("acme", "ns", "app", ["consume"])
    assert await authz.can_consume(t, "app", "s") and await authz.can_lookup(t, "app")
    assert not await authz.can_produce(t, "app")
    await authz.grant_topic(TopicName.parse("persistent://acme/ns/p"), "w", ["produce"])
    assert await authz.can_produce(part, "w")  # a partition inherits its topic's grant
    assert not await authz.can_produce(t, "w")
    await authz.grant_subscription("acme", "ns", "private", ["owner"])
    assert not await authz.can_consume(t, "app", "private")
    assert await authz.can_consume(t, "app", "other")
    await authz.revoke_namespace("acme", "ns", "app")
    assert not await authz.can_consume(t, "app", "other")
    with pytest.raises(InvalidResource):
        await authz.grant_namespace("acme", "ns", "app", ["fly"])
    assert await authz.can_list_topics("acme", "ns", "boss")
    assert not await authz.can_list_topics("acme", "ns", "app")
    await authz.grant_namespace("acme", "ns", "app", ["produce"])
    assert await authz.can_list_topics("acme", "ns", "app")
    assert not await authz.can_list_topics("acme", "missing", "app")


async def test_http_denials() -> None:
    authz = await _authz()
    assert await authz.http_denial("GET", "/admin/v2/tenants", "root") is None
    assert await authz.http_denial("GET", "/admin/v2/tenants", "boss") is not None
    assert await authz.http_denial("GET", "/admin/v2/tenants/acme", "boss") is None
    assert await authz.http_denial("PUT", "/admin/v2/namespaces/acme/x", "boss") is None
    assert await authz.http_denial("PUT", "/admin/v2/namespaces/acme/x", "app") is not None
    assert await authz.http_denial("GET", "/admin/v2/persistent/acme/ns", "boss") is None
    assert await authz.http_denial("GET", "/admin/v2/brokers/health", "boss") is not None
    assert await authz.http_denial("GET", "/admin/v2/clusters", "app") is None
    partitions = "/admin/v2/persistent/acme/ns/t/partitions"
    assert await authz.http_denial("GET", partitions, "app") is not None
    await authz.grant_namespace("acme", "ns", "app", ["consume"])
    assert await authz.http_denial("GET", partitions, "app") is None  # lookup-level
    assert await authz.http_denial("PUT", partitions, "app") is not None  # admin-level


async def test_authorization_off_allows_everything() -> None:
    resources = Resources(MemoryMetadataServer().connect(), "standalone")
    authz = AuthorizationService(BrokerConfig(), resources)
    t = TopicName.parse("persistent://x/y/z")
    assert await authz.can_produce(t, None) and await authz.can_consume(t, None, "s")
    assert await authz.http_denial("DELETE", "/admin/v2/tenants/x", None) is None


# ------------------------------------------------------------------------------- tls
def test_tls_settings_validation(tmp_path: pathlib.Path) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "c.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "k.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    base = TlsSettings(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    ctx = build_server_context(base)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.verify_mode == ssl.CERT_NONE
    with pytest.raises(TlsConfigError, match="insecure"):
        build_server_context(
            TlsSettings(base.certificate_file, base.key_file, protocols=("TLSv1",))
        )
    with pytest.raises(TlsConfigError, match="trust"):
        build_server_context(
            TlsSettings(base.certificate_file, base.key_file, require_client_cert=True)
        )
    with pytest.raises(TlsConfigError):
        build_server_context(TlsSettings(base.certificate_file, str(tmp_path / "missing")))
    with pytest.raises(TlsConfigError, match="cipher"):
        build_server_context(TlsSettings(base.certificate_file, base.key_file, ciphers="NOPE"))
    mtls = build_server_context(
        TlsSettings(base.certificate_file, base.key_file, str(tmp_path / "ca.pem"), True)
    )
    assert mtls.verify_mode == ssl.CERT_REQUIRED


def test_a_method_no_provider_serves_is_the_anonymous_role() -> None:
    """Pulsar's ServerCnx: no provider of that name -> anonymousUserRole (else refused); a
    configured provider that refuses the credentials is a refusal even then."""
    key = generate_secret_key()
    svc = AuthenticationService(
        enabled=True, token=TokenValidator(secret_key=key), anonymous_role="anonymous"
    )
    for method in ("unknown", "basic", "tls", "none", ""):
        assert svc.authenticate(method, b"user:pass").role == "anonymous", method
    with pytest.raises(AuthenticationError):
        svc.authenticate("token", b"not-a-token")
    strict = AuthenticationService(enabled=True, token=TokenValidator(secret_key=key))
    with pytest.raises(AuthenticationError):
        strict.authenticate("unknown", b"user:pass")
