"""Declarative management: manifests in, a plan per object, ``apply`` and ``diff`` out.

Owns: ``load_manifests`` (``-f FILE|DIR|-``, YAML or JSON, several documents, ``List``
unwrapped; every object checked before anything is sent: ``apiVersion``, ``kind``,
``metadata.name``, known spec fields), ``plan`` (read the live object, compare canonical
forms, return the writes that would make it so) and the comparable views ``diff`` prints.
``status`` is server-filled and ignored. Only fields the manifest names are managed: a
policy set to ``null`` is removed; a policy left out is left alone. Applying the same file
twice changes nothing the second time. Must not know: argparse, printers.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from magnetar.client.magctl.api import Api
from magnetar.client.magctl.errors import ServerError, UsageError
from magnetar.client.magctl.kinds import (
    CLUSTER_FIELDS,
    SECRET_MASK,
    TOPICS,
    position_body,
    topic_stats,
)
from magnetar.client.magctl.policyspec import (
    POLICIES,
    canonical_policies,
    read_policies,
    write_policy,
)
from magnetar.client.magctl.resources import API_VERSION, TopicName, split_namespace

KIND_ORDER = ("Cluster", "Tenant", "Namespace", "Topic", "Subscription")
_SPEC_FIELDS = {
    "Cluster": set(CLUSTER_FIELDS),
    "Tenant": {"adminRoles", "allowedClusters"},
    "Namespace": {"bundles", "replicationClusters", "policies"},
    "Topic": {"partitions", "persistent", "policies"},
    "Subscription": {"topic", "initialPosition"},
}


@dataclass(slots=True)
class Manifest:
    obj: dict[str, Any]
    source: str


def _read_source(src: str) -> list[tuple[str, str]]:
    if src == "-":
        return [("<stdin>", sys.stdin.read())]
    path = pathlib.Path(src)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
        return [(str(p), p.read_text()) for p in files]
    try:
        return [(src, path.read_text())]
    except OSError as exc:
        raise UsageError(
            f'the path "{src}" does not exist' if not path.exists() else f"cannot read {src}: {exc}"
        ) from None


def load_manifests(sources: list[str]) -> list[Manifest]:
    import yaml

    out: list[Manifest] = []
    for src in sources:
        for name, text in _read_source(src):
            try:
                docs = [d for d in yaml.safe_load_all(text) if d is not None]
            except yaml.YAMLError as exc:
                raise UsageError(f"error parsing {name}: {exc}") from None
            for doc in docs:
                out += _unwrap(doc, name)
    if not out:
        raise UsageError("no objects passed to apply")
    for m in out:
        validate(m)
    out.sort(key=lambda m: KIND_ORDER.index(m.obj["kind"]))
    return out


def _unwrap(doc: Any, source: str) -> list[Manifest]:
    if not isinstance(doc, dict):
        raise UsageError(f'error validating "{source}": a manifest must be a mapping')
    if doc.get("kind") == "List":
        items = doc.get("items")
        if not isinstance(items, list):
            raise UsageError(f'error validating "{source}": List.items must be a list')
        out: list[Manifest] = []
        for item in items:
            out += _unwrap(item, source)
        return out
    return [Manifest(doc, source)]


def validate(m: Manifest) -> None:
    obj, where = m.obj, f'error validating "{m.source}"'
    if obj.get("apiVersion") != API_VERSION:
        raise UsageError(
            f'{where}: apiVersion must be "{API_VERSION}", got {obj.get("apiVersion")!r}'
        )
    kind = obj.get("kind")
    if kind not in KIND_ORDER:
        raise UsageError(
            f'{where}: no kind "{kind}" is registered; kinds: {", ".join((*KIND_ORDER, "List"))}'
        )
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise UsageError(f"{where}: metadata.name is required")
    labels = meta.get("labels")
    if labels is not None:
        if kind not in ("Namespace", "Topic"):
            raise UsageError(
                f"{where}: metadata.labels are stored for namespaces and topics "
                f"only, not for a {kind}"
            )
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise UsageError(
                f"{where}: metadata.labels must map strings to strings (quote numbers and booleans)"
            )
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise UsageError(f"{where}: spec must be a mapping")
    unknown = set(spec) - _SPEC_FIELDS[kind]
    if unknown:
        raise UsageError(
            f"{where}: unknown field(s) in {kind}.spec: {', '.join(sorted(unknown))}"
            f" (known: {', '.join(sorted(_SPEC_FIELDS[kind]))})"
        )
    try:
        canonical_policies(spec.get("policies"), topic=kind == "Topic")
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from None


# ------------------------------------------------------------------------------- planning
Write = Callable[[], None]


@dataclass(slots=True)
class Plan:
    kind: str
    name: str
    exists: bool
    live: dict[str, Any]
    desired: dict[str, Any]
    writes: list[Write] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def changed(self) -> bool:
        return bool(self.writes)


def _view(kind: str, name: str, namespace: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}


def plan(api: Api, m: Manifest, default_namespace: str) -> Plan:
    kind = m.obj["kind"]
    return {
        "Cluster": _plan_cluster,
        "Tenant": _plan_tenant,
        "Namespace": _plan_namespace,
        "Topic": _plan_topic,
        "Subscription": _plan_subscription,
    }[kind](api, m.obj, default_namespace)


def _plan_cluster(api: Api, obj: dict[str, Any], _ns: str) -> Plan:
    """A Cluster manifest is Pulsar's ``ClusterData``: the fields it names are managed, the
    others the cluster has are kept (``POST`` replaces the whole document)."""
    name = obj["metadata"]["name"]
    desired = dict(obj.get("spec") or {})
    for key, value in desired.items():
        ok = (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
            if key == "peerClusterNames"
            else isinstance(value, bool)
            if key in ("brokerClientTlsEnabled", "tlsAllowInsecureConnection")
            else isinstance(value, str)
        )
        if not ok:
            raise UsageError(f"Cluster {name}: spec.{key} has the wrong type")
    path = f"/admin/v2/clusters/{quote(name, safe='')}"
    try:
        data = api.get(path, what=("clusters", name)) or {}
        exists = True
    except ServerError as exc:
        if exc.status != 404:
            raise
        data, exists = {}, False
    live = {k: data[k] for k in desired if k in data} if exists else {}

    def shown(spec: dict[str, Any]) -> dict[str, Any]:
        if spec.get("authenticationParameters"):
            return {**spec, "authenticationParameters": SECRET_MASK}
        return spec

    p = Plan(
        "Cluster",
        name,
        exists,
        _view("Cluster", name, None, shown(live)),
        _view("Cluster", name, None, shown(desired)),
    )
    if not exists:
        p.writes.append(lambda: api.put(path, desired, what=("clusters", name)))
    elif live != desired:
        p.writes.append(lambda: api.post(path, {**data, **desired}, what=("clusters", name)))
    return p


def _plan_tenant(api: Api, obj: dict[str, Any], _ns: str) -> Plan:
    name = obj["metadata"]["name"]
    spec = obj.get("spec") or {}
    path = f"/admin/v2/tenants/{quote(name, safe='')}"
    desired: dict[str, Any] = {}
    for key in ("adminRoles", "allowedClusters"):
        if key in spec:
            v = spec[key] or []
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise UsageError(f"Tenant {name}: spec.{key} must be a list of strings")
            desired[key] = sorted(v)
    try:
        info = api.get(path, what=("tenants", name)) or {}
        exists = True
    except ServerError as exc:
        if exc.status != 404:
            raise
        info, exists = {}, False
    live = {k: sorted(info.get(k) or []) for k in desired} if exists else {}
    p = Plan(
        "Tenant",
        name,
        exists,
        _view("Tenant", name, None, live),
        _view("Tenant", name, None, desired),
    )
    body = {
        "adminRoles": desired.get("adminRoles", sorted(info.get("adminRoles") or [])),
        "allowedClusters": desired.get("allowedClusters")
        or sorted(info.get("allowedClusters") or [])
        or [api.cluster()],
    }
    if not exists:
        p.writes.append(lambda: api.put(path, body, what=("tenants", name)))
    elif live != desired:
        p.writes.append(lambda: api.post(path, body, what=("tenants", name)))
    return p


def _policy_writes(api: Api, p: Plan, base: str, wanted: dict[str, Any], exists: bool) -> None:
    live = read_policies(api.get, base, list(wanted)) if exists else dict.fromkeys(wanted)
    p.live["spec"]["policies"] = {k: v for k, v in live.items() if v is not None}
    p.desired["spec"]["policies"] = {k: v for k, v in wanted.items() if v is not None}
    if not p.live["spec"]["policies"]:
        del p.live["spec"]["policies"]
    if not p.desired["spec"]["policies"]:
        del p.desired["spec"]["policies"]
    for key, value in wanted.items():
        if live.get(key) != value:
            p.writes.append(_policy_write(api, base, key, live.get(key), value))


def _policy_write(api: Api, base: str, key: str, live: Any, wanted: Any) -> Write:
    def write() -> None:
        write_policy(api.post, api.delete, base, key, live=live, wanted=wanted)

    return write


def _label_writes(
    api: Api, p: Plan, obj: dict[str, Any], base: str, exists: bool, *, namespace: bool
) -> None:
    """``metadata.labels`` are the object's Pulsar properties; when the manifest names them,
    the live set is made equal (extra keys removed)."""
    wanted = obj["metadata"].get("labels")
    if wanted is None:
        return
    live = (api.try_get(f"{base}/properties") or {}) if exists else {}
    if live:
        p.live["metadata"]["labels"] = dict(sorted(live.items()))
    if wanted:
        p.desired["metadata"]["labels"] = dict(sorted(wanted.items()))
    if live == wanted:
        return
    extra = sorted(set(live) - set(wanted))

    def write() -> None:
        if namespace and extra:
            api.delete(f"{base}/properties")
        elif extra:
            for key in extra:
                api.delete(f"{base}/properties", key=key)
        if wanted:
            api.put(f"{base}/properties", wanted)

    p.writes.append(write)


def _namespace_name(obj: dict[str, Any]) -> str:
    name = obj["metadata"]["name"]
    if "/" not in name and obj["metadata"].get("namespace"):
        name = f"{obj['metadata']['namespace']}/{name}"
    split_namespace(name)
    return str(name)


def _plan_namespace(api: Api, obj: dict[str, Any], _ns: str) -> Plan:
    name = _namespace_name(obj)
    tenant, ns = split_namespace(name)
    spec = obj.get("spec") or {}
    base = f"/admin/v2/namespaces/{tenant}/{ns}"
    wanted = canonical_policies(spec.get("policies"))
    try:
        raw = api.get(base, what=("namespaces", name)) or {}
        exists = True
    except ServerError as exc:
        if exc.status != 404:
            raise
        raw, exists = {}, False
    live_spec: dict[str, Any] = {}
    desired_spec: dict[str, Any] = {}
    p = Plan(
        "Namespace",
        name,
        exists,
        _view("Namespace", name, None, live_spec),
        _view("Namespace", name, None, desired_spec),
    )
    if "bundles" in spec:
        bundles = spec["bundles"]
        if isinstance(bundles, bool) or not isinstance(bundles, int) or bundles < 1:
            raise UsageError(f"Namespace {name}: spec.bundles must be a positive integer")
        desired_spec["bundles"] = bundles
        if exists:
            live_spec["bundles"] = (raw.get("bundles") or {}).get("numBundles")
            if live_spec["bundles"] != bundles:
                p.warnings.append(
                    f"namespace/{name}: spec.bundles cannot change after "
                    "creation (split bundles instead); left at "
                    f"{live_spec['bundles']}"
                )
                desired_spec["bundles"] = live_spec["bundles"]
    if not exists:
        body = {"bundles": {"numBundles": spec["bundles"]}} if "bundles" in spec else {}
        p.writes.append(lambda: api.put(base, body, what=("namespaces", name)))
    if "replicationClusters" in spec:
        clusters = spec["replicationClusters"]
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise UsageError(f"Namespace {name}: spec.replicationClusters must be a list")
        desired_spec["replicationClusters"] = sorted(set(clusters))
        if exists:
            live_spec["replicationClusters"] = sorted(raw.get("replication_clusters") or [])
        if live_spec.get("replicationClusters") != desired_spec["replicationClusters"]:
            wanted_clusters = desired_spec["replicationClusters"]
            p.writes.append(
                lambda: api.post(f"{base}/replication", wanted_clusters, what=("namespaces", name))
            )
    _policy_writes(api, p, base, wanted, exists)
    _label_writes(api, p, obj, base, exists, namespace=True)
    return p


def _topic_name(obj: dict[str, Any], default_namespace: str) -> TopicName:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    ns = meta.get("namespace") or default_namespace
    tn = TopicName.parse(meta["name"], ns)
    if spec.get("persistent") is False and "://" not in meta["name"]:
        tn = TopicName("non-persistent", tn.tenant, tn.namespace, tn.local)
    return tn


def _plan_topic(api: Api, obj: dict[str, Any], default_namespace: str) -> Plan:
    tn = _topic_name(obj, default_namespace)
    spec = obj.get("spec") or {}
    partitions = spec.get("partitions", 0)
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 0:
        raise UsageError(f"Topic {tn.full}: spec.partitions must be 0 (not partitioned) or more")
    wanted = canonical_policies(spec.get("policies"), topic=True)
    live_n = TOPICS.partitions_of(api, tn)
    exists = live_n is not None
    live_spec: dict[str, Any] = {"partitions": live_n} if exists else {}
    desired_spec: dict[str, Any] = {"partitions": partitions}
    p = Plan(
        "Topic",
        tn.full,
        exists,
        _view("Topic", tn.local, tn.ns, live_spec),
        _view("Topic", tn.local, tn.ns, desired_spec),
    )
    what = ("topics", tn.full)
    if not exists:
        if partitions > 0:
            p.writes.append(
                lambda: api.put(f"/admin/v2/{tn.path}/partitions", partitions, what=what)
            )
        else:
            p.writes.append(lambda: api.put(f"/admin/v2/{tn.path}", what=what))
    elif live_n != partitions:
        if live_n == 0 or partitions == 0:
            raise UsageError(
                f"Topic {tn.full}: cannot change between partitioned and not "
                f"partitioned (live partitions: {live_n})"
            )
        if partitions < (live_n or 0):
            raise UsageError(
                f"Topic {tn.full}: partitions can only grow ({live_n} -> {partitions})"
            )
        p.writes.append(lambda: api.post(f"/admin/v2/{tn.path}/partitions", partitions, what=what))
    if wanted:
        if not tn.persistent:
            raise UsageError(f"Topic {tn.full}: policies apply to persistent topics")
        _policy_writes(api, p, f"/admin/v2/{tn.path}", wanted, exists)
    _label_writes(api, p, obj, f"/admin/v2/{tn.path}", exists, namespace=False)
    return p


def _plan_subscription(api: Api, obj: dict[str, Any], default_namespace: str) -> Plan:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    name = meta["name"]
    if not isinstance(spec.get("topic"), str):
        raise UsageError(f"Subscription {name}: spec.topic is required")
    tn = TopicName.parse(spec["topic"], meta.get("namespace") or default_namespace)
    position = spec.get("initialPosition", "latest")
    body = position_body(str(position))
    n = TOPICS.partitions_of(api, tn)
    subs: list[str] = []
    if n is not None:
        subs = list(topic_stats(api, tn, n).get("subscriptions") or {})
    exists = name in subs
    desired = {"topic": tn.full}
    p = Plan(
        "Subscription",
        name,
        exists,
        _view("Subscription", name, tn.ns, desired if exists else {}),
        _view("Subscription", name, tn.ns, desired),
    )
    if not exists:
        p.writes.append(
            lambda: api.put(
                f"/admin/v2/{tn.path}/subscription/{quote(name, safe='')}",
                body,
                what=("subscriptions", name),
            )
        )
    return p


__all__ = ["KIND_ORDER", "POLICIES", "Manifest", "Plan", "load_manifests", "plan", "validate"]
