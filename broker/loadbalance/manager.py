"""The load manager of one broker: the leader election, the cluster's view of load reports,
and, while leader, placement, bundle split, load shedding and broker-failure detection.

Every broker runs one. All brokers keep the view of ``/loadbalance/brokers/*`` (watched) and
know the leader (``/loadbalance/leader``). The leader:
- places unowned bundles for lookups (``select_broker``; other brokers redirect lookups of
  unowned bundles to it);
- every ``split_interval_ms`` splits bundles over the thresholds (through the owner);
- every ``shedding_interval_ms`` runs the shedder and unloads what it chose (through the
  owner), never moving a bundle again within the grace period;
- probes every broker every ``probe_interval_ms`` (its health endpoint): a broker that refuses
  ``probe_failures`` probes in a row (retried at once, ``REPROBE_DELAY_S`` apart) is dead (its
  process is gone); one that has answered no probe for ``unresponsive_ms`` (a frozen process,
  a partition) is declared dead too. Either way its bundles' ownership nodes and its report
  are deleted at once instead of waiting for its metadata session to expire.
Followers probe the leader the same way; one that finds it dead deposes it (deletes its
election node, so the next contender leads without waiting for the dead leader's session) and
frees its bundles itself, so a leader that also owned topics costs one detection, not two.
Safety never rests on detection: a new owner fences the ledgers, so a broker wrongly declared
dead can no longer write, and its ownership cache drops bundles whose node went away.
Must not know: topics, the protocol, HTTP (``ClusterActions`` carries out unload, split and
probes).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import random
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.broker.errors import ResourceNotFound
from magnetar.broker.loadbalance.load_data import BrokerLoadReport, BundleData
from magnetar.broker.loadbalance.placement import (
    LeastResourceUsageWithWeight,
    NoBrokerAvailable,
    PlacementConfig,
)
from magnetar.broker.loadbalance.shedding import (
    OverloadShedder,
    SheddingConfig,
    ThresholdShedder,
    forget_expired,
    strategy,
)
from magnetar.broker.loadbalance.split import (
    SplitAlgorithm,
    SplitThresholds,
    bundles_to_split,
    namespace_of,
)
from magnetar.clock import Clock
from magnetar.zk import paths
from magnetar.zk.errors import BadVersion, MetadataError, NotFound
from magnetar.zk.recipes import LeaderElection
from magnetar.zk.store import MetadataStore, Notification

log = logging.getLogger(__name__)


class ProbeResult(enum.Enum):
    ALIVE = "alive"
    REFUSED = "refused"  # nothing listens: the process is gone
    TIMEOUT = "timeout"  # no answer in time: frozen, overloaded, or partitioned


REPROBE_DELAY_S = 0.1
"""Between the probes that confirm a refusal (a refused connection is answered at once)."""


class ClusterActions(Protocol):
    """What the leader asks of the cluster; the broker implements it over admin REST."""

    async def unload(self, owner: BrokerLoadReport, bundle: str) -> None: ...

    async def split(
        self, owner: BrokerLoadReport, bundle: str, algorithm: SplitAlgorithm, unload: bool
    ) -> None: ...

    async def bundle_count(self, namespace: str) -> int: ...

    async def probe(self, broker: BrokerLoadReport) -> ProbeResult: ...


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """The value of the leader's election node (Pulsar's ``LeaderBroker``)."""

    broker_id: str
    service_url: str  # HTTP, as Pulsar's leaderBroker answer
    pulsar_service_url: str = ""

    def encode(self) -> bytes:
        return json.dumps(
            {
                "brokerId": self.broker_id,
                "serviceUrl": self.service_url,
                "pulsarServiceUrl": self.pulsar_service_url,
            }
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LeaderInfo | None:
        try:
            d = json.loads(raw)
            return cls(str(d["brokerId"]), str(d["serviceUrl"]), str(d.get("pulsarServiceUrl", "")))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class LoadManagerConfig:
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    shedding: SheddingConfig = field(default_factory=SheddingConfig)
    shedding_strategy: str = "ThresholdShedder"  # loadBalancerLoadSheddingStrategy
    shedding_enabled: bool = True  # loadBalancerSheddingEnabled
    shedding_interval_ms: int = 60_000  # loadBalancerSheddingIntervalMinutes
    split: SplitThresholds = field(default_factory=SplitThresholds)
    auto_split_enabled: bool = True  # loadBalancerAutoBundleSplitEnabled
    auto_unload_split_bundles: bool = True  # loadBalancerAutoUnloadSplitBundlesEnabled
    split_algorithm: SplitAlgorithm = SplitAlgorithm.RANGE_EQUALLY_DIVIDE
    """defaultNamespaceBundleSplitAlgorithm"""
    split_interval_ms: int = 60_000  # loadBalancerSplitIntervalMinutes
    probe_interval_ms: int = 500
    probe_failures: int = 2
    unresponsive_ms: int = 2_500
    """A broker that answered no probe for this long (at least two probes) is dead."""


@dataclass(frozen=True, slots=True)
class LoadManagerStatistics:
    is_leader: bool
    brokers: int
    leader_changes: int
    bundles_assigned: int
    bundles_split: int
    bundles_unloaded: int
    brokers_declared_dead: int


PREALLOCATED_MAX = 100_000
"""Placements remembered at most until their bundles show up owned (oldest dropped first)."""


class NotLeader(Exception):
    """Placement asked of a broker that does not lead (any more)."""


class LoadManager:
    def __init__(
        self,
        store: MetadataStore,
        clock: Clock,
        me: LeaderInfo,
        config: LoadManagerConfig,
        actions: ClusterActions,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self.me = me
        self.config = config
        self._actions = actions
        self._rng = rng or random.Random()
        self._election = LeaderElection(
            store, paths.LOADBALANCE_LEADER, me.encode(), on_change=self._on_leader_change
        )
        self.reports: dict[str, BrokerLoadReport] = {}
        self.bundle_data: dict[str, BundleData] = {}
        self._seen_updates: dict[str, int] = {}
        self.placement = LeastResourceUsageWithWeight(config.placement, self._rng)
        self.shedder: ThresholdShedder | OverloadShedder = strategy(
            config.shedding_strategy, config.shedding
        )
        self.recently_unloaded: dict[str, int] = {}
        # bundle -> broker chosen for it and not yet seen owned (Pulsar's preallocated
        # bundles): every lookup of the bundle meanwhile gets the same answer
        self._preallocated: dict[str, str] = {}
        self._failures: dict[str, int] = {}
        # broker -> (when the first unanswered probe of the current run started, how many)
        self._unanswered: dict[str, tuple[float, int]] = {}
        self._refresh_wanted = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._leader_changes = 0
        self._assigned = 0
        self._split = 0
        # the last refusal of each bundle's split: logged once, not every round
        self._split_refused: dict[str, str] = {}
        self._unloaded = 0
        self._dead = 0
        self._last_split_ms = 0.0
        self._last_shed_ms = 0.0
        self._closed = False

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else "follower"
        return f"<LoadManager {self.me.broker_id} {role} brokers={len(self.reports)}>"

    @property
    def is_leader(self) -> bool:
        return self._election.is_leader

    def statistics(self) -> LoadManagerStatistics:
        return LoadManagerStatistics(
            self.is_leader,
            len(self.reports),
            self._leader_changes,
            self._assigned,
            self._split,
            self._unloaded,
            self._dead,
        )

    # -- lifecycle --

    async def start(self) -> None:
        self._store.add_listener(self._on_notification)
        await self._refresh_reports()
        await self._drop_stale_candidacies()
        await self._election.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._refresher(), name="lb-reports"),
            loop.create_task(self._rounds(), name="lb-rounds"),
        ]

    async def _drop_stale_candidacies(self) -> None:
        """Delete election nodes this broker id left in an earlier session (a SIGKILLed and
        restarted broker): until its old session expires such a node would stand in the
        queue, and become "leader" when its turn came, with nobody acting as one."""
        root = paths.LOADBALANCE_LEADER
        for name in await self._store.children(root):
            got = await self._store.get(f"{root}/{name}")
            if got is None or got.stat.ephemeral_owner == self._store.session_id:
                continue
            info = LeaderInfo.decode(got.value)
            if info is not None and info.broker_id == self.me.broker_id:
                log.info("dropping %s, left by an earlier session of this broker", name)
                with contextlib.suppress(NotFound, BadVersion):
                    await self._store.delete(f"{root}/{name}", expected_version=got.stat.version)

    async def close(self) -> None:
        self._closed = True
        self._store.remove_listener(self._on_notification)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        with contextlib.suppress(MetadataError):
            await self._election.resign()

    async def leader(self) -> LeaderInfo | None:
        if self.is_leader:
            return self.me
        raw = await self._election.leader_value()
        return None if raw is None else LeaderInfo.decode(raw)

    # -- the view of load reports --

    def _on_notification(self, n: Notification) -> None:
        if n.path == paths.LOADBALANCE_BROKERS or n.path.startswith(
            paths.LOADBALANCE_BROKERS + "/"
        ):
            self._refresh_wanted.set()

    async def _refresher(self) -> None:
        while True:
            await self._refresh_wanted.wait()
            self._refresh_wanted.clear()
            try:
                await self._refresh_reports()
            except MetadataError as exc:
                log.warning("load reports not refreshed: %s", exc)
                await self._clock.sleep(0.5)
                self._refresh_wanted.set()

    async def _refresh_reports(self) -> None:
        names = await self._store.children(paths.LOADBALANCE_BROKERS)
        fresh: dict[str, BrokerLoadReport] = {}
        for name in names:
            got = await self._store.get(paths.broker_load(name))
            if got is None:
                continue
            try:
                fresh[name] = BrokerLoadReport.decode(got.value)
            except ValueError as exc:
                log.warning("ignoring the load report of %s: %s", name, exc)
        self.reports = fresh
        for name, report in fresh.items():
            if self._seen_updates.get(name) == report.last_update_ms:
                continue
            self._seen_updates[name] = report.last_update_ms
            for bundle, stats in report.bundles.items():
                self.bundle_data.setdefault(bundle, BundleData()).update(stats)
        for name in set(self._seen_updates) - set(fresh):
            del self._seen_updates[name]
        if self._preallocated:
            owned = {b for r in fresh.values() for b in r.bundles}
            for bundle in [b for b in self._preallocated if b in owned]:
                del self._preallocated[bundle]

    def owner_of(self, bundle: str) -> BrokerLoadReport | None:
        for report in self.reports.values():
            if bundle in report.bundles:
                return report
        return None

    # -- placement --

    async def select_broker(self, bundle: str) -> BrokerLoadReport:
        """The broker that should own ``bundle`` (leader only). Raises ``NotLeader`` or
        ``NoBrokerAvailable``."""
        if not self.is_leader:
            raise NotLeader(f"{self.me.broker_id} is not the load-manager leader")
        if not self.reports:
            await self._refresh_reports()
        earlier = self._preallocated.get(bundle)
        if earlier is not None:
            report = self.reports.get(earlier)
            if report is not None and not report.draining:
                return report
        chosen = self.placement.select(bundle, self.reports, bundle_data=self.bundle_data)
        if len(self._preallocated) >= PREALLOCATED_MAX:
            self._preallocated.pop(next(iter(self._preallocated)))
        self._preallocated[bundle] = chosen
        self._assigned += 1
        return self.reports[chosen]

    # -- the leader's rounds --

    def _on_leader_change(self, leader: bool) -> None:
        self._leader_changes += 1
        log.info(
            "load manager: %s is %s", self.me.broker_id, "the leader" if leader else "a follower"
        )
        if leader:
            self._failures.clear()
            self._unanswered.clear()
            self._refresh_wanted.set()

    async def _rounds(self) -> None:
        while not self._closed:
            await self._clock.sleep(self.config.probe_interval_ms / 1000)
            try:
                await self.run_round()
            except MetadataError as exc:
                log.warning("load manager round: %s", exc)
            except Exception:
                log.exception("load manager round failed")

    async def run_round(self) -> None:
        """One tick: probes, and the split and shedding rounds when their interval is up."""
        now = self._clock.monotonic_ms()
        if not self.is_leader:
            await self._probe_leader()
            return
        await self._probe_brokers()
        cfg = self.config
        if cfg.auto_split_enabled and now - self._last_split_ms >= cfg.split_interval_ms:
            self._last_split_ms = now
            await self.split_round()
        if cfg.shedding_enabled and now - self._last_shed_ms >= cfg.shedding_interval_ms:
            self._last_shed_ms = now
            await self.shedding_round()

    async def split_round(self) -> int:
        stats = {b: s for r in self.reports.values() for b, s in r.bundles.items()}
        counts = {}
        for ns in sorted({namespace_of(b) for b in stats}):
            try:
                counts[ns] = await self._actions.bundle_count(ns)
            except ResourceNotFound:  # deleted since the reports were made: not this round
                log.info("namespace %s no longer exists: not considered for splitting", ns)
        stats = {b: s for b, s in stats.items() if namespace_of(b) in counts}
        done = 0
        for gone in self._split_refused.keys() - stats.keys():
            del self._split_refused[gone]
        for bundle, reason in bundles_to_split(stats, counts, self.config.split):
            owner = self.owner_of(bundle)
            if owner is None:
                continue
            again = bundle in self._split_refused
            log.log(
                logging.DEBUG if again else logging.INFO,
                "splitting bundle %s on %s: %s",
                bundle,
                owner.broker_id,
                reason,
            )
            try:
                await self._actions.split(
                    owner,
                    bundle,
                    self.config.split_algorithm,
                    self.config.auto_unload_split_bundles,
                )
            except Exception as exc:
                if self._split_refused.get(bundle) != str(exc):
                    log.warning(
                        "split of %s failed: %s (retried each round, logged again only when "
                        "the reason changes)",
                        bundle,
                        exc,
                    )
                self._split_refused[bundle] = str(exc)
                continue
            self._split_refused.pop(bundle, None)
            self.bundle_data.pop(bundle, None)
            self._split += 1
            done += 1
        return done

    async def shedding_round(self) -> int:
        now = self._clock.now_ms()
        forget_expired(self.recently_unloaded, now, self.config.shedding.grace_period_ms)
        live = {b: r for b, r in self.reports.items() if not r.draining}
        done = 0
        for unload in self.shedder.find(live, self.bundle_data, self.recently_unloaded, now):
            owner = self.reports.get(unload.broker)
            if owner is None:
                continue
            log.info("shedding bundle %s from %s: %s", unload.bundle, unload.broker, unload.reason)
            try:
                await self._actions.unload(owner, unload.bundle)
            except Exception as exc:
                log.warning("unload of %s failed: %s", unload.bundle, exc)
                continue
            self.recently_unloaded[unload.bundle] = now
            self._unloaded += 1
            done += 1
        return done

    # -- failure detection --

    async def _probe(self, report: BrokerLoadReport) -> bool:
        """True once ``report``'s broker is dead: it refused ``probe_failures`` probes in a row
        (confirmed at once, ``REPROBE_DELAY_S`` apart), or answered none for
        ``unresponsive_ms`` (two probes at least)."""
        broker = report.broker_id
        started = self._clock.monotonic_ms()
        result = await self._actions.probe(report)
        while result is ProbeResult.REFUSED:
            n = self._failures[broker] = self._failures.get(broker, 0) + 1
            if n >= self.config.probe_failures:
                return True
            await self._clock.sleep(REPROBE_DELAY_S)
            result = await self._actions.probe(report)
        self._failures.pop(broker, None)
        if result is ProbeResult.ALIVE:
            self._unanswered.pop(broker, None)
            return False
        since, n = self._unanswered.get(broker, (started, 0))
        self._unanswered[broker] = (since, n + 1)
        silent_ms = self._clock.monotonic_ms() - since
        if n + 1 >= 2 and silent_ms >= self.config.unresponsive_ms:
            log.warning("broker %s answered no probe for %.0f ms", broker, silent_ms)
            return True
        return False

    def _forget_probes_except(self, probed: set[str]) -> None:
        """Drop the probe history of brokers no longer probed (gone, or no longer leader):
        one coming back starts with a clean slate, not with an old silence."""
        for history in (self._failures, self._unanswered):
            for broker in [b for b in history if b not in probed]:
                del history[broker]

    async def _probe_brokers(self) -> None:
        others = [r for b, r in self.reports.items() if b != self.me.broker_id]
        self._forget_probes_except({r.broker_id for r in others})
        if not others:
            return
        dead = await asyncio.gather(*(self._probe(r) for r in others))
        for report, is_dead in zip(others, dead, strict=True):
            if is_dead:
                await self._declare_dead(report)

    async def _declare_dead(self, report: BrokerLoadReport) -> None:
        """Free a dead broker's bundles now (their ephemeral nodes would wait for its
        session to expire), then remove its report. The bundles are found by the session
        that holds its report node, not from the report (which may predate them)."""
        self._failures.pop(report.broker_id, None)
        self._unanswered.pop(report.broker_id, None)
        if report.broker_id == self.me.broker_id:
            return
        self.reports.pop(report.broker_id, None)
        report_path = paths.broker_load(report.broker_id)
        got = await self._store.get(report_path)
        if got is None or not got.stat.ephemeral:
            return  # its session is gone already, and its bundles with it
        session = got.stat.ephemeral_owner
        self._dead += 1
        freed = 0
        root = paths.NAMESPACE_OWNERSHIP
        for tenant in await self._store.children(root):
            for ns in await self._store.children(f"{root}/{tenant}"):
                for rng in await self._store.children(f"{root}/{tenant}/{ns}"):
                    path = f"{root}/{tenant}/{ns}/{rng}"
                    node = await self._store.get(path)
                    if node is not None and node.stat.ephemeral_owner == session:
                        with contextlib.suppress(NotFound, BadVersion):
                            await self._store.delete(path, expected_version=node.stat.version)
                            freed += 1
        log.warning(
            "broker %s does not answer on %s: freed its %d bundles",
            report.broker_id,
            report.pulsar_service_url,
            freed,
        )
        with contextlib.suppress(NotFound, BadVersion):
            await self._store.delete(report_path, expected_version=got.stat.version)

    async def _probe_leader(self) -> None:
        current = await self._election.current_leader()
        if current is None:
            return
        node, raw, version = current
        info = LeaderInfo.decode(raw)
        if info is None or info.broker_id == self.me.broker_id:
            return
        self._forget_probes_except({info.broker_id})
        report = self.reports.get(info.broker_id)
        if report is None or not await self._probe(report):
            return
        log.warning(
            "load-manager leader %s does not answer: deposing it and freeing its bundles",
            info.broker_id,
        )
        with contextlib.suppress(NotFound, BadVersion):
            await self._store.delete(node, expected_version=version)
        # It was a broker too: free its bundles now rather than after the next leader's
        # own detection (two detections in a row made a leader-and-owner kill the slowest).
        await self._declare_dead(report)


__all__ = [
    "ClusterActions",
    "LeaderInfo",
    "LoadManager",
    "LoadManagerConfig",
    "LoadManagerStatistics",
    "NoBrokerAvailable",
    "NotLeader",
    "ProbeResult",
]
