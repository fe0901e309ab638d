"""``magctl top topics|subscriptions``: rates, throughput and backlog, refreshed.

Owns: sampling the admin stats twice ``--interval`` seconds apart and printing rates from
the counters' deltas (``msgInCounter``, ``bytesInCounter``, consumers' ``msgOutCounter``),
sorted, as a table; redrawn in place on a terminal, printed once with ``--once``. Must not
know: REST paths beyond the kinds' ``topic_stats``.
"""

from __future__ import annotations

import argparse
import time
from typing import IO, Any

from magnetar.client.magctl.api import Api, Scope
from magnetar.client.magctl.errors import EXIT_OK, UsageError
from magnetar.client.magctl.kinds import TOPICS, topic_stats
from magnetar.client.magctl.output import table
from magnetar.client.magctl.resources import TopicName, resolve
from magnetar.client.magctl.units import human_bytes

_SORTS = ("rate-in", "rate-out", "throughput-in", "throughput-out", "backlog")


def _sample(api: Api, scope: Scope) -> dict[tuple[str, str], dict[str, float]]:
    """(topic, subscription or "") -> counters and gauges."""
    names = ({TopicName.parse(scope.topic, scope.namespace).full: 0} if scope.topic
             else TOPICS.names(api, scope.namespace))
    if scope.topic:
        n = TOPICS.partitions_of(api, TopicName.parse(scope.topic, scope.namespace))
        names = dict.fromkeys(names, n or 0)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for name, n in names.items():
        stats = topic_stats(api, TopicName.parse(name), n)
        subs: dict[str, Any] = stats.get("subscriptions") or {}
        topic_out = 0
        backlog = 0
        for sub, s in subs.items():
            msg_out = sum(int(c.get("msgOutCounter", 0)) for c in s.get("consumers") or [])
            topic_out += msg_out
            backlog += int(s.get("msgBacklog", 0))
            out[(name, sub)] = {"out": msg_out, "backlog": int(s.get("msgBacklog", 0)),
                                "consumers": len(s.get("consumers") or [])}
        out[(name, "")] = {"in": int(stats.get("msgInCounter", 0)),
                           "in_bytes": int(stats.get("bytesInCounter", 0)),
                           "out": topic_out, "backlog": backlog,
                           "storage": int(stats.get("storageSize", 0))}
    return out


def _rate(after: dict[str, float], before: dict[str, float] | None, key: str, dt: float) -> float:
    if before is None or dt <= 0:
        return 0.0
    return max(0.0, (after.get(key, 0) - before.get(key, 0)) / dt)


def run(args: argparse.Namespace, api: Api, scope: Scope, out: IO[str]) -> int:
    plural = resolve(args.resource).plural
    if plural not in ("topics", "subscriptions"):
        raise UsageError(f'top shows topics or subscriptions, not "{args.resource}"')
    if args.sort_by not in _SORTS:
        raise UsageError(f"--sort-by: one of {', '.join(_SORTS)}")
    tty = hasattr(out, "isatty") and out.isatty() and not args.once
    before = _sample(api, scope)
    started = time.monotonic()
    while True:
        time.sleep(max(0.1, args.interval))  # the sampling period of the rates
        after = _sample(api, scope)
        now = time.monotonic()
        dt = now - started
        rows = []
        for (topic, sub), v in after.items():
            if (plural == "topics") != (sub == ""):
                continue
            prev = before.get((topic, sub))
            rates = {
                "rate-in": _rate(v, prev, "in", dt),
                "rate-out": _rate(v, prev, "out", dt),
                "throughput-in": _rate(v, prev, "in_bytes", dt),
                "throughput-out": 0.0,
                "backlog": v.get("backlog", 0),
            }
            rows.append((rates, topic, sub, v))
        rows.sort(key=lambda r: -float(r[0][args.sort_by]))
        if plural == "topics":
            text = table(
                ["NAME", "RATE-IN", "RATE-OUT", "THROUGHPUT-IN", "BACKLOG", "STORAGE"],
                [[t, f"{r['rate-in']:.1f}", f"{r['rate-out']:.1f}",
                  human_bytes(r["throughput-in"]) + "/s", str(int(r["backlog"])),
                  human_bytes(v.get("storage", 0))] for r, t, _, v in rows])
        else:
            text = table(
                ["NAME", "TOPIC", "RATE-OUT", "BACKLOG", "CONSUMERS"],
                [[s, t, f"{r['rate-out']:.1f}", str(int(r["backlog"])),
                  str(int(v.get("consumers", 0)))] for r, t, s, v in rows])
        if tty:
            out.write("\033[H\033[2J")
        out.write(text)
        out.flush()
        if args.once:
            return EXIT_OK
        before, started = after, now
