"""The replicator over in-memory fakes of its topic and of the remote cluster, on virtual
time: everything arrives once and in order, the cursor moves only over what the remote
stored (or what needs no replication), flow control and the dispatch rate bound what is in
flight, failures are retried with back-off and their reason shown, and a restart resends
only what the remote recognises."""

from __future__ import annotations

import random

import pytest
from support.autojump import AutojumpClock
from support.replication_fakes import FakeRemote, FakeSource, batch_entry_bytes, entry_bytes
from support.waiting import wait_for

from magnetar.broker.ledger.position import Position
from magnetar.broker.policies.model import Rate
from magnetar.broker.replication.replicator import Replicator, ReplicatorSettings
from magnetar.broker.replication.states import State
from magnetar.broker.topics.replication_names import ReplicationLink
from magnetar.client.protocol import EntryView, pb

LINK = ReplicationLink("east", "west")


def _payloads(remote: FakeRemote) -> list[bytes]:
    return [EntryView.parse(e.headers_and_payload).payload for e in remote.stored]


def _replicator(
    source: FakeSource, remote: FakeRemote, clock: AutojumpClock, **settings: object
) -> Replicator:
    rep = Replicator(
        LINK,
        source,
        remote,
        ReplicatorSettings(**settings),  # type: ignore[arg-type]
        clock=clock,
        rng=random.Random(7),
    )
    return rep


async def _caught_up(rep: Replicator, source: FakeSource) -> None:
    last = source.entries[-1].position

    def done() -> bool:
        rep.check_invariants()
        return source.mark_delete_position == last

    await wait_for(
        done, what=lambda: f"mark-delete at {last}: {rep!r} {source.mark_delete_position}"
    )


async def test_everything_arrives_once_in_order_and_the_cursor_follows() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote()
        for i in range(250):
            source.add(entry_bytes(f"m{i}".encode()))
        rep = _replicator(source, remote, clock)
        rep.start()
        await _caught_up(rep, source)
        assert _payloads(remote) == [f"m{i}".encode() for i in range(250)]
        assert remote.duplicates == 0
        assert [e.sequence_id for e in remote.stored] == sorted(
            e.sequence_id for e in remote.stored
        )
        assert remote.producers[0].name == "pulsar.repl.east-->west"
        assert remote.producers[0].topic == source.topic
        stats = rep.statistics()
        assert stats.connected and stats.replication_backlog == 0
        assert stats.counters.messages_out == 250
        # entries added later wake it up
        source.add(batch_entry_bytes([b"x", b"y"]))
        await _caught_up(rep, source)
        assert rep.statistics().counters.messages_out == 252
        await rep.stop()
        assert rep.state is State.STOPPED and remote.producers[0].closed
        assert source.listeners == []


async def test_skipped_entries_move_the_cursor_and_are_never_sent() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote()
        source.add(entry_bytes(b"a"))
        source.add(entry_bytes(b"from-central", replicated_from="central"))
        source.add(entry_bytes(b"local-only", replicate_to=["__local__"]))
        source.add(entry_bytes(b"b", replicate_to=["west"]))
        source.add(entry_bytes(b"marker", marker_type=12))
        rep = _replicator(source, remote, clock)
        rep.start()
        await _caught_up(rep, source)
        assert _payloads(remote) == [b"a", b"b"]
        assert rep.statistics().counters.entries_skipped == 3
        await rep.stop()


async def test_a_skip_only_tail_still_moves_the_cursor() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote()
        for _ in range(3):
            source.add(entry_bytes(b"loop", replicated_from="west"))
        rep = _replicator(source, remote, clock)
        rep.start()
        await _caught_up(rep, source)
        assert remote.stored == []
        await rep.stop()


