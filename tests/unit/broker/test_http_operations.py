"""``operations.classify``: which kind of operation an admin request is (Pulsar's admin
resources), the input of the REST decision table in docs/security.md."""

from __future__ import annotations

import pytest

from magnetar.broker.security.operations import OpKind, classify

pytestmark = pytest.mark.unit

T = "/admin/v2/persistent/acme/ns/t"


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", "/lookup/v2/topic/persistent/acme/ns/t", OpKind.LOOKUP),
        ("GET", T + "/partitions", OpKind.LOOKUP),
        ("PUT", T + "/partitions", OpKind.TENANT_ADMIN),
        ("GET", T + "/stats", OpKind.LOOKUP),
        ("GET", T + "/internalStats", OpKind.LOOKUP),
        ("GET", T + "/subscriptions", OpKind.CONSUME),
        ("PUT", T + "/subscription/s", OpKind.CONSUME),
        ("DELETE", T + "/subscription/s", OpKind.CONSUME),
        ("POST", T + "/subscription/s/skip/5", OpKind.CONSUME),
        ("POST", T + "/subscription/s/resetcursor/0", OpKind.CONSUME),
        ("PUT", T + "/compaction", OpKind.TENANT_ADMIN),
        ("PUT", T + "/unload", OpKind.TENANT_ADMIN),
        ("DELETE", T, OpKind.TENANT_ADMIN),
        ("GET", T + "/permissions", OpKind.TENANT_ADMIN),
        ("GET", "/admin/v2/persistent/acme/ns", OpKind.NAMESPACE_READ),
        ("GET", "/admin/v2/persistent/acme/ns/partitioned", OpKind.NAMESPACE_READ),
        ("GET", "/admin/v2/namespaces/acme/ns/topics", OpKind.NAMESPACE_READ),
        ("POST", "/admin/v2/namespaces/acme/ns/deduplication", OpKind.TENANT_ADMIN),
        ("GET", "/admin/v2/namespaces/acme/ns/deduplication", OpKind.TENANT_ADMIN),
        ("PUT", "/admin/v2/namespaces/acme/ns", OpKind.TENANT_ADMIN),
        ("GET", "/admin/v2/namespaces/acme", OpKind.TENANT_ADMIN),
        ("GET", "/admin/v2/tenants/acme", OpKind.TENANT_ADMIN),
        ("PUT", "/admin/v2/tenants/acme", OpKind.SUPERUSER),
        ("GET", "/admin/v2/tenants", OpKind.SUPERUSER),
        ("GET", "/admin/v2/clusters", OpKind.OPEN),
        ("PUT", "/admin/v2/clusters/c", OpKind.SUPERUSER),
        ("GET", "/admin/v2/brokers/health", OpKind.SUPERUSER),
        ("GET", "/admin/v2/schemas/acme/ns/t/schema", OpKind.LOOKUP),
        ("POST", "/admin/v2/schemas/acme/ns/t/schema", OpKind.TENANT_ADMIN),
    ],
)
def test_each_request_has_pulsars_kind(method: str, path: str, kind: OpKind) -> None:
    assert classify(method, path).kind is kind


def test_topic_and_subscription_names_are_carried() -> None:
    op = classify("POST", "/admin/v2/non-persistent/acme/ns/a%20b/subscription/s%2F1/skip_all")
    assert (op.tenant, op.namespace, op.topic, op.subscription) == (
        "acme",
        "ns",
        "non-persistent://acme/ns/a b",
        "s/1",
    )
