"""SIGKILL a bookie process under load: no acknowledged entry is ever lost or corrupted.

A client streams adds (many ledgers, random sizes, hundreds in flight) to a real bookie
process on a real disk and records every acknowledged (ledger, entry). At a random moment
(seeded) the bookie is SIGKILLed; after a restart every acknowledged entry must read back
byte for byte (the client verifies crc32c on every read). Then the journal tail is torn or
bit-flipped by hand: the bookie must start, say so in its log, keep every earlier acked
entry and never serve the damaged one.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import struct

import crc32c
import pytest
from support.bookies import BookieFactory, BookieProcess
from support.waiting import wait_for

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient
from magnetar.bookie.errors import BookieError, BookieUnavailable, NoEntry

KEY = b"chaos-master-key"
SEED = int(os.environ.get("MAGNETAR_CHAOS_SEED", "20261122"))


def payload_of(ledger: int, entry: int, size: int) -> bytes:
    head = f"{ledger}:{entry}:".encode()
    body = random.Random(ledger * 1_000_003 + entry).randbytes(max(0, size - len(head)))
    return head + body


def req(ledger: int, entry: int, payload: bytes, lac: int = -1) -> AddRequest:
    return AddRequest(ledger, entry, lac, crc32c.crc32c(payload), payload, KEY)


async def reconnect(client: BookieClient, timeout_s: float = 20.0) -> None:
    await wait_for(lambda: client.health(timeout_ms=500), timeout_s, "the bookie back")


async def load_until_killed(
    client: BookieClient,
    bookie: BookieProcess,
    rng: random.Random,
    ledgers: list[int],
    acked: dict[tuple[int, int], bytes],
    *,
    inflight_max: int,
) -> int:
    """Stream adds until the bookie is SIGKILLed at a random moment; return adds issued."""
    kill_after_acks = rng.randint(500, 4000)
    next_entry = dict.fromkeys(ledgers, 0)
    sem = asyncio.Semaphore(inflight_max)
    failed = asyncio.Event()
    killed = False
    issued = 0

    def on_done(fut: asyncio.Future[None], key: tuple[int, int], data: bytes) -> None:
        sem.release()
        if fut.cancelled() or fut.exception() is not None:
            failed.set()
            return
        acked[key] = data

    while not failed.is_set():
        await sem.acquire()
        if failed.is_set():
            sem.release()
            break
        ledger = rng.choice(ledgers)
        entry = next_entry[ledger]
        next_entry[ledger] = entry + 1
        data = payload_of(ledger, entry, rng.choice((16, 100, 1024, 3000, 20_000)))
        fut = client.add(req(ledger, entry, data, lac=entry - 1))
        fut.add_done_callback(lambda f, k=(ledger, entry), d=data: on_done(f, k, d))
        issued += 1
        if not killed and len(acked) >= kill_after_acks:
            # The random moment: adds are in flight (some acked, some not) right now.
            bookie.kill()
            killed = True
    assert killed, "load stopped before the kill"
    # Let every outstanding future settle (they fail with BookieUnavailable).
    for _ in range(inflight_max):
        await sem.acquire()
    return issued


async def verify(client: BookieClient, acked: dict[tuple[int, int], bytes]) -> None:
    by_ledger: dict[int, list[int]] = {}
    for ledger, entry in acked:
        by_ledger.setdefault(ledger, []).append(entry)
    for ledger, entries in by_ledger.items():
        entries.sort()
        # Acked entries of one ledger are a prefix-closed set except for holes left by
        # unacked adds, so read the span in ranges and check each acked one.
        got: dict[int, bytes] = {}
        first, last = entries[0], entries[-1]
        pos = first
        while pos <= last:
            try:
                chunk = await client.read_range(ledger, pos, last, max_bytes=1 << 20)
            except NoEntry:
                pos += 1
                continue
            for e in chunk:
                got[e.entry_id] = e.payload
            pos = chunk[-1].entry_id + 1
        missing = [e for e in entries if e not in got]
        assert not missing, f"ledger {ledger}: acked entries lost after crash: {missing[:20]}"
        for e in entries:
            assert got[e] == acked[(ledger, e)], f"entry {ledger}:{e} differs after crash"


@pytest.mark.timeout(180)
async def test_no_acknowledged_entry_lost_across_sigkill(bookie_factory: BookieFactory) -> None:
    rng = random.Random(SEED)
    bookie = bookie_factory.start()
    client = BookieClient(bookie.address, timeout_ms=10_000)
    acked: dict[tuple[int, int], bytes] = {}
    try:
        for round_no in range(3):
            ledgers = [round_no * 100 + i for i in range(8)]
            issued = await load_until_killed(client, bookie, rng, ledgers, acked, inflight_max=256)
            assert issued > len([k for k in acked if k[0] in ledgers])
            bookie.start()
            await reconnect(client)
            await verify(client, acked)
        assert len(acked) > 1500
        log = bookie.log_text()
        assert log.count("bookie started") == 4
    finally:
        await client.close()


def _journal_records(path: pathlib.Path) -> list[tuple[int, int]]:
    """(offset, total length) of each record in a journal file (header: 16 bytes)."""
    data = path.read_bytes()
    out = []
    pos = 16
    while pos + 8 <= len(data):
        length, _crc = struct.unpack_from(">II", data, pos)
        if length == 0 or pos + 8 + length > len(data):  # 0: the preallocated rest
            break
        out.append((pos, 8 + length))
        pos += 8 + length
    return out


def _last_journal(bookie: BookieProcess) -> pathlib.Path:
    files = sorted((bookie.data_dir / "journal").glob("*.txn"))
    with_records = [f for f in files if _journal_records(f)]
    assert with_records, f"no journal records in {files}"
    return with_records[-1]


@pytest.mark.parametrize("damage", ["truncate", "flip"])
async def test_torn_or_corrupt_journal_tail_is_skipped_and_never_served(
    bookie_factory: BookieFactory, tmp_path: pathlib.Path, damage: str
) -> None:
    # No periodic checkpoint during the test: the last record must still be needed.
    config = tmp_path / "bookie.yaml"
    config.write_text("engine:\n  checkpoint_interval_ms: 3600000\n")
    bookie = bookie_factory.start(extra_args=["--config", str(config)])
    client = BookieClient(bookie.address)
    try:
        early = {i: payload_of(9, i, 500) for i in range(50)}
        await asyncio.gather(*(client.add(req(9, i, p)) for i, p in early.items()))
        last_payload = payload_of(9, 50, 4000)
        await client.add(req(9, 50, last_payload))  # alone: the journal's last record
        bookie.kill()

        journal = _last_journal(bookie)
        offset, length = _journal_records(journal)[-1]
        data = bytearray(journal.read_bytes())
        assert last_payload in bytes(data[offset : offset + length])
        if damage == "truncate":
            del data[offset + length // 2 :]
        else:
            data[offset + length - 100] ^= 0x5A
        journal.write_bytes(bytes(data))

        bookie.start()
        assert "journal" in bookie.log_text() and (
            "checksum mismatch" in bookie.log_text()
            or "short" in bookie.log_text()
            or "skipped" in bookie.log_text()
        ), bookie.log_tail()
        await reconnect(client)
        for i, p in early.items():
            try:
                got = await client.read_entry(9, i)
            except BookieUnavailable:
                await reconnect(client)
                got = await client.read_entry(9, i)
            assert got.payload == p
        # The damaged entry is gone, never served damaged (the client would raise
        # CorruptEntry on a checksum mismatch).
        with pytest.raises(NoEntry):
            await client.read_entry(9, 50)
        # And the ledger is writable again at that position.
        await client.add(req(9, 50, b"rewritten"))
        assert (await client.read_entry(9, 50)).payload == b"rewritten"
    except BookieError:
        print(bookie.log_tail())
        raise
    finally:
        await client.close()
