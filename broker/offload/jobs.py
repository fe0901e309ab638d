"""An offload as data: what the offload worker process is asked to do, and what it answers.

Owns: ``LocatedLedger`` (a sealed ledger's metadata and its bookies' addresses: what a process
without the metadata store needs to read it), ``OffloadJob`` (a located ledger, the store's
``StoreSpec``, the upload's sizes, the attempt's keys and metadata, the bookie client's TLS
files) and the JSON of each; ``error_to_json`` / ``error_from_json``: an ``OffloadError``
across the pipe, of the same class and message.
Must not know: processes and pipes (``isolation`` and ``worker`` own them), managed ledgers.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.bookie.tls import GrpcTls
from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.offload import errors
from magnetar.broker.offload.drivers import StoreKind, StoreSpec


@dataclass(frozen=True, slots=True)
class LocatedLedger:
    """A sealed ledger and where its bookies listen (bookie id -> ``host:port``)."""

    metadata: LedgerMetadata
    addresses: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"metadata": self.metadata.to_dict(), "addresses": dict(self.addresses)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LocatedLedger:
        return cls(LedgerMetadata.from_dict(doc["metadata"]), dict(doc["addresses"]))


def spec_to_json(spec: StoreSpec) -> dict[str, Any]:
    return {
        "kind": spec.kind.value,
        "location": spec.location,
        "config": dict(spec.config),
        "allow_http": spec.allow_http,
        "request_timeout_ms": spec.request_timeout_ms,
        "connect_timeout_ms": spec.connect_timeout_ms,
        "library_retries": spec.library_retries,
        "supports_attributes": spec.supports_attributes,
    }


def spec_from_json(doc: Mapping[str, Any]) -> StoreSpec:
    return StoreSpec(
        StoreKind(doc["kind"]),
        doc["location"],
        dict(doc["config"]),
        allow_http=bool(doc["allow_http"]),
        request_timeout_ms=doc["request_timeout_ms"],
        connect_timeout_ms=doc["connect_timeout_ms"],
        library_retries=doc["library_retries"],
        supports_attributes=bool(doc["supports_attributes"]),
    )


@dataclass(frozen=True, slots=True)
class OffloadJob:
    """One attempt's upload of one ledger, everything the worker needs to do it alone."""

    ledger: LocatedLedger
    spec: StoreSpec
    data_key: str
    index_key: str
    extra: Mapping[str, str]
    block_bytes: int
    part_bytes: int
    part_concurrency: int
    prefetch_rounds: int
    paced: bool
    """The broker's offload reads are rate-limited: the worker asks before each read."""
    bookie_tls: GrpcTls | None = None
    bookie_timeout_ms: int = 30_000

    def to_json(self) -> dict[str, Any]:
        tls = self.bookie_tls
        return {
            "ledger": self.ledger.to_json(),
            "spec": spec_to_json(self.spec),
            "data_key": self.data_key,
            "index_key": self.index_key,
            "extra": dict(self.extra),
            "block_bytes": self.block_bytes,
            "part_bytes": self.part_bytes,
            "part_concurrency": self.part_concurrency,
            "prefetch_rounds": self.prefetch_rounds,
            "paced": self.paced,
            "bookie_tls": None
            if tls is None
            else [tls.certificate_file, tls.key_file, tls.trust_certs_file],
            "bookie_timeout_ms": self.bookie_timeout_ms,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> OffloadJob:
        tls = doc["bookie_tls"]
        return cls(
            ledger=LocatedLedger.from_json(doc["ledger"]),
            spec=spec_from_json(doc["spec"]),
            data_key=doc["data_key"],
            index_key=doc["index_key"],
            extra=dict(doc["extra"]),
            block_bytes=int(doc["block_bytes"]),
            part_bytes=int(doc["part_bytes"]),
            part_concurrency=int(doc["part_concurrency"]),
            prefetch_rounds=int(doc["prefetch_rounds"]),
            paced=bool(doc["paced"]),
            bookie_tls=None if tls is None else GrpcTls(tls[0], tls[1], tls[2]),
            bookie_timeout_ms=int(doc["bookie_timeout_ms"]),
        )


def bytes_to_json(data: bytes) -> str:
    return base64.b64encode(data).decode()


def bytes_from_json(text: str) -> bytes:
    return base64.b64decode(text)


_ERRORS: dict[str, type[errors.OffloadError]] = {
    cls.__name__: cls
    for cls in (
        errors.OffloadError,
        errors.StoreUnavailable,
        errors.ObjectNotFound,
        errors.StoreAccessDenied,
        errors.OffloadCorrupt,
        errors.LedgerNotSealed,
        errors.SourceMismatch,
        errors.EntryOutOfRange,
        errors.InvalidOffloadPolicies,
    )
}


def error_to_json(exc: BaseException) -> dict[str, str]:
    """What the worker answers for a failed job: an ``OffloadError`` keeps its class; anything
    else (a bookie that served nothing, a bug) travels as an ``OffloadError`` naming it."""
    name = type(exc).__name__
    if name in _ERRORS and isinstance(exc, errors.OffloadError):
        return {"class": name, "message": str(exc)}
    return {"class": "OffloadError", "message": f"{name}: {exc}"}


def error_from_json(doc: Mapping[str, str]) -> errors.OffloadError:
    return _ERRORS.get(doc.get("class", ""), errors.OffloadError)(doc.get("message", ""))


__all__ = [
    "LocatedLedger",
    "OffloadJob",
    "bytes_from_json",
    "bytes_to_json",
    "error_from_json",
    "error_to_json",
    "spec_from_json",
    "spec_to_json",
]
