"""Offload policies: Pulsar's ``OffloadPoliciesImpl`` as a small typed model.

Owns: ``OffloadPolicies`` (every field optional: None means "not set at this level"), read from
Pulsar's JSON (``offloadPolicies`` of a namespace or topic) or from broker properties
(``broker.conf`` names, including the three whose conf-file names differ:
``managedLedgerOffloadAutoTriggerSizeThresholdBytes``, ``managedLedgerOffloadDeletionLagMs``,
``managedLedgerDataReadPriority``); ``merge(topic, namespace, broker)`` field by field, topic
first, as Pulsar's ``mergeConfiguration``; and ``resolve()``, which applies Pulsar's defaults,
picks the driver-specific or universal name the way Pulsar's ``TieredStorageConfiguration``
does (``s3...``/``gcs...`` before ``managedLedgerOffload...``) and validates, returning an
``EffectiveOffloadPolicies`` or raising ``InvalidOffloadPolicies`` naming the JSON field.

Pure (reading a Hadoop profile file is the one I/O, done by ``resolve`` only when
``fileSystemProfilePath`` is set). Must not know: stores, managed ledgers, topics.
"""

from __future__ import annotations

import dataclasses
import enum
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.offload.errors import InvalidOffloadPolicies

MIB = 1024 * 1024
DEFAULT_MAX_BLOCK_SIZE_BYTES = 64 * MIB
DEFAULT_READ_BUFFER_SIZE_BYTES = 1 * MIB
DEFAULT_MAX_THREADS = 2
DEFAULT_PREFETCH_ROUNDS = 1
DEFAULT_DELETION_LAG_MS = 4 * 3600 * 1000  # broker.conf managedLedgerOffloadDeletionLagMs
DEFAULT_ROLE_SESSION_NAME = "pulsar-s3-offload"
DEFAULT_OFFLOADERS_DIRECTORY = "./offloaders"
CLOUD_MIN_BLOCK_SIZE_BYTES = 5 * MIB  # S3's smallest multipart part; Pulsar refuses less
READ_BUFFER_MIN_BYTES = 1024
READ_BUFFER_MAX_BYTES = 64 * MIB
BLOCK_SIZE_MAX_BYTES = 2**31 - 1  # an i32 in Pulsar's JSON


class Driver(enum.Enum):
    """The storage drivers, by Pulsar's names (matched case-insensitively)."""

    S3 = "S3"  # any S3-compatible store (MinIO, Ceph, moto): endpoint usually set
    AWS_S3 = "aws-s3"
    GCS = "google-cloud-storage"
    AZURE = "azureblob"
    FILESYSTEM = "filesystem"

    @property
    def is_s3(self) -> bool:
        return self in (Driver.S3, Driver.AWS_S3)

    @property
    def is_cloud(self) -> bool:
        return self is not Driver.FILESYSTEM

    @classmethod
    def parse(cls, name: str) -> Driver:
        for driver in cls:
            if driver.value.lower() == name.strip().lower():
                return driver
        known = ", ".join(d.value for d in cls)
        if name.strip().lower() == "aliyun-oss":
            raise InvalidOffloadPolicies(
                "managedLedgerOffloadDriver 'aliyun-oss' is not supported; Aliyun OSS speaks "
                "S3: use driver 'S3' with its endpoint"
            )
        raise InvalidOffloadPolicies(f"managedLedgerOffloadDriver {name!r} unknown; one of {known}")


class ReadPriority(enum.Enum):
    TIERED_STORAGE_FIRST = "tiered-storage-first"
    BOOKKEEPER_FIRST = "bookkeeper-first"


@dataclass(frozen=True, slots=True)
class _Field:
    json: str
    attr: str
    kind: type
    conf: str | None = None  # broker.conf name when it differs from the JSON name
    secret: bool = False


