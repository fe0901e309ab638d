"""Each resource type as objects: how to list, get, create and delete it over the admin API.

Owns: ``KINDS`` (resource plural -> ``Kind``) and the object form every verb and printer
works on, kubectl's shape: ``{apiVersion, kind, metadata: {name, namespace, labels}, spec,
status}``; ``status`` is what the server reports (stats) and is never applied. Table columns
(``columns(wide)``) are declared here next to the object they read. Must not know: argparse,
output formats, manifests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from magnetar.client.magctl.api import Api, Scope
from magnetar.client.magctl.errors import ServerError, UsageError
from magnetar.client.magctl.policyspec import POLICIES, TOPIC_POLICIES, read_policies
from magnetar.client.magctl.resources import (
    API_VERSION,
    DOMAINS,
    TopicName,
    split_namespace,
)
from magnetar.client.magctl.units import format_duration_s, human_bytes

Obj = dict[str, Any]
Column = tuple[str, Callable[[Obj], Any]]


def make(
    kind: str,
    name: str,
    namespace: str | None = None,
    *,
    spec: Any = None,
    status: Any = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    obj: Obj = {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata}
    if spec is not None:
        obj["spec"] = spec
    if status is not None:
        obj["status"] = status
    return obj


def dig(obj: Any, *path: str, default: Any = None) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    return obj


def _list_or_str(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(str(x) for x in v) if v else "<none>"
    return "<none>" if v is None else str(v)


class Kind:
    """One resource type; subclasses fill in what the admin API allows."""

    plural = ""

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        raise UsageError(f'"{self.plural}" cannot be listed')

    def get(self, api: Api, name: str, scope: Scope, *, full: bool) -> Obj:
        for obj in self.list_all(api, scope, full=full):
            if self.key(obj) == name or obj["metadata"]["name"] == name:
                return obj
        raise ServerError(404, f'{self.plural} "{name}" not found')

    def key(self, obj: Obj) -> str:
        """The name ``-o name`` prints and ``get TYPE NAME`` accepts."""
        return str(obj["metadata"]["name"])

    def columns(self, wide: bool) -> list[Column]:
        return [("NAME", self.key)]

    def create(self, api: Api, name: str, scope: Scope, opts: dict[str, Any]) -> None:
        raise UsageError(f'"{self.plural}" cannot be created with magctl')

    def delete(self, api: Api, name: str, scope: Scope, *, force: bool) -> None:
        raise UsageError(f'"{self.plural}" cannot be deleted with magctl')


# ---------------------------------------------------------------------------------- clusters
class Clusters(Kind):
    plural = "clusters"

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        return [self.get(api, str(c), scope, full=full) for c in api.get("/admin/v2/clusters")]

    def get(self, api: Api, name: str, scope: Scope, *, full: bool) -> Obj:
        names = api.get("/admin/v2/clusters") or []
        if name not in names:
            raise ServerError(404, f'clusters "{name}" not found')
        data = api.try_get(f"/admin/v2/clusters/{quote(name, safe='')}") or {}
        return make("Cluster", name, spec=cluster_spec(data))

    def columns(self, wide: bool) -> list[Column]:
        return [
            ("NAME", self.key),
            ("ADMIN-URL", lambda o: dig(o, "spec", "serviceUrl") or "<none>"),
            ("SERVICE-URL", lambda o: dig(o, "spec", "brokerServiceUrl") or "<none>"),
        ]

    def create(self, api: Api, name: str, scope: Scope, opts: dict[str, Any]) -> None:
        body = {
            key: opts[flag]
            for flag, key in (
                ("url", "serviceUrl"),
                ("url_tls", "serviceUrlTls"),
                ("broker_url", "brokerServiceUrl"),
                ("broker_url_tls", "brokerServiceUrlTls"),
            )
            if opts.get(flag)
        }
        if not body.get("brokerServiceUrl") and not body.get("brokerServiceUrlTls"):
            raise UsageError("create cluster: --broker-url (or --broker-url-tls) is required")
        api.put(f"/admin/v2/clusters/{quote(name, safe='')}", body, what=("clusters", name))

    def delete(self, api: Api, name: str, scope: Scope, *, force: bool) -> None:
        api.delete(f"/admin/v2/clusters/{quote(name, safe='')}", what=("clusters", name))


CLUSTER_FIELDS = (
    "serviceUrl",
    "serviceUrlTls",
    "brokerServiceUrl",
    "brokerServiceUrlTls",
    "authenticationPlugin",
    "authenticationParameters",
    "brokerClientTlsEnabled",
    "tlsAllowInsecureConnection",
    "brokerClientTrustCertsFilePath",
    "brokerClientCertificateFilePath",
    "brokerClientKeyFilePath",
    "listenerName",
    "peerClusterNames",
)
"""The ``ClusterData`` fields a Cluster's spec holds (Pulsar's names)."""
SECRET_MASK = "******"


def cluster_spec(data: dict[str, Any], *, reveal: bool = False) -> dict[str, Any]:
    """A Cluster's spec from its ``ClusterData``: the URLs always, other fields when set;
    ``authenticationParameters`` masked unless ``reveal``."""
    spec: dict[str, Any] = {k: data.get(k) or "" for k in CLUSTER_FIELDS[:4]}
    for key in CLUSTER_FIELDS[4:]:
        value = data.get(key)
        if value not in (None, "", False, []):
            spec[key] = value
    if spec.get("authenticationParameters") and not reveal:
        spec["authenticationParameters"] = SECRET_MASK
    return spec


# ----------------------------------------------------------------------------------- tenants
class Tenants(Kind):
    plural = "tenants"

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        return [self.get(api, t, scope, full=full) for t in sorted(api.get("/admin/v2/tenants"))]

    def get(self, api: Api, name: str, scope: Scope, *, full: bool) -> Obj:
        info = api.get(f"/admin/v2/tenants/{quote(name, safe='')}", what=("tenants", name)) or {}
        spec = {
            "adminRoles": sorted(info.get("adminRoles") or []),
            "allowedClusters": sorted(info.get("allowedClusters") or []),
        }
        return make("Tenant", name, spec=spec)

    def columns(self, wide: bool) -> list[Column]:
        return [
            ("NAME", self.key),
            ("ADMIN-ROLES", lambda o: _list_or_str(dig(o, "spec", "adminRoles"))),
            ("ALLOWED-CLUSTERS", lambda o: _list_or_str(dig(o, "spec", "allowedClusters"))),
        ]

    def create(self, api: Api, name: str, scope: Scope, opts: dict[str, Any]) -> None:
        clusters = opts.get("allowed_clusters") or [api.cluster()]
        body = {"adminRoles": opts.get("admin_roles") or [], "allowedClusters": clusters}
        api.put(f"/admin/v2/tenants/{quote(name, safe='')}", body, what=("tenants", name))

    def delete(self, api: Api, name: str, scope: Scope, *, force: bool) -> None:
        q = {"force": True} if force else {}
        api.delete(f"/admin/v2/tenants/{quote(name, safe='')}", what=("tenants", name), **q)


# -------------------------------------------------------------------------------- namespaces
class Namespaces(Kind):
    plural = "namespaces"

    def _names(self, api: Api, scope: Scope) -> list[str]:
        if scope.namespace_explicit:
            tenants = [scope.namespace.split("/")[0]]
        else:
            tenants = sorted(api.get("/admin/v2/tenants"))
        names: list[str] = []
        for t in tenants:
            names += api.get(f"/admin/v2/namespaces/{quote(t, safe='')}", what=("tenants", t))
        return sorted(names)

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        return [self.get(api, n, scope, full=full) for n in self._names(api, scope)]

    def get(self, api: Api, name: str, scope: Scope, *, full: bool) -> Obj:
        tenant, ns = split_namespace(name)
        base = f"/admin/v2/namespaces/{tenant}/{ns}"
        raw = api.get(base, what=("namespaces", name)) or {}
        bundles = dig(raw, "bundles", "numBundles", default=0)
        spec: dict[str, Any] = {"bundles": bundles}
        if raw.get("replication_clusters"):
            spec["replicationClusters"] = sorted(raw["replication_clusters"])
        if full:
            policies = read_policies(api.get, base, list(POLICIES))
            spec["policies"] = {k: v for k, v in policies.items() if v is not None}
        else:  # the table's few columns come from the one Policies document
            spec["policies"] = {
                k: v
                for k, v in (
                    (
                        "messageTTL",
                        POLICIES["messageTTL"].from_server(raw.get("message_ttl_in_seconds")),
                    ),
                    ("retention", POLICIES["retention"].from_server(raw.get("retention_policies"))),
                )
                if v is not None
            }
        labels = api.try_get(f"{base}/properties")
        return make(
            "Namespace", name, spec=spec, labels=labels if isinstance(labels, dict) else None
        )

    def columns(self, wide: bool) -> list[Column]:
        cols: list[Column] = [
            ("NAME", self.key),
            ("BUNDLES", lambda o: dig(o, "spec", "bundles")),
            ("MESSAGE-TTL", lambda o: dig(o, "spec", "policies", "messageTTL") or "<none>"),
        ]
        if wide:
            cols.append(
                ("RETENTION", lambda o: _retention_str(dig(o, "spec", "policies", "retention")))
            )
            cols.append(("LABELS", lambda o: _labels_str(dig(o, "metadata", "labels"))))
        return cols

    def create(self, api: Api, name: str, scope: Scope, opts: dict[str, Any]) -> None:
        tenant, ns = split_namespace(name)
        body: dict[str, Any] = {}
        if opts.get("bundles"):
            body["bundles"] = {"numBundles": int(opts["bundles"])}
        api.put(f"/admin/v2/namespaces/{tenant}/{ns}", body, what=("namespaces", name))

    def delete(self, api: Api, name: str, scope: Scope, *, force: bool) -> None:
        tenant, ns = split_namespace(name)
        q = {"force": True} if force else {}
        api.delete(f"/admin/v2/namespaces/{tenant}/{ns}", what=("namespaces", name), **q)


def _labels_str(labels: Any) -> str:
    if not isinstance(labels, dict) or not labels:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _retention_str(r: Any) -> str:
    if not isinstance(r, dict):
        return "<none>"
    return f"{r.get('time')}/{r.get('size')}"


# ------------------------------------------------------------------------------------ topics
def topic_stats(api: Api, tn: TopicName, partitions: int) -> dict[str, Any]:
    """The topic's stats (summed over partitions for a partitioned topic); {} if unloaded."""
    if partitions > 0:
        data = api.try_get(f"/admin/v2/{tn.path}/partitioned-stats")
        if data is not None:
            return dict(data)
        merged: dict[str, Any] = {"publishers": [], "subscriptions": {}}
        for i in range(partitions):
            part = api.try_get(f"/admin/v2/{tn.partition(i).path}/stats") or {}
            for key in ("msgInCounter", "bytesInCounter", "storageSize", "msgOutCounter"):
                merged[key] = merged.get(key, 0) + int(part.get(key, 0))
            merged["publishers"] += part.get("publishers") or []
            for sub, s in (part.get("subscriptions") or {}).items():
                into = merged["subscriptions"].setdefault(
                    sub, {**s, "msgBacklog": 0, "consumers": []}
                )
                into["msgBacklog"] += int(s.get("msgBacklog", 0))
                into["consumers"] += s.get("consumers") or []
        return merged
    return api.try_get(f"/admin/v2/{tn.path}/stats") or {}