async def test_in_flight_entries_are_bounded_by_the_queue_size() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote(hold=True)
        for i in range(40):
            source.add(entry_bytes(b"%d" % i))
        rep = _replicator(source, remote, clock, producer_queue_size=5, read_batch_max=3)
        rep.start()
        await wait_for(lambda: remote.in_flight == 5, what="the window full")
        reads = source.reads
        for _ in range(20):
            await clock.sleep(1)
        assert remote.in_flight == 5 and source.reads == reads  # nothing read beyond it
        assert source.mark_delete_position == Position(7, -1)
        assert rep.statistics().in_flight == 5
        remote.release()
        await _caught_up(rep, source)
        assert len(remote.stored) == 40
        assert remote.producers[0].max_in_flight <= 5
        await rep.stop()


async def test_the_replicator_dispatch_rate_paces_it() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote()
        for i in range(50):
            source.add(entry_bytes(b"%d" % i))
        rep = _replicator(source, remote, clock, dispatch_rate=Rate(msgs=10, period_s=1))
        t0 = clock.monotonic_ms()
        rep.start()
        await _caught_up(rep, source)
        elapsed_s = (clock.monotonic_ms() - t0) / 1000
        assert elapsed_s >= 3.5, elapsed_s  # 50 messages at 10/s, one period's burst first
        assert len(remote.stored) == 50
        # lifting the rate: the rest goes at once
        rep.update_settings(message_ttl_s=0, dispatch_rate=Rate())
        for i in range(50):
            source.add(entry_bytes(b"more%d" % i))
        t1 = clock.monotonic_ms()
        await _caught_up(rep, source)
        assert clock.monotonic_ms() - t1 < 1000
        await rep.stop()


async def test_a_remote_down_is_retried_with_back_off_and_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with AutojumpClock() as clock:
        source = FakeSource()
        reasons = ["connection refused", "connection refused", "authentication failed"]
        remote = FakeRemote(down_reasons=list(reasons))
        source.add(entry_bytes(b"waiting"))
        rep = _replicator(source, remote, clock, retry_initial_ms=1_000, retry_max_ms=10_000)
        rep.start()
        await wait_for(lambda: rep.state is State.BACKING_OFF, what="backing off")
        down = rep.statistics()
        assert (down.state, down.connected, down.last_error) == (
            "BackingOff",
            False,
            "connection refused",
        )
        assert down.replication_backlog == 1
        await wait_for(lambda: remote.stored, what="replication once the remote is back")
        assert "authentication failed; retrying in" in caplog.text
        stats = rep.statistics()
        assert stats.counters.retries == 3 and stats.last_error == ""
        assert stats.to_json()["connected"] is True
        await _caught_up(rep, source)
        await rep.stop()


async def test_back_off_doubles_up_to_its_maximum() -> None:
    async with AutojumpClock() as clock:
        source = FakeSource()
        remote = FakeRemote(down_reasons=["down"] * 8)
        rep = _replicator(source, remote, clock, retry_initial_ms=100, retry_max_ms=1_000)
        t0 = clock.monotonic_ms()
        rep.start()
        await wait_for(lambda: rep.state is State.RUNNING, what="connected at last")
        waited_s = (clock.monotonic_ms() - t0) / 1000
        # 0.1 + 0.2 + 0.4 + 0.8 + 4 x 1.0, each up to 10 % shorter
        assert 0.9 * 5.5 <= waited_s <= 5.5 + 0.01, waited_s
        await rep.stop()


async def test_a_refused_send_is_retried_and_nothing_is_lost_or_stored_twice() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote()
        for i in range(30):
            source.add(entry_bytes(b"%d" % i))
        rep = _replicator(source, remote, clock, read_batch_max=7)
        remote.hold = True
        rep.start()
        await wait_for(lambda: remote.in_flight >= 7, what="entries in flight")
        remote.fail_next_sends = 1  # the first one is refused: the producer is closed
        remote.release()
        await _caught_up(rep, source)
        assert _payloads(remote) == [b"%d" % i for i in range(30)]
        stats = rep.statistics()
        assert stats.counters.retries == 1 and len(remote.producers) == 2
        await rep.stop()


