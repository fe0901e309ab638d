"""Readers: a non-durable exclusive subscription positioned by message id (reference §3.18).

Owns: ``Reader`` over a ``Consumer`` with ``durable=False`` and a ``start_message_id``
(earliest, latest or an id; ``start_message_id_inclusive``), ``read_next``,
``get_last_message_id``, ``has_message_available`` (GET_LAST_MESSAGE_ID compared with the
last message read, or with the start position when nothing was read yet), ``seek`` by id or
publish time.

Must not know: connections.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from magnetar.client._consumer import Consumer
from magnetar.client._errors import InvalidConfiguration
from magnetar.client._message import Message, MessageId


def _pos(mid: MessageId) -> tuple[int, int, int]:
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


class Reader:
    def __init__(self, consumer: Consumer, start_message_id: MessageId, inclusive: bool) -> None:
        self._consumer = consumer
        self._start = start_message_id
        self._inclusive = inclusive

    def __repr__(self) -> str:
        return f"<Reader {self._consumer.topic()} start={self._start}>"

    def topic(self) -> str:
        return self._consumer.topic()

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        msg = await self._consumer.receive(timeout_millis)
        return msg

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._consumer.__aiter__()

    async def has_message_available(self) -> bool:
        if self._consumer._queue:
            return True
        parts = self._consumer.partitions
        if len(parts) != 1:
            raise InvalidConfiguration("has_message_available needs a non-partitioned topic")
        part = parts[0]
        last, mark = await part.get_last_message_id()
        if last.entry_id() < 0:
            return False
        if self._consumer._queue:
            return True
        ref = part.last_dequeued
        if ref is not None:
            last_pos = _pos(last)
            ref_pos = _pos(ref)
            if last.batch_index() < 0 and ref.batch_index() >= 0:
                # the broker reported the entry, we have read some of its batch
                return last_pos[:2] > ref_pos[:2]
            return last_pos > ref_pos
        start = part.start_message_id or self._start
        if start == MessageId.earliest:
            return True
        if start == MessageId.latest:
            if mark is not None and mark.entry_id() >= -1:
                return _pos(last)[:2] > _pos(mark)[:2]
            return False
        if self._inclusive:
            return _pos(last)[:2] >= _pos(start)[:2]
        return _pos(last) > _pos(start)

    async def seek(self, target: MessageId | int) -> None:
        await self._consumer.seek(target)

    async def get_last_message_id(self) -> MessageId:
        """The id of the topic's last message (Java's ``Reader.getLastMessageId``): for a
        batched entry it names the batch's last message; ``entry_id() < 0`` when empty."""
        return await self._consumer.get_last_message_id()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    @property
    def consumer(self) -> Consumer:
        return self._consumer

    async def close(self) -> None:
        await self._consumer.close()


__all__ = ["Reader"]
