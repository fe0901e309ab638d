"""deploy/: the Kubernetes manifests validate against the Kubernetes OpenAPI schema (strict,
version K8S_VERSION, with kubernetes-validate), are wired as the issue asks (probes, PVCs,
PDBs, spread, resources), and every MAGNETAR_* variable in the manifests and in
compose.yaml is a real setting."""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Any

import pytest
import yaml

from magnetar import settings
from magnetar.bookie.main import BookieConfig
from magnetar.broker.config import BrokerConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "deploy" / "compose.yaml"
K8S_VERSION = "1.31.0"

kubernetes_validate = pytest.importorskip("kubernetes_validate")


def _kustomization() -> dict[str, Any]:
    return dict(yaml.safe_load((K8S / "kustomization.yaml").read_text()))


def _resources() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for name in _kustomization()["resources"]:
        docs.extend(d for d in yaml.safe_load_all((K8S / name).read_text()) if d)
    return docs


def _by_kind(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in _resources() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return list(workload["spec"]["template"]["spec"]["containers"])


def test_kustomization_lists_every_manifest() -> None:
    listed = set(_kustomization()["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize("doc", _resources(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_manifest_validates_against_the_kubernetes_openapi_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_an_invalid_manifest_is_refused() -> None:
    broken = _by_kind("Deployment", "broker")
    broken = {**broken, "spec": {**broken["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_brokers_are_probed_on_the_admin_port() -> None:
    (broker,) = _containers(_by_kind("Deployment", "broker"))
    ports = {p["name"]: p["containerPort"] for p in broker["ports"]}
    env = {e["name"]: e.get("value") for e in broker["env"]}
    assert ports["http"] == int(env["MAGNETAR_WEB_SERVICE_PORT"])
    for probe in ("readinessProbe", "livenessProbe"):
        assert broker[probe]["httpGet"] == {"path": "/admin/v2/brokers/health", "port": "http"}


def test_bookies_have_volumes_a_disruption_budget_and_spread() -> None:
    bookies = _by_kind("StatefulSet", "bookie")
    assert bookies["spec"]["serviceName"] == "bookie"
    assert _by_kind("Service", "bookie")["spec"]["clusterIP"] == "None"
    assert _by_kind("Service", "zookeeper")["spec"]["clusterIP"] == "None"
    (claim,) = bookies["spec"]["volumeClaimTemplates"]
    (bookie,) = _containers(bookies)
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in bookie["volumeMounts"]
    labels = bookies["spec"]["template"]["metadata"]["labels"]
    pdb = _by_kind("PodDisruptionBudget", "bookie")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    spread = bookies["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} >= {"kubernetes.io/hostname"}
    job = _by_kind("Job", "magnetar-init")
    assert _containers(job)[0]["args"][0] == "zookeeper-init"


def test_every_container_has_requests_and_a_memory_limit() -> None:
    for doc in _resources():
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            for container in _containers(doc):
                assert container["resources"]["requests"], doc["metadata"]["name"]
                assert container["resources"]["limits"]["memory"], doc["metadata"]["name"]


def _magnetar_variables(text: str) -> set[str]:
    return {v for v in re.findall(r"\bMAGNETAR_[A-Z0-9_]+", text) if not v.endswith("_")}


def test_every_magnetar_variable_in_deploy_is_a_setting() -> None:
    known = {settings.BROKER.env_name(f.name) for f in dataclasses.fields(BrokerConfig)}
    known |= {settings.BOOKIE.env_name(f.name) for f in dataclasses.fields(BookieConfig)}
    used = _magnetar_variables(COMPOSE.read_text())
    for path in K8S.glob("*.yaml"):
        used |= _magnetar_variables(path.read_text())
    assert used - known == set()


def test_compose_uses_host_networking_and_named_volumes_only() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    for name, service in compose["services"].items():
        assert service["network_mode"] == "host", name
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in compose["volumes"], (name, volume)
