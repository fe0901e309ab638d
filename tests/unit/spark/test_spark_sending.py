"""``sending.PartitionSender`` over a fake producer: a task's rows for one topic-partition are
cut into the same batch entries whatever the input's chunking, and a retried task (the broker
holding some of its rows) sends exactly the batches after what is stored, none straddling it:
what lets the broker's deduplication (first sequence id, highest recorded) drop a replay
whole. Rows with keys go out with explicit sequence ids, cut at the same grid."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.spark.sending import Extras, PartitionSender, SendCounts


class FakePart:
    def __init__(self, owner: FakeProducer) -> None:
        self.owner = owner

    def flush_batches(self) -> None:
        if self.owner.open:
            self.owner.entries.append(self.owner.open)
            self.owner.open = []


class FakeProducer:
    """Records the batch entries it would send: (first sequence id, payloads)."""

    def __init__(self, last_stored: int = -1) -> None:
        self.next_seq = last_stored + 1
        self.entries: list[list[tuple[int, bytes]]] = []
        self.open: list[tuple[int, bytes]] = []
        self.partitions = [FakePart(self)]

    def _done(self, value: Any) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(value)
        return fut

    async def send_batch(self, payloads: list[bytes]) -> asyncio.Future[Any]:
        first = self.next_seq
        self.next_seq += len(payloads)
        self.entries.append([(first + i, p) for i, p in enumerate(payloads)])

        class Ids:
            def entries(self) -> list[tuple[str, int, int, int, int]]:
                return [("t", 0, 1, 1, len(payloads))]

        return self._done(Ids())

    async def send_async(self, payload: bytes, *, sequence_id: int, **_: Any) -> Any:
        self.open.append((sequence_id, payload))
        self.next_seq = max(self.next_seq, sequence_id + 1)  # as the client's producer does

        class Id:
            def entry_id(self) -> int:
                return 1

        return self._done(Id())


def run(
    rows: list[bytes],
    chunks: list[int],
    *,
    last_stored: int = -1,
    max_messages: int = 4,
    max_bytes: int = 40,
    keyed: set[int] = frozenset(),  # type: ignore[assignment]
) -> tuple[list[list[tuple[int, bytes]]], SendCounts]:
    async def go() -> tuple[list[list[tuple[int, bytes]]], SendCounts]:
        producer = FakeProducer(last_stored)
        counts = SendCounts()
        sender = PartitionSender(
            producer,
            max_messages=max_messages,
            max_bytes=max_bytes,
            skip_upto=last_stored,
            counts=counts,
            on_error=lambda exc: (_ for _ in ()).throw(exc),
        )
        i = 0
        for size in chunks:
            part = rows[i : i + size]
            if any(j in keyed for j in range(i, i + len(part))):
                for j, row in enumerate(part, i):
                    await sender.add(row, Extras(key="k") if j in keyed else None)
            else:
                await sender.add_plain(part)
            i += size
        for j in range(i, len(rows)):
            await sender.add(rows[j], Extras(key="k") if j in keyed else None)
        await sender.finish()
        await asyncio.sleep(0)
        return producer.entries, counts

    return asyncio.run(go())


ROWS = [b"x" * n for n in (5, 9, 1, 30, 2, 2, 2, 2, 2, 50, 3, 3, 7, 7, 7, 7, 1, 1)]


def grid(entries: list[list[tuple[int, bytes]]]) -> list[tuple[int, int]]:
    return [(e[0][0], e[-1][0]) for e in entries]


def test_the_cuts_depend_on_the_rows_only() -> None:
    whole, _ = run(ROWS, [len(ROWS)])
    # at most 4 rows and 40 bytes a batch (a lone bigger row alone)
    assert grid(whole) == [(0, 2), (3, 6), (7, 8), (9, 9), (10, 13), (14, 17)]
    for chunks in ([1] * len(ROWS), [3, 5, 2, 8], [17, 1], [0, 18]):
        got, _ = run(ROWS, chunks)
        assert got == whole, chunks


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=60),
    chunks=st.lists(st.integers(0, 10), max_size=20),
    keyed=st.sets(st.integers(0, 59), max_size=10),
)
def test_any_chunking_and_any_keys_give_the_same_grid(
    sizes: list[int], chunks: list[int], keyed: set[int]
) -> None:
    rows = [b"y" * n for n in sizes]
    want, _ = run(rows, [len(rows)])
    got, _ = run(rows, chunks, keyed=keyed)
    assert got == want


def test_a_retry_sends_the_batches_after_what_is_stored() -> None:
    first, _ = run(ROWS, [len(ROWS)])
    for stored_entries in range(len(first) + 1):
        last = first[stored_entries - 1][-1][0] if stored_entries else -1
        retry, counts = run(ROWS, [7, 11], last_stored=last)
        assert retry == first[stored_entries:]  # the same batches, none straddling
        assert counts.skipped == last + 1
        assert counts.sent == len(ROWS) - last - 1


def test_rows_stored_inside_a_batch_leave_its_remainder_to_send() -> None:
    """(A grid that changed between attempts: the remainder starts after what is stored.)"""
    retry, counts = run(ROWS, [len(ROWS)], last_stored=4)
    assert grid(retry)[0] == (5, 6) and counts.skipped == 5
    assert [seq for e in retry for seq, _ in e] == list(range(5, len(ROWS)))


def test_keyed_rows_carry_explicit_ids_cut_at_the_same_grid() -> None:
    plain, _ = run(ROWS, [len(ROWS)])
    keyed, _ = run(ROWS, [len(ROWS)], keyed=set(range(len(ROWS))))
    assert keyed == plain
