"""Helpers for hostile-input tests: an in-process broker whose topics live in managed ledgers
on fake bookies (small ledgers, so topics span several), hand-built SEND payloads, and a log
handler that records tracebacks.

``ml_broker(**config)`` returns a started ``InProcessBroker``; ``entry(...)`` builds the
headers-and-payload bytes of a SEND; ``Tracebacks`` collects log records carrying exc_info.
"""

from __future__ import annotations

import logging
import random
import struct
from typing import Any

import crc32c

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.zk.memory import MemoryMetadataServer
from support.broker import InProcessBroker


def ml_broker(entries_per_ledger: int = 3, **config: Any) -> InProcessBroker:
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=1)
    factory = ManagedLedgerFactory(
        server.connect(),
        bookies.factory,
        ManagedLedgerConfig(
            ensemble_size=1,
            write_quorum=1,
            ack_quorum=1,
            max_entries_per_ledger=entries_per_ledger,
            min_ledger_rollover_time_ms=0,
        ),
        rng=random.Random(1),
    )
    return InProcessBroker(server, ManagedLedgerStorage(factory), **config).start()


def entry(payload: bytes = b"payload", *, checksum: bool = True, **metadata: Any) -> bytes:
    """Headers-and-payload of a SEND: ``MessageMetadata(**metadata)`` (producer name,
    sequence id and publish time default to valid values; pass ``producer_name=None`` to
    leave it out) and ``payload``."""
    fields: dict[str, Any] = {"producer_name": "p", "sequence_id": 0, "publish_time": 1}
    fields.update(metadata)
    md = pb.MessageMetadata(**{k: v for k, v in fields.items() if v is not None})
    raw = md.SerializePartialToString()
    body = struct.pack(">I", len(raw)) + raw + payload
    if not checksum:
        return body
    return b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body)) + body


def batch_payload(count: int) -> bytes:
    """``count`` single messages of a batch, each with an empty payload."""
    single = pb.SingleMessageMetadata(payload_size=0).SerializeToString()
    return (struct.pack(">I", len(single)) + single) * count


class Tracebacks(logging.Handler):
    """Records every log record that carries a traceback (exc_info), from any thread."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None or record.levelno >= logging.ERROR:
            self.records.append(record)

    def __enter__(self) -> Tracebacks:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)

    def text(self) -> str:
        return "\n".join(self.format(r) for r in self.records)
