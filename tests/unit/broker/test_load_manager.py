"""The load manager over an in-memory metadata store: leadership, placement, failure
detection, deposing a dead leader, shedding and split rounds (actions recorded, not done)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator

import pytest
from support.waiting import wait_for

from magnetar.broker.errors import ResourceNotFound
from magnetar.broker.loadbalance import BrokerLoadReport, BundleStats, ResourceUsage, SheddingConfig
from magnetar.broker.loadbalance.manager import (
    LeaderInfo,
    LoadManager,
    LoadManagerConfig,
    NotLeader,
    ProbeResult,
)
from magnetar.broker.loadbalance.split import SplitAlgorithm, SplitThresholds
from magnetar.clock import VirtualClock
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer, MemoryMetadataStore

MB = 1024 * 1024


class Actions:
    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.silent: set[str] = set()
        self.refuse_once = False
        self.probes = 0
        self.unloads: list[tuple[str, str]] = []
        self.splits: list[tuple[str, str, SplitAlgorithm, bool]] = []
        self.split_refusal: Exception | None = None
        self.deleted_namespaces: set[str] = set()

    async def unload(self, owner: BrokerLoadReport, bundle: str) -> None:
        self.unloads.append((owner.broker_id, bundle))

    async def split(
        self, owner: BrokerLoadReport, bundle: str, algorithm: SplitAlgorithm, unload: bool
    ) -> None:
        if self.split_refusal is not None:
            raise self.split_refusal
        self.splits.append((owner.broker_id, bundle, algorithm, unload))

    async def bundle_count(self, namespace: str) -> int:
        if namespace in self.deleted_namespaces:
            raise ResourceNotFound("Namespace does not exist")
        return 4

    async def probe(self, broker: BrokerLoadReport) -> ProbeResult:
        self.probes += 1
        if self.refuse_once and broker.broker_id in self.refused:
            self.refused.discard(broker.broker_id)
            return ProbeResult.REFUSED
        if broker.broker_id in self.silent:
            return ProbeResult.TIMEOUT
        return ProbeResult.REFUSED if broker.broker_id in self.refused else ProbeResult.ALIVE


def report(name: str, cpu: float, bundles: dict[str, float]) -> BrokerLoadReport:
    stats = {b: BundleStats(1000, 1000, mbs * MB, mbs * MB, topics=5) for b, mbs in bundles.items()}
    total = sum(s.msg_throughput_in for s in stats.values())
    return BrokerLoadReport(
        name,
        f"pulsar://{name}",
        f"http://{name}",
        cpu=ResourceUsage(cpu, 100),
        msg_throughput_in=total,
        msg_throughput_out=total,
        bundles=stats,
        last_update_ms=1,
    )


class Cluster:
    def __init__(self) -> None:
        self.server = MemoryMetadataServer()
        self.clock = VirtualClock()
        self.actions = Actions()
        self.managers: dict[str, LoadManager] = {}
        self.stores: dict[str, MemoryMetadataStore] = {}

    async def broker(self, name: str, cpu: float, bundles: dict[str, float]) -> LoadManager:
        store = self.stores[name] = self.server.connect()
        r = report(name, cpu, bundles)
        await store.put(paths.broker_load(name), r.encode(), ephemeral=True)
        for bundle in bundles:
            t, ns, rng = bundle.split("/")
            await store.put(
                paths.bundle_ownership(t, ns, rng),
                json.dumps({"nativeUrl": r.pulsar_service_url}).encode(),
                ephemeral=True,
            )
        config = LoadManagerConfig(
            shedding=SheddingConfig(min_throughput_bytes=0),
            split=SplitThresholds(max_msg_rate=1500),
            probe_failures=2,
        )
        lm = LoadManager(
            store, self.clock, LeaderInfo(name, f"http://{name}", f"pulsar://{name}"),
            config, self.actions, rng=random.Random(1),
        )  # fmt: skip
        await lm.start()
        self.managers[name] = lm
        return lm


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster()
    yield c
    for lm in c.managers.values():
        await lm.close()


async def test_one_leader_places_and_followers_refuse(cluster: Cluster) -> None:
    a = await cluster.broker("a", 80, {"t/n/0x00000000_0x80000000": 1})
    b = await cluster.broker("b", 5, {})
    await wait_for(lambda: len(a.reports) == 2 and len(b.reports) == 2)
    assert a.is_leader and not b.is_leader
    assert (await b.leader()) == a.me
    chosen = await a.select_broker("t/n/0x80000000_0xffffffff")
    assert chosen.broker_id == "b"  # far below the average usage
    with pytest.raises(NotLeader):
        await b.select_broker("t/n/0x80000000_0xffffffff")
    assert a.statistics().bundles_assigned == 1


async def round_of(cluster: Cluster, lm: LoadManager) -> None:
    """One ``run_round``, advancing the virtual clock while it waits (re-probes)."""
    task = asyncio.ensure_future(lm.run_round())
    while not task.done():
        await asyncio.sleep(0.001)
        cluster.clock.advance(0.05)
    await task


async def test_a_broker_refusing_probes_is_declared_dead_and_its_bundles_freed(
    cluster: Cluster,
) -> None:
    a = await cluster.broker("a", 10, {})
    await cluster.broker("b", 10, {"t/n/0x00000000_0x80000000": 1, "t/n/0x80000000_0xffffffff": 1})
    await wait_for(lambda: len(a.reports) == 2)
    owner_path = paths.bundle_ownership("t", "n", "0x00000000_0x80000000")
    cluster.actions.refused.add("b")
    cluster.actions.refuse_once = True
    await round_of(cluster, a)
    assert await cluster.stores["a"].get(owner_path) is not None  # one refusal is not enough
    cluster.actions.refuse_once = False
    cluster.actions.refused.add("b")
    probes = cluster.actions.probes
    await round_of(cluster, a)  # the refusal is confirmed within the round, not the next
    assert cluster.actions.probes == probes + 2
    assert await cluster.stores["a"].get(owner_path) is None
    assert await cluster.stores["a"].get(paths.broker_load("b")) is None
    assert "b" not in a.reports and a.statistics().brokers_declared_dead == 1


async def test_a_broker_answering_no_probe_is_dead_after_the_unresponsive_bound(
    cluster: Cluster,
) -> None:
    """A frozen or partitioned broker (probes time out) is declared dead once it answered
    none for ``unresponsive_ms``, not before; an answer in between starts the count again."""
    a = await cluster.broker("a", 10, {})
    await cluster.broker("b", 10, {"t/n/0x00000000_0xffffffff": 1})
    await wait_for(lambda: len(a.reports) == 2)
    owner_path = paths.bundle_ownership("t", "n", "0x00000000_0xffffffff")
    cluster.actions.silent.add("b")
    for _ in range(5):  # many unanswered probes, but no time passes
        await a.run_round()
    assert await cluster.stores["a"].get(owner_path) is not None
    cluster.clock.advance(2.0)
    cluster.actions.silent.clear()
    await a.run_round()  # it answered: the silence starts over
    cluster.actions.silent.add("b")
    await a.run_round()
    cluster.clock.advance(2.0)
    await a.run_round()
    assert await cluster.stores["a"].get(owner_path) is not None  # silent 2 s < 2.5 s
    cluster.clock.advance(0.5)
    await a.run_round()
    assert await cluster.stores["a"].get(owner_path) is None
    assert a.statistics().brokers_declared_dead == 1


async def test_a_broker_that_left_and_came_back_starts_with_no_silence(
    cluster: Cluster,
) -> None:
    """The silence of a broker that left (report gone) is forgotten: back much later, one
    unanswered probe does not make it dead."""
    a = await cluster.broker("a", 10, {})
    await cluster.broker("b", 10, {"t/n/0x00000000_0xffffffff": 1})
    await wait_for(lambda: len(a.reports) == 2)
    cluster.actions.silent.add("b")
    await a.run_round()  # one unanswered probe
    raw = (await cluster.stores["b"].get(paths.broker_load("b"))).value  # type: ignore[union-attr]
    await cluster.stores["b"].delete(paths.broker_load("b"))
    await wait_for(lambda: "b" not in a.reports)
    await a.run_round()
    cluster.clock.advance(10)
    await cluster.stores["b"].put(paths.broker_load("b"), raw, ephemeral=True)
    await wait_for(lambda: "b" in a.reports)
    await a.run_round()
    assert await cluster.stores["a"].get(paths.bundle_ownership("t", "n", "0x00000000_0xffffffff"))
    assert a.statistics().brokers_declared_dead == 0


async def test_followers_depose_a_dead_leader_and_free_its_bundles(cluster: Cluster) -> None:
    a = await cluster.broker("a", 10, {"t/n/0x00000000_0xffffffff": 1})
    b = await cluster.broker("b", 10, {})
    await wait_for(lambda: len(b.reports) == 2 and a.is_leader)
    cluster.actions.refused.add("a")
    await round_of(cluster, b)
    await wait_for(lambda: b.is_leader)
    assert (await b.leader()) == b.me
    # the follower that found the leader dead freed its bundles too: one detection, not two
    owner_path = paths.bundle_ownership("t", "n", "0x00000000_0xffffffff")
    assert await cluster.stores["b"].get(owner_path) is None
    assert "a" not in b.reports


async def test_shedding_and_split_rounds_ask_the_owner(cluster: Cluster) -> None:
    a = await cluster.broker(
        "a", 90, {"t/n/0x00000000_0x40000000": 30, "t/n/0x40000000_0x80000000": 5}
    )
    await cluster.broker("b", 10, {"t/n/0x80000000_0xffffffff": 5})
    await wait_for(lambda: len(a.reports) == 2)
    assert await a.shedding_round() == 1
    assert cluster.actions.unloads == [("a", "t/n/0x00000000_0x40000000")]
    assert await a.shedding_round() == 0  # moved within the grace period; one stays
    assert await a.split_round() == 3  # every bundle carries 2,000 msg/s > 1,500
    assert {s[1] for s in cluster.actions.splits} == {
        "t/n/0x00000000_0x40000000",
        "t/n/0x40000000_0x80000000",
        "t/n/0x80000000_0xffffffff",
    }
    assert all(s[2] is SplitAlgorithm.RANGE_EQUALLY_DIVIDE and s[3] for s in cluster.actions.splits)


async def test_a_refused_split_is_logged_once_not_every_round(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    a = await cluster.broker("a", 50, {"t/n/0x00000000_0xffffffff": 30})
    await wait_for(lambda: len(a.reports) == 1)
    cluster.actions.split_refusal = ValueError("the bundle holds one topic")
    with caplog.at_level(logging.INFO, logger="magnetar.broker.loadbalance.manager"):
        assert await a.split_round() == 0
        assert await a.split_round() == 0
        assert await a.split_round() == 0
    refused = [r for r in caplog.records if "split of" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
    assert len([r for r in caplog.records if "splitting bundle" in r.getMessage()]) == 1
    cluster.actions.split_refusal = None
    assert await a.split_round() == 1  # still retried each round


async def test_a_namespace_deleted_during_a_split_round_is_skipped(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Its bundles are still in the load reports; the others are split as usual."""
    a = await cluster.broker(
        "a", 50, {"t/gone/0x00000000_0xffffffff": 30, "t/n/0x00000000_0xffffffff": 30}
    )
    await wait_for(lambda: len(a.reports) == 1)
    cluster.actions.deleted_namespaces.add("t/gone")
    with caplog.at_level(logging.INFO, logger="magnetar.broker.loadbalance.manager"):
        assert await a.split_round() == 1
    assert [s[1] for s in cluster.actions.splits] == ["t/n/0x00000000_0xffffffff"]
    gone = [r for r in caplog.records if "t/gone" in r.getMessage()]
    assert len(gone) == 1 and gone[0].levelno == logging.INFO and gone[0].exc_info is None