def _summary(stats: dict[str, Any]) -> dict[str, Any]:
    subs = stats.get("subscriptions") or {}
    return {
        "producers": len(stats.get("publishers") or []),
        "subscriptions": len(subs),
        "backlog": sum(int(s.get("msgBacklog", 0)) for s in subs.values()),
        "storageSize": int(stats.get("storageSize", 0)),
        **(
            {"offloadedStorageSize": int(stats["offloadedStorageSize"])}
            if "offloadedStorageSize" in stats
            else {}
        ),
        "msgInCounter": int(stats.get("msgInCounter", 0)),
        "bytesInCounter": int(stats.get("bytesInCounter", 0)),
    }


def _offload_status(raw: Any) -> dict[str, Any] | None:
    """The last manual offload (Pulsar's OffloadProcessStatus), for ``describe``."""
    if not isinstance(raw, dict) or "status" not in raw:
        return None
    out: dict[str, Any] = {"status": raw["status"]}
    if raw.get("lastError"):
        out["lastError"] = raw["lastError"]
    first = raw.get("firstUnoffloadedMessage") or {}
    if int(first.get("ledgerId", -1)) >= 0:
        out["firstUnoffloadedMessage"] = f"{first['ledgerId']}:{first.get('entryId', 0)}"
    return out


