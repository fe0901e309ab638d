"""This broker's load report: measured, and published to ``/loadbalance/brokers/<broker-id>``.

Owns: turning cumulative per-bundle counters (messages and bytes in and out, topics,
producers, consumers, supplied by the service as ``BundleCounters``) and host usage into a
``BrokerLoadReport`` with per-bundle rates over the last sample interval; publishing it as an
ephemeral node when ``needs_report`` says so (Pulsar's update threshold and min/max
intervals), again at once when draining starts, and again after a new metadata session (the
ephemeral node went with the old one); deleting it on close.
Must not know: topics or the protocol (the service gives counters), placement decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

from magnetar.broker.loadbalance.host_usage import HostUsageSampler
from magnetar.broker.loadbalance.load_data import (
    BrokerLoadReport,
    BundleStats,
    ReportPolicy,
    needs_report,
)
from magnetar.clock import Clock, TimerHandle
from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, BadVersion, MetadataError, NotFound
from magnetar.zk.store import CREATE_ONLY, MetadataStore, SessionEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BundleCounters:
    """Cumulative figures of one owned bundle (counters only grow while topics stay loaded;
    a drop, e.g. after a topic unload, restarts the rate from zero)."""

    msg_in: int = 0
    bytes_in: int = 0
    msg_out: int = 0
    bytes_out: int = 0
    topics: int = 0
    producers: int = 0
    consumers: int = 0


CountersSource = Callable[[], Awaitable[Mapping[str, BundleCounters]]]


def bundle_rates(
    before: Mapping[str, BundleCounters], now: Mapping[str, BundleCounters], seconds: float
) -> dict[str, BundleStats]:
    """Per-bundle rates between two readings; bundles new since ``before`` (or whose counters
    went back) count from zero."""
    out = {}
    for bundle, c in now.items():
        b = before.get(bundle)
        if b is None or seconds <= 0 or c.msg_in < b.msg_in or c.msg_out < b.msg_out:
            b = BundleCounters()
            secs = max(seconds, 1.0)
        else:
            secs = seconds
        out[bundle] = BundleStats(
            (c.msg_in - b.msg_in) / secs if b.msg_in or c.msg_in else 0.0,
            (c.msg_out - b.msg_out) / secs if b.msg_out or c.msg_out else 0.0,
            (c.bytes_in - b.bytes_in) / secs,
            (c.bytes_out - b.bytes_out) / secs,
            c.topics,
            c.producers,
            c.consumers,
        )
    return out


class LoadReporter:
    def __init__(
        self,
        store: MetadataStore,
        clock: Clock,
        broker_id: str,
        *,
        pulsar_service_url: str,
        web_service_url: str,
        counters: CountersSource,
        sampler: HostUsageSampler,
        policy: ReportPolicy,
    ) -> None:
        self._store = store
        self._clock = clock
        self.broker_id = broker_id
        self._urls = (pulsar_service_url, web_service_url)
        self._counters = counters
        self._sampler = sampler
        self.policy = policy
        self._path = paths.broker_load(broker_id)
        self._last_counters: Mapping[str, BundleCounters] = {}
        self._last_sample_ms = 0
        self.published: BrokerLoadReport | None = None
        self.latest: BrokerLoadReport | None = None
        self._draining = False
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._version: int | None = None  # of our node, while this session holds it
        self.writes = 0
        self.rounds = 0
        self._timer: TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<LoadReporter {self.broker_id} writes={self.writes}>"

    async def measure(self) -> BrokerLoadReport:
        """A report of now (rates since the previous measurement)."""
        now = self._clock.now_ms()
        counters = dict(await self._counters())
        seconds = (now - self._last_sample_ms) / 1000 if self._last_sample_ms else 0.0
        rates = bundle_rates(self._last_counters, counters, seconds)
        self._last_counters, self._last_sample_ms = counters, now
        host = self._sampler.sample(now)
        report = BrokerLoadReport(
            self.broker_id,
            self._urls[0],
            self._urls[1],
            cpu=host.cpu,
            memory=host.memory,
            bandwidth_in=host.bandwidth_in,
            bandwidth_out=host.bandwidth_out,
            process_cpu=host.host_cpu,
            msg_rate_in=sum(s.msg_rate_in for s in rates.values()),
            msg_rate_out=sum(s.msg_rate_out for s in rates.values()),
            msg_throughput_in=sum(s.msg_throughput_in for s in rates.values()),
            msg_throughput_out=sum(s.msg_throughput_out for s in rates.values()),
            num_topics=sum(c.topics for c in counters.values()),
            num_producers=sum(c.producers for c in counters.values()),
            num_consumers=sum(c.consumers for c in counters.values()),
            bundles=rates,
            last_update_ms=now,
            draining=self._draining,
        )
        self.latest = report
        return report

    async def publish(self, report: BrokerLoadReport) -> None:
        """Write ``report`` to this broker's ephemeral node, creating it (in this session)
        when it is missing or was left by an earlier session of the same broker id."""
        data = report.encode()
        if self._version is not None:
            try:
                result = await self._store.put(self._path, data, expected_version=self._version)
            except (NotFound, BadVersion):
                self._version = None
            else:
                self._version = result.stat.version
        while self._version is None:
            try:
                result = await self._store.put(
                    self._path, data, expected_version=CREATE_ONLY, ephemeral=True
                )
                self._version = result.stat.version
            except AlreadyExists:
                got = await self._store.get(self._path)
                if got is None:
                    continue
                if got.stat.ephemeral_owner == self._store.session_id:
                    self._version = got.stat.version
                    return await self.publish(report)
                log.info(
                    "replacing the load report left by an earlier session of %s", self.broker_id
                )
                with contextlib.suppress(NotFound, BadVersion):
                    await self._store.delete(self._path, expected_version=got.stat.version)
        self.published = report
        self.writes += 1
        return None

    async def start(self) -> None:
        self._store.add_session_listener(self._on_session)
        await self.publish(await self.measure())
        self._schedule()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="load-reporter")

    async def set_draining(self) -> None:
        """This broker is shutting down: say so now, so nothing new is placed here."""
        self._draining = True
        await self.publish(replace(await self.measure(), draining=True))

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        interval_s = max(self.policy.min_interval_ms, 100) / 1000
        self._timer = self._clock.call_later(interval_s, self._wake.set)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                report = await self.measure()
                if self._version is None or needs_report(
                    self.published, report, report.last_update_ms, self.policy
                ):
                    await self.publish(report)
            except MetadataError as exc:
                log.warning("load report not published: %s", exc)
            except Exception:
                log.exception("load report failed")
            self.rounds += 1
            self._schedule()

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.CONNECTED:  # a new session: our ephemeral node is gone
            self._version = None
            self._wake.set()

    async def close(self) -> None:
        self._store.remove_session_listener(self._on_session)
        if self._timer is not None:
            self._timer.cancel()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._version is not None:
            with contextlib.suppress(MetadataError):
                await self._store.delete(self._path, expected_version=self._version)
            self._version = None


__all__ = ["BundleCounters", "CountersSource", "LoadReporter", "bundle_rates"]
