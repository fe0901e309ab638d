"""Registration state machine over the in-memory metadata store: ephemeral node on the
right path, follows read-only mode, survives session loss, replaces only its own stale node."""

from __future__ import annotations

import json

from support.waiting import wait_for

from magnetar.bookie.registration import BookieRegistration, LiveLedgerLister, RegistrationInfo
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer
from magnetar.zk.store import MetadataStore

INFO = RegistrationInfo(bookie_id="b1", address="127.0.0.1:3181", instance_id="inst-1")


async def test_registers_ephemeral_and_deregisters_on_stop() -> None:
    server = MemoryMetadataServer()
    store = server.connect()
    reg = BookieRegistration(store, INFO, check_interval_s=0.02)
    await reg.start()
    got = await store.get(paths.bookie_registration("b1"))
    assert got is not None and got.stat.ephemeral
    assert json.loads(got.value)["address"] == "127.0.0.1:3181"
    await reg.stop()
    assert await store.exists(paths.bookie_registration("b1")) is None


async def test_follows_read_only_mode() -> None:
    server = MemoryMetadataServer()
    store = server.connect()
    read_only = False
    reg = BookieRegistration(store, INFO, read_only=lambda: read_only, check_interval_s=0.02)
    await reg.start()
    read_only = True
    await wait_for(lambda: store.exists(paths.readonly_bookie_registration("b1")))
    assert await store.exists(paths.bookie_registration("b1")) is None
    read_only = False
    await wait_for(lambda: store.exists(paths.bookie_registration("b1")))
    assert await store.exists(paths.readonly_bookie_registration("b1")) is None
    await reg.stop()


async def test_session_loss_reopens_store_and_registers_again() -> None:
    server = MemoryMetadataServer()
    store = server.connect()
    opened: list[MetadataStore] = []

    async def reopen() -> MetadataStore:
        new = server.connect()
        opened.append(new)
        return new

    reg = BookieRegistration(store, INFO, reopen=reopen, check_interval_s=0.02)
    await reg.start()
    server.expire_session(store.session_id)
    observer = server.connect()
    await wait_for(lambda: bool(opened))
    await wait_for(lambda: observer.exists(paths.bookie_registration("b1")))
    stat = await observer.exists(paths.bookie_registration("b1"))
    assert stat is not None and stat.ephemeral_owner == opened[0].session_id
    assert reg.registrations == 2
    await reg.stop()


async def test_stale_node_of_previous_incarnation_is_replaced_but_not_a_strangers() -> None:
    server = MemoryMetadataServer()
    old = server.connect()
    await old.put(paths.bookie_registration("b1"), INFO.encode(False), ephemeral=True)
    store = server.connect()
    reg = BookieRegistration(store, INFO, check_interval_s=0.02)
    await reg.start()
    stat = await store.exists(paths.bookie_registration("b1"))
    assert stat is not None and stat.ephemeral_owner == store.session_id
    await reg.stop()

    stranger = RegistrationInfo(bookie_id="b1", address="10.0.0.9:3181", instance_id="other")
    await old.put(paths.bookie_registration("b1"), stranger.encode(False), ephemeral=True)
    reg2 = BookieRegistration(store, INFO, check_interval_s=0.02)
    await reg2.start()
    stat = await store.exists(paths.bookie_registration("b1"))
    assert stat is not None and stat.ephemeral_owner == old.session_id  # not stolen
    await old.close()  # the stranger's session ends: ours takes the id
    await wait_for(lambda: _owned_by(store))
    await reg2.stop()


async def test_registers_as_soon_as_the_other_instance_s_node_expires() -> None:
    """Not at the next check (an hour here): the auditor must not see the id missing."""
    server = MemoryMetadataServer()
    old = server.connect()
    before = RegistrationInfo(bookie_id="b1", address="127.0.0.1:3181", instance_id="wiped")
    await old.put(paths.bookie_registration("b1"), before.encode(False), ephemeral=True)
    store = server.connect()
    reg = BookieRegistration(store, INFO, check_interval_s=3600)
    await reg.start()
    assert not await _owned_by(store)  # another instance's node: waits for it to expire
    server.expire_session(old.session_id)
    await wait_for(lambda: _owned_by(store), 5, "registered on the deletion")
    assert reg.registrations == 1
    await reg.stop()


async def _owned_by(store: MetadataStore) -> bool:
    stat = await store.exists(paths.bookie_registration("b1"))
    return stat is not None and stat.ephemeral_owner == store.session_id


async def test_live_ledger_lister_refuses_to_guess_without_root() -> None:
    store = MemoryMetadataServer().connect()
    lister = LiveLedgerLister(store)
    assert await lister.live_ledgers() is None
    await store.put(paths.ledger_metadata(7), b"{}")
    await store.put(paths.ledger_metadata(12), b"{}")
    await store.put(f"{paths.LEDGER_META_ROOT}/not-a-ledger", b"")
    assert await lister.live_ledgers() == {7, 12}