_FIELDS = (
    _Field("offloadersDirectory", "offloaders_directory", str),
    _Field("managedLedgerOffloadDriver", "driver", str),
    _Field("managedLedgerOffloadMaxThreads", "max_threads", int),
    _Field("managedLedgerOffloadPrefetchRounds", "prefetch_rounds", int),
    _Field(
        "managedLedgerOffloadThresholdInBytes",
        "threshold_bytes",
        int,
        conf="managedLedgerOffloadAutoTriggerSizeThresholdBytes",
    ),
    _Field("managedLedgerOffloadThresholdInSeconds", "threshold_seconds", int),
    _Field(
        "managedLedgerOffloadDeletionLagInMillis",
        "deletion_lag_ms",
        int,
        conf="managedLedgerOffloadDeletionLagMs",
    ),
    _Field(
        "managedLedgerOffloadedReadPriority",
        "read_priority",
        str,
        conf="managedLedgerDataReadPriority",
    ),
    _Field("s3ManagedLedgerOffloadRegion", "s3_region", str),
    _Field("s3ManagedLedgerOffloadBucket", "s3_bucket", str),
    _Field("s3ManagedLedgerOffloadServiceEndpoint", "s3_service_endpoint", str),
    _Field("s3ManagedLedgerOffloadMaxBlockSizeInBytes", "s3_max_block_size_bytes", int),
    _Field("s3ManagedLedgerOffloadReadBufferSizeInBytes", "s3_read_buffer_size_bytes", int),
    _Field("s3ManagedLedgerOffloadCredentialId", "s3_credential_id", str, secret=True),
    _Field("s3ManagedLedgerOffloadCredentialSecret", "s3_credential_secret", str, secret=True),
    _Field("s3ManagedLedgerOffloadRole", "s3_role", str),
    _Field("s3ManagedLedgerOffloadRoleSessionName", "s3_role_session_name", str),
    _Field("gcsManagedLedgerOffloadRegion", "gcs_region", str),
    _Field("gcsManagedLedgerOffloadBucket", "gcs_bucket", str),
    _Field("gcsManagedLedgerOffloadMaxBlockSizeInBytes", "gcs_max_block_size_bytes", int),
    _Field("gcsManagedLedgerOffloadReadBufferSizeInBytes", "gcs_read_buffer_size_bytes", int),
    _Field("gcsManagedLedgerOffloadServiceAccountKeyFile", "gcs_service_account_key_file", str),
    _Field("fileSystemProfilePath", "file_system_profile_path", str),
    _Field("fileSystemURI", "file_system_uri", str),
    _Field("managedLedgerOffloadBucket", "bucket", str),
    _Field("managedLedgerOffloadRegion", "region", str),
    _Field("managedLedgerOffloadServiceEndpoint", "service_endpoint", str),
    _Field("managedLedgerOffloadMaxBlockSizeInBytes", "max_block_size_bytes", int),
    _Field("managedLedgerOffloadReadBufferSizeInBytes", "read_buffer_size_bytes", int),
)
JSON_NAMES = tuple(f.json for f in _FIELDS)
NAMESPACE_KEY = "offload_policies"
"""Where a namespace's Policies JSON keeps its ``OffloadPolicies`` (Pulsar's name)."""
NAMESPACE_THRESHOLD_KEY = "offload_threshold"
NAMESPACE_THRESHOLD_SECONDS_KEY = "offload_threshold_in_seconds"
NAMESPACE_DELETION_LAG_KEY = "offload_deletion_lag_ms"
TOPIC_KEY = "offloadPolicies"
"""Where a topic's policies JSON keeps its ``OffloadPolicies`` (Pulsar's TopicPolicies name)."""
_BY_JSON = {f.json: f for f in _FIELDS}


