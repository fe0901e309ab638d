"""The object-store boundary: our small ``BlobStore`` interface and its one implementation on
``obstore`` (the Python binding of Rust's ``object_store``: S3, GCS, Azure, local files and
memory behind one async API; multipart uploads, ranged GETs, its own retries of one request).

Owns: ``BlobStore`` (what the offloader needs of a store: put a stream as a multipart upload,
put a small object, get whole / a range / a stream, delete, list), ``ObstoreBlobStore`` and
``open_blob_store(spec)``. This is the only module that imports ``obstore``; its exceptions
are translated here (not found -> ``ObjectNotFound``, refused credentials ->
``StoreAccessDenied``, anything else -> ``StoreUnavailable``) and never escape.
Must not know: block and index formats, managed ledgers, topics.
Invariant: a ``put_stream`` either creates the whole object or none (a multipart upload is
completed only after its last part; a local write is renamed into place at the end).
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import pathlib
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import obstore
from obstore.exceptions import (
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from obstore.store import AzureStore, GCSStore, LocalStore, MemoryStore, S3Store

from magnetar.broker.offload.drivers import StoreKind, StoreSpec
from magnetar.broker.offload.errors import (
    InvalidOffloadPolicies,
    ObjectNotFound,
    OffloadError,
    StoreAccessDenied,
    StoreUnavailable,
)

T = TypeVar("T")

STREAM_CHUNK_BYTES = 1 << 20
_STAGED = re.compile(r"#\d+$")


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int


class BlobStore(Protocol):
    """What offloading needs of an object store. Keys are relative to the store's location."""

    def describe(self) -> str: ...

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        part_bytes: int,
        concurrency: int,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        """Upload ``chunks`` as one object, in parts of ``part_bytes`` (a multipart upload
        where the store has them), at most ``concurrency`` parts in flight."""
        ...

    async def put(
        self, key: str, data: bytes, attributes: Mapping[str, str] | None = None
    ) -> None: ...

    async def get(self, key: str) -> bytes: ...

    async def get_range(self, key: str, start: int, length: int) -> bytes: ...

    def stream(self, key: str) -> AsyncIterator[bytes]:
        """The whole object as a stream of chunks (one GET)."""
        ...

    async def delete(self, key: str) -> None:
        """Delete one object; deleting a missing one is no error."""
        ...

    def list(self, prefix: str | None = None) -> AsyncIterator[ObjectInfo]: ...

    async def close(self) -> None: ...


