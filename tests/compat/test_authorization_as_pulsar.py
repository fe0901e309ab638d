"""Authorization decided as Pulsar decides it, on a real standalone with token and basic
authentication, authorization on and ``anonymousUserRole=anonymous`` (the set-up of Pulsar's
Python client test suite): one test per row of the decision table in docs/security.md
(operation x role kind -> allowed), over HTTP, and the binary protocol's answers with the
official client (a missing tenant is ``TopicNotFound``; a CONNECT naming a method no provider
serves is the anonymous role).

Role kinds: a superuser (token ``superUser``), a tenant admin (token ``boss``, admin of
``acme``), a role with namespace grants (token ``app``: produce+consume on ``acme/ns``), the
anonymous role granted the same, the anonymous role as admin of tenant ``open``, and a role
with nothing (token ``stranger``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pulsar
import pytest
from passlib.hash import apr_md5_crypt
from support.admin import http
from support.security import TokenKit, make_token_kit
from support.standalone import StandaloneProcess

pytestmark = pytest.mark.compat

GRANTED = ["produce", "consume"]
KINDS = ("superuser", "tenant-admin", "granted", "anonymous", "anonymous-admin", "stranger")


@dataclass
class Secured:
    server: StandaloneProcess
    tokens: dict[str, str]

    def headers(self, kind: str) -> dict[str, str]:
        role = {"superuser": "superUser", "tenant-admin": "boss", "granted": "app"}.get(kind)
        role = role or ("stranger" if kind == "stranger" else None)
        return {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}

    def ns(self, kind: str) -> str:
        """The namespace a role kind acts on: ``open/ns`` for the anonymous tenant admin."""
        return "open/ns" if kind == "anonymous-admin" else "acme/ns"

    def call(self, kind: str, method: str, path: str, body: object = None) -> int:
        status, _ = http(self.server.web_url, method, path, body, self.headers(kind))
        return status

    def su(self, method: str, path: str, body: object = None) -> None:
        status, reply = http(self.server.web_url, method, path, body, self.headers("superuser"))
        assert status in (200, 204), (method, path, status, reply)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("authz")
    kit: TokenKit = make_token_kit(base)
    tokens = {r: kit.token(r) for r in ("superUser", "boss", "app", "stranger")}
    htpasswd = base / ".htpasswd"
    htpasswd.write_text(f"user:{apr_md5_crypt.hash('pass')}\n")
    server = StandaloneProcess(
        base / "data",
        base / "standalone.log",
        config={
            "authenticationEnabled": "true",
            "authenticationProviders": (
                "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
                "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"
            ),
            "authorizationEnabled": "true",
            "anonymousUserRole": "anonymous",
            "superUserRoles": "superUser,admin",
            "tokenSecretKey": kit.url,
            "basicAuthConf": str(htpasswd),
        },
        token=tokens["superUser"],
    ).start()
    s = Secured(server, tokens)
    s.su(
        "PUT", "/admin/v2/tenants/acme", {"adminRoles": ["boss"], "allowedClusters": ["standalone"]}
    )
    s.su(
        "PUT",
        "/admin/v2/tenants/open",
        {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]},
    )
    s.su("PUT", "/admin/v2/tenants/private", {"adminRoles": [], "allowedClusters": ["standalone"]})
    grants = {"auth_policies": {"namespace_auth": {"app": GRANTED, "anonymous": GRANTED}}}
    s.su("PUT", "/admin/v2/namespaces/acme/ns", grants)
    s.su("PUT", "/admin/v2/namespaces/open/ns", {})
    s.su(
        "PUT",
        "/admin/v2/namespaces/private/auth",
        {"auth_policies": {"namespace_auth": {"app": GRANTED}}},
    )
    for ns in ("acme/ns", "open/ns"):  # a topic with a subscription for the topic-level rows
        s.su("PUT", f"/admin/v2/persistent/{ns}/existing")
        s.su("PUT", f"/admin/v2/persistent/{ns}/existing/subscription/s")
    try:
        yield s
    finally:
        server.stop()


ALLOW_ADMINS = {"superuser", "tenant-admin", "anonymous-admin"}
ALLOW_GRANTED = ALLOW_ADMINS | {"granted", "anonymous"}


def check_row(secured: Secured, allowed: set[str], request: object) -> None:
    """``request(kind) -> status`` for every role kind: 2xx where allowed, else 403."""
    got = {}
    for kind in KINDS:
        status = request(kind)  # type: ignore[operator]
        got[kind] = "allowed" if 200 <= status < 300 else str(status)
    want = {kind: "allowed" if kind in allowed else "403" for kind in KINDS}
    assert got == want


def test_create_partitioned_topic(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_ADMINS,
        lambda k: secured.call(
            k, "PUT", f"/admin/v2/persistent/{secured.ns(k)}/parted-{k}/partitions", 2
        ),
    )


def test_namespace_deduplication_policy(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_ADMINS,
        lambda k: secured.call(
            k, "POST", f"/admin/v2/namespaces/{secured.ns(k)}/deduplication", True
        ),
    )


def test_namespace_compaction_threshold_policy(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_ADMINS,
        lambda k: secured.call(
            k, "PUT", f"/admin/v2/namespaces/{secured.ns(k)}/compactionThreshold", 1 << 20
        ),
    )


def test_trigger_topic_compaction(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_ADMINS,
        lambda k: secured.call(
            k, "PUT", f"/admin/v2/persistent/{secured.ns(k)}/existing/compaction"
        ),
    )


def test_partitioned_topic_metadata(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_GRANTED,
        lambda k: secured.call(
            k, "GET", f"/admin/v2/persistent/{secured.ns(k)}/existing/partitions"
        ),
    )


def test_http_lookup(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_GRANTED,
        lambda k: secured.call(k, "GET", f"/lookup/v2/topic/persistent/{secured.ns(k)}/existing"),
    )


def test_topic_stats(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_GRANTED,
        lambda k: secured.call(k, "GET", f"/admin/v2/persistent/{secured.ns(k)}/existing/stats"),
    )


def test_list_subscriptions(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_GRANTED,
        lambda k: secured.call(
            k, "GET", f"/admin/v2/persistent/{secured.ns(k)}/existing/subscriptions"
        ),
    )


def test_skip_all_on_a_subscription(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_GRANTED,
        lambda k: secured.call(
            k, "POST", f"/admin/v2/persistent/{secured.ns(k)}/existing/subscription/s/skip_all"
        ),
    )


def test_list_topics_of_a_namespace(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_GRANTED,
        lambda k: secured.call(k, "GET", f"/admin/v2/persistent/{secured.ns(k)}"),
    )


def test_read_namespace_permissions(secured: Secured) -> None:
    check_row(
        secured,
        ALLOW_ADMINS,
        lambda k: secured.call(k, "GET", f"/admin/v2/namespaces/{secured.ns(k)}/permissions"),
    )


def test_create_a_tenant(secured: Secured) -> None:
    check_row(
        secured,
        {"superuser"},
        lambda k: secured.call(
            k,
            "PUT",
            f"/admin/v2/tenants/t-{k}",
            {"adminRoles": [], "allowedClusters": ["standalone"]},
        ),
    )


def test_a_missing_tenant_is_404_to_all_but_superusers(secured: Secured) -> None:
    path = "/admin/v2/persistent/nosuchtenant/ns/t/partitions"
    assert secured.call("granted", "GET", path) == 404
    assert secured.call("anonymous", "PUT", path, 1) == 404
    status, body = http(secured.server.web_url, "GET", path, None, secured.headers("stranger"))
    assert (status, body) == (404, {"reason": "Tenant does not exist"})


def test_bad_credentials_are_401_not_anonymous(secured: Secured) -> None:
    status, _ = http(
        secured.server.web_url,
        "GET",
        "/admin/v2/persistent/acme/ns",
        None,
        {"Authorization": "Bearer not-a-token"},
    )
    assert status == 401


def test_putting_an_existing_namespace_answers_409(secured: Secured) -> None:
    status, _ = http(
        secured.server.web_url,
        "PUT",
        "/admin/v2/namespaces/acme/ns",
        {"auth_policies": {"namespace_auth": {"other": GRANTED}}},
        secured.headers("superuser"),
    )
    assert status == 409
    status, _ = http(
        secured.server.web_url,
        "PUT",
        "/admin/v2/namespaces/public/default",
        {},
        secured.headers("superuser"),
    )
    assert status == 409


# ---------------------------------------------------------------- the binary protocol
def _client(secured: Secured, auth: object = None, timeout_s: int = 10) -> pulsar.Client:
    return pulsar.Client(
        secured.server.service_url,
        authentication=auth,
        operation_timeout_seconds=timeout_s,
        log_conf_file_path=None,
    )


def test_a_producer_on_a_missing_tenant_is_topic_not_found(secured: Secured) -> None:
    client = _client(secured, pulsar.AuthenticationToken(secured.tokens["app"]))
    try:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer("persistent://nosuchtenant/ns/topic")
        with pytest.raises(pulsar.AuthorizationError):  # the tenant exists: a plain refusal
            client.create_producer("persistent://open/ns/topic")
    finally:
        client.close()


def test_an_unknown_auth_method_connects_as_the_anonymous_role(secured: Secured) -> None:
    """Pulsar's ServerCnx: no provider of that name -> ``anonymousUserRole``; its grants
    decide at once (no wait for a timeout)."""
    auth = pulsar.AuthenticationBasic("user", "pass", method="unknown")
    client = _client(secured, auth, timeout_s=30)
    try:
        producer = client.create_producer("persistent://acme/ns/unknown-method")
        producer.send(b"as anonymous")
        started = time.monotonic()
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://private/auth/unknown-method")
        assert time.monotonic() - started < 10
    finally:
        client.close()


def test_basic_credentials_of_the_configured_method_are_the_user(secured: Secured) -> None:
    client = _client(secured, pulsar.AuthenticationBasic("user", "pass"))
    try:
        with pytest.raises(pulsar.AuthorizationError):  # "user" has no grant on acme/ns
            client.create_producer("persistent://acme/ns/as-user")
    finally:
        client.close()


def test_granting_on_public_default_as_the_docs_say(secured: Secured) -> None:
    """docs/security.md "public/default when security is on": a superuser grants the
    anonymous role on public/default and makes it an admin of ``public``; then the anonymous
    role produces there and creates partitioned topics (what Pulsar's Python client suite
    does over plain HTTP)."""
    path = "/admin/v2/persistent/public/default/suite-parted/partitions"
    assert secured.call("anonymous", "PUT", path, 3) == 403
    secured.su("POST", "/admin/v2/namespaces/public/default/permissions/anonymous", GRANTED)
    secured.su(
        "POST",
        "/admin/v2/tenants/public",
        {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]},
    )
    assert secured.call("anonymous", "PUT", path, 3) == 204
    assert (
        secured.call("anonymous", "POST", "/admin/v2/namespaces/public/default/deduplication", True)
        == 204
    )
    client = _client(secured)
    try:
        client.create_producer("persistent://public/default/suite-parted").send(b"x")
    finally:
        client.close()


def test_a_refused_connect_is_answered_at_once(secured: Secured) -> None:
    """Credentials a configured provider refuses are never the anonymous role: the broker
    answers ERROR(AuthenticationError) at once and closes; an unknown method is CONNECTED
    (the anonymous role)."""
    from support.raw_client import RawClient, T

    from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

    def connect(method: str, data: bytes) -> pb.BaseCommand:
        raw = RawClient(secured.server.port)
        try:
            raw.send(
                T(
                    type=T.CONNECT,
                    connect=pb.CommandConnect(
                        client_version="raw",
                        protocol_version=20,
                        auth_method_name=method,
                        auth_data=data,
                    ),
                )
            )
            started = time.monotonic()
            got = raw.recv()
            assert time.monotonic() - started < 2
            if got.type == T.ERROR:
                assert raw.is_closed()
            return got
        finally:
            raw.close()

    refused = connect("token", b"not-a-token")
    assert (refused.type, refused.error.error) == (T.ERROR, pb.AuthenticationError)
    assert connect("unknown", b"user:pass").type == T.CONNECTED