class Topics(Kind):
    plural = "topics"

    def key(self, obj: Obj) -> str:
        return str(dig(obj, "status", "fullName") or obj["metadata"]["name"])

    def names(self, api: Api, ns: str) -> dict[str, int]:
        """Full topic name -> partitions (0 = not partitioned) of namespace ``ns``."""
        tenant, local_ns = split_namespace(ns)
        out: dict[str, int] = {}
        what = ("namespaces", ns)
        for domain in DOMAINS:
            base = f"/admin/v2/{domain}/{tenant}/{local_ns}"
            parted = (
                api.try_get(base + "/partitioned")
                if domain != "persistent"
                else api.get(base + "/partitioned", what=what)
            )
            for name in parted or []:
                tn = TopicName.parse(name)
                meta = api.try_get(f"/admin/v2/{tn.path}/partitions") or {}
                out[tn.full] = int(meta.get("partitions", 0))
            plain = api.try_get(base) if domain != "persistent" else api.get(base, what=what)
            for name in plain or []:
                tn = TopicName.parse(name)
                idx = tn.partition_index
                if idx >= 0:
                    parent = tn.full[: -len(f"-partition-{idx}")]
                    if parent in out:
                        continue
                out.setdefault(tn.full, 0)
        return out

    def _obj(self, api: Api, tn: TopicName, partitions: int, *, full: bool) -> Obj:
        spec: dict[str, Any] = {"persistent": tn.persistent, "partitions": partitions}
        status: dict[str, Any] = {"fullName": tn.full}
        status.update(_summary(topic_stats(api, tn, partitions)))
        if full:
            base = f"/admin/v2/{tn.path}"
            try:
                policies = read_policies(api.get, base, TOPIC_POLICIES)
            except ServerError:
                policies = {}
            spec["policies"] = {k: v for k, v in policies.items() if v is not None}
            if tn.persistent and partitions == 0:
                offload = _offload_status(api.try_get(f"{base}/offload"))
                if offload is not None:
                    status["offload"] = offload
        labels = api.try_get(f"/admin/v2/{tn.path}/properties")
        return make(
            "Topic",
            tn.local,
            tn.ns,
            spec=spec,
            status=status,
            labels=labels if isinstance(labels, dict) else None,
        )

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        return [
            self._obj(api, TopicName.parse(name), n, full=full)
            for name, n in sorted(self.names(api, scope.namespace).items())
        ]

    def partitions_of(self, api: Api, tn: TopicName) -> int | None:
        """Partitions of ``tn`` (0 = not partitioned), None when no such topic exists."""
        meta = api.try_get(f"/admin/v2/{tn.path}/partitions") or {}
        n = int(meta.get("partitions", 0))
        if n > 0:
            return n
        try:
            names = self.names(api, tn.ns)
        except ServerError as exc:
            if exc.status == 404:  # no such namespace (or tenant)
                return None
            raise
        return 0 if tn.full in names else None

    def get(self, api: Api, name: str, scope: Scope, *, full: bool) -> Obj:
        tn = TopicName.parse(name, scope.namespace)
        n = self.partitions_of(api, tn)
        if n is None:
            raise ServerError(404, f'topics "{tn.full}" not found')
        return self._obj(api, tn, n, full=full)

    def columns(self, wide: bool) -> list[Column]:
        cols: list[Column] = [
            ("NAME", lambda o: o["metadata"]["name"]),
            ("PARTITIONS", lambda o: dig(o, "spec", "partitions")),
            ("PERSISTENT", lambda o: str(dig(o, "spec", "persistent")).lower()),
            ("PRODUCERS", lambda o: dig(o, "status", "producers", default=0)),
            ("SUBSCRIPTIONS", lambda o: dig(o, "status", "subscriptions", default=0)),
            ("BACKLOG", lambda o: dig(o, "status", "backlog", default=0)),
            ("STORAGE", lambda o: human_bytes(dig(o, "status", "storageSize", default=0))),
        ]
        if wide:
            cols += [
                ("MSG-IN", lambda o: dig(o, "status", "msgInCounter", default=0)),
                ("BYTES-IN", lambda o: dig(o, "status", "bytesInCounter", default=0)),
                ("LABELS", lambda o: _labels_str(dig(o, "metadata", "labels"))),
                ("FULL-NAME", self.key),
            ]
        return cols

    def create(self, api: Api, name: str, scope: Scope, opts: dict[str, Any]) -> None:
        tn = TopicName.parse(name, scope.namespace)
        n = int(opts.get("partitions") or 0)
        what = ("topics", tn.full)
        if n > 0:
            api.put(f"/admin/v2/{tn.path}/partitions", n, what=what)
        else:
            api.put(f"/admin/v2/{tn.path}", what=what)

    def delete(self, api: Api, name: str, scope: Scope, *, force: bool) -> None:
        tn = TopicName.parse(name, scope.namespace)
        n = self.partitions_of(api, tn)
        q = {"force": True} if force else {}
        what = ("topics", tn.full)
        if n is None:
            raise ServerError(404, f'topics "{tn.full}" not found')
        if n > 0:
            api.delete(f"/admin/v2/{tn.path}/partitions", what=what, **q)
        else:
            api.delete(f"/admin/v2/{tn.path}", what=what, **q)


