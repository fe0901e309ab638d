"""Topic names as the broker sees them (a small adapter until the codec's parser is used).

Owns: ``TopicName`` parsing of fully qualified names (``persistent://tenant/ns/local``, short
forms ``local`` and ``tenant/ns/local`` as the client normalises them), the partition
suffix ``-partition-<n>``, and the managed-ledger name ``tenant/ns/persistent/<local>``.
Invalid names raise ``InvalidTopicName``. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

PARTITION_SUFFIX = "-partition-"
_DOMAINS = ("persistent", "non-persistent")
_MAX_NAME = 1024


class InvalidTopicName(ValueError):
    pass


def _part_ok(part: str) -> bool:
    return bool(part) and all(c.isalnum() or c in "-_=:." for c in part)


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        if not name or len(name) > _MAX_NAME or "\x00" in name:
            raise InvalidTopicName(f"Invalid topic name: {name!r}")
        if "://" in name:
            domain, _, rest = name.partition("://")
        else:
            domain, rest = "persistent", name
            if rest.count("/") == 0:
                rest = f"public/default/{rest}"
        if domain not in _DOMAINS:
            raise InvalidTopicName(f"Invalid topic domain: {name!r}")
        parts = rest.split("/", 2)
        if len(parts) != 3:
            raise InvalidTopicName(f"Invalid topic name: {name!r}")
        tenant, namespace, local = parts
        if not (_part_ok(tenant) and _part_ok(namespace)) or not local or local.strip() != local:
            raise InvalidTopicName(f"Invalid topic name: {name!r}")
        if "/" in local:  # v1 names with a cluster are not supported
            raise InvalidTopicName(f"Invalid topic name: {name!r}")
        return cls(domain, tenant, namespace, local)

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
        head, sep, tail = self.local.rpartition(PARTITION_SUFFIX)
        if sep and head and tail.isdigit():
            return int(tail)
        return -1

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