async def test_a_bundle_keeps_its_placement_until_it_is_owned(cluster: Cluster) -> None:
    """Lookups racing for one unowned bundle all get the broker chosen first (Pulsar's
    preallocated bundles); a draining or vanished choice is made again."""
    a = await cluster.broker("a", 10, {})
    await cluster.broker("b", 10, {})
    await wait_for(lambda: len(a.reports) == 2)
    first = await a.select_broker("t/n/0x00000000_0xffffffff")
    for _ in range(5):
        assert (await a.select_broker("t/n/0x00000000_0xffffffff")).broker_id == first.broker_id
    assert a.statistics().bundles_assigned == 1


async def test_a_restarted_broker_drops_its_earlier_candidacy(cluster: Cluster) -> None:
    """A SIGKILLed broker's election node outlives it until its session expires; restarted
    under the same id, the broker deletes it, so the queue never waits on a dead node."""
    await cluster.broker("a", 10, {})
    old = cluster.server.connect()  # an earlier session of broker "b"
    await old.put(
        paths.LOADBALANCE_LEADER + "/n_",
        LeaderInfo("b", "http://b", "pulsar://b").encode(),
        ephemeral=True,
        sequential=True,
    )
    await cluster.broker("b", 10, {})
    store = cluster.stores["a"]
    names = await store.children(paths.LOADBALANCE_LEADER)
    values = [await store.get(f"{paths.LOADBALANCE_LEADER}/{n}") for n in names]
    owners = [v.stat.ephemeral_owner for v in values if v is not None]
    assert old.session_id not in owners
    assert len(names) == 2