TOPICS = Topics()


def _scope_topics(api: Api, scope: Scope) -> dict[str, int]:
    if scope.topic:
        tn = TopicName.parse(scope.topic, scope.namespace)
        n = TOPICS.partitions_of(api, tn)
        if n is None:
            raise ServerError(404, f'topics "{tn.full}" not found')
        return {tn.full: n}
    return TOPICS.names(api, scope.namespace)


# ------------------------------------------------------------------------------ partitions
class Partitions(Kind):
    plural = "partitions"

    def key(self, obj: Obj) -> str:
        return str(dig(obj, "status", "fullName") or obj["metadata"]["name"])

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        out = []
        for name, n in sorted(_scope_topics(api, scope).items()):
            parent = TopicName.parse(name)
            for i in range(n):
                tn = parent.partition(i)
                status = {"fullName": tn.full, **_summary(topic_stats(api, tn, 0))}
                out.append(
                    make(
                        "Partition",
                        tn.local,
                        tn.ns,
                        spec={"topic": parent.full, "index": i},
                        status=status,
                    )
                )
        return out

    def columns(self, wide: bool) -> list[Column]:
        cols = [c for c in TOPICS.columns(wide) if c[0] not in ("PARTITIONS", "PERSISTENT")]
        return [cols[0], ("TOPIC", lambda o: dig(o, "spec", "topic")), *cols[1:]]


