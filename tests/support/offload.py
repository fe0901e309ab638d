"""Tiered storage through a real broker's admin REST API, for the end-to-end tiers.

Owns: ``OffloadAdmin`` (a topic's ``PUT/GET .../offload``, its internal stats and stats, and
waiting on them with deadlines, never sleeps), ``broker_settings`` (broker.conf names for a
small-ledger topic offloading to a filesystem directory or an S3 bucket, with deletion lag 0
and short object-store timeouts), ``payloads`` (deterministic, distinct message bodies), and
``publish`` / ``read_all`` (a topic written and read back whole with the official client).
"""

from __future__ import annotations

import json
import pathlib
import random
import urllib.error
import urllib.request
from typing import Any

from support.s3 import S3Bucket
from support.waiting import wait_until


def publish(service_url: str, topic: str, data: list[bytes]) -> None:
    """``data`` sent one message at a time (unbatched: an entry each), each acknowledged."""
    import pulsar

    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    producer = client.create_producer(topic, batching_enabled=False)
    for payload in data:
        producer.send(payload)
    client.close()


def read_all(service_url: str, topic: str, n: int, timeout_ms: int = 30_000) -> list[bytes]:
    """The first ``n`` messages of ``topic``, read by a reader from the earliest."""
    import pulsar

    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(timeout_ms).data() for _ in range(n)]
    client.close()
    return got


def payloads(n: int, size: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [f"{i:06d}:".encode() + rng.randbytes(size) for i in range(n)]


def broker_settings(
    *,
    directory: pathlib.Path | None = None,
    bucket: S3Bucket | None = None,
    entries_per_ledger: int = 40,
    **more: object,
) -> dict[str, object]:
    """Ledgers of ``entries_per_ledger`` entries, kept forever (retention -1), offloaded to
    ``directory`` (filesystem driver) or ``bucket`` (S3 driver on the moto server), their
    bookie copies deleted as soon as they are offloaded."""
    conf: dict[str, object] = {
        "managedLedgerMaxEntriesPerLedger": entries_per_ledger,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        "defaultRetentionTimeInMinutes": -1,
        "defaultRetentionSizeInMB": -1,
        "managedLedgerOffloadDeletionLagMs": 0,
        "managedLedgerOffloadReadBufferSizeInBytes": 64 * 1024,
        "managedLedgerOffloadStoreTimeoutMs": 2_000,
        "managedLedgerOffloadStoreRetries": 1,
    }
    if directory is not None:
        conf["managedLedgerOffloadDriver"] = "filesystem"
        conf["fileSystemURI"] = f"file://{directory}"
    if bucket is not None:
        for key, value in bucket.policies_json().items():
            conf[key] = value
    conf.update(more)
    return conf


class OffloadAdmin:
    def __init__(self, web_url: str, topic: str) -> None:
        """``topic``: ``persistent://tenant/ns/local``."""
        self.web_url = web_url.rstrip("/")
        self.topic = topic
        self.path = "/admin/v2/" + topic.replace("://", "/", 1)

    def call(self, method: str, suffix: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.web_url + self.path + suffix,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def trigger(self, until: dict[str, int] | None = None) -> None:
        self.call("PUT", "/offload", until)

    def status(self) -> dict[str, Any]:
        got: dict[str, Any] = self.call("GET", "/offload")
        return got

    def internal_stats(self) -> dict[str, Any]:
        got: dict[str, Any] = self.call("GET", "/internalStats")
        return got

    def stats(self) -> dict[str, Any]:
        got: dict[str, Any] = self.call("GET", "/stats")
        return got

    def sealed_ledgers(self) -> list[dict[str, Any]]:
        return list(self.internal_stats()["ledgers"][:-1])

    def wait_status(self, wanted: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Until the last manual offload's status is ``wanted`` (ERROR on the way fails)."""
        seen: dict[str, Any] = {}

        def reached() -> bool:
            seen.update(self.status())
            if seen["status"] == "ERROR" and wanted != "ERROR":
                raise AssertionError(f"offload failed: {seen}")
            return bool(seen["status"] == wanted)

        wait_until(reached, timeout_s, lambda: f"offload status {wanted} (last {seen})")
        return seen

    def wait_offloaded(self, *, bookie_deleted: bool = True, timeout_s: float = 60.0) -> None:
        """Until every sealed ledger is offloaded (and its bookie copy deleted)."""

        def done() -> bool:
            ledgers = self.sealed_ledgers()
            return bool(ledgers) and all(
                ledger["offloaded"]
                and (
                    not bookie_deleted
                    or ledger.get("offloadContext", {}).get("bookkeeperDeleted", False)
                )
                for ledger in ledgers
            )

        wait_until(
            done, timeout_s, lambda: f"every sealed ledger offloaded: {self.sealed_ledgers()}"
        )

    def http_error(self, method: str, suffix: str, body: Any = None) -> tuple[int, str]:
        """The status and reason of a call expected to fail."""
        try:
            self.call(method, suffix, body)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}").get("reason", "")
        raise AssertionError(f"{method} {suffix} did not fail")


__all__ = ["OffloadAdmin", "broker_settings", "payloads"]
