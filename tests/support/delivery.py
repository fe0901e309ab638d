"""Delivery checks for cluster tests and benchmarks: a consumer that receives and acknowledges
while the cluster moves topics, and the counts that tell duplicates apart.

Owns: ``AckingConsumer`` (a thread receiving and acknowledging each message at once with the
official client, or with ours through ``magnetar_acking_consumer`` (ack receipts on: an ack
counts once its receipt came back), recording every (payload, message id) it got) and
``DeliveryCounts``:
- ``lost``: acknowledged to the producer, never received;
- ``stored_twice``: payloads stored under two message ids (the producer resent a message
  whose receipt died with the broker: without deduplication Pulsar does the same);
- ``acked_redelivered``: a message id received again after the consumer acknowledged it
  (an acknowledgement lost in the move; with ack receipts, after its receipt arrived).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import pulsar


@dataclass(frozen=True, slots=True)
class DeliveryCounts:
    acknowledged: int
    received: int
    lost: int
    stored_twice: int
    acked_redelivered: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class AckingConsumer:
    def __init__(
        self,
        consumer: Any,
        *,
        timeout: type[Exception] = pulsar.Timeout,
        error: type[Exception] = pulsar.PulsarException,
        work_s: float = 0.0,
    ) -> None:
        self.consumer = consumer
        self.work_s = work_s
        """Simulated processing time per message, before its ack (a slow consumer whose
        receive queue fills up)."""
        self._timeout = timeout
        self._error = error
        self.ids: dict[bytes, set[str]] = {}
        self.acked_ids: set[str] = set()
        self.received = 0
        self.acked_redelivered = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> AckingConsumer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.consumer.receive(200)
            except self._timeout:
                continue
            except self._error:
                time.sleep(0.05)  # the consumer is reconnecting: back-off, then receive again
                continue
            mid = str(msg.message_id())
            with self._lock:
                self.received += 1
                if mid in self.acked_ids:
                    self.acked_redelivered += 1
                self.ids.setdefault(msg.data(), set()).add(mid)
            if self.work_s:
                time.sleep(self.work_s)  # the simulated work on the message, not a wait
            try:
                self.consumer.acknowledge(msg)
            except self._error:
                continue  # not acknowledged: a redelivery of it is no acked redelivery
            with self._lock:
                self.acked_ids.add(mid)

    def has_all(self, payloads: set[bytes]) -> bool:
        with self._lock:
            return payloads <= self.ids.keys()

    def stop(self, acknowledged: set[bytes], timeout_s: float = 300) -> DeliveryCounts:
        """Wait (bounded) until every acknowledged payload arrived, then count."""
        deadline = time.monotonic() + timeout_s
        while not self.has_all(acknowledged) and time.monotonic() < deadline:
            time.sleep(0.1)  # polling interval of a deadline-bounded wait
        self._stop.set()
        self._thread.join(30)
        with self._lock:
            return DeliveryCounts(
                acknowledged=len(acknowledged),
                received=self.received,
                lost=len(acknowledged - self.ids.keys()),
                stored_twice=sum(1 for ids in self.ids.values() if len(ids) > 1),
                acked_redelivered=self.acked_redelivered,
            )


def magnetar_acking_consumer(consumer: Any) -> AckingConsumer:
    """An ``AckingConsumer`` over a ``magnetar.client.sync`` consumer subscribed with
    ``ack_receipt_enabled=True``: ``acknowledge`` returns once the broker confirmed the ack
    (and raises when it could not), so ``acked_redelivered`` counts receipt-confirmed acks."""
    from magnetar.client import PulsarException, Timeout

    return AckingConsumer(consumer, timeout=Timeout, error=PulsarException)
