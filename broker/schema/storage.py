"""Where schema versions live: ledgers for the definitions, an index in metadata.

Owns: the ``SchemaStorage`` contract (append a version, read one / the latest / all, delete
everything of a schema id), ``LedgerSchemaStorage`` (Pulsar's ``BookkeeperSchemaStorage``:
each version is one entry in its own closed ledger, created through the broker's
``LedgerClient`` and tagged ``{"application": "pulsar", "component": "schema"}``; the index,
``/schemas/<tenant>/<namespace>/<topic>``, is a JSON list of (version, ledger, entry,
SHA-256) written with compare-and-set, so two brokers never both write version n),
``MemorySchemaStorage`` (for brokers serving topics from memory), and the stored-entry
codec (``encode`` / ``decode``: JSON with the definition in base64).

Invariants: versions of a schema id are 0, 1, 2, ... in append order; a version is visible
only once its ledger is closed and the index names it (a crash in between leaves an
unreferenced ledger, never a half version); definitions read back are checked against the
index's hash. A hard delete removes the index first, then the ledgers (Pulsar's
``deleteSchemaStorage``), so versions start again at 0.
Must not know: compatibility, topics, the wire protocol, HTTP.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.schema.model import SchemaData, SchemaStorageError, SchemaType
from magnetar.zk.errors import AlreadyExists, BadVersion, MetadataError, NotFound
from magnetar.zk.store import CREATE_ONLY, MetadataStore

if TYPE_CHECKING:
    from magnetar.broker.bookkeeper.client import LedgerClient

log = logging.getLogger(__name__)

SCHEMAS_ROOT = "/schemas"
PUT_ATTEMPTS_MAX = 16
"""Compare-and-set retries of one append racing other writers of the same schema id."""
VERSIONS_MAX = 10_000
"""Versions one schema id may hold (each is a ledger): a bound, as every list here."""
CACHE_ENTRIES_MAX = 4096
"""Definitions kept in memory (they are immutable once written)."""


def index_path(schema_id: str) -> str:
    return f"{SCHEMAS_ROOT}/{schema_id}"


def encode(schema: SchemaData) -> bytes:
    return json.dumps(
        {
            "type": schema.type.name,
            "data": base64.b64encode(schema.data).decode("ascii"),
            "properties": dict(schema.properties),
            "timestamp": schema.timestamp_ms,
            "user": schema.user,
            "deleted": schema.deleted,
        },
        separators=(",", ":"),
    ).encode()


def decode(raw: bytes) -> SchemaData:
    try:
        doc = json.loads(raw)
        return SchemaData(
            SchemaType[doc["type"]],
            base64.b64decode(doc["data"]),
            tuple(sorted((str(k), str(v)) for k, v in doc.get("properties", {}).items())),
            int(doc.get("timestamp", 0)),
            str(doc.get("user", "")),
            bool(doc.get("deleted", False)),
        )
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise SchemaStorageError(f"corrupt stored schema: {exc}") from None


class SchemaStorage(Protocol):
    async def put(self, schema_id: str, entry: bytes) -> int:
        """Append ``entry`` as the next version; its number."""
        ...

    async def get(self, schema_id: str, version: int | None) -> tuple[int, bytes] | None:
        """(version, entry) of ``version`` (None: the latest), or None."""
        ...

    async def get_all(self, schema_id: str) -> list[tuple[int, bytes]]: ...

    async def delete(self, schema_id: str) -> bool:
        """Remove every version; whether there was any."""
        ...


class MemorySchemaStorage:
    """``SchemaStorage`` in a dict (topics served from memory have no ledgers either)."""

    def __init__(self) -> None:
        self._versions: dict[str, list[bytes]] = {}

    async def put(self, schema_id: str, entry: bytes) -> int:
        versions = self._versions.setdefault(schema_id, [])
        if len(versions) >= VERSIONS_MAX:
            raise SchemaStorageError(f"{schema_id} has {VERSIONS_MAX} versions already")
        versions.append(entry)
        return len(versions) - 1

    async def get(self, schema_id: str, version: int | None) -> tuple[int, bytes] | None:
        versions = self._versions.get(schema_id, [])
        if version is None:
            version = len(versions) - 1
        if 0 <= version < len(versions):
            return version, versions[version]
        return None

    async def get_all(self, schema_id: str) -> list[tuple[int, bytes]]:
        return list(enumerate(self._versions.get(schema_id, [])))

    async def delete(self, schema_id: str) -> bool:
        return self._versions.pop(schema_id, None) is not None


@dataclass(frozen=True, slots=True)
class IndexEntry:
    version: int
    ledger_id: int
    entry_id: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "ledgerId": self.ledger_id,
            "entryId": self.entry_id,
            "hash": self.sha256,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> IndexEntry:
        return cls(int(doc["version"]), int(doc["ledgerId"]), int(doc["entryId"]), doc["hash"])


def _decode_index(raw: bytes) -> list[IndexEntry]:
    try:
        return [IndexEntry.from_json(e) for e in json.loads(raw)["index"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaStorageError(f"corrupt schema index: {exc}") from None


def _encode_index(entries: list[IndexEntry]) -> bytes:
    return json.dumps({"index": [e.to_json() for e in entries]}, separators=(",", ":")).encode()


class LedgerSchemaStorage:
    """``SchemaStorage`` over the broker's ledgers and metadata store."""

    def __init__(self, store: MetadataStore, ledgers: LedgerClient) -> None:
        self.store = store
        self.ledgers = ledgers
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    def __repr__(self) -> str:
        return f"<LedgerSchemaStorage cached={len(self._cache)}>"

    async def _index(self, schema_id: str) -> tuple[list[IndexEntry], int]:
        """The index and its node version (``CREATE_ONLY`` when there is none)."""
        try:
            got = await self.store.get(index_path(schema_id))
        except MetadataError as exc:
            raise SchemaStorageError(f"cannot read the schema index: {exc}") from None
        if got is None:
            return [], CREATE_ONLY
        return _decode_index(got.value), got.stat.version

    async def _write_ledger(self, entry: bytes) -> tuple[int, int]:
        try:
            handle = await self.ledgers.create_ledger(
                custom={"application": "pulsar", "component": "schema"}
            )
            entry_id = await handle.add(entry)
            await handle.close()
        except Exception as exc:  # bookies unavailable, quorum lost, ...
            raise SchemaStorageError(f"cannot store the schema: {exc}") from None
        return handle.ledger_id, entry_id

    async def _drop_ledger(self, ledger_id: int) -> None:
        self._cache.pop(ledger_id, None)
        try:
            await self.ledgers.delete_ledger(ledger_id)
        except Exception:
            log.warning("could not delete schema ledger %d", ledger_id, exc_info=True)

    async def put(self, schema_id: str, entry: bytes) -> int:
        sha = hashlib.sha256(entry).hexdigest()
        ledger_id, entry_id = await self._write_ledger(entry)
        for _ in range(PUT_ATTEMPTS_MAX):
            index, node_version = await self._index(schema_id)
            if len(index) >= VERSIONS_MAX:
                await self._drop_ledger(ledger_id)
                raise SchemaStorageError(f"{schema_id} has {VERSIONS_MAX} versions already")
            version = index[-1].version + 1 if index else 0
            index.append(IndexEntry(version, ledger_id, entry_id, sha))
            try:
                await self.store.put(
                    index_path(schema_id), _encode_index(index), expected_version=node_version
                )
            except (BadVersion, AlreadyExists, NotFound):
                continue  # another writer appended first: take the next number
            except MetadataError as exc:
                await self._drop_ledger(ledger_id)
                raise SchemaStorageError(f"cannot write the schema index: {exc}") from None
            self._remember(ledger_id, entry)
            return version
        await self._drop_ledger(ledger_id)
        raise SchemaStorageError(f"too many concurrent schema updates of {schema_id}")

    def _remember(self, ledger_id: int, entry: bytes) -> None:
        self._cache[ledger_id] = entry
        self._cache.move_to_end(ledger_id)
        while len(self._cache) > CACHE_ENTRIES_MAX:
            self._cache.popitem(last=False)

    async def _read(self, at: IndexEntry) -> bytes:
        cached = self._cache.get(at.ledger_id)
        if cached is not None:
            return cached
        try:
            handle = await self.ledgers.open_ledger(at.ledger_id)
            entries = await handle.read(at.entry_id, at.entry_id)
        except Exception as exc:
            raise SchemaStorageError(
                f"cannot read schema version {at.version} (ledger {at.ledger_id}): {exc}"
            ) from None
        data = entries[0].payload
        if hashlib.sha256(data).hexdigest() != at.sha256:
            raise SchemaStorageError(f"schema version {at.version} does not match its hash")
        self._remember(at.ledger_id, data)
        return data

    async def get(self, schema_id: str, version: int | None) -> tuple[int, bytes] | None:
        index, _ = await self._index(schema_id)
        if not index:
            return None
        if version is None:
            at = index[-1]
        else:
            found = [e for e in index if e.version == version]
            if not found:
                return None
            at = found[0]
        return at.version, await self._read(at)

    async def get_all(self, schema_id: str) -> list[tuple[int, bytes]]:
        index, _ = await self._index(schema_id)
        return [(at.version, await self._read(at)) for at in index]

    async def delete(self, schema_id: str) -> bool:
        index, node_version = await self._index(schema_id)
        if node_version == CREATE_ONLY:
            return False
        try:
            await self.store.delete(index_path(schema_id))
        except NotFound:
            return False
        except MetadataError as exc:
            raise SchemaStorageError(f"cannot delete the schema index: {exc}") from None
        for at in index:
            await self._drop_ledger(at.ledger_id)
        return True


def storage_for(store: MetadataStore, topic_storage: object) -> SchemaStorage:
    """Ledgers when the broker's topics live in managed ledgers (a cluster, standalone),
    else memory (topics served from memory in tests)."""
    from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage

    if isinstance(topic_storage, ManagedLedgerStorage):
        return LedgerSchemaStorage(store, topic_storage.factory.ledger_client)
    return MemorySchemaStorage()


__all__ = [
    "SCHEMAS_ROOT",
    "LedgerSchemaStorage",
    "MemorySchemaStorage",
    "SchemaStorage",
    "decode",
    "encode",
    "index_path",
    "storage_for",
]
