"""A real cluster for tests: ZooKeeper (the session fixture), bookie processes and
``magnetar broker`` processes under one metadata chroot, plus the official client's view.

Owns: ``Cluster`` (start N bookies and M brokers, find a topic's owner and the leader, kill
or stop brokers) and ``PublishChecker`` (an official-client producer that records every
acknowledged payload, so a test can prove that each one reaches a consumer).
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import tempfile
import threading
import time
import urllib.error
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from support.bookies import BookieFactory
from support.broker_process import BrokerProcess
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer


class Cluster:
    def __init__(
        self,
        zookeeper: ZooKeeperServer,
        bookies: BookieFactory,
        base: pathlib.Path,
        made: list[BrokerProcess],
    ) -> None:
        self.metadata = f"{zookeeper.url}/cluster-{uuid.uuid4().hex[:8]}"
        self.clients: list[pulsar.Client] = []
        self._bookies = bookies
        self._base = base
        self.brokers = made

    def client(self, service_url: str | None = None, timeout_s: int = 60) -> pulsar.Client:
        """An official client, closed when the cluster is torn down (a C++ client left open
        at interpreter exit aborts the process)."""
        c = pulsar.Client(service_url or self.service_url, operation_timeout_seconds=timeout_s)
        self.clients.append(c)
        return c

    def close_clients(self) -> None:
        for c in self.clients:
            with contextlib.suppress(Exception):
                c.close()
        self.clients.clear()

    def start_bookies(self, n: int = 2) -> None:
        self._bookies.start_many(n, metadata=self.metadata)

    def start_broker(self, extra_config: str = "") -> BrokerProcess:
        b = BrokerProcess(
            self._base, f"broker-{len(self.brokers) + 1}", self.metadata, extra_config=extra_config
        )
        self.brokers.append(b)
        return b.start()

    @property
    def running(self) -> list[BrokerProcess]:
        return [b for b in self.brokers if b.running]

    @property
    def service_url(self) -> str:
        """Every running broker, as a client's multi-host service URL."""
        return "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in self.running)

    def by_url(self, service_url: str) -> BrokerProcess:
        return next(b for b in self.brokers if b.service_url == service_url)

    def owner(self, topic: str, timeout_s: float = 60) -> BrokerProcess:
        """The broker owning ``topic`` (a full name), asking any running broker; retried
        while the bundle is being unloaded or split (503: the answer clients retry too)."""

        def lookup() -> BrokerProcess | None:
            try:
                return self.by_url(self.running[0].lookup(topic.replace("://", "/")))
            except urllib.error.HTTPError as exc:
                if exc.code != 503:
                    raise
                return None

        return wait_until(lookup, timeout_s, f"an owner of {topic}", interval_s=0.1)

    def leader_id(self, via: BrokerProcess | None = None) -> str:
        b = via or self.running[0]
        return str(json.loads(b.admin("GET", "/admin/v2/brokers/leaderBroker"))["brokerId"])

    def leader(self) -> BrokerProcess:
        lid = self.leader_id()
        return next(b for b in self.brokers if lid == f"127.0.0.1:{b.web_port}")


class PublishChecker:
    """Publishes ``<prefix>-<n>`` as fast as the producer allows (send_async, bounded by its
    pending queue) in a thread, recording each payload whose receipt came back Ok and when."""

    def __init__(
        self, client: pulsar.Client, topic: str, prefix: str = "m", burst: int = 20
    ) -> None:
        self.producer = client.create_producer(
            topic, batching_enabled=False, send_timeout_millis=120_000, max_pending_messages=200
        )
        self.prefix = prefix
        self.burst = burst
        """Sends between two 5 ms pauses (1: at most ~200 a second)."""
        self.acked: dict[bytes, float] = {}
        self.failed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def start(self) -> PublishChecker:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            payload = f"{self.prefix}-{self.sent}".encode()
            self.sent += 1

            def done(res: pulsar.Result, _mid: object, payload: bytes = payload) -> None:
                with self._lock:
                    if res == pulsar.Result.Ok:
                        self.acked[payload] = time.monotonic()
                    else:
                        self.failed.append(f"{payload!r}: {res}")

            try:
                self.producer.send_async(payload, done)
            except pulsar.PulsarException as exc:  # queue full while reconnecting
                self.failed.append(f"send_async {payload!r}: {exc}")
                self.sent -= 1
                time.sleep(0.01)  # back-off before offering the same payload again
            if self.sent % self.burst == 0:
                time.sleep(0.005)  # a steady load, not a flood, on a 2-core machine

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def first_ack_after(self, t: float) -> float | None:
        with self._lock:
            later = [a for a in self.acked.values() if a > t]
        return min(later) if later else None

    def ack_times(self, start: float, end: float) -> list[float]:
        """Receipt times within [start, end], sorted."""
        with self._lock:
            return sorted(t for t in self.acked.values() if start <= t <= end)

    def stop(self) -> dict[bytes, float]:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush()
        with self._lock:
            return dict(self.acked)


