"""Topic names as the broker uses them: a thin view over the codec's ``TopicName``.

Owns: the broker-side conveniences (``full``, ``local``, ``namespace_name``,
``partitioned_base``, the managed-ledger name ``tenant/ns/persistent/<url-encoded local>``)
and one rule of its own: legacy v1 names with a cluster part are refused. Parsing and
Pulsar's validation wording come from ``magnetar.client.protocol.TopicName``. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from magnetar.client.protocol import PARTITIONED_TOPIC_SUFFIX, InvalidTopicNameError
from magnetar.client.protocol import TopicName as CodecTopicName

PARTITION_SUFFIX = PARTITIONED_TOPIC_SUFFIX
_NAME_MAX = 1024


class InvalidTopicName(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        if not name or len(name) > _NAME_MAX or "\x00" in name:
            raise InvalidTopicName(f"Invalid topic name: {name!r}")
        try:
            parsed = CodecTopicName.parse(name)
        except InvalidTopicNameError as exc:
            raise InvalidTopicName(str(exc)) from None
        if parsed.cluster is not None:
            raise InvalidTopicName(f"v1 topic names (with a cluster) are not supported: {name}")
        if parsed.local_name.strip() != parsed.local_name:
            raise InvalidTopicName(f"Invalid topic name: {name!r}")
        return cls(parsed.domain, parsed.tenant, parsed.namespace_portion, parsed.local_name)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"

    @property
    def full(self) -> str:
        return str(self)

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """The partition index of a ``-partition-<n>`` name, else -1."""
        return CodecTopicName(self.domain, self.tenant, self.namespace, self.local).partition_index

    @property
    def partitioned_base(self) -> TopicName:
        """The partitioned topic a partition belongs to (itself if not a partition)."""
        if self.partition_index < 0:
            return self
        head = self.local.rpartition(PARTITION_SUFFIX)[0]
        return TopicName(self.domain, self.tenant, self.namespace, head)

    def partition(self, index: int) -> TopicName:
        return TopicName(
            self.domain, self.tenant, self.namespace, f"{self.local}{PARTITION_SUFFIX}{index}"
        )

    @property
    def managed_ledger_name(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.domain}/{quote(self.local, safe='')}"


__all__ = ["PARTITION_SUFFIX", "InvalidTopicName", "TopicName"]
