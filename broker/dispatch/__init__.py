"""Dispatch: consumers and dispatchers (which consumer gets which entry), Key_Shared.

Owns: permits, pending entries, redelivery and key ownership between consumers.
Must not know: topics, connections or policies; it reads entries through the ``storage``
contract.
"""

from magnetar.broker.dispatch.consumer import Consumer, ConsumerSink, OutMessage, SubType
from magnetar.broker.dispatch.dispatchers import (
    ChunkOf,
    CountOf,
    DeliverAtOf,
    Dispatcher,
    KeySharedDispatcher,
    MultipleConsumersDispatcher,
    SingleActiveConsumerDispatcher,
    Throttle,
    new_dispatcher,
)
from magnetar.broker.dispatch.key_shared import (
    KeySharedMode,
    KeySharedPolicy,
    KeySharedScheduler,
    KeySharedSelector,
)

__all__ = [
    "ChunkOf",
    "Consumer",
    "ConsumerSink",
    "CountOf",
    "DeliverAtOf",
    "Dispatcher",
    "KeySharedDispatcher",
    "KeySharedMode",
    "KeySharedPolicy",
    "KeySharedScheduler",
    "KeySharedSelector",
    "MultipleConsumersDispatcher",
    "OutMessage",
    "SingleActiveConsumerDispatcher",
    "SubType",
    "Throttle",
    "new_dispatcher",
]