def drain(
    consumer: pulsar.Consumer,
    expected: set[bytes],
    timeout_s: float,
    ids: dict[bytes, list[str]] | None = None,
) -> list[bytes]:
    """Receive (and acknowledge) until every payload of ``expected`` arrived; all received.
    ``ids`` collects each payload's message ids (a payload stored twice has two)."""
    got: list[bytes] = []
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while not expected <= seen:
        left = deadline - time.monotonic()
        if left <= 0:
            missing = sorted(expected - seen)[:10]
            raise AssertionError(f"{len(expected - seen)} acknowledged messages missing: {missing}")
        try:
            msg = consumer.receive(int(min(left, 5) * 1000))
        except pulsar.Timeout:
            continue
        got.append(msg.data())
        seen.add(msg.data())
        if ids is not None:
            ids.setdefault(msg.data(), []).append(str(msg.message_id()))
        consumer.acknowledge(msg)
    return got


@contextlib.contextmanager
def running_cluster(
    zookeeper: ZooKeeperServer,
    factory: BookieFactory,
    base: pathlib.Path,
    *,
    bookies: int = 2,
    brokers: int = 0,
    extra_config: str = "",
) -> Iterator[Cluster]:
    """A ``Cluster`` with ``bookies`` bookies and ``brokers`` brokers started; on exit its
    clients are closed and every broker it started is killed (the bookies belong to the
    factory)."""
    made: list[BrokerProcess] = []
    cluster = Cluster(zookeeper, factory, base, made)
    try:
        cluster.start_bookies(bookies)
        for _ in range(brokers):
            cluster.start_broker(extra_config)
        yield cluster
    finally:
        cluster.close_clients()
        for b in made:
            b.kill()


@pytest.fixture
def two_broker_cluster(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[Cluster]:
    """Two bookies and two brokers, started; ``wait_for_brokers`` before counting on the
    leader placing bundles on both."""
    with running_cluster(
        zookeeper_server,
        bookie_factory,
        tmp_path,
        brokers=2,
        extra_config="metadata_store_session_timeout_millis=30000\n",
    ) as c:
        yield c


def wait_for_brokers(via: BrokerProcess, n: int, timeout_s: float = 60) -> None:
    """Until ``via`` holds ``n`` brokers' load reports (the leader then places bundles on
    each of them)."""
    wait_until(
        lambda: len(json.loads(via.admin("GET", "/admin/v2/brokers/test"))) == n,
        timeout_s,
        f"{n} load reports",
    )


@contextlib.contextmanager
def own_cluster(
    prefix: str, *, bookies: int = 2, brokers: int = 2, extra_config: str = ""
) -> Iterator[Cluster]:
    """A cluster with its own ZooKeeper, for tools outside pytest (benchmarks): started, then
    every process stopped on exit."""
    base = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    zk = ZooKeeperServer()
    zk.start()
    factory = BookieFactory(base / "bookies")
    try:
        with running_cluster(
            zk, factory, base, bookies=bookies, brokers=brokers, extra_config=extra_config
        ) as cluster:
            yield cluster
    finally:
        factory.close()
        zk.stop()


def lost_and_duplicated(
    consumer: pulsar.Consumer, acked: dict[bytes, float], timeout_s: float = 300
) -> tuple[int, int]:
    """Drain ``consumer`` until every acknowledged payload arrived: (lost, duplicated)."""
    got = drain(consumer, set(acked), timeout_s=timeout_s)
    return len(set(acked) - set(got)), len(got) - len(set(got))
