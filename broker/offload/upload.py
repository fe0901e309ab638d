"""Writing one sealed ledger to the object store, then proving it is there.

Owns: ``upload_ledger``: reads the source in batches (``prefetch_rounds`` batches ahead, so the
bookie reads overlap the upload; paced by the broker's ``FlowPermits`` when it has a rate),
packs entries into blocks of ``block_bytes`` (the unit a reader later fetches), streams the
blocks as one multipart upload in parts of ``part_bytes``, writes the index object, then reads
both back: the index byte for byte, the data object in one streamed GET, every block parsed
and every entry's checksum verified and compared with the one computed during the upload.
Only then does it return. On any failure it deletes what it wrote (best effort) and raises; a
crash leaves at most the two objects of this attempt's UUID.
Must not know: managed ledgers, topics, the library behind ``BlobStore``.
Bounded: the source prefetch queue (``prefetch_rounds`` batches of about ``READ_BYTES``), one
block being packed, the library's parts in flight (``concurrency`` x ``part_bytes``), one block
during verification.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

from magnetar.broker.bookkeeper.entry import LedgerEntry
from magnetar.broker.offload.blocks import BlockBuilder, parse_block
from magnetar.broker.offload.errors import (
    LedgerNotSealed,
    OffloadCorrupt,
    OffloadError,
    SourceMismatch,
)
from magnetar.broker.offload.flow import FlowPermits
from magnetar.broker.offload.index import LedgerSummary, OffloadIndex, build_index
from magnetar.broker.offload.records import LedgerSource
from magnetar.broker.offload.store import BlobStore

log = logging.getLogger(__name__)

ENTRIES_PER_READ = 100
READ_BYTES = 1 << 20
"""About this many bytes per source read (and never more than ``ENTRIES_PER_READ`` entries):
a read's decoding and checksums run on the broker's loop in one piece, so a ledger of large
entries (a producer's batches) is read a few entries at a time, not 100 at 128 KB each."""


def entries_per_read(
    ledger_bytes: int,
    entry_count: int,
    read_bytes: int = READ_BYTES,
    entries_max: int = ENTRIES_PER_READ,
) -> int:
    """Entries one source read asks for: ``read_bytes`` of the ledger's average entry, at most
    ``entries_max``."""
    average = max(1, ledger_bytes // max(1, entry_count))
    return max(1, min(entries_max, read_bytes // average))


FORMAT_ATTRIBUTE = "magnetarOffloadFormat"
"""The user-metadata name marking our objects. Letters only: Azure allows only C# identifiers
as metadata names (it refused ``magnetar-offload-format`` with InvalidMetadata, found on
Azurite), S3 and GCS take any; Pulsar's own are camel case for the same reason."""


@dataclass(frozen=True, slots=True)
class UploadPlan:
    block_bytes: int
    part_bytes: int
    part_concurrency: int = 2
    prefetch_rounds: int = 1
    flow: FlowPermits = field(default_factory=lambda: FlowPermits(-1))
    """The broker's offload read rate: each source read waits for it (unlimited: never)."""
    read_bytes: int = READ_BYTES
    read_entries_max: int = ENTRIES_PER_READ
    """At most this many entries a source read (the offload worker, which decodes on its own
    loop, reads ``read_bytes`` of small entries too: a background read's cost is per call)."""
    """About this many bytes per source read."""


@dataclass(frozen=True, slots=True)
class UploadResult:
    index: OffloadIndex
    index_object_bytes: int


class _Packer:
    """Source batches in, block bytes out; remembers where each block starts and every
    entry's checksum for the verification read."""

    def __init__(self, ledger_id: int, block_bytes: int) -> None:
        self.ledger_id = ledger_id
        self.block_bytes = block_bytes
        self.starts: list[tuple[int, int]] = []
        self.checksums = array.array("I")
        self.offset = 0
        self.next_entry = 0
        self.last_cumulative = 0
        self._block: BlockBuilder | None = None

    def add(self, entry: LedgerEntry) -> bytes | None:
        """Add one entry; returns a finished block when this entry did not fit in it."""
        if entry.entry_id != self.next_entry or entry.ledger_id != self.ledger_id:
            raise SourceMismatch(
                f"source gave {entry.ledger_id}:{entry.entry_id}, "
                f"expected {self.ledger_id}:{self.next_entry}"
            )
        if entry.cumulative_length < self.last_cumulative:
            raise SourceMismatch(f"entry {entry.entry_id}: cumulative length went backwards")
        self.next_entry += 1
        self.last_cumulative = entry.cumulative_length
        finished = None
        if self._block is not None and not self._block.add(entry):
            finished = self._finish()
        if self._block is None:
            self._block = BlockBuilder(entry.entry_id, self.block_bytes)
            self.starts.append((entry.entry_id, self.offset))
            added = self._block.add(entry)
            assert added
        return finished

    def _finish(self) -> bytes:
        assert self._block is not None
        data = self._block.build()
        self.checksums.extend(self._block.checksums)
        self.offset += len(data)
        self._block = None
        return data

    def flush(self) -> bytes | None:
        return self._finish() if self._block is not None else None


async def _source_batches(
    source: LedgerSource, last: int, plan: UploadPlan
) -> AsyncIterator[Sequence[LedgerEntry]]:
    """Batches of entries 0..last, up to ``prefetch_rounds`` read ahead of the consumer, at
    the pace ``flow`` allows."""
    queue: asyncio.Queue[Sequence[LedgerEntry] | BaseException | None] = asyncio.Queue(
        maxsize=plan.prefetch_rounds
    )
    flow = plan.flow
    per_read = entries_per_read(source.length, last + 1, plan.read_bytes, plan.read_entries_max)

    async def reader() -> None:
        try:
            first = 0
            while first <= last:
                stop = min(last, first + per_read - 1)
                batch = await source.read(first, stop)
                if len(batch) != stop - first + 1:
                    raise SourceMismatch(
                        f"source read {first}..{stop} returned {len(batch)} entries"
                    )
                await queue.put(batch)
                first = stop + 1
                if flow.limited:
                    await flow.pace(sum(len(e.payload) for e in batch))
            await queue.put(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the consumer, raised there
            await queue.put(exc)

    task = asyncio.ensure_future(reader())
    try:
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def upload_ledger(
    store: BlobStore,
    source: LedgerSource,
    *,
    data_key: str,
    index_key: str,
    extra: Mapping[str, str],
    plan: UploadPlan,
) -> UploadResult:
    if not source.is_closed:
        raise LedgerNotSealed(f"ledger {source.ledger_id} is not closed: only sealed ledgers move")
    ledger_id = source.ledger_id
    last = source.last_add_confirmed
    summary = LedgerSummary(ledger_id, last, source.length, dict(extra))
    packer = _Packer(ledger_id, plan.block_bytes)
    attributes = {FORMAT_ATTRIBUTE: "1", "Content-Type": "application/octet-stream"}

    source_failure: list[BaseException] = []

    async def blocks() -> AsyncGenerator[bytes, None]:
        try:
            async for batch in _source_batches(source, last, plan):
                for entry in batch:
                    block = packer.add(entry)
                    if block is not None:
                        yield block
                await asyncio.sleep(0)  # packing is CPU: let the broker's clients in between
            block = packer.flush()
            if block is not None:
                yield block
        except BaseException as exc:  # the library may wrap it: ours is raised below
            source_failure.append(exc)
            raise

    try:
        if last < 0:
            await store.put(data_key, b"", attributes)
        else:
            stream = blocks()
            try:
                await store.put_stream(
                    data_key,
                    stream,
                    part_bytes=plan.part_bytes,
                    concurrency=plan.part_concurrency,
                    attributes=attributes,
                )
            except BaseException:
                if source_failure:
                    raise source_failure[0] from None
                raise
            finally:
                await stream.aclose()  # stops the source prefetch if the store gave up early
        if packer.next_entry != last + 1:
            raise SourceMismatch(f"source gave {packer.next_entry} entries, expected {last + 1}")
        if last >= 0 and packer.last_cumulative != source.length:
            raise SourceMismatch(
                f"ledger {ledger_id}: entries add up to {packer.last_cumulative} bytes, "
                f"the ledger says {source.length}"
            )
        index = build_index(summary, packer.starts, packer.offset, plan.part_bytes)
        encoded = index.encode()
        await store.put(index_key, encoded, attributes)
        await _verify(
            store,
            data_key=data_key,
            index_key=index_key,
            encoded_index=encoded,
            index=index,
            checksums=packer.checksums,
        )
    except BaseException as exc:
        if not isinstance(exc, asyncio.CancelledError):
            await _discard(store, (data_key, index_key))
        raise
    return UploadResult(index, len(encoded))


async def _verify(
    store: BlobStore,
    *,
    data_key: str,
    index_key: str,
    encoded_index: bytes,
    index: OffloadIndex,
    checksums: array.array[int],
) -> None:
    """Read both objects back; raise ``OffloadCorrupt`` unless they are what was written."""
    stored_index = await store.get(index_key)
    if stored_index != encoded_index:
        raise OffloadCorrupt(f"{index_key}: the index read back differs from the one written")
    OffloadIndex.decode(stored_index)
    ledger_id = index.ledger_id
    buffer = bytearray()
    block = 0
    seen = 0
    total = 0
    async for chunk in store.stream(data_key):
        buffer += chunk
        total += len(chunk)
        while block < len(index.blocks) and len(buffer) >= index.blocks[block].length:
            ref = index.blocks[block]
            parsed = parse_block(bytes(buffer[: ref.length]), ledger_id, ref.first_entry_id)
            del buffer[: ref.length]
            if parsed.last_entry_id != index.last_entry_of(block):
                raise OffloadCorrupt(f"{data_key}: block {block} ends at {parsed.last_entry_id}")
            if array.array("I", parsed.checksums) != checksums[seen : seen + len(parsed.checksums)]:
                raise OffloadCorrupt(f"{data_key}: block {block} checksums differ from written")
            seen += len(parsed.checksums)
            block += 1
            await asyncio.sleep(0)  # verifying is CPU: let the broker's clients in between
    if total != index.data_object_bytes or block != len(index.blocks) or buffer:
        raise OffloadCorrupt(
            f"{data_key}: read back {total} bytes, {block} blocks; wrote "
            f"{index.data_object_bytes} bytes, {len(index.blocks)} blocks"
        )
    if seen != index.ledger.entry_count:
        raise OffloadCorrupt(f"{data_key}: {seen} entries read back of {index.ledger.entry_count}")


async def _discard(store: BlobStore, keys: Sequence[str]) -> None:
    for key in keys:
        try:
            await store.delete(key)
        except OffloadError as exc:
            log.warning("could not delete %s after a failed offload (an orphan now): %s", key, exc)


__all__ = [
    "ENTRIES_PER_READ",
    "FORMAT_ATTRIBUTE",
    "READ_BYTES",
    "UploadPlan",
    "UploadResult",
    "entries_per_read",
    "upload_ledger",
]