@dataclass(frozen=True, slots=True)
class OffloadPolicies:
    """One level's offload policies (broker, namespace or topic); None = not set here."""

    offloaders_directory: str | None = None
    driver: str | None = None
    max_threads: int | None = None
    prefetch_rounds: int | None = None
    threshold_bytes: int | None = None
    threshold_seconds: int | None = None
    deletion_lag_ms: int | None = None
    read_priority: str | None = None
    s3_region: str | None = None
    s3_bucket: str | None = None
    s3_service_endpoint: str | None = None
    s3_max_block_size_bytes: int | None = None
    s3_read_buffer_size_bytes: int | None = None
    s3_credential_id: str | None = None
    s3_credential_secret: str | None = None
    s3_role: str | None = None
    s3_role_session_name: str | None = None
    gcs_region: str | None = None
    gcs_bucket: str | None = None
    gcs_max_block_size_bytes: int | None = None
    gcs_read_buffer_size_bytes: int | None = None
    gcs_service_account_key_file: str | None = None
    file_system_profile_path: str | None = None
    file_system_uri: str | None = None
    bucket: str | None = None
    region: str | None = None
    service_endpoint: str | None = None
    max_block_size_bytes: int | None = None
    read_buffer_size_bytes: int | None = None

    def __repr__(self) -> str:
        shown = {f.json: ("***" if f.secret else v) for f, v in self._set_fields()}
        return f"OffloadPolicies({shown})"

    def _set_fields(self) -> list[tuple[_Field, Any]]:
        return [(f, v) for f in _FIELDS if (v := getattr(self, f.attr)) is not None]

    # -- reading ----------------------------------------------------------------------------
    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> OffloadPolicies:
        """From Pulsar's JSON names; JSON null means not set. Unknown names and wrong types
        are refused with the offending name in the message."""
        if not isinstance(doc, Mapping):
            raise InvalidOffloadPolicies("offloadPolicies must be a JSON object")
        values: dict[str, Any] = {}
        for name, value in doc.items():
            spec = _BY_JSON.get(name)
            if spec is None:
                raise InvalidOffloadPolicies(f"offloadPolicies: unknown field {name!r}")
            if value is None:
                continue
            if spec.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidOffloadPolicies(f"{name} must be an integer, got {value!r}")
            if spec.kind is str and not isinstance(value, str):
                raise InvalidOffloadPolicies(f"{name} must be a string, got {value!r}")
            values[spec.attr] = value
        return cls(**values)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> OffloadPolicies:
        """From broker.conf-style properties (strings). Pulsar's conf-file names for the
        threshold, deletion lag and read priority are read when the JSON name is absent; a
        threshold of -1 (Pulsar's "off") means not set."""
        values: dict[str, Any] = {}
        for spec in _FIELDS:
            raw = props.get(spec.json)
            if raw is None and spec.conf is not None:
                raw = props.get(spec.conf)
            if raw is None or str(raw).strip() == "":
                continue
            text = str(raw).strip()
            if spec.kind is int:
                try:
                    number = int(text)
                except ValueError:
                    raise InvalidOffloadPolicies(
                        f"{spec.conf or spec.json} must be an integer, got {text!r}"
                    ) from None
                if number == -1 and spec.attr in ("threshold_bytes", "threshold_seconds"):
                    continue
                values[spec.attr] = number
            else:
                values[spec.attr] = text
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The fields set at this level, by Pulsar's JSON names."""
        return {f.json: v for f, v in self._set_fields()}

    @classmethod
    def from_namespace_policies(cls, doc: Mapping[str, Any]) -> OffloadPolicies | None:
        """A namespace's level from its Policies JSON, as Pulsar's ``oldPoliciesCompatible``:
        ``offload_policies``, with the thresholds and the deletion lag of the older fields
        (``offload_threshold``, ``offload_threshold_in_seconds``, ``offload_deletion_lag_ms``;
        -1 / null: not set) where ``offload_policies`` leaves them unset. None when the
        namespace sets none of them. A stored value that does not parse is left out (the REST
        API refuses such bodies; the rest of the namespace's policies still apply)."""
        raw = doc.get(NAMESPACE_KEY)
        level: OffloadPolicies | None = None
        if isinstance(raw, Mapping):
            try:
                level = cls.from_json(raw)
            except InvalidOffloadPolicies:
                level = None
        legacy: dict[str, Any] = {}
        for key, attr, unset in (
            (NAMESPACE_THRESHOLD_KEY, "threshold_bytes", -1),
            (NAMESPACE_THRESHOLD_SECONDS_KEY, "threshold_seconds", -1),
            (NAMESPACE_DELETION_LAG_KEY, "deletion_lag_ms", None),
        ):
            value = doc.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value != unset:
                legacy[attr] = value
        if level is None and not legacy:
            return None
        level = level or cls()
        fill = {a: v for a, v in legacy.items() if getattr(level, a) is None}
        return dataclasses.replace(level, **fill) if fill else level

    # -- combining --------------------------------------------------------------------------
    @staticmethod
    def merge(
        topic: OffloadPolicies | None,
        namespace: OffloadPolicies | None,
        broker: OffloadPolicies | None,
    ) -> OffloadPolicies:
        """Field by field: the topic's value if set, else the namespace's, else the broker's."""
        values: dict[str, Any] = {}
        for spec in _FIELDS:
            for level in (topic, namespace, broker):
                if level is not None and (v := getattr(level, spec.attr)) is not None:
                    values[spec.attr] = v
                    break
        return OffloadPolicies(**values)

    def resolve(self) -> EffectiveOffloadPolicies | None:
        """Defaults applied, names resolved, validated; None when no driver is configured
        (offloading is off)."""
        if self.driver is None or not self.driver.strip():
            return None
        driver = Driver.parse(self.driver)
        legacy: tuple[str | None, str | None, str | None, int | None, int | None]
        if driver is Driver.GCS:
            legacy = (
                self.gcs_bucket,
                self.gcs_region,
                None,
                self.gcs_max_block_size_bytes,
                self.gcs_read_buffer_size_bytes,
            )
        elif driver.is_s3:
            legacy = (
                self.s3_bucket,
                self.s3_region,
                self.s3_service_endpoint,
                self.s3_max_block_size_bytes,
                self.s3_read_buffer_size_bytes,
            )
        else:
            legacy = (None, None, None, None, None)
        bucket = _first(legacy[0], self.bucket)
        region = _first(legacy[1], self.region)
        endpoint = _first(legacy[2], self.service_endpoint)
        block = _first(legacy[3], self.max_block_size_bytes, DEFAULT_MAX_BLOCK_SIZE_BYTES)
        read_buffer = _first(legacy[4], self.read_buffer_size_bytes, DEFAULT_READ_BUFFER_SIZE_BYTES)
        assert block is not None and read_buffer is not None
        names = _driver_field_names(driver)
        _check_range(
            names.block,
            block,
            CLOUD_MIN_BLOCK_SIZE_BYTES if driver.is_cloud else READ_BUFFER_MIN_BYTES,
            BLOCK_SIZE_MAX_BYTES,
        )
        _check_range(names.read_buffer, read_buffer, READ_BUFFER_MIN_BYTES, READ_BUFFER_MAX_BYTES)
        max_threads = _first(self.max_threads, DEFAULT_MAX_THREADS)
        prefetch = _first(self.prefetch_rounds, DEFAULT_PREFETCH_ROUNDS)
        lag = _first(self.deletion_lag_ms, DEFAULT_DELETION_LAG_MS)
        assert max_threads is not None and prefetch is not None and lag is not None
        _check_range("managedLedgerOffloadMaxThreads", max_threads, 1, 64)
        _check_range("managedLedgerOffloadPrefetchRounds", prefetch, 1, 16)
        _check_range("managedLedgerOffloadDeletionLagInMillis", lag, 0, 2**63 - 1)
        try:
            priority = ReadPriority(
                (self.read_priority or ReadPriority.TIERED_STORAGE_FIRST.value).strip().lower()
            )
        except ValueError:
            raise InvalidOffloadPolicies(
                f"managedLedgerOffloadedReadPriority {self.read_priority!r}: one of "
                + ", ".join(p.value for p in ReadPriority)
            ) from None
        file_root: str | None = None
        if driver is Driver.FILESYSTEM:
            file_root = _filesystem_root(self.file_system_uri, self.file_system_profile_path)
        else:
            if not bucket:
                raise InvalidOffloadPolicies(
                    f"{names.bucket} must be set for driver {driver.value}"
                )
            if driver.is_s3 and not region and not endpoint:
                raise InvalidOffloadPolicies(
                    f"either {names.region} or {names.endpoint} must be set for driver "
                    f"{driver.value}"
                )
        if bool(self.s3_credential_id) != bool(self.s3_credential_secret):
            raise InvalidOffloadPolicies(
                "s3ManagedLedgerOffloadCredentialId and s3ManagedLedgerOffloadCredentialSecret "
                "are set together or not at all"
            )
        return EffectiveOffloadPolicies(
            driver=driver,
            bucket=bucket or "",
            region=region,
            service_endpoint=endpoint,
            max_block_size_bytes=block,
            read_buffer_size_bytes=read_buffer,
            max_threads=max_threads,
            prefetch_rounds=prefetch,
            threshold_bytes=_enabled(self.threshold_bytes),
            threshold_seconds=_enabled(self.threshold_seconds),
            deletion_lag_ms=lag,
            read_priority=priority,
            s3_credential_id=self.s3_credential_id,
            s3_credential_secret=self.s3_credential_secret,
            s3_role=self.s3_role,
            s3_role_session_name=self.s3_role_session_name or DEFAULT_ROLE_SESSION_NAME,
            gcs_service_account_key_file=self.gcs_service_account_key_file,
            file_system_root=file_root,
        )


