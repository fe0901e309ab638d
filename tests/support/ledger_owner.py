"""A managed-ledger owner in its own process, for chaos tests that SIGKILL / SIGSTOP it.

Usage: python ledger_owner.py <metadata-url> <managed-ledger-name>
Streams adds of b"entry-<i>" forever; after each acknowledged batch prints one line per
entry, ``ACK <ledger>:<entry> <i>``, and flushes. On ``ManagedLedgerFenced`` prints
``FENCED`` and exits with status 3.
"""

from __future__ import annotations

import asyncio
import sys

from magnetar.bookie.client import BookieClient
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory, ManagedLedgerFenced
from magnetar.zk.factory import open_metadata_store


async def main(url: str, name: str) -> int:
    store = await open_metadata_store(url)
    config = ManagedLedgerConfig(
        add_timeout_ms=1_000, retention_time_ms=-1, retention_size_bytes=-1
    )
    factory = ManagedLedgerFactory(store, BookieClient, config)
    ml = await factory.open(name)
    print("OPEN", flush=True)
    i = 0
    while True:
        batch = list(range(i, i + 20))
        try:
            positions = await asyncio.gather(*(ml.add_nowait(b"entry-%d" % k) for k in batch))
        except ManagedLedgerFenced:
            print("FENCED", flush=True)
            return 3
        except Exception as exc:  # anything else is a failure the test must see
            print(f"ERROR {exc!r}", flush=True)
            return 4
        sys.stdout.write("".join(f"ACK {p} {k}\n" for p, k in zip(positions, batch, strict=True)))
        sys.stdout.flush()
        i += 20


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
