"""From effective offload policies to the object-store configuration of each driver.

Owns: ``StoreSpec`` (which kind of store, where, and the library's configuration keys) and
``store_spec(policies)``, the mapping per driver:

- ``aws-s3`` / ``S3``: bucket, region, endpoint (path-style requests and plain HTTP allowed when
  an ``http://`` endpoint is set, as for MinIO or a test server), static credentials from
  ``s3ManagedLedgerOffloadCredentialId``/``Secret`` or else the AWS environment chain, and
  ``s3ManagedLedgerOffloadRole``/``RoleSessionName`` as the role to assume;
- ``google-cloud-storage``: bucket, service-account key file
  (``gcsManagedLedgerOffloadServiceAccountKeyFile``) or else Google's environment;
- ``azureblob``: container = bucket, the account from ``AZURE_STORAGE_ACCOUNT`` (Pulsar's
  variable) and its key from ``AZURE_STORAGE_ACCESS_KEY`` (read by the library), an endpoint if set;
- ``filesystem``: a directory (created if missing).

Pure: reads the environment only through the ``environ`` argument. Must not know: the library's
classes (``store.py`` builds them), managed ledgers, topics.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.offload.errors import InvalidOffloadPolicies
from magnetar.broker.offload.policies import Driver, EffectiveOffloadPolicies


class StoreKind(enum.Enum):
    S3 = "s3"
    GCS = "gcs"
    AZURE = "azure"
    LOCAL = "local"
    MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """Everything needed to open one store; ``config`` uses the library's configuration keys."""

    kind: StoreKind
    location: str
    """Bucket (S3, GCS), container (Azure), directory (local), a label (memory)."""
    config: Mapping[str, Any] = field(default_factory=dict, repr=False)
    allow_http: bool = False
    request_timeout_ms: int | None = None
    connect_timeout_ms: int | None = None
    library_retries: int | None = None
    """The library's own retries of one request (None: its default, 10 with back-off)."""
    supports_attributes: bool = True

    def describe(self) -> str:
        return f"{self.kind.value}:{self.location}"


def store_spec(
    policies: EffectiveOffloadPolicies, environ: Mapping[str, str] | None = None
) -> StoreSpec:
    env = os.environ if environ is None else environ
    driver = policies.driver
    endpoint = policies.service_endpoint
    if driver.is_s3:
        config: dict[str, Any] = {}
        if policies.region:
            config["region"] = policies.region
        if endpoint:
            config["endpoint"] = endpoint
            config["virtual_hosted_style_request"] = False
        if policies.s3_credential_id and policies.s3_credential_secret:
            config["access_key_id"] = policies.s3_credential_id
            config["secret_access_key"] = policies.s3_credential_secret
        if policies.s3_role:
            config["role_arn"] = policies.s3_role
            config["role_session_name"] = policies.s3_role_session_name
        return StoreSpec(
            StoreKind.S3,
            policies.bucket,
            config,
            allow_http=bool(endpoint and endpoint.startswith("http://")),
        )
    if driver is Driver.GCS:
        config = {}
        if policies.gcs_service_account_key_file:
            config["service_account"] = policies.gcs_service_account_key_file
        if endpoint:
            config["base_url"] = endpoint
        return StoreSpec(
            StoreKind.GCS,
            policies.bucket,
            config,
            allow_http=bool(endpoint and endpoint.startswith("http://")),
        )
    if driver is Driver.AZURE:
        config = {}
        account = env.get("AZURE_STORAGE_ACCOUNT") or env.get("AZURE_STORAGE_ACCOUNT_NAME")
        if not account:
            raise InvalidOffloadPolicies(
                "driver azureblob needs the storage account in AZURE_STORAGE_ACCOUNT"
            )
        config["account_name"] = account
        key = env.get("AZURE_STORAGE_ACCESS_KEY")
        if key:
            config["account_key"] = key
        if endpoint:
            config["endpoint"] = endpoint
        return StoreSpec(
            StoreKind.AZURE,
            policies.bucket,
            config,
            allow_http=bool(endpoint and endpoint.startswith("http://")),
        )
    if driver is Driver.FILESYSTEM:
        assert policies.file_system_root is not None
        return StoreSpec(StoreKind.LOCAL, policies.file_system_root, supports_attributes=False)
    raise InvalidOffloadPolicies(f"driver {driver.value} has no store mapping")


__all__ = ["StoreKind", "StoreSpec", "store_spec"]
