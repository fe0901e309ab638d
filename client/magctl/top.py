"""``magctl top topics|subscriptions|bundles|brokers``: rates, throughput and backlogs.

Owns: sampling the admin stats twice ``--interval`` seconds apart and printing rates from
the counters' deltas (``msgInCounter``, ``bytesInCounter``, consumers' ``msgOutCounter``),
and the backlogs (subscriptions', and the replicators' for other clusters: ``REPL-BACKLOG``),
sorted, as a table; redrawn in place on a terminal, printed once with ``--once``. Bundles
sum their topics (a topic's bundle from ``/lookup/v2/topic/.../bundle``); brokers sum
what each broker's ``/admin/v2/broker-stats/topics`` reports. Must not know: output
formats beyond the table.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import IO, Any

from magnetar.client.magctl.api import Api, Scope
from magnetar.client.magctl.errors import EXIT_OK, UsageError
from magnetar.client.magctl.kinds import TOPICS, topic_stats
from magnetar.client.magctl.output import table
from magnetar.client.magctl.resources import TopicName, resolve
from magnetar.client.magctl.units import human_bytes

_SORTS = ("rate-in", "rate-out", "throughput-in", "backlog", "replication-backlog")
Sample = dict[tuple[str, str], dict[str, float]]


def _topic_counters(stats: dict[str, Any]) -> tuple[dict[str, float], Sample]:
    """A topic's counters, and its subscriptions' (keyed by subscription name)."""
    subs: dict[str, Any] = stats.get("subscriptions") or {}
    per_sub: Sample = {}
    topic_out = backlog = 0
    for sub, s in subs.items():
        msg_out = sum(int(c.get("msgOutCounter", 0)) for c in s.get("consumers") or [])
        topic_out += msg_out
        backlog += int(s.get("msgBacklog", 0))
        per_sub[("", sub)] = {
            "out": msg_out,
            "backlog": int(s.get("msgBacklog", 0)),
            "consumers": len(s.get("consumers") or []),
        }
    replication = stats.get("replication") or {}
    return {
        "in": int(stats.get("msgInCounter", 0)),
        "in_bytes": int(stats.get("bytesInCounter", 0)),
        "out": topic_out,
        "backlog": backlog,
        "replication_backlog": sum(
            int(r.get("replicationBacklog", 0)) for r in replication.values()
        ),
        "storage": int(stats.get("storageSize", 0)),
        "topics": 1,
    }, per_sub


def _add(into: dict[str, float], values: dict[str, float]) -> None:
    for k, v in values.items():
        into[k] = into.get(k, 0) + v


def _topics_in_scope(api: Api, scope: Scope) -> dict[str, int]:
    if scope.topic:
        tn = TopicName.parse(scope.topic, scope.namespace)
        return {tn.full: TOPICS.partitions_of(api, tn) or 0}
    return TOPICS.names(api, scope.namespace)


def _sampler(plural: str, api: Api, scope: Scope) -> Callable[[], Sample]:
    bundle_of: dict[str, str] = {}

    def topics_and_subs() -> Sample:
        out: Sample = {}
        for name, n in _topics_in_scope(api, scope).items():
            counters, subs = _topic_counters(topic_stats(api, TopicName.parse(name), n))
            out[(name, "")] = counters
            for (_, sub), v in subs.items():
                out[(name, sub)] = v
        return out

    def bundles() -> Sample:
        out: Sample = {}
        for name, n in _topics_in_scope(api, scope).items():
            parent = TopicName.parse(name)
            for tn in [parent.partition(i) for i in range(n)] if n else [parent]:
                if tn.full not in bundle_of:
                    got = api.try_get(f"/lookup/v2/topic/{tn.path}/bundle")
                    bundle_of[tn.full] = str(got) if got else "?"
                counters, _ = _topic_counters(api.try_get(f"/admin/v2/{tn.path}/stats") or {})
                _add(out.setdefault((bundle_of[tn.full], ""), {}), counters)
        return out

    def brokers() -> Sample:
        from magnetar.client.magctl.http import AdminHttp

        out: Sample = {}
        cluster = api.cluster()
        for broker in api.get(f"/admin/v2/brokers/{cluster}") or []:
            scheme = "https" if api.http.base_url.startswith("https") else "http"
            http = AdminHttp(
                f"{scheme}://{broker}",
                token=api.http.token,
                basic=api.http.basic,
                timeout_s=api.http.timeout_s,
            )
            by_ns = Api(http).get("/admin/v2/broker-stats/topics") or {}
            into = out.setdefault((str(broker), ""), {})
            for bundles in by_ns.values():
                for domains in bundles.values():
                    for topics in domains.values():
                        for stats in topics.values():
                            _add(into, _topic_counters(stats)[0])
        return out

    return {
        "topics": topics_and_subs,
        "subscriptions": topics_and_subs,
        "bundles": bundles,
        "brokers": brokers,
    }[plural]


def _rate(after: dict[str, float], before: dict[str, float] | None, key: str, dt: float) -> float:
    if before is None or dt <= 0:
        return 0.0
    return max(0.0, (after.get(key, 0) - before.get(key, 0)) / dt)


def _render(plural: str, rows: list[tuple[dict[str, float], str, str, dict[str, float]]]) -> str:
    if plural == "subscriptions":
        return table(
            ["NAME", "TOPIC", "RATE-OUT", "BACKLOG", "CONSUMERS"],
            [
                [
                    s,
                    t,
                    f"{r['rate-out']:.1f}",
                    str(int(r["backlog"])),
                    str(int(v.get("consumers", 0))),
                ]
                for r, t, s, v in rows
            ],
        )
    headers = ["NAME", "RATE-IN", "RATE-OUT", "THROUGHPUT-IN", "BACKLOG", "REPL-BACKLOG"]
    headers.append("STORAGE" if plural == "topics" else "TOPICS")
    return table(
        headers,
        [
            [
                t,
                f"{r['rate-in']:.1f}",
                f"{r['rate-out']:.1f}",
                human_bytes(r["throughput-in"]) + "/s",
                str(int(r["backlog"])),
                str(int(r["replication-backlog"])),
                human_bytes(v.get("storage", 0))
                if plural == "topics"
                else str(int(v.get("topics", 0))),
            ]
            for r, t, _, v in rows
        ],
    )


def run(args: argparse.Namespace, api: Api, scope: Scope, out: IO[str]) -> int:
    plural = resolve(args.resource).plural
    if plural not in ("topics", "subscriptions", "bundles", "brokers"):
        raise UsageError(
            f'top shows topics, subscriptions, bundles or brokers, not "{args.resource}"'
        )
    if args.sort_by not in _SORTS:
        raise UsageError(f"--sort-by: one of {', '.join(_SORTS)}")
    sample = _sampler(plural, api, scope)
    tty = hasattr(out, "isatty") and out.isatty() and not args.once
    before = sample()
    started = time.monotonic()
    while True:
        time.sleep(max(0.1, args.interval))  # the sampling period of the rates
        after = sample()
        now = time.monotonic()
        dt = now - started
        rows = []
        for (name, sub), v in after.items():
            if (plural == "subscriptions") == (sub == ""):
                continue
            prev = before.get((name, sub))
            rates = {
                "rate-in": _rate(v, prev, "in", dt),
                "rate-out": _rate(v, prev, "out", dt),
                "throughput-in": _rate(v, prev, "in_bytes", dt),
                "backlog": v.get("backlog", 0),
                "replication-backlog": v.get("replication_backlog", 0),
            }
            rows.append((rates, name, sub, v))
        rows.sort(key=lambda r: (-float(r[0][args.sort_by]), r[1], r[2]))
        if tty:
            out.write("\033[H\033[2J")
        out.write(_render(plural, rows))
        out.flush()
        if args.once:
            return EXIT_OK
        before, started = after, now
