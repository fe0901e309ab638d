"""The schema registry: versioned schemas per schema id (Pulsar's ``SchemaRegistryServiceImpl``).

Owns: reading versions (one, the latest, all; the versions that count are those after the
last *deleted* marker, Pulsar's ``trimDeletedSchemaAndGetList``), ``put_if_absent`` (an
identical definition answers its existing version; otherwise validate, check compatibility
under the strategy, append), ``find_version``, ``check_compatible`` (the REST
``/compatibility`` test), ``check_reader`` (a consumer's schema), soft ``delete`` (appends a
deleted marker: the next schema starts a new history, version numbers keep counting) and
``delete_storage`` (everything gone, as when the topic is deleted).

Writes of one schema id are serialised here (one ``asyncio.Lock`` per id while in use), and
the storage's compare-and-set orders writers on different brokers.
Must not know: topics, policies (the caller passes the strategy), the wire protocol, HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from magnetar.broker.schema import compatibility, storage
from magnetar.broker.schema.model import (
    NO_VERSION,
    CompatibilityStrategy,
    IncompatibleSchema,
    SchemaData,
    SchemaType,
    VersionedSchema,
)
from magnetar.broker.schema.storage import SchemaStorage
from magnetar.broker.schema.validation import validate


def _same(a: SchemaData, b: SchemaData) -> bool:
    return a.type is b.type and a.fingerprint == b.fingerprint


class SchemaRegistry:
    def __init__(self, store: SchemaStorage, *, now_ms: Callable[[], int] | None = None) -> None:
        self.store = store
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._locks: dict[str, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"<SchemaRegistry {self.store!r} writing={len(self._locks)}>"

    @asynccontextmanager
    async def _writing(self, schema_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(schema_id, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._locks.get(schema_id) is lock:
                del self._locks[schema_id]

    # -- reads --------------------------------------------------------------------------------
    async def get(self, schema_id: str, version: int | None = None) -> VersionedSchema | None:
        """``version`` (None: the latest, and None if the latest is a deleted marker)."""
        got = await self.store.get(schema_id, version)
        if got is None:
            return None
        found = VersionedSchema(got[0], storage.decode(got[1]))
        if version is None and found.schema.deleted:
            return None
        return found

    async def all_versions(self, schema_id: str) -> list[VersionedSchema]:
        return [
            VersionedSchema(v, storage.decode(raw))
            for v, raw in await self.store.get_all(schema_id)
        ]

    async def live_versions(self, schema_id: str) -> list[VersionedSchema]:
        """The versions after the last deleted marker (none if the latest is one)."""
        versions = await self.all_versions(schema_id)
        for i in range(len(versions) - 1, -1, -1):
            if versions[i].schema.deleted:
                return versions[i + 1 :]
        return versions

    async def find_version(self, schema_id: str, schema: SchemaData) -> int:
        for v in await self.live_versions(schema_id):
            if _same(v.schema, schema):
                return v.version
        return NO_VERSION

    # -- checks -------------------------------------------------------------------------------
    async def check_compatible(
        self, schema_id: str, schema: SchemaData, strategy: CompatibilityStrategy
    ) -> None:
        validate(schema)
        live = [v.schema for v in await self.live_versions(schema_id)]
        compatibility.check(live, schema, strategy)

    async def check_reader(
        self, schema_id: str, schema: SchemaData, strategy: CompatibilityStrategy
    ) -> None:
        if strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
            return
        validate(schema)
        live = [v.schema for v in await self.live_versions(schema_id)]
        if not live:
            raise IncompatibleSchema("Topic does not have schema to check")
        compatibility.check_reader(live, schema, strategy)

    # -- writes -------------------------------------------------------------------------------
    async def put_if_absent(
        self,
        schema_id: str,
        schema: SchemaData,
        strategy: CompatibilityStrategy,
        *,
        allow_auto_update: bool = True,
    ) -> int:
        """The version of ``schema``: an existing identical one, else a new one if it is
        valid and compatible (``IncompatibleSchema`` / ``InvalidSchemaData`` otherwise)."""
        validate(schema)
        async with self._writing(schema_id):
            live = await self.live_versions(schema_id)
            for v in live:
                if _same(v.schema, schema):
                    return v.version
            if not allow_auto_update:
                raise IncompatibleSchema("Schema not found and schema auto updating is disabled.")
            compatibility.check([v.schema for v in live], schema, strategy)
            stamped = SchemaData(
                schema.type,
                schema.data,
                tuple(sorted(schema.properties)),
                self._now_ms(),
                schema.user,
            )
            return await self.store.put(schema_id, storage.encode(stamped))

    async def delete(self, schema_id: str, user: str = "") -> int | None:
        """Append a deleted marker; its version, or None when there was nothing to delete."""
        async with self._writing(schema_id):
            latest = await self.store.get(schema_id, None)
            if latest is None or storage.decode(latest[1]).deleted:
                return None
            marker = SchemaData(SchemaType.NONE, b"", (), self._now_ms(), user, deleted=True)
            return await self.store.put(schema_id, storage.encode(marker))

    async def delete_storage(self, schema_id: str) -> bool:
        async with self._writing(schema_id):
            return await self.store.delete(schema_id)


__all__ = ["SchemaRegistry"]
