"""The load reporter over an in-memory metadata store and a virtual clock; /proc parsing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.waiting import wait_for

from magnetar.broker.loadbalance import BrokerLoadReport, ReportPolicy
from magnetar.broker.loadbalance.host_usage import (
    HostUsageSampler,
    parse_meminfo_mb,
    parse_net_dev_bytes,
    parse_proc_stat_cpu,
    parse_process_cpu_ticks,
)
from magnetar.broker.loadbalance.reporter import BundleCounters, LoadReporter, bundle_rates
from magnetar.clock import VirtualClock
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer

PROC = {
    "/proc/stat": "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n",
    "/proc/self/stat": "42 (python (x)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0\n",
    "/proc/meminfo": "MemTotal:       2048000 kB\nMemAvailable:   1024000 kB\n",
    "/proc/self/statm": "1000 256 0 0 0 0 0\n",
    "/proc/net/dev": (
        "Inter-|   Receive\n face |bytes    packets\n"
        "    lo: 1000 1 0 0 0 0 0 0 1000 1 0 0 0 0 0 0\n"
        "  eth0: 5000 1 0 0 0 0 0 0 7000 1 0 0 0 0 0 0\n"
    ),
}


def test_proc_parsers() -> None:
    assert parse_proc_stat_cpu(PROC["/proc/stat"]) == (200, 1000)
    assert parse_process_cpu_ticks(PROC["/proc/self/stat"]) == 300  # a ')' in the name
    assert parse_meminfo_mb(PROC["/proc/meminfo"]) == (2000.0, 1000.0)
    assert parse_net_dev_bytes(PROC["/proc/net/dev"], include_loopback=False) == (5000, 7000)
    assert parse_net_dev_bytes(PROC["/proc/net/dev"], include_loopback=True) == (6000, 8000)
    with pytest.raises(ValueError):
        parse_proc_stat_cpu("intr 1 2 3")


def test_sampler_turns_two_readings_into_usages() -> None:
    files = dict(PROC)
    sampler = HostUsageSampler(
        nic_speed_gbps=1, read=files.__getitem__, cores=2, clock_ticks=100, page_size=4096
    )
    first = sampler.sample(0)
    assert first.cpu.usage == 0 and first.cpu.limit == 200
    assert first.memory.usage == pytest.approx(1.0) and first.memory.limit == 2000
    files["/proc/self/stat"] = "42 (p) S 1 2 3 4 5 6 7 8 9 10 300 100 0 0\n"  # +100 ticks
    files["/proc/stat"] = "cpu  200 0 200 1400 0 0 0 0 0 0\n"  # +200 busy of +800
    files["/proc/net/dev"] = PROC["/proc/net/dev"].replace("5000", "130000")
    second = sampler.sample(1000)
    assert second.cpu.usage == pytest.approx(100)  # one core for the second
    assert second.cpu.percent() == pytest.approx(50)
    assert second.host_cpu.usage == pytest.approx(50)  # 200 of 800 jiffies on 2 cores
    assert second.bandwidth_in.usage == pytest.approx(1.0)  # 125,000 B in 1 s = 1 Mbit/s
    assert second.bandwidth_in.percent() == pytest.approx(0.1)


def test_bundle_rates_from_counters() -> None:
    before = {"a": BundleCounters(100, 1000, 50, 500, topics=2)}
    now = {
        "a": BundleCounters(300, 3000, 50, 500, topics=2, producers=1, consumers=2),
        "b": BundleCounters(10, 100, 0, 0, topics=1),
    }
    rates = bundle_rates(before, now, 2.0)
    assert rates["a"].msg_rate_in == 100 and rates["a"].msg_throughput_in == 1000
    assert rates["a"].msg_rate_out == 0 and rates["a"].sessions == 3
    assert rates["b"].msg_rate_in == 5  # new: counted from zero over the interval
    reset = bundle_rates(now, {"a": BundleCounters(5, 50)}, 1.0)  # counters went back
    assert reset["a"].msg_rate_in == 5


async def _ready(counters: dict[str, BundleCounters]) -> dict[str, BundleCounters]:
    return counters


@pytest.fixture
def server() -> Iterator[MemoryMetadataServer]:
    yield MemoryMetadataServer()


async def test_reporter_publishes_on_change_within_intervals(server: MemoryMetadataServer) -> None:
    store = server.connect()
    clock = VirtualClock()
    counters = {"t/n/0x00000000_0xffffffff": BundleCounters(0, 0, topics=1)}
    sampler = HostUsageSampler(read=PROC.__getitem__, cores=2, clock_ticks=100, page_size=4096)
    reporter = LoadReporter(
        store,
        clock,
        "127.0.0.1:8080",
        pulsar_service_url="pulsar://127.0.0.1:6650",
        web_service_url="http://127.0.0.1:8080",
        counters=lambda: _ready(counters),
        sampler=sampler,
        policy=ReportPolicy(threshold_percent=10, min_interval_ms=1000, max_interval_ms=60_000),
    )
    await reporter.start()
    got = await store.get(paths.broker_load("127.0.0.1:8080"))
    assert got is not None and got.stat.ephemeral
    assert BrokerLoadReport.decode(got.value).num_topics == 1

    async def advance(seconds: float) -> None:
        """Move time by one report interval and wait for the reporter's round."""
        rounds = reporter.rounds
        clock.advance(seconds)
        await wait_for(lambda: reporter.rounds > rounds, timeout_s=10)

    await advance(1)
    assert reporter.writes == 1  # nothing moved
    counters["t/n/0x00000000_0xffffffff"] = BundleCounters(1000, 10_000, topics=1)
    await advance(1)
    assert reporter.writes == 2
    report = BrokerLoadReport.decode((await store.get(paths.broker_load("127.0.0.1:8080"))).value)  # type: ignore[union-attr]
    assert report.msg_rate_in == pytest.approx(1000)
    await reporter.set_draining()
    assert reporter.published is not None and reporter.published.draining
    await reporter.close()
    assert await store.get(paths.broker_load("127.0.0.1:8080")) is None


async def test_a_report_left_by_an_earlier_session_is_replaced(
    server: MemoryMetadataServer,
) -> None:
    old = server.connect()
    await old.put(paths.broker_load("b:1"), b"{}", ephemeral=True)
    store = server.connect()
    sampler = HostUsageSampler(read=PROC.__getitem__, cores=1, clock_ticks=100, page_size=4096)
    reporter = LoadReporter(
        store,
        VirtualClock(),
        "b:1",
        pulsar_service_url="",
        web_service_url="",
        counters=lambda: _ready({}),
        sampler=sampler,
        policy=ReportPolicy(),
    )
    await reporter.start()
    got = await store.get(paths.broker_load("b:1"))
    assert got is not None and got.stat.ephemeral_owner == store.session_id
    await reporter.close()
