"""Admin REST of the cluster: bundles (split, unload), brokers, the load-manager leader, load
reports and ownership, with Pulsar's paths and JSON shapes.

Owns the routes and their translation to ``BrokerCluster``/``BrokerService`` calls:
- ``PUT /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split?unload=&splitAlgorithmName=``
  (body: a JSON list of positions for ``specified_positions_divide``),
- ``GET /admin/v2/brokers/{cluster}``, ``GET /admin/v2/brokers/leaderBroker``,
- ``GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces``,
- ``GET /admin/v2/broker-stats/load-report``.
A request for a bundle another broker owns answers 307 to that broker, as Pulsar does.
Must not know: aiohttp's app set-up (``http_api`` registers these before the topic routes).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.admin.http_guard import read_json
from magnetar.broker.loadbalance import SplitAlgorithm, SplitError
from magnetar.broker.namespace.bundles import BundleRange
from magnetar.broker.namespace.ownership import NamespaceBundle
from magnetar.broker.namespace.resources import (
    InvalidResource,
    PreconditionFailed,
    ResourceNotFound,
)

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type="application/json"
    )


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() in ("true", "1", "yes")


def _positions(body: Any) -> list[int]:
    if body is None:
        return []
    if not isinstance(body, list):
        raise InvalidResource("split boundaries must be a JSON list")
    out = []
    for p in body:
        if isinstance(p, int) and not isinstance(p, bool):
            out.append(p)
        elif isinstance(p, str) and p.lower().startswith("0x"):
            try:
                out.append(int(p, 16))
            except ValueError:
                raise InvalidResource(f"invalid split boundary {p!r}") from None
        else:
            raise InvalidResource(f"invalid split boundary {p!r}: a number or 0x-hex")
    return out


class ClusterApi:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    def register(self, r: web.UrlDispatcher) -> None:
        ns = "/admin/v2/namespaces/{tenant}/{namespace}/{bundle:0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}}"
        r.add_put(ns + "/split", self.split_bundle)
        r.add_get("/admin/v2/brokers/leaderBroker", self.leader_broker)
        r.add_get("/admin/v2/broker-stats/load-report", self.load_report)
        r.add_get("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", self.owned_namespaces)
        r.add_get("/admin/v2/brokers/{cluster}", self.list_brokers)

    # -- helpers --

    async def _bundle(self, request: web.Request) -> NamespaceBundle:
        m = request.match_info
        if not await self.service.resources.namespace_exists(m["tenant"], m["namespace"]):
            raise ResourceNotFound("Namespace does not exist")
        try:
            rng = BundleRange.parse(m["bundle"])
        except ValueError as exc:
            raise PreconditionFailed(str(exc)) from None
        bundles = await self.service.resources.bundles(m["tenant"], m["namespace"])
        if rng not in bundles.ranges:
            raise ResourceNotFound(
                f"Namespace bundle {m['tenant']}/{m['namespace']}/{rng} does not exist"
            )
        return NamespaceBundle(m["tenant"], m["namespace"], rng)

    async def _owned_here_or_redirect(self, request: web.Request, bundle: NamespaceBundle) -> None:
        """Return when this broker owns ``bundle`` (taking it when nobody does, as Pulsar's
        owner validation does); else redirect (307) to the owner."""
        ownership = self.service.namespaces.ownership
        assert ownership is not None
        if ownership.is_owned(bundle):
            return
        owner = await ownership.get_owner(bundle)
        if owner is None:
            owner = await ownership.try_acquire(bundle)
            if owner is ownership.me:
                return
        raise web.HTTPTemporaryRedirect(owner.http_url.rstrip("/") + str(request.rel_url))

    # -- bundles --

    async def split_bundle(self, request: web.Request) -> web.Response:
        """Pulsar's split; answers (200) the new ranges. Positions in the body (numbers, or
        ``0x`` strings) imply ``specified_positions_divide`` when no algorithm is named."""
        bundle = await self._bundle(request)
        positions = _positions(await read_json(request))
        name = request.query.get("splitAlgorithmName") or (
            "specified_positions_divide"
            if positions
            else self.service.config.default_namespace_bundle_split_algorithm
        )
        try:
            algorithm = SplitAlgorithm.parse(name)
        except SplitError as exc:
            raise PreconditionFailed(str(exc)) from None
        await self._owned_here_or_redirect(request, bundle)
        cluster = self.service.cluster
        if cluster is None:
            raise PreconditionFailed("Load management is disabled on this broker")
        try:
            after = await cluster.split(
                bundle, algorithm, unload=_flag(request, "unload"), positions=positions
            )
        except SplitError as exc:
            raise PreconditionFailed(str(exc)) from None
        lo, hi = bundle.range.lower, bundle.range.upper
        return _json([r.name for r in after.ranges if lo <= r.lower and r.upper <= hi])

    # -- brokers and load --

    async def list_brokers(self, request: web.Request) -> web.Response:
        if request.match_info["cluster"] != self.service.config.cluster_name:
            raise ResourceNotFound(f"Cluster {request.match_info['cluster']} does not exist")
        cluster = self.service.cluster
        if cluster is None or cluster.manager is None:
            return _json([cluster.broker_id] if cluster and cluster.broker_id else [])
        return _json(sorted(cluster.manager.reports))

    async def leader_broker(self, request: web.Request) -> web.Response:
        cluster = self.service.cluster
        leader = (
            None if cluster is None or cluster.manager is None else await cluster.manager.leader()
        )
        if leader is None:
            raise ResourceNotFound("No load-manager leader")
        return _json({"serviceUrl": leader.service_url, "brokerId": leader.broker_id})

    async def load_report(self, request: web.Request) -> web.Response:
        cluster = self.service.cluster
        report = None if cluster is None or cluster.reporter is None else cluster.reporter.latest
        if report is None:
            raise ResourceNotFound("No load report yet")
        return _json(report.to_json())

    async def owned_namespaces(self, request: web.Request) -> web.Response:
        cluster = self.service.cluster
        ownership = self.service.namespaces.ownership
        if request.match_info["cluster"] != self.service.config.cluster_name:
            raise ResourceNotFound(f"Cluster {request.match_info['cluster']} does not exist")
        broker = request.match_info["broker"]
        if cluster is None or ownership is None or broker != cluster.broker_id:
            raise ResourceNotFound(f"Broker {broker} is not this broker: ask it")
        return _json(
            {
                str(b): {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
                for b in ownership.owned
            }
        )


__all__ = ["ClusterApi"]