# --------------------------------------------------------------------------- subscriptions
class Subscriptions(Kind):
    plural = "subscriptions"

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        out = []
        for name, n in sorted(_scope_topics(api, scope).items()):
            tn = TopicName.parse(name)
            subs = topic_stats(api, tn, n).get("subscriptions") or {}
            for sub in sorted(subs):
                s = subs[sub]
                status = {
                    "type": s.get("type", "None"),
                    "msgBacklog": int(s.get("msgBacklog", 0)),
                    "consumers": len(s.get("consumers") or []),
                    "unackedMessages": int(s.get("unackedMessages", 0)),
                    "isDurable": bool(s.get("isDurable", True)),
                }
                for k in ("markDeletePosition", "readPosition"):
                    if k in s:
                        status[k] = s[k]
                out.append(make("Subscription", sub, tn.ns, spec={"topic": tn.full}, status=status))
        return out

    def get(self, api: Api, name: str, scope: Scope, *, full: bool) -> Obj:
        found = [o for o in self.list_all(api, scope, full=full) if o["metadata"]["name"] == name]
        if not found:
            raise ServerError(404, f'subscriptions "{name}" not found')
        if len(found) > 1:
            topics = ", ".join(dig(o, "spec", "topic") for o in found)
            raise UsageError(
                f'subscription "{name}" exists on several topics ({topics}): name one with --topic'
            )
        return found[0]

    def columns(self, wide: bool) -> list[Column]:
        cols: list[Column] = [
            ("NAME", self.key),
            ("TOPIC", lambda o: dig(o, "spec", "topic")),
            ("TYPE", lambda o: dig(o, "status", "type")),
            ("BACKLOG", lambda o: dig(o, "status", "msgBacklog")),
            ("CONSUMERS", lambda o: dig(o, "status", "consumers")),
        ]
        if wide:
            cols += [
                ("UNACKED", lambda o: dig(o, "status", "unackedMessages")),
                ("MARK-DELETE", lambda o: dig(o, "status", "markDeletePosition") or "<none>"),
                ("DURABLE", lambda o: str(dig(o, "status", "isDurable")).lower()),
            ]
        return cols

    def _topic(self, scope: Scope) -> TopicName:
        if not scope.topic:
            raise UsageError("a subscription belongs to a topic: give --topic TOPIC")
        return TopicName.parse(scope.topic, scope.namespace)

    def create(self, api: Api, name: str, scope: Scope, opts: dict[str, Any]) -> None:
        tn = self._topic(scope)
        position = opts.get("position") or "latest"
        body = position_body(position)
        api.put(
            f"/admin/v2/{tn.path}/subscription/{quote(name, safe='')}",
            body,
            what=("subscriptions", name),
        )

    def delete(self, api: Api, name: str, scope: Scope, *, force: bool) -> None:
        tn = self._topic(scope)
        q = {"force": True} if force else {}
        api.delete(
            f"/admin/v2/{tn.path}/subscription/{quote(name, safe='')}",
            what=("subscriptions", name),
            **q,
        )