async def test_a_restart_resends_only_what_the_remote_recognises() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote()
        for i in range(20):
            source.add(entry_bytes(b"%d" % i))
        first = _replicator(source, remote, clock)
        remote.hold = True
        first.start()
        await wait_for(lambda: remote.in_flight == 20, what="all in flight")
        remote.producers[0].flush()  # the remote stored them all; the receipts are lost
        remote.producers[0].pending.clear()
        await first.stop()  # as an unload or a crash: the cursor never moved
        assert source.mark_delete_position == Position(7, -1)
        remote.hold = False
        second = _replicator(source, remote, clock)
        second.start()
        await _caught_up(second, source)
        assert _payloads(remote) == [b"%d" % i for i in range(20)]
        assert remote.duplicates == 20  # sent again, recognised, not stored again
        await second.stop()


async def test_stopping_while_connecting() -> None:
    async with AutojumpClock() as clock:
        source = FakeSource()
        remote = FakeRemote(connect_delay_s=5, clock_sleep=clock.sleep)
        rep = _replicator(source, remote, clock)
        rep.start()
        assert rep.state is State.STARTING
        await clock.sleep(1)
        await rep.stop()
        assert rep.state is State.STOPPED
        await clock.sleep(10)
        assert all(p.closed for p in remote.producers)  # made after the stop: closed too


async def test_stopping_while_backing_off() -> None:
    async with AutojumpClock() as clock:
        source = FakeSource()
        remote = FakeRemote(down_reasons=["down"])
        rep = _replicator(source, remote, clock, retry_initial_ms=60_000, retry_max_ms=60_000)
        rep.start()
        await wait_for(lambda: rep.state is State.BACKING_OFF, what="backing off")
        await rep.stop()
        assert rep.state is State.STOPPED
        await clock.sleep(120)
        assert remote.producers == []  # the retry timer was cancelled


async def test_schemas_are_mapped_to_the_remote_versions() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote()
        v1, v2 = b"\x00" * 7 + b"\x01", b"\x00" * 7 + b"\x02"
        source.schemas[v1] = pb.Schema(name="s", schema_data=b"{}", type=pb.Schema.Json)
        remote.schema_versions[b"{}"] = v2
        for _ in range(5):
            source.add(entry_bytes(b"typed", schema_version=v1))
        source.add(entry_bytes(b"no-schema"))
        rep = _replicator(source, remote, clock)
        rep.start()
        await _caught_up(rep, source)
        versions = [
            EntryView.parse(e.headers_and_payload).metadata.schema_version for e in remote.stored
        ]
        assert versions == [v2] * 5 + [b""]
        assert remote.schema_calls == 1  # remembered
        await rep.stop()


async def test_statistics_with_pulsars_names() -> None:
    async with AutojumpClock() as clock:
        source, remote = FakeSource(), FakeRemote(hold=True)
        now = clock.now_ms()
        for i in range(10):
            source.add(entry_bytes(b"%d" % i, publish_time_ms=now))
        rep = _replicator(source, remote, clock)
        rep.start()
        await wait_for(lambda: remote.in_flight == 10, what="in flight")
        await clock.sleep(3)
        held = rep.statistics().to_json()
        assert held["replicationBacklog"] == 10
        assert held["replicationDelayInSeconds"] >= 3
        assert held["outboundConnection"] == "pulsar://west-broker:6650"
        assert held["outboundConnectedSince"]
        remote.release()
        await _caught_up(rep, source)
        await clock.sleep(2)
        data = rep.statistics().to_json()
        assert set(data) >= {
            "msgRateIn",
            "msgThroughputIn",
            "msgRateOut",
            "msgThroughputOut",
            "msgRateExpired",
            "replicationBacklog",
            "connected",
            "replicationDelayInSeconds",
            "inboundConnection",
            "inboundConnectedSince",
            "outboundConnection",
            "outboundConnectedSince",
        }
        assert data["replicationBacklog"] == 0 and data["replicationDelayInSeconds"] == 0
        assert data["connected"] is True and data["state"] == "Started"
        await rep.stop()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        ReplicatorSettings(producer_queue_size=0)
    with pytest.raises(ValueError):
        ReplicatorSettings(retry_initial_ms=10, retry_max_ms=5)
