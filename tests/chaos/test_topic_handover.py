"""A topic moved back and forth between two broker processes under load loses nothing.

Real processes: ZooKeeper, two bookies (E = Qw = Qa = 2), two ``magnetar broker`` processes.
One official ``pulsar-client`` producer (service URL listing both brokers) publishes
continuously; a consumer on subscription ``s`` receives and acknowledges continuously. The
topic's bundle moves between the brokers by admin bundle unload, SIGTERM and SIGKILL (the
killed or stopped broker is started again so there are always two). Each move makes the new
owner open a new ledger: with per-broker id blocks that ledger could get a smaller id than the
previous one, and since positions compare by ledger id first the subscription then skipped it.

The checker proves, for every publish the client got a receipt for:
- it was delivered to subscription ``s``;
- it is readable by a reader from earliest, in publish order, unless its ledger was trimmed;
- every trimmed ledger held only publishes the subscription had already received: a trimmed
  ledger's metadata is gone, so a publish in it delivered at all was delivered before the
  trim. The brokers log ``trimming ledgers [...]`` before they store the list without them
  (a broker SIGKILLed between the store's write and its answer never logs the outcome), so
  the logged set holds every trimmed ledger (and may hold one whose trim did not land);
and that the managed ledger's ledger ids strictly increase.
Retention keeps 1 MB of consumed ledgers, so trims happen during the run and the reader has
several ledgers (from different owners) to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import pathlib
import re
import threading
import time
import urllib.error
import uuid
from collections.abc import Callable

import pulsar
import pytest
from support.bookies import BookieFactory
from support.broker_process import BrokerProcess
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

from magnetar.broker.namespace.bundles import NamespaceBundles
from magnetar.zk import paths
from magnetar.zk.factory import open_metadata_store

MOVES = ("unload", "sigterm", "unload", "sigkill", "unload", "unload") * 3
PAYLOAD_PAD = b"." * 1000


class _Load:
    """A producer thread and a consumer thread; records receipts and deliveries."""

    def __init__(self, service_url: str, topic: str) -> None:
        self.client = pulsar.Client(
            service_url,
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
        )
        self.consumer = self.client.subscribe(
            topic,
            "s",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        self.producer = self.client.create_producer(
            topic, batching_enabled=False, send_timeout_millis=60_000
        )
        self.acked: dict[int, tuple[int, int]] = {}  # sequence -> (ledger, entry) of receipt
        self.failed_sends = 0
        self.received: set[int] = set()
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def _produce(self) -> None:
        seq = 0
        while not self.stop_producing.is_set():
            try:
                mid = self.producer.send(b"%d:" % seq + PAYLOAD_PAD)
            except pulsar.PulsarException:
                self.failed_sends += 1  # no receipt: the checker owes it nothing
            except BaseException as exc:  # a failed thread must fail the test
                self.errors.append(exc)
                return
            else:
                self.acked[seq] = (mid.ledger_id(), mid.entry_id())
            seq += 1

    def _consume(self) -> None:
        while not self.stop_consuming.is_set():
            try:
                msg = self.consumer.receive(500)
            except pulsar.Timeout:
                continue
            except BaseException as exc:
                self.errors.append(exc)
                return
            self.received.add(int(msg.data().split(b":", 1)[0]))
            try:
                self.consumer.acknowledge(msg)
            except pulsar.PulsarException:
                pass  # the ack is lost with the connection: redelivered, still counted once

    def join(self) -> None:
        self.stop_producing.set()
        self.stop_consuming.set()
        for t in self._threads:
            t.join(90)
            assert not t.is_alive(), "load thread stuck"


def test_topic_moves_between_brokers_lose_no_acknowledged_publish(
    zookeeper_server: ZooKeeperServer,
    bookie_factory: BookieFactory,
    broker_processes: list[BrokerProcess],
    tmp_path: pathlib.Path,
) -> None:
    metadata = f"{zookeeper_server.url}/handover-{uuid.uuid4().hex[:8]}"
    bookie_factory.start_many(2, metadata=metadata)
    extra = "retention_check_interval_in_seconds=1\nmetadata_store_session_timeout_millis=4000\n"
    b1 = BrokerProcess(tmp_path, "broker-1", metadata, extra_config=extra).start()
    broker_processes.append(b1)
    b2 = BrokerProcess(tmp_path, "broker-2", metadata, extra_config=extra).start()
    broker_processes.append(b2)
    by_url = {b.service_url: b for b in (b1, b2)}

    local = f"handover-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://public/default/{local}"
    lookup_path = f"persistent/public/default/{local}"
    b1.admin(
        "POST",
        "/admin/v2/namespaces/public/default/retention",
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1},
    )
    boundaries = json.loads(b1.admin("GET", "/admin/v2/namespaces/public/default/bundles"))
    bundles = NamespaceBundles(tuple(int(b, 16) for b in boundaries["boundaries"]))
    bundle = bundles.find(topic).name

    # Broker 2 (started second: its ledger ids come from a later block) owns the topic first,
    # as in the report: it takes the unowned bundle on an authoritative lookup (the
    # load-manager leader would otherwise choose).
    unload_path = f"/admin/v2/namespaces/public/default/{bundle}/unload"
    b2.admin("GET", f"/lookup/v2/topic/{lookup_path}?authoritative=true")
    assert b2.lookup(lookup_path) == b2.service_url
    # An unload sent to a broker that does not own the bundle points at the owner.
    with pytest.raises(urllib.error.HTTPError) as redirect:
        b1.admin("PUT", unload_path)
    assert redirect.value.code == 307
    assert redirect.value.headers["Location"] == b2.web_url + unload_path
    load = _Load(f"pulsar://127.0.0.1:{b1.port},127.0.0.1:{b2.port}", topic)
    load.start()
    owners = [b2.service_url]

    def progressed(since: int) -> Callable[[], bool]:
        return lambda: bool(load.errors) or len(load.acked) >= since + 30

    try:
        wait_until(progressed(0), 60, "the first publishes")
        for action in MOVES:
            owner = by_url[owners[-1]]
            other = b1 if owner is b2 else b2
            owners.append(_move(owner, other, action, lookup_path, bundle))
            wait_until(progressed(len(load.acked)), 60, f"publishes after {action}")
            assert not load.errors, load.errors
        load.stop_producing.set()
        # bounded: on a timeout the assertions below say what is missing
        with contextlib.suppress(AssertionError):
            wait_until(lambda: bool(load.errors) or set(load.acked) <= load.received, 60)
    finally:
        load.join()
    assert not load.errors, load.errors
    missing = sorted(set(load.acked) - load.received)
    assert not missing, (
        f"{len(missing)} acknowledged publishes never delivered, e.g. "
        f"{[(s, load.acked[s]) for s in missing[:5]]}"
    )
    moves = sum(a != b for a, b in itertools.pairwise(owners))
    assert moves >= len(MOVES) // 2, owners

    # The managed ledger's ledgers: ids strictly increase.
    async def ledger_list() -> list[int]:
        store = await open_metadata_store(metadata)
        try:
            got = await store.get(paths.managed_ledger(f"public/default/persistent/{local}"))
            assert got is not None
            return [int(d["id"]) for d in json.loads(got.value)["ledgers"]]
        finally:
            await store.close()

    ledgers = asyncio.run(ledger_list())
    assert ledgers == sorted(set(ledgers)), ledgers

    # Trimmed ledgers held only publishes the subscription had received.
    trimmed: set[int] = set()
    pattern = re.compile(
        re.escape(f"public/default/persistent/{local}") + r": trimming ledgers \[([\d, ]+)\]"
    )
    for b in (b1, b2):
        for m in pattern.finditer(b.log_text()):
            trimmed |= {int(x) for x in m.group(1).split(",")}
    trimmed -= set(ledgers)  # logged, but the list write did not land (its owner was fenced)
    for seq, (lid, _) in load.acked.items():
        assert lid not in trimmed or seq in load.received

    # A reader from earliest reads every receipted publish not in a trimmed ledger, in order.
    expected = sorted(s for s, (lid, _) in load.acked.items() if lid not in trimmed)
    reader = load.client.create_reader(topic, pulsar.MessageId.earliest)
    read: list[int] = []
    positions: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while (not expected or not read or read[-1] < expected[-1]) and time.monotonic() < deadline:
        try:
            msg = reader.read_next(2000)
        except pulsar.Timeout:
            continue
        read.append(int(msg.data().split(b":", 1)[0]))
        positions.append((msg.message_id().ledger_id(), msg.message_id().entry_id()))
    load.client.close()
    assert positions == sorted(positions)
    assert read == sorted(read), "the reader's order is not the publish order"
    unread = sorted(set(expected) - set(read))
    lost = sorted({load.acked[s][0] for s in unread})
    said = [
        line
        for b in (b1, b2)
        for line in b.log_text().splitlines()
        if any(f"ledger {lid}" in line or f"{lid}]" in line or f" {lid}," in line for lid in lost)
    ]
    assert not unread, (
        f"{len(unread)} acknowledged publishes not readable from earliest, e.g. "
        f"{[(s, load.acked[s]) for s in unread[:5]]}; ledgers {ledgers}, trimmed {trimmed}; "
        f"what the brokers logged about ledgers {lost}: {said[-20:]}"
    )
    print(
        f"moves={moves} acked={len(load.acked)} failed_sends={load.failed_sends} "
        f"ledgers={ledgers} trimmed={sorted(trimmed)}"
    )


def _try_lookup(broker: BrokerProcess, lookup_path: str) -> str | None:
    """``broker``'s answer for the topic, taking the bundle if nobody owns it (an
    authoritative lookup: the load-manager leader would otherwise choose the owner)."""
    try:
        return broker.lookup(lookup_path + "?authoritative=true")
    except OSError:
        return None


def _move(
    owner: BrokerProcess, other: BrokerProcess, action: str, lookup_path: str, bundle: str
) -> str:
    """Move the bundle away from ``owner``; returns the new owner's service URL."""
    if action == "unload":
        owner.admin("PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload")
    elif action == "sigterm":
        assert owner.stop() == 0, owner.log_text()[-3000:]
    else:
        owner.kill()
    # An authoritative lookup at the other broker takes the bundle once it is free: when the
    # owner is down (after a SIGKILL, once the load-manager leader declared it dead), or
    # after an unload (unless the client's own lookup placed it first: any owner then).
    new_owner: list[str] = []

    def assigned() -> bool:
        got = _try_lookup(other, lookup_path)
        if got is not None and (got == other.service_url or action == "unload"):
            new_owner.append(got)
            return True
        return False

    wait_until(assigned, 60, f"handover after {action}")
    if not owner.running:
        owner.start()
    return new_owner[0]
