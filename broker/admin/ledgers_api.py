"""A topic's storage layout over the admin REST API: its ledgers, their ensembles and the
bookies' addresses, for readers that fetch sealed data straight from the bookies (the Spark
connector's ``readPath=storage``, as Pulsar SQL reads ledgers without a broker in the way).

Owns one route::

    GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/ledgers
    -> {"topic": ..., "lastConfirmedEntry": "L:E" | "-1:-1",
        "messagesPerEntry": float | null,     # messages / entries published since loaded
        "bookieTls": bool,                    # the bookies speak gRPC over TLS
        "ledgers": [{"ledgerId": L, "entries": N, "size": B, "state": "OPEN" | "CLOSED" | ...,
                     "ensembleSize": E, "writeQuorum": Qw, "ackQuorum": Qa,
                     "lastEntryId": -1 | last (closed), "length": bytes (closed),
                     "ensembles": [{"firstEntryId": F, "bookies": ["host:port", ...]}],
                     "offloaded": bool, "offloadContext": {...}   # tiered storage, if any
                    }]}

``entries`` counts the ledger's entries a reader may take (``0 .. entries-1``): for the open
ledger, those the broker has confirmed so far. ``bookies`` are the addresses the bookies
registered (their ids when they registered none), in ensemble order, so a reader computes
each entry's write set (entry e: ``Qw`` members from ``e mod E``) as the writer did. A ledger
whose metadata is gone (deleted by retention meanwhile) is left out, unless it is offloaded
(its bookie copy deleted after tiered storage's deletion lag): then it is listed with
``"bookkeeperDeleted": true``, no ensembles, and its ``offloadContext``, whose ``record`` is
what ``magnetar.broker.offload.registry.open_offloaded_ledger`` opens; a ledger offloaded and
still on the bookies has both. A topic none of whose ledgers has metadata (a storage without
bookies) is refused (405). The ledgers' master keys
are not given out: a reader needs none.

Answered by the broker that owns the topic (others answer 404, as for ``internalStats``;
readers look the owner up first). Authorization is that of the other topic admin reads:
reading bookies directly bypasses the broker's topic permissions, so this is not opened to
consume-only roles.

Must not know: how topics are served, the data path, Spark.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from magnetar.broker.admin.offload_stats import offload_contexts
from magnetar.broker.admin.topic_ops import TopicOperations, not_allowed
from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.bookkeeper.placement import parse_registration
from magnetar.broker.namespace.resources import PreconditionFailed
from magnetar.zk import paths

ROUTE = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/ledgers"


class LedgerLayoutRoutes:
    """The ``/ledgers`` route of a broker's admin API (see the module docstring)."""

    def __init__(self, ops: TopicOperations) -> None:
        self.ops = ops

    def add_routes(self, r: web.UrlDispatcher) -> None:
        r.add_get(ROUTE, self.ledgers)

    async def ledgers(self, request: web.Request) -> web.Response:
        m = request.match_info
        if m["domain"] != "persistent":
            raise not_allowed("Only persistent topics are stored in ledgers")
        local = unquote(m["topic"])
        if not local or "/" in local:
            raise PreconditionFailed(f"Invalid topic name {local!r}")
        topic_name = f"persistent://{m['tenant']}/{m['namespace']}/{local}"
        topic = await self.ops.persistent(topic_name)
        ledger = topic.ledger
        service = self.ops.service
        store = service.store
        addresses: dict[str, str] = {}

        async def address(bookie_id: str) -> str:
            if bookie_id not in addresses:
                got = await store.get(paths.bookie_registration(bookie_id))
                addresses[bookie_id] = parse_registration(
                    bookie_id, got.value if got is not None else b""
                )
            return addresses[bookie_id]

        out: list[dict[str, Any]] = []
        sizes = ledger.ledger_sizes()
        offloaded = offload_contexts(ledger)
        for ledger_id, entries, size in sizes:
            got = await store.get(paths.ledger_metadata(ledger_id))
            context = offloaded.get(ledger_id)
            if got is None:
                if context is not None and context["complete"]:
                    record = context["record"]
                    out.append(
                        {
                            "ledgerId": ledger_id,
                            "entries": entries,
                            "size": size,
                            "state": "CLOSED",
                            "lastEntryId": record["lastEntryId"],
                            "length": record["length"],
                            "ensembles": [],
                            "offloaded": True,
                            "bookkeeperDeleted": True,
                            "offloadContext": context,
                        }
                    )
                continue
            meta = LedgerMetadata.from_bytes(got.value)
            tiered: dict[str, Any] = {}
            if context is not None:
                tiered = {"offloaded": bool(context["complete"]), "offloadContext": context}
            out.append(
                {
                    "ledgerId": ledger_id,
                    "entries": entries,
                    "size": size,
                    "state": meta.state.value,
                    "ensembleSize": meta.ensemble_size,
                    "writeQuorum": meta.write_quorum,
                    "ackQuorum": meta.ack_quorum,
                    "lastEntryId": meta.last_entry_id,
                    "length": meta.length,
                    "ensembles": [
                        {"firstEntryId": first, "bookies": [await address(b) for b in ensemble]}
                        for first, ensemble in meta.ensembles
                    ],
                    **tiered,
                }
            )
        if sizes and not out:
            raise not_allowed("The topic's storage keeps no ledgers on bookies")
        counters = topic.counters
        last = ledger.last_confirmed
        body = {
            "topic": topic_name,
            "lastConfirmedEntry": str(last) if last is not None else "-1:-1",
            "messagesPerEntry": (
                counters.msg_in / counters.entries_in if counters.entries_in else None
            ),
            "bookieTls": bool(service.config.bookkeeper_tls_trust_certs_file_path),
            "ledgers": out,
        }
        return web.Response(body=json.dumps(body).encode(), content_type="application/json")


__all__ = ["ROUTE", "LedgerLayoutRoutes"]