@dataclass(frozen=True, slots=True)
class EffectiveOffloadPolicies:
    """What an offloader is built from: every value decided, validated."""

    driver: Driver
    bucket: str
    region: str | None
    service_endpoint: str | None
    max_block_size_bytes: int
    read_buffer_size_bytes: int
    max_threads: int
    prefetch_rounds: int
    threshold_bytes: int | None
    threshold_seconds: int | None
    deletion_lag_ms: int
    read_priority: ReadPriority
    s3_credential_id: str | None = field(default=None, repr=False)
    s3_credential_secret: str | None = field(default=None, repr=False)
    s3_role: str | None = None
    s3_role_session_name: str = DEFAULT_ROLE_SESSION_NAME
    gcs_service_account_key_file: str | None = None
    file_system_root: str | None = None
    """Filesystem driver: the directory holding the objects (fileSystemURI's path, joined
    with the profile's ``hadoop.tmp.dir`` as Pulsar's filesystem offloader does)."""

    def driver_metadata(self) -> dict[str, str]:
        """Pulsar's ``offloadDriverMetadata``: what a reader needs to find the bucket again."""
        return {
            "managedLedgerOffloadDriver": self.driver.value,
            "bucket": self.bucket if self.driver.is_cloud else (self.file_system_root or ""),
            "region": self.region or "",
            "serviceEndpoint": self.service_endpoint or "",
        }

    def with_changes(self, **changes: Any) -> EffectiveOffloadPolicies:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class _Names:
    bucket: str
    region: str
    endpoint: str
    block: str
    read_buffer: str