def position_body(position: str) -> dict[str, int]:
    """Pulsar's MessageId JSON for ``earliest``, ``latest`` or ``L:E``."""
    if position == "latest":
        return {"ledgerId": 9223372036854775807, "entryId": 9223372036854775807}
    if position == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    parts = position.split(":")
    if len(parts) == 2 and all(p.lstrip("-").isdigit() for p in parts):
        return {"ledgerId": int(parts[0]), "entryId": int(parts[1])}
    raise UsageError(f'invalid position "{position}": earliest, latest or LEDGER:ENTRY')


# ------------------------------------------------------------------------------- bundles
class Bundles(Kind):
    plural = "bundles"

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        tenant, ns = split_namespace(scope.namespace)
        data = (
            api.get(
                f"/admin/v2/namespaces/{tenant}/{ns}/bundles", what=("namespaces", scope.namespace)
            )
            or {}
        )
        bounds = data.get("boundaries") or []
        out = []
        for lo, hi in itertools.pairwise(bounds):
            out.append(make("Bundle", f"{lo}_{hi}", scope.namespace, spec={"range": [lo, hi]}))
        return out

    def columns(self, wide: bool) -> list[Column]:
        return [("NAME", self.key), ("NAMESPACE", lambda o: dig(o, "metadata", "namespace"))]


# ------------------------------------------------------------------------------- brokers
class Brokers(Kind):
    plural = "brokers"

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        cluster = api.cluster()
        names = api.get(f"/admin/v2/brokers/{quote(cluster, safe='')}")
        return [make("Broker", str(b), spec={"cluster": cluster}) for b in sorted(names or [])]

    def columns(self, wide: bool) -> list[Column]:
        return [("NAME", self.key), ("CLUSTER", lambda o: dig(o, "spec", "cluster"))]


# -------------------------------------------------------------------------------- bookies
class Bookies(Kind):
    plural = "bookies"

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        data = api.get("/admin/v2/bookies/all") or {}
        out = []
        for b in data.get("bookies") or []:
            bid = b.get("bookieId") if isinstance(b, dict) else str(b)
            out.append(make("Bookie", str(bid), status=b if isinstance(b, dict) else {}))
        return out

    def columns(self, wide: bool) -> list[Column]:
        cols: list[Column] = [
            ("NAME", self.key),
            ("STATE", lambda o: dig(o, "status", "state") or "<none>"),
        ]
        if wide:
            cols.append(("HTTP-PORT", lambda o: dig(o, "status", "httpPort") or "<none>"))
        return cols


# -------------------------------------------------------------------------------- ledgers
class Ledgers(Kind):
    plural = "ledgers"

    def list_all(self, api: Api, scope: Scope, *, full: bool) -> list[Obj]:
        if not scope.topic:
            raise UsageError("ledgers belong to a topic: give --topic TOPIC")
        tn = TopicName.parse(scope.topic, scope.namespace)
        stats = api.get(f"/admin/v2/{tn.path}/internalStats", what=("topics", tn.full)) or {}
        return [
            make("Ledger", str(lg.get("ledgerId")), tn.ns, spec={"topic": tn.full}, status=lg)
            for lg in stats.get("ledgers") or []
        ]

    def columns(self, wide: bool) -> list[Column]:
        return [
            ("NAME", self.key),
            ("TOPIC", lambda o: dig(o, "spec", "topic")),
            ("ENTRIES", lambda o: dig(o, "status", "entries", default=0)),
            ("SIZE", lambda o: human_bytes(dig(o, "status", "size", default=0))),
        ]


KINDS: dict[str, Kind] = {
    "clusters": Clusters(),
    "tenants": Tenants(),
    "namespaces": Namespaces(),
    "topics": TOPICS,
    "partitions": Partitions(),
    "subscriptions": Subscriptions(),
    "bundles": Bundles(),
    "brokers": Brokers(),
    "bookies": Bookies(),
    "ledgers": Ledgers(),
}


__all__ = [
    "CLUSTER_FIELDS",
    "KINDS",
    "SECRET_MASK",
    "Kind",
    "Obj",
    "cluster_spec",
    "dig",
    "format_duration_s",
    "make",
    "position_body",
    "topic_stats",
]
