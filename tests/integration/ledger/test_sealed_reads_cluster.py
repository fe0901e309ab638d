"""Sealed ledgers read straight from real bookie processes with ``open_sealed_ledger``: the
ledger metadata as an API hands it out (its JSON document) and a ``BookiePool`` of real
``BookieClient``s, no metadata store on the reading side, nothing fenced or changed."""

from __future__ import annotations

import json

from support.ledger_cluster import bookie_client_factory, chroot_url, open_factory, wait_registered

from magnetar.broker.bookkeeper import BookiePool, LedgerMetadata, LedgerState, open_sealed_ledger
from magnetar.zk import paths


async def test_sealed_ledgers_read_from_the_bookies_without_a_store(  # type: ignore[no-untyped-def]
    zookeeper_server, bookie_factory
) -> None:
    url = chroot_url(zookeeper_server.url)
    for _ in range(2):
        bookie_factory.start(metadata=url)
    factory = await open_factory(
        url,
        min_ledger_rollover_time_ms=0,
        max_entries_per_ledger=100,
        retention_time_ms=-1,  # no cursor: without retention each sealed ledger is trimmed
        retention_size_bytes=-1,
    )
    try:
        await wait_registered(factory.store, 2)
        ml = await factory.open("t/ns/persistent/sealed")
        payloads = [b"entry-%d-" % i + bytes(i % 50) for i in range(250)]
        positions = [await ml.add_nowait(p) for p in payloads]
        sealed = sorted({p.ledger_id for p in positions})[:-1]  # the last one is still open
        assert len(sealed) == 2
        documents = {}
        for ledger_id in sealed:
            got = await factory.store.get(paths.ledger_metadata(ledger_id))
            assert got is not None
            documents[ledger_id] = (json.dumps(LedgerMetadata.from_bytes(got.value).to_dict()), got)
        read: list[bytes] = []
        async with BookiePool(bookie_client_factory) as bookies:  # ids are addresses here
            for ledger_id in sealed:
                meta = LedgerMetadata.from_dict(json.loads(documents[ledger_id][0]))
                assert meta.state is LedgerState.CLOSED
                handle = open_sealed_ledger(meta, bookies)
                assert handle.last_add_confirmed == 99
                entries = await handle.read(0, handle.last_add_confirmed)
                assert entries[-1].cumulative_length == handle.length
                read += [e.payload for e in entries]
        assert read == payloads[:200]
        for ledger_id in sealed:  # the reads changed nothing in the metadata
            now = await factory.store.get(paths.ledger_metadata(ledger_id))
            assert now is not None and now.stat.version == documents[ledger_id][1].stat.version
        assert await ml.add(b"the writer goes on") > positions[-1]
    finally:
        await factory.close()
        await factory.store.close()
