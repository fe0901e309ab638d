"""magctl's clusters and replication clusters against a real standalone: ``create cluster``
with Pulsar's URLs, ``get`` / ``describe`` (credentials masked), a Cluster manifest applied
(and applied again: nothing to do), a Namespace manifest's ``replicationClusters``, and
``delete``; the server's refusals come back as magctl errors."""

from __future__ import annotations

import json
import uuid

from support.admin import http
from support.magctl import Magctl, Result
from support.standalone import StandaloneProcess


def ok(r: Result) -> str:
    assert r.code == 0, (r.code, r.out, r.err)
    return r.out


def test_create_get_describe_delete_a_cluster(magctl: Magctl, server: StandaloneProcess) -> None:
    url = server.web_url
    name = f"c{uuid.uuid4().hex[:6]}"
    created = magctl(
        "create",
        "cluster",
        name,
        "--url",
        "http://far.example.com:8080",
        "--broker-url",
        "pulsar://far.example.com:6650",
        admin_url=url,
    )
    assert ok(created) == f"cluster/{name} created\n"
    assert http(url, "GET", f"/admin/v2/clusters/{name}")[1] == {
        "serviceUrl": "http://far.example.com:8080",
        "brokerServiceUrl": "pulsar://far.example.com:6650",
    }
    table = ok(magctl("get", "clusters", admin_url=url))
    assert name in table and "pulsar://far.example.com:6650" in table
    one = json.loads(ok(magctl("get", "cluster", name, "-o", "json", admin_url=url)))
    assert one["kind"] == "Cluster" and one["spec"]["serviceUrl"] == "http://far.example.com:8080"
    assert "far.example.com" in ok(magctl("describe", "cluster", name, admin_url=url))
    refused = magctl("create", "cluster", f"{name}x", "--url", "http://h:1", admin_url=url)
    assert refused.code == 2 and "--broker-url" in refused.err
    bad = magctl("create", "cluster", f"{name}y", "--broker-url", "http://h:1", admin_url=url)
    assert bad.code == 1 and "Illegal broker service url" in bad.err
    assert ok(magctl("delete", "cluster", name, admin_url=url)) == f'cluster "{name}" deleted\n'
    assert name not in ok(magctl("get", "clusters", "-o", "name", admin_url=url))


def test_apply_cluster_and_replicated_namespace(
    magctl: Magctl,
    server: StandaloneProcess,
) -> None:
    url = server.web_url
    remote = f"r{uuid.uuid4().hex[:6]}"
    tenant = f"t{uuid.uuid4().hex[:6]}"
    manifest = f"""
apiVersion: magnetar.io/v1alpha1
kind: Cluster
metadata: {{name: {remote}}}
spec:
  serviceUrl: http://remote.example.com:8080
  brokerServiceUrl: pulsar://remote.example.com:6650
  authenticationPlugin: token
  authenticationParameters: "token:s3cret"
---
apiVersion: magnetar.io/v1alpha1
kind: Tenant
metadata: {{name: {tenant}}}
spec: {{allowedClusters: [standalone, {remote}]}}
---
apiVersion: magnetar.io/v1alpha1
kind: Namespace
metadata: {{name: {tenant}/geo}}
spec:
  replicationClusters: [standalone, {remote}]
"""
    applied = ok(magctl("apply", "-f", "-", admin_url=url, stdin=manifest))
    assert f"cluster/{remote} created" in applied
    assert f"namespace/{tenant}/geo created" in applied
    replication = http(url, "GET", f"/admin/v2/namespaces/{tenant}/geo/replication")[1]
    assert replication == sorted(["standalone", remote])
    data = http(url, "GET", f"/admin/v2/clusters/{remote}")[1]
    assert data["authenticationParameters"] == "token:s3cret"
    again = ok(magctl("apply", "-f", "-", admin_url=url, stdin=manifest))
    assert "created" not in again and "configured" not in again
    shown = ok(magctl("get", "cluster", remote, "-o", "yaml", admin_url=url))
    assert "s3cret" not in shown and "******" in shown
    ns = json.loads(ok(magctl("get", "namespace", f"{tenant}/geo", "-o", "json", admin_url=url)))
    assert ns["spec"]["replicationClusters"] == sorted(["standalone", remote])
    # narrowing the replication through the manifest
    narrowed = manifest.replace(
        f"replicationClusters: [standalone, {remote}]", "replicationClusters: [standalone]"
    )
    assert f"namespace/{tenant}/geo configured" in ok(
        magctl("apply", "-f", "-", admin_url=url, stdin=narrowed)
    )
    assert http(url, "GET", f"/admin/v2/namespaces/{tenant}/geo/replication")[1] == ["standalone"]
    # an unknown cluster is the server's 403, reported by magctl
    wrong = manifest.replace(
        f"replicationClusters: [standalone, {remote}]", "replicationClusters: [mars]"
    )
    refused = magctl("apply", "-f", "-", admin_url=url, stdin=wrong)
    assert refused.code == 1 and "Invalid cluster id: mars" in refused.err
