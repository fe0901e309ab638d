"""A topic's offload policies: the broker's, its namespace's and its own, merged as Pulsar.

Owns: ``broker_level(config)`` (the ``managedLedgerOffload*`` / ``s3...`` / ``gcs...`` /
``fileSystem...`` settings of broker.conf as an ``OffloadPolicies``; an empty value or a
negative threshold is "not set"), ``namespace_level(policies)`` (a namespace's
``offload_policies`` with its older ``offload_threshold`` / ``offload_threshold_in_seconds``
/ ``offload_deletion_lag_ms`` fields, as Pulsar's ``oldPoliciesCompatible``),
``topic_level(policies)`` (a topic's ``offloadPolicies``) and ``resolve_offload``: topic over
namespace over broker, field by field (Pulsar's ``mergeConfiguration``), resolved; policies
that cannot work resolve to None (offloading off for that topic; logged).
Pure: no I/O. Must not know: managed ledgers, HTTP, the metadata store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.offload import EffectiveOffloadPolicies, InvalidOffloadPolicies
from magnetar.broker.offload.policies import TOPIC_KEY, OffloadPolicies

log = logging.getLogger(__name__)


def _text(value: str) -> str | None:
    return value.strip() or None


def _threshold(value: int) -> int | None:
    return value if value >= 0 else None


def broker_level(config: BrokerConfig) -> OffloadPolicies:
    c = config
    return OffloadPolicies(
        driver=_text(c.managed_ledger_offload_driver),
        max_threads=c.managed_ledger_offload_max_threads,
        prefetch_rounds=c.managed_ledger_offload_prefetch_rounds,
        threshold_bytes=_threshold(c.managed_ledger_offload_auto_trigger_size_threshold_bytes),
        threshold_seconds=_threshold(c.managed_ledger_offload_threshold_in_seconds),
        deletion_lag_ms=c.managed_ledger_offload_deletion_lag_ms,
        read_priority=_text(c.managed_ledger_data_read_priority),
        bucket=_text(c.managed_ledger_offload_bucket),
        region=_text(c.managed_ledger_offload_region),
        service_endpoint=_text(c.managed_ledger_offload_service_endpoint),
        max_block_size_bytes=c.managed_ledger_offload_max_block_size_in_bytes,
        read_buffer_size_bytes=c.managed_ledger_offload_read_buffer_size_in_bytes,
        s3_region=_text(c.s3_managed_ledger_offload_region),
        s3_bucket=_text(c.s3_managed_ledger_offload_bucket),
        s3_service_endpoint=_text(c.s3_managed_ledger_offload_service_endpoint),
        s3_max_block_size_bytes=c.s3_managed_ledger_offload_max_block_size_in_bytes,
        s3_read_buffer_size_bytes=c.s3_managed_ledger_offload_read_buffer_size_in_bytes,
        s3_credential_id=_text(c.s3_managed_ledger_offload_credential_id),
        s3_credential_secret=_text(c.s3_managed_ledger_offload_credential_secret),
        s3_role=_text(c.s3_managed_ledger_offload_role),
        s3_role_session_name=_text(c.s3_managed_ledger_offload_role_session_name),
        gcs_region=_text(c.gcs_managed_ledger_offload_region),
        gcs_bucket=_text(c.gcs_managed_ledger_offload_bucket),
        gcs_max_block_size_bytes=c.gcs_managed_ledger_offload_max_block_size_in_bytes,
        gcs_read_buffer_size_bytes=c.gcs_managed_ledger_offload_read_buffer_size_in_bytes,
        gcs_service_account_key_file=_text(c.gcs_managed_ledger_offload_service_account_key_file),
        file_system_uri=_text(c.file_system_uri),
        file_system_profile_path=_text(c.file_system_profile_path),
    )


def namespace_level(policies: Mapping[str, Any]) -> OffloadPolicies | None:
    return OffloadPolicies.from_namespace_policies(policies)


def topic_level(policies: Mapping[str, Any]) -> OffloadPolicies | None:
    raw = policies.get(TOPIC_KEY)
    if not isinstance(raw, Mapping):
        return None
    try:
        return OffloadPolicies.from_json(raw)
    except InvalidOffloadPolicies as exc:
        log.warning("a topic's stored offloadPolicies are ignored: %s", exc)
        return None


def merged_offload(config: BrokerConfig, policies: Mapping[str, Any]) -> OffloadPolicies:
    """Topic over namespace over broker, field by field; ``policies``: the namespace's
    Policies JSON with the topic's own keys over it."""
    return OffloadPolicies.merge(
        topic_level(policies), namespace_level(policies), broker_level(config)
    )


def resolve_offload(
    config: BrokerConfig, policies: Mapping[str, Any]
) -> EffectiveOffloadPolicies | None:
    try:
        return merged_offload(config, policies).resolve()
    except InvalidOffloadPolicies as exc:
        log.error("offload policies that cannot work are ignored (offloading off): %s", exc)
        return None


__all__ = ["broker_level", "merged_offload", "namespace_level", "resolve_offload", "topic_level"]
