"""Topic compaction: a compacted view keeping the latest message per key, and reading it.

One module per concern (trio-style: private-ish modules, public names re-exported here):
- ``fold``: the pure fold (``entry_messages``, ``LatestPerKey``): which messages of a stream
  of entries survive "latest value per key" (key = ``partition_key``, of each
  SingleMessageMetadata in a batch); an empty payload or ``null_value`` deletes its key;
  messages without a key are left out (Pulsar's ``compactionRetainNullKey=false``);
- ``view``: the compacted-view record format and ``CompactedView`` (one generation: a managed
  ledger named ``<topic>/__compaction/compacted-<generation>`` holding, in position order,
  each retained entry as (original position, retained batch indexes, ORIGINAL entry bytes
  unchanged), sealed by a trailer record carrying the *compaction horizon*);
- ``compactor``: ``TopicCompaction``, a topic's compaction state (the current view, status
  NOT_RUN / RUNNING / SUCCESS / ERROR, last statistics) and ``compact()``, Pulsar's two phases
  over the previous view followed by the topic's entries after the previous horizon up to the
  current end (phase one folds keys in memory, phase two copies the retained entries);
- ``cursor``: ``CompactedCursor``, a ``TopicCursor`` over a subscription's own cursor that,
  while the read position is at or before the horizon, serves the view (only retained
  entries at or after the read position, with their original message ids), then continues
  on the live tail. A partially retained batch goes out with a CommandMessage ``ack_set``
  whose 0 bits are the messages compacted out (the official clients skip them and return
  their permits);
- ``monitor``: ``CompactionMonitor``, the periodic check that compacts topics whose bytes not
  yet compacted exceed their ``compaction_threshold``.

Dependencies inside the package run one way: fold <- view <- compactor <- monitor, cursor.
``fold`` is pure (import-linter contract ``compaction-fold-is-pure``).

Invariants: a generation becomes visible only once its trailer is written (one append: a
crash leaves either the old or the new view); on load the newest sealed generation wins and
every other one is deleted; the ``__compaction`` durable cursor's mark-delete is the horizon
of the current view (so retention never trims data not yet compacted); the view only ever
holds positions <= its horizon, in increasing order.
Must not know: sockets, frames, dispatch (the dispatchers see an ordinary cursor).
"""

from magnetar.broker.compaction.compactor import (
    CompactionAlreadyRunning,
    CompactionStatistics,
    CompactionStatus,
    TopicCompaction,
)
from magnetar.broker.compaction.cursor import CompactedCursor, int_to_words, words_to_int
from magnetar.broker.compaction.fold import KeyedMessage, LatestPerKey, entry_messages
from magnetar.broker.compaction.monitor import CompactionMonitor, MonitoredTopic
from magnetar.broker.compaction.view import (
    COMPACTION_SUBSCRIPTION,
    CompactedView,
    Trailer,
    ViewRecord,
    decode_record,
    encode_record,
    view_name,
)

__all__ = [
    "COMPACTION_SUBSCRIPTION",
    "CompactedCursor",
    "CompactedView",
    "CompactionAlreadyRunning",
    "CompactionMonitor",
    "CompactionStatistics",
    "CompactionStatus",
    "KeyedMessage",
    "LatestPerKey",
    "MonitoredTopic",
    "TopicCompaction",
    "Trailer",
    "ViewRecord",
    "decode_record",
    "encode_record",
    "entry_messages",
    "int_to_words",
    "view_name",
    "words_to_int",
]
