"""What this broker process and its host use: CPU, memory, network (Linux ``/proc``).

Owns: parsing ``/proc/stat``, ``/proc/self/stat``, ``/proc/meminfo``, ``/proc/self/statm``
and ``/proc/net/dev`` (pure functions over their text), and ``HostUsageSampler``, which turns
two successive readings into usages. The broker's ``cpu`` figure is this process's CPU in
percent of one core, out of ``100 x cores``: brokers that share a host (tests, several brokers
per machine) must not see each other's load, and in a container the process is the
container. The host's CPU is reported beside it. Bandwidth is counted over every interface
but loopback unless ``include_loopback`` (a cluster on one host talks over loopback), in
Mbit/s out of the NIC speed (``nic_speed_gbps``; 0 = unknown, then usage reads 0 %).
Must not know: topics, bundles, ZooKeeper. Reading files is injected (``read``) for tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.broker.loadbalance.load_data import ResourceUsage


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def parse_proc_stat_cpu(text: str) -> tuple[int, int]:
    """(busy, total) jiffies of the ``cpu`` line of ``/proc/stat``."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
            total = sum(values[:8])  # guest time is already counted in user
            return total - idle, total
    raise ValueError("no cpu line in /proc/stat")


def parse_process_cpu_ticks(text: str) -> int:
    """utime + stime of ``/proc/<pid>/stat`` (fields after the parenthesised name)."""
    rest = text.rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def parse_meminfo_mb(text: str) -> tuple[float, float]:
    """(total, available) MB of ``/proc/meminfo``."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key] = int(parts[0]) / 1024
    return values["MemTotal"], values.get("MemAvailable", values.get("MemFree", 0.0))


def parse_net_dev_bytes(text: str, include_loopback: bool) -> tuple[int, int]:
    """(received, sent) bytes over the interfaces of ``/proc/net/dev``."""
    rx = tx = 0
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if not rest or (name.strip() == "lo" and not include_loopback):
            continue
        fields = rest.split()
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


@dataclass(frozen=True, slots=True)
class HostUsage:
    cpu: ResourceUsage  # this process
    host_cpu: ResourceUsage
    memory: ResourceUsage  # this process's RSS (MB) of the host's memory
    bandwidth_in: ResourceUsage  # Mbit/s
    bandwidth_out: ResourceUsage


class HostUsageSampler:
    """Usages over the interval between two ``sample`` calls (the first covers nothing)."""

    def __init__(
        self,
        *,
        nic_speed_gbps: float = 0.0,
        include_loopback: bool = False,
        read: Callable[[str], str] = _read,
        cores: int | None = None,
        clock_ticks: int | None = None,
        page_size: int | None = None,
    ) -> None:
        self._read = read
        self._nic_mbit = nic_speed_gbps * 1000
        self._loopback = include_loopback
        self._cores = cores or os.cpu_count() or 1
        self._ticks = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._page = page_size or os.sysconf("SC_PAGE_SIZE")
        self._last: tuple[float, int, int, int, int, int] | None = None

    def sample(self, now_ms: float) -> HostUsage:
        busy, total = parse_proc_stat_cpu(self._read("/proc/stat"))
        proc = parse_process_cpu_ticks(self._read("/proc/self/stat"))
        rx, tx = parse_net_dev_bytes(self._read("/proc/net/dev"), self._loopback)
        mem_total, _ = parse_meminfo_mb(self._read("/proc/meminfo"))
        rss_pages = int(self._read("/proc/self/statm").split()[1])
        rss_mb = rss_pages * self._page / (1024 * 1024)
        limit = 100.0 * self._cores
        last, self._last = self._last, (now_ms, busy, total, proc, rx, tx)
        if last is None or now_ms <= last[0]:
            zero = ResourceUsage(0.0, limit)
            net = ResourceUsage(0.0, self._nic_mbit)
            return HostUsage(zero, zero, ResourceUsage(rss_mb, mem_total), net, net)
        seconds = (now_ms - last[0]) / 1000
        d_total = max(total - last[2], 1)
        host = limit * (busy - last[1]) / d_total
        process = 100.0 * (proc - last[3]) / self._ticks / seconds
        mbit_in = (rx - last[4]) * 8 / 1e6 / seconds
        mbit_out = (tx - last[5]) * 8 / 1e6 / seconds
        return HostUsage(
            ResourceUsage(min(process, limit), limit),
            ResourceUsage(host, limit),
            ResourceUsage(rss_mb, mem_total),
            ResourceUsage(mbit_in, self._nic_mbit),
            ResourceUsage(mbit_out, self._nic_mbit),
        )


__all__ = [
    "HostUsage",
    "HostUsageSampler",
    "parse_meminfo_mb",
    "parse_net_dev_bytes",
    "parse_proc_stat_cpu",
    "parse_process_cpu_ticks",
]
