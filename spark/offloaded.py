"""Ledgers offloaded to tiered storage, read straight from the object store inside a Spark
task (read-only), as Pulsar SQL reads them.

Owns: ``OffloadedLedgers``, one task's reader of offloaded ledgers: each opened from the
offload record the planner got from the ledgers endpoint (``LedgerLayout.offload``: driver,
bucket, the objects' keys) with the job's own credentials and location (``store_settings``:
the ``pulsar.offload.*`` options, Pulsar's offload setting names), through tiered storage's
read handle (``broker.offload.registry.open_offloaded_ledger``: ranged GETs of whole blocks,
each entry's checksum verified, a bounded read-ahead). One ledger is open at a time: opening
the next closes the previous, so a task holds one ledger's read-ahead (``READ_AHEAD_BYTES``)
whatever its split spans. A task waits for an unavailable store at most about
``STORE_WAIT_MS`` (its caller then reads through the broker, or fails naming the options).

Errors: ``OffloadUnreadable`` (the library is missing, the settings do not make a store, the
store refuses the credentials, is unreachable or keeps failing, the objects are not where the
record says, or they do not verify).

The one module of ``magnetar.spark`` that imports tiered storage (the import-linter contract
``spark`` allows these imports, here).

Must not know: Spark, topics, messages, bookies.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from magnetar.broker.bookkeeper.entry import LedgerEntries
from magnetar.spark.layout import LedgerLayout

READ_AHEAD_BYTES = 4 << 20
"""Blocks one task fetches ahead of its reads (the store's read handle's bound)."""
STORE_WAIT_MS = 10_000
"""How long a task waits for an unavailable store, retries included, before giving up."""
STORE_REQUEST_TIMEOUT_MS = 10_000
STORE_REQUEST_RETRIES = 2


class OffloadUnreadable(RuntimeError):
    """An offloaded ledger could not be read from its object store."""


def describe(ledger: LedgerLayout) -> str:
    """Where an offloaded ledger's objects are (for messages): driver and bucket or path."""
    record = json.loads(ledger.offload or "{}")
    meta = record.get("driverMetadata") or {}
    where = meta.get("bucket") or "?"
    endpoint = meta.get("serviceEndpoint")
    return f"{record.get('driverName', '?')} {where}" + (f" at {endpoint}" if endpoint else "")


class OffloadedLedgers:
    """Reads of offloaded ledgers for one task (see the module docstring)."""

    def __init__(self, settings: Mapping[str, str]) -> None:
        self._settings = dict(settings)
        self._open: tuple[int, Any, contextlib.AsyncExitStack] | None = None

    async def read(self, ledger: LedgerLayout, first: int, last: int) -> LedgerEntries:
        """Entries ``first`` .. ``last`` of the offloaded ``ledger``, checksums verified."""
        handle = await self._handle(ledger)
        try:
            from magnetar.broker.offload.errors import OffloadError

            got = await handle.read(first, last)
        except OffloadError as exc:
            await self.close()
            raise OffloadUnreadable(f"{type(exc).__name__}: {exc}") from None
        return LedgerEntries.of(got)

    async def _handle(self, ledger: LedgerLayout) -> Any:
        if self._open is not None and self._open[0] == ledger.ledger_id:
            return self._open[1]
        await self.close()
        if ledger.offload is None:
            raise OffloadUnreadable(f"ledger {ledger.ledger_id} is not offloaded")
        try:
            from magnetar.broker.offload.errors import OffloadError
            from magnetar.broker.offload.offloader import OffloaderTuning
            from magnetar.broker.offload.policies import OffloadPolicies
            from magnetar.broker.offload.registry import open_offloaded_ledger
            from magnetar.broker.offload.retry import RetryPolicy
        except ImportError as exc:
            raise OffloadUnreadable(
                f"tiered storage cannot be imported here ({exc}): install 'magnetar[spark]'"
            ) from None
        tuning = OffloaderTuning(
            read_ahead_bytes_max=READ_AHEAD_BYTES,
            read_retry=RetryPolicy(deadline_ms=STORE_WAIT_MS),
            store_request_timeout_ms=STORE_REQUEST_TIMEOUT_MS,
            store_retries=STORE_REQUEST_RETRIES,
        )
        stack = contextlib.AsyncExitStack()
        try:
            credentials = OffloadPolicies.from_json(self._settings) if self._settings else None
            handle = await stack.enter_async_context(
                open_offloaded_ledger(json.loads(ledger.offload), credentials, tuning=tuning)
            )
        except OffloadError as exc:
            await stack.aclose()
            raise OffloadUnreadable(f"{type(exc).__name__}: {exc}") from None
        except BaseException:
            await stack.aclose()
            raise
        self._open = (ledger.ledger_id, handle, stack)
        return handle

    async def close(self) -> None:
        opened, self._open = self._open, None
        if opened is not None:
            await opened[2].aclose()


__all__ = [
    "READ_AHEAD_BYTES",
    "STORE_WAIT_MS",
    "OffloadUnreadable",
    "OffloadedLedgers",
    "describe",
]