def _translate(key: str, exc: BaseException) -> OffloadError:
    if isinstance(exc, (FileNotFoundError, NotFoundError)):
        return ObjectNotFound(f"{key}: not found")
    if isinstance(exc, (PermissionDeniedError, UnauthenticatedError, PermissionError)):
        return StoreAccessDenied(f"{key}: {_first_line(exc)}")
    return StoreUnavailable(f"{key}: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


_LIBRARY_ERRORS: tuple[type[BaseException], ...] = (obstore.exceptions.BaseError, OSError)
_CONSTRUCTION_ERRORS: tuple[type[BaseException], ...] = (*_LIBRARY_ERRORS, ValueError)


class ObstoreBlobStore:
    """``BlobStore`` on an obstore store (any kind)."""

    def __init__(self, store: Any, spec: StoreSpec) -> None:
        self._store = store
        self.spec = spec

    def __repr__(self) -> str:
        return f"<ObstoreBlobStore {self.spec.describe()}>"

    def describe(self) -> str:
        return self.spec.describe()

    async def _call(self, key: str, op: Callable[[], Any]) -> Any:
        try:
            return await op()
        except _LIBRARY_ERRORS as exc:
            raise _translate(key, exc) from exc

    def _attributes(self, attributes: Mapping[str, str] | None) -> dict[str, str] | None:
        if not attributes or not self.spec.supports_attributes:
            return None
        return dict(attributes)

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        part_bytes: int,
        concurrency: int,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        await self._call(
            key,
            lambda: obstore.put_async(
                self._store,
                key,
                chunks,
                attributes=self._attributes(attributes),
                chunk_size=part_bytes,
                max_concurrency=concurrency,
            ),
        )

    async def put(self, key: str, data: bytes, attributes: Mapping[str, str] | None = None) -> None:
        await self._call(
            key,
            lambda: obstore.put_async(
                self._store, key, data, attributes=self._attributes(attributes), use_multipart=False
            ),
        )

    async def get(self, key: str) -> bytes:
        async def op() -> bytes:
            result = await obstore.get_async(self._store, key)
            return bytes(await result.bytes_async())

        data: bytes = await self._call(key, op)
        return data

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        async def op() -> bytes:
            got = await obstore.get_range_async(self._store, key, start=start, length=length)
            return bytes(got)

        data: bytes = await self._call(key, op)
        return data

    async def stream(self, key: str) -> AsyncIterator[bytes]:
        try:
            result = await obstore.get_async(self._store, key)
            async for chunk in result.stream(min_chunk_size=STREAM_CHUNK_BYTES):
                yield bytes(chunk)
        except _LIBRARY_ERRORS as exc:
            raise _translate(key, exc) from exc

    async def delete(self, key: str) -> None:
        try:
            await obstore.delete_async(self._store, key)
        except (FileNotFoundError, NotFoundError):
            pass
        except _LIBRARY_ERRORS as exc:
            raise _translate(key, exc) from exc
        for staged in self._staged_files(key):
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()

    async def list(self, prefix: str | None = None) -> AsyncIterator[ObjectInfo]:
        try:
            async for batch in obstore.list(self._store, prefix=prefix, chunk_size=1000):
                for meta in batch:
                    yield ObjectInfo(meta["path"], meta["size"])
        except (FileNotFoundError, NotFoundError):
            return
        except _LIBRARY_ERRORS as exc:
            raise _translate(prefix or "<list>", exc) from exc
        for staged in self._staged_files(None):
            key = _STAGED.sub("", staged.relative_to(self.spec.location).as_posix())
            if prefix is None or key.startswith(prefix):
                yield ObjectInfo(key, staged.stat().st_size)

    def _staged_files(self, key: str | None) -> tuple[pathlib.Path, ...]:
        """Local stores only: what a write that never finished left behind. The library
        writes ``KEY#N`` and renames it to ``KEY`` when complete; after a crash the staging
        file stays, hidden from its listings and refused by its delete. Listed under the key
        it would have become, and removed with it. (Object stores keep an unfinished
        multipart upload invisibly instead: a bucket lifecycle rule removes those.)"""
        if self.spec.kind is not StoreKind.LOCAL:
            return ()
        root = pathlib.Path(self.spec.location)
        if key is None:
            return tuple(p for p in root.rglob("*#*") if _STAGED.search(p.name) and p.is_file())
        target = root / key
        return tuple(
            p
            for p in target.parent.glob(glob.escape(target.name) + "#*")
            if _STAGED.search(p.name) and p.is_file()
        )

    async def close(self) -> None:
        """obstore keeps no open handle that needs closing; the store is dropped with us."""


def _client_options(spec: StoreSpec) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if spec.allow_http:
        options["allow_http"] = True
    if spec.request_timeout_ms is not None:
        options["timeout"] = datetime.timedelta(milliseconds=spec.request_timeout_ms)
    if spec.connect_timeout_ms is not None:
        options["connect_timeout"] = datetime.timedelta(milliseconds=spec.connect_timeout_ms)
    return options


def _retry_config(spec: StoreSpec) -> dict[str, Any] | None:
    if spec.library_retries is None:
        return None
    return {
        "max_retries": spec.library_retries,
        "backoff": {
            "init_backoff": datetime.timedelta(milliseconds=50),
            "max_backoff": datetime.timedelta(seconds=1),
            "base": 2,
        },
        "retry_timeout": datetime.timedelta(
            milliseconds=max(1000, (spec.request_timeout_ms or 30_000) * (spec.library_retries + 1))
        ),
    }


def open_blob_store(spec: StoreSpec) -> ObstoreBlobStore:
    """Open the store a spec names (no request is made yet); a configuration the library
    refuses (a malformed key file, an unusable directory) raises ``InvalidOffloadPolicies``."""
    # the library types these as TypedDicts; ours are built from validated policies
    client: Any = _client_options(spec)
    retry: Any = _retry_config(spec)
    config: Any = dict(spec.config)
    store: Any
    try:
        if spec.kind is StoreKind.S3:
            store = S3Store(spec.location, config=config, client_options=client, retry_config=retry)
        elif spec.kind is StoreKind.GCS:
            store = GCSStore(
                spec.location, config=config, client_options=client, retry_config=retry
            )
        elif spec.kind is StoreKind.AZURE:
            store = AzureStore(
                spec.location, config=config, client_options=client, retry_config=retry
            )
        elif spec.kind is StoreKind.LOCAL:
            store = LocalStore(spec.location, mkdir=True)
        else:
            store = MemoryStore()
    except _CONSTRUCTION_ERRORS as exc:
        raise InvalidOffloadPolicies(f"{spec.describe()}: {_first_line(exc)}") from exc
    return ObstoreBlobStore(store, spec)


def memory_blob_store(label: str = "memory") -> ObstoreBlobStore:
    """An in-process store (tests, the fast tiers)."""
    return open_blob_store(StoreSpec(StoreKind.MEMORY, label))


async def drain(iterator: AsyncIterator[T]) -> list[T]:
    """Every item of an async iterator (listings in tests and tools)."""
    return [item async for item in iterator]


__all__ = [
    "BlobStore",
    "ObjectInfo",
    "ObstoreBlobStore",
    "drain",
    "memory_blob_store",
    "open_blob_store",
]
