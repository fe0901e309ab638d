"""The whole ack state is durable: 1,000,000 entries acknowledged in random order leaving
100,000 holes, the cursor owner is SIGKILLed, and a new owner finds exactly the holes
unacknowledged, with their redelivery counts (real bookies, real ZooKeeper).

The data ledger of this test is *synthetic*: its metadata says CLOSED with 1,000,000 entries
but no entry was written to the bookies (writing a million real entries would take longer
than this tier's budget; reading entries back is covered by the other chaos tests). The
cursor only needs the ledger's shape, and everything the cursor persists goes through real
bookies (its cursor ledger) and real ZooKeeper (its znode), and is recovered by fencing.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import random
import subprocess
import sys
import threading

from support.ledger_cluster import chroot_url, open_factory, wait_registered
from support.waiting import wait_for

from magnetar.broker.bookkeeper.metadata import LedgerMetadata, master_key_for
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.broker.ledger import Position
from magnetar.zk import paths

OWNER = pathlib.Path(__file__).resolve().parents[1] / "support" / "ledger_cursor_owner.py"
N = 1_000_000
HOLES = 100_000
DATA_LEDGER = 4_000_000_000


def start_owner(
    url: str, name: str, holes_file: str
) -> tuple[subprocess.Popen[bytes], list[str], threading.Thread]:
    proc = subprocess.Popen(
        [sys.executable, str(OWNER), url, name, "sub", holes_file],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    lines: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode().strip())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    return proc, lines, thread


async def test_million_acks_with_100k_holes_survive_sigkill(
    zookeeper_server,
    bookie_factory,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    url = chroot_url(zookeeper_server.url)
    bookies = bookie_factory.start_many(2, metadata=url)
    factory = await open_factory(url, retention_time_ms=-1, retention_size_bytes=-1)
    store = factory.store
    await wait_registered(store, 2)
    name = "t/ns/persistent/cursor-crash"
    meta = LedgerMetadata(
        ledger_id=DATA_LEDGER,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        state=LedgerState.CLOSED,
        ensembles=((0, tuple(b.bookie_id for b in bookies)),),
        master_key=master_key_for(b""),
        last_entry_id=N - 1,
        length=N * 100,
    )
    await store.put(paths.ledger_metadata(DATA_LEDGER), meta.to_bytes())
    info = {"ledgers": [{"id": DATA_LEDGER, "entries": N, "size": N * 100, "ts": 0}]}
    await store.put(paths.managed_ledger(name), json.dumps(info).encode())
    rng = random.Random(3)
    holes = sorted(rng.sample(range(N), HOLES))
    holes_file = tmp_path / "holes.txt"
    holes_file.write_text("\n".join(f"{DATA_LEDGER}:{e}" for e in holes))

    proc, lines, thread = start_owner(url, name, str(holes_file))
    try:
        await wait_for(lambda: "DONE" in lines or proc.poll() is not None, 150)
        assert "DONE" in lines, (
            lines[-3:],
            proc.stderr.read().decode()[-2000:] if proc.stderr else "",
        )
    finally:
        proc.kill()
        proc.wait(10)
        thread.join(5)

    ml = await factory.open(name)
    cursor = ml.cursors["sub"]
    assert cursor.backlog().entries == HOLES
    assert cursor.mark_delete_position == Position(DATA_LEDGER, holes[0] - 1)
    expected = []
    prev = holes[0]
    for h in [*holes[1:], N]:
        if h > prev + 1:
            expected.append((Position(DATA_LEDGER, prev + 1), Position(DATA_LEDGER, h - 1)))
        prev = h
    assert cursor.individually_deleted_ranges() == expected
    assert all(not cursor.is_acknowledged(Position(DATA_LEDGER, h)) for h in holes)
    for i, h in enumerate(holes[:1000]):
        assert cursor.redelivery_count(Position(DATA_LEDGER, h)) == i % 3 + 1
    assert cursor.redelivery_count(Position(DATA_LEDGER, holes[1000])) == 0
    await asyncio.wait_for(factory.close(), 30)
    await store.close()
