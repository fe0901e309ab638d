"""A blocking facade over the asyncio client, for scripts and the Spark connector.

    from magnetar.client.sync import Client

    client = Client("pulsar://localhost:6650")
    producer = client.create_producer("my-topic")
    producer.send(b"hello")
    consumer = client.subscribe("my-topic", "sub")
    msg = consumer.receive(timeout_millis=5000)
    consumer.acknowledge(msg)
    client.close()

Owns only the thread hop: each sync ``Client`` runs one event loop on a daemon thread and every
method submits the matching coroutine of the asyncio object to it and waits for the result.
No logic is duplicated here; names and arguments are those of the asyncio API (and of the
official ``pulsar`` package). Callbacks (``send_async``) run on the loop thread; message
listeners run on a worker thread so they may call back into the facade.

Invariant: never call the facade from the loop thread itself (it would deadlock); doing so
raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from magnetar.client import _client as _aclient
from magnetar.client._consumer import Consumer as _AConsumer
from magnetar.client._errors import PulsarException
from magnetar.client._message import Message, MessageId
from magnetar.client._message_batch import MessageBatch
from magnetar.client._producer import Producer as _AProducer
from magnetar.client._producer import SentMessageIds
from magnetar.client._reader import Reader as _AReader

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="magnetar-client", daemon=True
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("the sync facade cannot be called from its own event loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


class Producer:
    def __init__(self, loop: _Loop, producer: _AProducer) -> None:
        self._loop = loop
        self._producer = producer

    def __repr__(self) -> str:
        return f"<sync {self._producer!r}>"

    @property
    def aio(self) -> _AProducer:
        """The underlying asyncio producer."""
        return self._producer

    def topic(self) -> str:
        return self._producer.topic()

    def producer_name(self) -> str:
        return self._producer.producer_name()

    def last_sequence_id(self) -> int:
        return self._producer.last_sequence_id()

    def is_connected(self) -> bool:
        return self._producer.is_connected()

    def send(self, content: bytes, **kwargs: Any) -> MessageId:
        return self._loop.run(self._producer.send(content, **kwargs))

    def send_async(
        self,
        content: bytes,
        callback: Callable[[PulsarException | None, MessageId | None], Any] | None,
        **kwargs: Any,
    ) -> None:
        """Queue a message; ``callback(exception, message_id)`` runs on completion."""

        async def go() -> None:
            await self._producer.send_async(content, callback, **kwargs)

        self._loop.run(go())

    def send_batch(self, contents: Sequence[bytes]) -> SentMessageIds:
        """``send_batch`` and wait for every receipt; returns the ids in order."""

        async def go() -> SentMessageIds:
            return await (await self._producer.send_batch(contents))

        return self._loop.run(go())

    def send_batch_async(
        self,
        contents: Sequence[bytes],
        callback: Callable[[PulsarException | None, SentMessageIds | None], Any] | None,
    ) -> None:
        """Queue a ``send_batch`` (waits only for room); ``callback(exception, ids)`` runs on
        the loop thread when every receipt is in."""

        async def go() -> None:
            fut = await self._producer.send_batch(contents)
            if callback is not None:

                def done(f: asyncio.Future[SentMessageIds]) -> None:
                    exc = f.exception()
                    if exc is not None:
                        callback(exc if isinstance(exc, PulsarException) else None, None)
                    else:
                        callback(None, f.result())

                fut.add_done_callback(done)

        self._loop.run(go())

    def flush(self) -> None:
        self._loop.run(self._producer.flush())

    def close(self) -> None:
        self._loop.run(self._producer.close())


class Consumer:
    def __init__(self, loop: _Loop, consumer: _AConsumer) -> None:
        self._loop = loop
        self._consumer = consumer

    def __repr__(self) -> str:
        return f"<sync {self._consumer!r}>"

    @property
    def aio(self) -> _AConsumer:
        return self._consumer

    def topic(self) -> str:
        return self._consumer.topic()

    def subscription_name(self) -> str:
        return self._consumer.subscription_name()

    def consumer_name(self) -> str:
        return self._consumer.consumer_name()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    def receive(self, timeout_millis: int | None = None) -> Message:
        return self._loop.run(self._consumer.receive(timeout_millis))

    def batch_receive(self) -> list[Message]:
        return self._loop.run(self._consumer.batch_receive())

    def receive_batch(
        self, max_messages: int = 1000, timeout_millis: int | None = None
    ) -> MessageBatch:
        return self._loop.run(self._consumer.receive_batch(max_messages, timeout_millis))

    def __iter__(self) -> Iterator[Message]:
        while True:
            try:
                yield self.receive()
            except PulsarException:
                return

    def acknowledge(self, message: Message | MessageId | MessageBatch) -> None:
        self._loop.run(self._consumer.acknowledge(message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._loop.run(self._consumer.acknowledge_cumulative(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._loop.run(self._consumer.negative_acknowledge(message))

    def reconsume_later(self, message: Message, delay_ms: int, **kwargs: Any) -> None:
        self._loop.run(self._consumer.reconsume_later(message, delay_ms, **kwargs))

    def redeliver_unacknowledged_messages(self) -> None:
        self._loop.run(self._consumer.redeliver_unacknowledged_messages())

    def seek(self, target: MessageId | int) -> None:
        self._loop.run(self._consumer.seek(target))

    def get_last_message_id(self) -> MessageId:
        return self._loop.run(self._consumer.get_last_message_id())

    def pause_message_listener(self) -> None:
        self._consumer.pause_message_listener()

    def resume_message_listener(self) -> None:
        self._consumer.resume_message_listener()

    def unsubscribe(self) -> None:
        self._loop.run(self._consumer.unsubscribe())

    def close(self) -> None:
        self._loop.run(self._consumer.close())


class Reader:
    def __init__(self, loop: _Loop, reader: _AReader) -> None:
        self._loop = loop
        self._reader = reader

    @property
    def aio(self) -> _AReader:
        return self._reader

    def topic(self) -> str:
        return self._reader.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._loop.run(self._reader.read_next(timeout_millis))

    def has_message_available(self) -> bool:
        return self._loop.run(self._reader.has_message_available())

    def seek(self, target: MessageId | int) -> None:
        self._loop.run(self._reader.seek(target))

    def get_last_message_id(self) -> MessageId:
        return self._loop.run(self._reader.get_last_message_id())

    def is_connected(self) -> bool:
        return self._reader.is_connected()

    def close(self) -> None:
        self._loop.run(self._reader.close())


class Client:
    """Blocking client; same arguments as ``magnetar.client.Client``."""

    def __init__(self, service_url: str, *args: Any, **kwargs: Any) -> None:
        self._loop = _Loop()
        self._client = _aclient.Client(service_url, *args, **kwargs)
        self._closed = False

    def __repr__(self) -> str:
        return f"<sync {self._client!r}>"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def aio(self) -> _aclient.Client:
        return self._client

    def _listener(self, listener: Callable[..., Any] | None, wrap: type[Any]) -> Any:
        if listener is None:
            return None
        holder: list[Any] = []

        async def call(_consumer: Any, msg: Message) -> None:
            await asyncio.get_running_loop().run_in_executor(None, listener, holder[0], msg)

        return call, holder

    def create_producer(self, topic: str, **kwargs: Any) -> Producer:
        return Producer(self._loop, self._loop.run(self._client.create_producer(topic, **kwargs)))

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        **kwargs: Any,
    ) -> Consumer:
        wrapped = self._listener(kwargs.pop("message_listener", None), Consumer)
        if wrapped is not None:
            kwargs["message_listener"] = wrapped[0]
        consumer = Consumer(
            self._loop, self._loop.run(self._client.subscribe(topic, subscription_name, **kwargs))
        )
        if wrapped is not None:
            wrapped[1].append(consumer)
        return consumer

    def create_reader(self, topic: str, start_message_id: MessageId, **kwargs: Any) -> Reader:
        wrapped = self._listener(kwargs.pop("reader_listener", None), Reader)
        if wrapped is not None:
            kwargs["reader_listener"] = wrapped[0]
        reader = Reader(
            self._loop,
            self._loop.run(self._client.create_reader(topic, start_message_id, **kwargs)),
        )
        if wrapped is not None:
            wrapped[1].append(reader)
        return reader

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._loop.run(self._client.get_topic_partitions(topic))

    def get_schema_info(self, topic: str, version: int | None = None) -> Any:
        return self._loop.run(self._client.get_schema_info(topic, version))

    def get_topics_matching(self, pattern: str) -> list[str]:
        return self._loop.run(self._client.get_topics_matching(pattern))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._client.close(), timeout=60)
        finally:
            self._loop.stop()


__all__ = ["Client", "Consumer", "Producer", "Reader"]
