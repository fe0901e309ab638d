"""Topic names: parsing, normalisation and partition names, with Pulsar's error messages.

Owns: ``TopicName``. Accepted forms (like Pulsar's TopicName):
``my-topic`` → ``persistent://public/default/my-topic``; ``tenant/ns/topic`` →
``persistent://tenant/ns/topic``; ``{persistent,non-persistent}://tenant/ns/topic``; the legacy
``domain://tenant/cluster/ns/topic``. Partition ``i`` of topic ``T`` is ``T-partition-i``; the
index is whatever follows the last ``-partition-`` (decimal, no sign, no leading zeros).

Must not know: brokers, ownership, storage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._errors import InvalidTopicNameError

PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITIONED_TOPIC_SUFFIX = "-partition-"
DOMAINS = ("persistent", "non-persistent")
_NAMED_ENTITY = re.compile(r"^[-=:.\w]*$")


def _check_name(name: str) -> None:
    if not _NAMED_ENTITY.match(name):
        raise InvalidTopicNameError(f"Invalid named entity: {name}")


def partition_index_of(name: str) -> int:
    """Partition index encoded in a topic name, or -1 (Pulsar's ``getPartitionIndex``)."""
    at = name.rfind(PARTITIONED_TOPIC_SUFFIX)
    if at < 0:
        return -1
    idx = name[at + len(PARTITIONED_TOPIC_SUFFIX) :]
    if not idx.isascii() or not idx.isdigit() or str(int(idx)) != idx or int(idx) > 2**31 - 1:
        return -1
    return int(idx)


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace_portion: str
    local_name: str
    cluster: str | None = None

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse and normalise; raises ``InvalidTopicNameError`` with Pulsar's wording."""
        complete = name
        if "://" not in complete:
            parts = [p for p in complete.split("/") if p]  # StringUtils.split drops empties
            if len(parts) == 3:
                complete = "persistent://" + complete
            elif len(parts) == 1:
                complete = f"persistent://{PUBLIC_TENANT}/{DEFAULT_NAMESPACE}/{parts[0]}"
            else:
                raise InvalidTopicNameError(
                    f"Invalid short topic name '{complete}', it should be in the format of "
                    "<tenant>/<namespace>/<topic> or <topic>"
                )
        domain, rest = complete.split("://", 1)
        if domain.lower() not in DOMAINS:
            raise InvalidTopicNameError(f"Invalid topic domain: '{domain}'")
        domain = domain.lower()
        parts = rest.split("/", 3)
        cluster: str | None = None
        if len(parts) == 3:
            tenant, ns, local = parts
            if not tenant or not ns:
                raise InvalidTopicNameError(f"Invalid namespace format. namespace: {tenant}/{ns}")
        elif len(parts) == 4:
            tenant, cluster, ns, local = parts
            if not tenant or not cluster or not ns:
                raise InvalidTopicNameError(
                    f"Invalid namespace format. namespace: {tenant}/{cluster}/{ns}"
                )
            _check_name(cluster)
        else:
            raise InvalidTopicNameError(f"Invalid topic name: {complete}")
        _check_name(tenant)
        _check_name(ns)
        if not local:
            raise InvalidTopicNameError(f"Invalid topic name: {complete}")
        return cls(domain, tenant, ns, local, cluster)

    # ------------------------------------------------------------------ derived names

    @property
    def namespace(self) -> str:
        """``tenant/ns`` (or ``tenant/cluster/ns`` for legacy names)."""
        if self.cluster is None:
            return f"{self.tenant}/{self.namespace_portion}"
        return f"{self.tenant}/{self.cluster}/{self.namespace_portion}"

    @property
    def full_name(self) -> str:
        return f"{self.domain}://{self.namespace}/{self.local_name}"

    @property
    def is_persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def partition_index(self) -> int:
        return partition_index_of(self.local_name)

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def partitioned_topic_name(self) -> str:
        """The base topic's full name (this name if it is not a partition)."""
        idx = self.partition_index
        if idx < 0:
            return self.full_name
        base = self.local_name[: self.local_name.rfind(PARTITIONED_TOPIC_SUFFIX)]
        return f"{self.domain}://{self.namespace}/{base}"

    def partition(self, index: int) -> TopicName:
        """The name of partition ``index`` of this (base) topic."""
        if index < 0:
            raise ValueError(f"invalid partition index {index}")
        base = TopicName.parse(self.partitioned_topic_name)
        return TopicName(
            base.domain,
            base.tenant,
            base.namespace_portion,
            f"{base.local_name}{PARTITIONED_TOPIC_SUFFIX}{index}",
            base.cluster,
        )

    def __str__(self) -> str:
        return self.full_name
