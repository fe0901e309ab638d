"""A cursor owner in its own process, for the SIGKILL test of durable ack state.

Usage: python ledger_cursor_owner.py <metadata-url> <managed-ledger> <cursor> <holes-file>
Opens the managed ledger and the cursor (from the earliest entry), acknowledges every entry of
the managed ledger except the positions listed in ``holes-file`` (one ``ledger:entry`` per
line), in random order and in batches, then counts redeliveries for the first 1,000 holes
(hole i gets ``i % 3 + 1``). Prints ``ACKED <n>`` after each durable batch and ``DONE`` at
the end, then waits to be killed.
"""

from __future__ import annotations

import asyncio
import random
import sys

from magnetar.bookie.client import BookieClient
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory, Position
from magnetar.zk.factory import open_metadata_store


async def main(url: str, name: str, cursor_name: str, holes_file: str) -> None:
    holes = [Position.parse(line) for line in open(holes_file).read().split()]  # noqa: ASYNC230, SIM115
    hole_set = set(holes)
    store = await open_metadata_store(url)
    config = ManagedLedgerConfig(retention_time_ms=-1, retention_size_bytes=-1)
    factory = ManagedLedgerFactory(store, BookieClient, config)
    ml = await factory.open(name)
    cursor = await ml.open_cursor(cursor_name, EARLIEST)
    everything = [Position(lid, e) for lid, n, _ in ml.ledger_sizes() for e in range(n)]
    todo = [p for p in everything if p not in hole_set]
    random.Random(11).shuffle(todo)
    batch = 20_000
    for i in range(0, len(todo), batch):
        await cursor.delete(todo[i : i + batch])
        print(f"ACKED {min(i + batch, len(todo))}", flush=True)
    for round_ in (1, 2, 3):  # concurrent increments share group-committed flushes
        await asyncio.gather(
            *(
                cursor.increment_redelivery(pos)
                for i, pos in enumerate(holes[:1000])
                if i % 3 + 1 >= round_
            )
        )
    print("DONE", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
