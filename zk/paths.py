"""The metadata path layout, following Pulsar and BookKeeper so operators recognise it.

Owns: every path string used in the metadata store. Other packages build paths only
through these functions. Must not know: what is stored at the paths (each owner encodes
its own values).
"""

from __future__ import annotations

LEDGERS_ROOT = "/ledgers"
AVAILABLE_BOOKIES = "/ledgers/available"
READONLY_BOOKIES = "/ledgers/available/readonly"
COOKIES = "/ledgers/cookies"
LEDGER_IDGEN = "/ledgers/idgen"
LEDGER_META_ROOT = "/ledgers/meta"
UNDERREPLICATION = "/ledgers/underreplication"
UNDERREPLICATED_LEDGERS = "/ledgers/underreplication/ledgers"
REPLICATION_LOCKS = "/ledgers/underreplication/locks"
AUDITOR_ELECTION = "/ledgers/underreplication/auditorelection"
DRAINING_BOOKIES = "/ledgers/draining"
CLUSTERS = "/admin/clusters"
POLICIES = "/admin/policies"
PARTITIONED_TOPICS = "/admin/partitioned-topics"
MANAGED_LEDGERS = "/managed-ledgers"
NAMESPACE_OWNERSHIP = "/namespace"
LOADBALANCE_BROKERS = "/loadbalance/brokers"
LOADBALANCE_LEADER = "/loadbalance/leader"


def bookie_registration(bookie_id: str) -> str:
    """Ephemeral node announcing a writable bookie."""
    return f"{AVAILABLE_BOOKIES}/{bookie_id}"


def readonly_bookie_registration(bookie_id: str) -> str:
    return f"{READONLY_BOOKIES}/{bookie_id}"


def bookie_cookie(bookie_id: str) -> str:
    return f"{COOKIES}/{bookie_id}"


def underreplicated_ledger(ledger_id: int) -> str:
    """BookKeeper's re-replication task node: the id as 16 hex digits split 4/4/4/4 (no
    node gets more than 65,536 children), then ``urL<id>``."""
    if ledger_id < 0:
        raise ValueError(f"ledger id must be >= 0, got {ledger_id}")
    h = f"{ledger_id:016x}"
    return f"{UNDERREPLICATED_LEDGERS}/{h[0:4]}/{h[4:8]}/{h[8:12]}/{h[12:16]}/urL{ledger_id}"


def underreplicated_ledger_id_of(name: str) -> int | None:
    """Parse the last component of an ``underreplicated_ledger`` path; None otherwise."""
    if name.startswith("urL") and name[3:].isdigit():
        return int(name[3:])
    return None


def replication_lock(ledger_id: int) -> str:
    """Ephemeral lock held by the replication worker working on the ledger."""
    return f"{REPLICATION_LOCKS}/urL{ledger_id}"


def draining_bookie(bookie_id: str) -> str:
    """Marker of a bookie being decommissioned: never chosen for new ensembles."""
    return f"{DRAINING_BOOKIES}/{bookie_id}"


def ledger_metadata(ledger_id: int) -> str:
    """Ledger metadata; ids are zero-padded so lexical order is numeric order."""
    if ledger_id < 0:
        raise ValueError(f"ledger id must be >= 0, got {ledger_id}")
    return f"{LEDGER_META_ROOT}/L{ledger_id:020d}"


def ledger_id_of(name: str) -> int | None:
    """Parse a child name of ``LEDGER_META_ROOT``; None for anything else."""
    if len(name) == 21 and name[0] == "L" and name[1:].isdigit():
        return int(name[1:])
    return None


def cluster(name: str) -> str:
    return f"{CLUSTERS}/{name}"


def tenant_policies(tenant: str) -> str:
    return f"{POLICIES}/{tenant}"


def namespace_policies(tenant: str, namespace: str) -> str:
    return f"{POLICIES}/{tenant}/{namespace}"


def partitioned_topic(tenant: str, namespace: str, domain: str, local_name: str) -> str:
    return f"{PARTITIONED_TOPICS}/{tenant}/{namespace}/{domain}/{local_name}"


def partitioned_topics_of(tenant: str, namespace: str, domain: str) -> str:
    return f"{PARTITIONED_TOPICS}/{tenant}/{namespace}/{domain}"


def managed_ledger(name: str) -> str:
    """``name`` is the managed ledger's name, e.g. ``tenant/ns/persistent/topic``."""
    return f"{MANAGED_LEDGERS}/{name}"


def encode_cursor_name(cursor: str) -> str:
    """A cursor (subscription) name as one path segment: ``%`` and ``/`` escaped, so that
    ``a/b`` is never a child of ``a`` and no name collides with a node of its own."""
    return cursor.replace("%", "%25").replace("/", "%2F")


def decode_cursor_name(segment: str) -> str:
    return segment.replace("%2F", "/").replace("%25", "%")


def managed_cursor(ledger_name: str, cursor: str) -> str:
    return f"{MANAGED_LEDGERS}/{ledger_name}/{encode_cursor_name(cursor)}"


def bundle_ownership(tenant: str, namespace: str, bundle_range: str) -> str:
    return f"{NAMESPACE_OWNERSHIP}/{tenant}/{namespace}/{bundle_range}"


def broker_load(broker_id: str) -> str:
    return f"{LOADBALANCE_BROKERS}/{broker_id}"
