"""``PUT`` / ``POST /admin/v2/clusters/{cluster}`` on a real standalone, with Pulsar's status
codes: create 204, exists 409, update 204, update of a missing cluster 404, a bad name 412,
a bad ClusterData 400; and the data read back with ``GET``."""

from __future__ import annotations

import uuid

from support.admin import http
from support.standalone import StandaloneProcess


def test_create_update_and_refusals(server: StandaloneProcess) -> None:
    name = f"c{uuid.uuid4().hex[:6]}"
    data = {"serviceUrl": "http://b1.example.com:8080", "brokerServiceUrl": "pulsar://b1:6650"}
    assert http(server.web_url, "PUT", f"/admin/v2/clusters/{name}", data)[0] == 204
    status, listed = http(server.web_url, "GET", "/admin/v2/clusters")
    assert status == 200 and name in listed and "standalone" in listed
    status, body = http(server.web_url, "PUT", f"/admin/v2/clusters/{name}", data)
    assert status == 409 and body["reason"] == "Cluster already exists"
    changed = {**data, "brokerServiceUrlTls": "pulsar+ssl://b1:6651"}
    assert http(server.web_url, "POST", f"/admin/v2/clusters/{name}", changed)[0] == 204
    assert http(server.web_url, "GET", f"/admin/v2/clusters/{name}") == (200, changed)
    status, body = http(server.web_url, "POST", "/admin/v2/clusters/nowhere", data)
    assert status == 404 and body["reason"] == "Cluster does not exist"
    bad = {"brokerServiceUrl": "http://b1:6650"}
    status, body = http(server.web_url, "PUT", f"/admin/v2/clusters/{name}-2", bad)
    assert status == 400 and "Illegal broker service url" in body["reason"]
    assert http(server.web_url, "GET", f"/admin/v2/clusters/{name}-2")[0] == 404
    assert http(server.web_url, "PUT", "/admin/v2/clusters/bad%20name", data)[0] == 412
    assert http(server.web_url, "PUT", f"/admin/v2/clusters/{name}-3", [1, 2])[0] == 400


def test_delete_a_cluster(server: StandaloneProcess) -> None:
    """``DELETE /admin/v2/clusters/{c}``: 204, then gone; 404 for a missing one; 412 for the
    cluster the broker serves and for one a tenant is allowed on (stricter than Pulsar)."""
    name = f"d{uuid.uuid4().hex[:6]}"
    data = {"serviceUrl": "http://b2.example.com:8080", "brokerServiceUrl": "pulsar://b2:6650"}
    assert http(server.web_url, "PUT", f"/admin/v2/clusters/{name}", data)[0] == 204
    tenant = f"t{uuid.uuid4().hex[:6]}"
    body = {"adminRoles": [], "allowedClusters": ["standalone", name]}
    assert http(server.web_url, "PUT", f"/admin/v2/tenants/{tenant}", body)[0] == 204
    status, answer = http(server.web_url, "DELETE", f"/admin/v2/clusters/{name}")
    assert status == 412 and tenant in answer["reason"]
    assert http(server.web_url, "DELETE", f"/admin/v2/tenants/{tenant}")[0] == 204
    assert http(server.web_url, "DELETE", f"/admin/v2/clusters/{name}")[0] == 204
    assert http(server.web_url, "GET", f"/admin/v2/clusters/{name}")[0] == 404
    assert name not in http(server.web_url, "GET", "/admin/v2/clusters")[1]
    status, answer = http(server.web_url, "DELETE", f"/admin/v2/clusters/{name}")
    assert status == 404 and answer["reason"] == "Cluster does not exist"
    status, answer = http(server.web_url, "DELETE", "/admin/v2/clusters/standalone")
    assert status == 412 and "this broker serves" in answer["reason"]