def _driver_field_names(driver: Driver) -> _Names:
    prefix = "s3" if driver.is_s3 else "gcs" if driver is Driver.GCS else None
    if prefix is None:
        return _Names(
            "managedLedgerOffloadBucket",
            "managedLedgerOffloadRegion",
            "managedLedgerOffloadServiceEndpoint",
            "managedLedgerOffloadMaxBlockSizeInBytes",
            "managedLedgerOffloadReadBufferSizeInBytes",
        )
    return _Names(
        f"{prefix}ManagedLedgerOffloadBucket",
        f"{prefix}ManagedLedgerOffloadRegion",
        f"{prefix}ManagedLedgerOffloadServiceEndpoint",
        f"{prefix}ManagedLedgerOffloadMaxBlockSizeInBytes",
        f"{prefix}ManagedLedgerOffloadReadBufferSizeInBytes",
    )


def _enabled(threshold: int | None) -> int | None:
    """A threshold in force, or None: unset, or negative (Pulsar's "disabled": set at a
    level, it overrides a lower level's threshold)."""
    return threshold if threshold is not None and threshold >= 0 else None


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None and value != "":
            return value
    return None


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidOffloadPolicies(f"{name} must be between {low} and {high}, got {value}")


def _filesystem_root(uri: str | None, profile_path: str | None) -> str:
    """The directory of the filesystem driver. ``fileSystemURI`` names the filesystem
    (``file:///data/offload`` or a plain path); when unset, the profile's ``fs.defaultFS``
    does. The profile's ``hadoop.tmp.dir`` (Pulsar's storage base path) is appended, as
    Pulsar's filesystem offloader does."""
    profile = _read_hadoop_profile(profile_path) if profile_path else {}
    uri = uri or profile.get("fs.defaultFS")
    if not uri:
        raise InvalidOffloadPolicies("fileSystemURI must be set for driver filesystem")
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise InvalidOffloadPolicies(
            f"fileSystemURI {uri!r}: only local or mounted filesystems (file://) are supported"
        )
    root = parsed.path if parsed.scheme else uri
    if not root.startswith("/"):
        raise InvalidOffloadPolicies(f"fileSystemURI {uri!r} must be an absolute path")
    base = profile.get("hadoop.tmp.dir", "").strip("/")
    return f"{root.rstrip('/')}/{base}" if base else root


def _read_hadoop_profile(path: str) -> dict[str, str]:
    """``name`` -> ``value`` of a Hadoop configuration file (``<configuration><property>``)."""
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError) as exc:
        raise InvalidOffloadPolicies(f"fileSystemProfilePath {path!r}: {exc}") from exc
    out: dict[str, str] = {}
    for prop in tree.getroot().iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None:
            out[name.strip()] = value.strip()
    return out


__all__ = [
    "DEFAULT_DELETION_LAG_MS",
    "DEFAULT_MAX_BLOCK_SIZE_BYTES",
    "DEFAULT_READ_BUFFER_SIZE_BYTES",
    "JSON_NAMES",
    "NAMESPACE_DELETION_LAG_KEY",
    "NAMESPACE_KEY",
    "NAMESPACE_THRESHOLD_KEY",
    "NAMESPACE_THRESHOLD_SECONDS_KEY",
    "TOPIC_KEY",
    "Driver",
    "EffectiveOffloadPolicies",
    "OffloadPolicies",
    "ReadPriority",
]
