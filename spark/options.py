"""The ``magnetar`` data source's options: parsed and checked once, at planning time.

Owns: ``ReadOptions`` and ``WriteOptions`` (frozen), built from Spark's case-insensitive,
all-string option map by ``read_options`` / ``write_options``. Every option named in
``docs/spark.md`` is accepted here and used somewhere; any other key, a bad value, or two
options that contradict each other raise ``OptionError`` naming the option. Option names are
pulsar-spark's (``service.url``, ``topicsPattern``, ``startingOffsets``...), matched without
regard to case as Spark does.

``pulsar.client.*``, ``pulsar.reader.*`` and ``pulsar.producer.*`` pass through to
``magnetar.client`` under their Java-client names (``pulsar.reader.receiverQueueSize``); each
supported name maps to one keyword argument and an unsupported one is an error.

Must not know: Spark sessions, the network.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.spark.positions import Position, PositionError


class OptionError(ValueError):
    """An option of the ``magnetar`` data source is unknown, malformed or conflicting."""


# Keys Spark itself may add to a source's or sink's options.
_SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})

_READ_KEYS = frozenset(
    {
        "service.url",
        "admin.url",
        "topic",
        "topics",
        "topicspattern",
        "startingoffsets",
        "endingoffsets",
        "startingtime",
        "endingtime",
        "failondataloss",
        "maxbytespertrigger",
        "maxrecordspertrigger",
        "subscriptionname",
        "polltimeoutms",
        "waitingfornonexistedtopic",
        "filterpushdown",
        "readpath",
        "minpartitions",
        "maxrecordsperpartition",
    }
)
READ_PATHS = ("storage", "broker")
"""``readPath``: sealed data straight from the bookies, or everything through a broker."""
_WRITE_KEYS = frozenset({"service.url", "admin.url", "topic", "exactlyonce"})


def _ms_to_s(v: str) -> float:
    return int(v) / 1000


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValueError(f"{v!r} is not true or false")


def _token(v: str) -> Any:
    """``token:<jwt>`` (or the bare JWT), or ``file:<path>`` / ``file:///path``: the token
    file is read at every connection, so a rotated token is picked up (the official
    clients' ``AuthenticationToken`` forms). The file must exist where the tasks run."""
    from magnetar.client import AuthenticationToken

    if not v.startswith("file:"):
        return AuthenticationToken(v.removeprefix("token:"))
    path = v[len("file:") :]
    if path.startswith("//"):
        path = urllib.parse.urlparse(v).path
    _read_token(path)  # unreadable or empty: refused now, with the path named

    return AuthenticationToken(lambda: _read_token(path))


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the token file {path!r}: {exc.strerror}") from None
    if not token:
        raise ValueError(f"the token file {path!r} is empty")
    return token


def _basic(v: str) -> Any:
    """``authParams`` of the basic plugin, as the official clients take them:
    ``{"userId": "...", "password": "..."}``."""
    from magnetar.client import AuthenticationBasic

    try:
        doc = json.loads(v)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("userId"), str) or not doc["userId"]:
        raise ValueError('expected {"userId": "...", "password": "..."} for basic authentication')
    return AuthenticationBasic(doc["userId"], str(doc.get("password", "")))


_AUTH_PLUGINS = {
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "pulsar.AuthenticationToken": "token",
    "AuthenticationToken": "token",
    "token": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
    "pulsar.AuthenticationBasic": "basic",
    "AuthenticationBasic": "basic",
    "basic": "basic",
}


def _auth_plugin(v: str) -> str:
    """``authPluginClassName`` as pulsar-spark jobs set it: token or basic authentication."""
    kind = _AUTH_PLUGINS.get(v.strip())
    if kind is None:
        raise ValueError(
            f"{v!r}: token and basic authentication are supported "
            "(org.apache.pulsar.client.impl.auth.AuthenticationToken with authParams "
            "token:<jwt> or file:<path>; ...AuthenticationBasic with authParams "
            '{"userId": ..., "password": ...}); client certificates: tlsCertificateFilePath'
        )
    return kind


AUTH_PLUGIN_KEY = "_auth_plugin"
"""Not a client keyword: ``authPluginClassName``, as "token" or "basic", then dropped."""
AUTH_PARAMS_KEY = "_auth_params"
"""Not a client keyword: ``authParams``, read by the plugin's rule (token by default)."""

# pass-through name (lower case) -> (client keyword, converter)
_CLIENT_PASS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "operationtimeoutms": ("operation_timeout_seconds", _ms_to_s),
    "connectiontimeoutms": ("connection_timeout_ms", int),
    "keepaliveintervalseconds": ("keep_alive_interval_seconds", int),
    "usetls": ("use_tls", _bool),
    "tlstrustcertsfilepath": ("tls_trust_certs_file_path", str),
    "tlsallowinsecureconnection": ("tls_allow_insecure_connection", _bool),
    "tlshostnameverificationenable": ("tls_validate_hostname", _bool),
    "tlscertificatefilepath": ("tls_certificate_file_path", str),
    "tlskeyfilepath": ("tls_private_key_file_path", str),
    "listenername": ("listener_name", str),
    "authparams": (AUTH_PARAMS_KEY, str),
    "authpluginclassname": (AUTH_PLUGIN_KEY, _auth_plugin),
}
_READER_PASS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "receiverqueuesize": ("receiver_queue_size", int),
    "readername": ("reader_name", str),
    "subscriptionroleprefix": ("subscription_role_prefix", str),
    "readcompacted": ("is_read_compacted", _bool),
}


def _compression(v: str) -> Any:
    from magnetar.client import CompressionType

    try:
        return CompressionType[v.strip().upper()]
    except KeyError:
        raise ValueError(f"{v!r} is not one of {[c.name for c in CompressionType]}") from None


_PRODUCER_PASS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "sendtimeoutms": ("send_timeout_millis", int),
    "maxpendingmessages": ("max_pending_messages", int),
    "compressiontype": ("compression_type", _compression),
    "batchingenabled": ("batching_enabled", _bool),
    "batchingmaxmessages": ("batching_max_messages", int),
    "batchingmaxpublishdelayms": ("batching_max_publish_delay_ms", int),
    "batchingmaxbytes": ("batching_max_allowed_size_in_bytes", int),
    "chunkingenabled": ("chunking_enabled", _bool),
}

OFFLOAD_SETTINGS = (
    "s3ManagedLedgerOffloadCredentialId",
    "s3ManagedLedgerOffloadCredentialSecret",
    "s3ManagedLedgerOffloadRole",
    "s3ManagedLedgerOffloadRoleSessionName",
    "s3ManagedLedgerOffloadRegion",
    "s3ManagedLedgerOffloadServiceEndpoint",
    "managedLedgerOffloadRegion",
    "managedLedgerOffloadServiceEndpoint",
    "gcsManagedLedgerOffloadServiceAccountKeyFile",
    "fileSystemURI",
    "fileSystemProfilePath",
)
"""``pulsar.offload.<name>``: how the tasks reach tiered storage, by Pulsar's offload setting
names (credentials; where the executors reach the store when it is not where the broker
does: endpoint, region, the directory a filesystem store is mounted at). The bucket and the
objects' keys come from each ledger's offload record."""
_OFFLOAD_PASS: dict[str, tuple[str, Callable[[str], Any]]] = {
    name.lower(): (name, str) for name in OFFLOAD_SETTINGS
}

_PREFIXES: dict[str, dict[str, tuple[str, Callable[[str], Any]]]] = {
    "pulsar.client.": _CLIENT_PASS,
    "pulsar.reader.": _READER_PASS,
    "pulsar.producer.": _PRODUCER_PASS,
    "pulsar.offload.": _OFFLOAD_PASS,
}


@dataclass(frozen=True, slots=True)
class ClientSettings:
    service_url: str
    admin_url: str | None
    client_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicSelection:
    """Exactly one of ``topics`` (explicit names) or ``pattern`` is set."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def describe(self) -> str:
        return self.pattern if self.pattern is not None else ",".join(self.topics)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``startingOffsets`` / ``endingOffsets``: a keyword or one bound per topic-partition."""

    keyword: str | None  # "earliest" / "latest", or None with ``per_partition``
    per_partition: dict[str, Position] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    client: ClientSettings
    selection: TopicSelection
    starting: OffsetSpec
    ending: OffsetSpec
    starting_time_ms: int | None
    ending_time_ms: int | None
    fail_on_data_loss: bool
    max_records_per_trigger: int | None
    max_bytes_per_trigger: int | None
    subscription_name: str | None
    poll_timeout_ms: int
    reader_kwargs: dict[str, Any] = field(default_factory=dict)
    wait_for_topics: bool = False
    """``waitingForNonExistedTopic``: planning waits for missing topics to be created."""
    filter_pushdown: bool = False
    """``filterPushdown``: batch reads take ``__topic`` filters (Spark's pushdown conf on)."""
    read_path: str | None = None
    """``readPath``: "storage", "broker", or None (storage where the bookies answer)."""
    min_partitions: int | None = None
    """``minPartitions``: at least about this many Spark tasks per batch (Kafka's option)."""
    max_records_per_partition: int | None = None
    """``maxRecordsPerPartition``: at most about this many messages per Spark task."""
    offload: dict[str, str] = field(default_factory=dict)
    """``pulsar.offload.*``: how the tasks reach tiered storage, by Pulsar's offload setting
    names (``OFFLOAD_SETTINGS``)."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    client: ClientSettings
    topic: str | None
    exactly_once: bool
    producer_kwargs: dict[str, Any] = field(default_factory=dict)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _split_passthrough(
    opts: dict[str, str], allowed_prefixes: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {p: {} for p in _PREFIXES}
    for key in list(opts):
        for prefix, table in _PREFIXES.items():
            if not key.startswith(prefix):
                continue
            value = opts.pop(key)
            if prefix not in allowed_prefixes:
                raise OptionError(f"option {key!r}: {prefix}* options do not apply here")
            name = key[len(prefix) :]
            if name not in table:
                raise OptionError(
                    f"option {key!r} is not supported; supported {prefix}* options: "
                    + ", ".join(
                        sorted(
                            kw if prefix == "pulsar.offload." else n for n, (kw, _) in table.items()
                        )
                    )
                )
            kw, conv = table[name]
            try:
                out[prefix][kw] = conv(value)
            except ValueError as exc:
                raise OptionError(f"option {key!r}: {exc}") from None
            break
    return out


def _check_unknown(opts: dict[str, str], known: frozenset[str]) -> None:
    unknown = sorted(k for k in opts if k not in known and k not in _SPARK_KEYS)
    if unknown:
        raise OptionError(
            f"unknown option {unknown[0]!r} for format 'magnetar'"
            + (f" (also: {', '.join(unknown[1:])})" if len(unknown) > 1 else "")
        )


def _client_settings(opts: dict[str, str], client_kwargs: dict[str, Any]) -> ClientSettings:
    url = opts.get("service.url", "").strip()
    if not url:
        raise OptionError("option 'service.url' is required (e.g. pulsar://localhost:6650)")
    if not re.match(r"^(pulsar|pulsar\+ssl|http|https)://", url):
        raise OptionError(f"option 'service.url': {url!r} is not a pulsar:// or http:// URL")
    admin = opts.get("admin.url", "").strip() or None
    if admin is not None and not re.match(r"^https?://", admin):
        raise OptionError(f"option 'admin.url': {admin!r} is not an http(s):// URL")
    plugin = client_kwargs.pop(AUTH_PLUGIN_KEY, None)
    params = client_kwargs.pop(AUTH_PARAMS_KEY, None)
    if plugin is not None and params is None:
        raise OptionError(
            f"option 'pulsar.client.authPluginClassName' names {plugin} authentication but "
            "'pulsar.client.authParams' is missing"
        )
    if params is not None:
        try:
            client_kwargs["authentication"] = (_basic if plugin == "basic" else _token)(params)
        except ValueError as exc:
            raise OptionError(f"option 'pulsar.client.authparams': {exc}") from None
    return ClientSettings(url, admin.rstrip("/") if admin else None, client_kwargs)


def _positive_int(opts: dict[str, str], key: str, name: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        v = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r}: {raw!r} is not an integer") from None
    if v <= 0:
        raise OptionError(f"option {name!r} must be positive, got {v}")
    return v


def _offsets(raw: str | None, name: str, allowed: tuple[str, ...]) -> OffsetSpec | None:
    if raw is None:
        return None
    text = raw.strip()
    if text.lower() in allowed:
        return OffsetSpec(text.lower())
    if not text.startswith("{"):
        raise OptionError(
            f"option {name!r}: {raw!r} is neither "
            + " nor ".join(repr(a) for a in allowed)
            + ' nor JSON like {"persistent://public/default/t-partition-0": "12:5"}'
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name!r}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option {name!r}: the JSON must map topic-partitions to message ids")
    per: dict[str, Position] = {}
    for tp, mid in data.items():
        if not isinstance(mid, str):
            raise OptionError(f"option {name!r}: the id of {tp!r} must be a string 'ledger:entry'")
        try:
            per[full_topic_name(tp)] = Position.parse(mid)
        except PositionError as exc:
            raise OptionError(f"option {name!r}: {exc}") from None
    return OffsetSpec(None, per)


def full_topic_name(topic: str) -> str:
    t = topic.strip()
    if "://" in t:
        return t
    parts = t.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{t}"
    if len(parts) == 3:
        return f"persistent://{t}"
    raise OptionError(f"{topic!r} is not a topic name")


def _selection(opts: dict[str, str]) -> TopicSelection:
    given = [k for k in ("topic", "topics", "topicspattern") if opts.get(k, "").strip()]
    names = {"topic": "topic", "topics": "topics", "topicspattern": "topicsPattern"}
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'topic', 'topics', 'topicsPattern' is required"
            + (f" (given: {', '.join(names[g] for g in given)})" if given else "")
        )
    key = given[0]
    value = opts[key].strip()
    if key == "topicspattern":
        pattern = value if "://" in value else f"persistent://public/default/{value}"
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'topicsPattern': {value!r} is not a regex ({exc})") from None
        return TopicSelection(pattern=pattern)
    topics = [t for t in (s.strip() for s in value.split(",")) if t]
    if key == "topic" and len(topics) != 1:
        raise OptionError("option 'topic' takes one topic; use 'topics' for a comma list")
    return TopicSelection(topics=tuple(full_topic_name(t) for t in topics))


def _time(opts: dict[str, str], key: str, name: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        v = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r}: {raw!r} is not a time in ms since the epoch") from None
    if v < 0:
        raise OptionError(f"option {name!r} must not be negative")
    return v


def read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """``streaming=None`` checks what does not depend on batch or streaming (``schema()``)."""
    opts = _lower(options)
    passed = _split_passthrough(opts, ("pulsar.client.", "pulsar.reader.", "pulsar.offload."))
    _check_unknown(opts, _READ_KEYS)
    client = _client_settings(opts, passed["pulsar.client."])
    selection = _selection(opts)
    starting = _offsets(opts.get("startingoffsets"), "startingOffsets", ("earliest", "latest"))
    ending = _offsets(opts.get("endingoffsets"), "endingOffsets", ("latest",))
    start_t = _time(opts, "startingtime", "startingTime")
    end_t = _time(opts, "endingtime", "endingTime")
    if starting is not None and start_t is not None:
        raise OptionError("options 'startingOffsets' and 'startingTime' conflict: give one")
    if ending is not None and end_t is not None:
        raise OptionError("options 'endingOffsets' and 'endingTime' conflict: give one")
    if start_t is not None and end_t is not None and end_t < start_t:
        raise OptionError("option 'endingTime' is before 'startingTime'")
    if streaming is None:
        pass
    elif streaming:
        if ending is not None or end_t is not None:
            which = "endingOffsets" if ending is not None else "endingTime"
            raise OptionError(f"option {which!r} applies to batch reads only, not readStream")
    else:
        if starting is not None and starting.keyword == "latest":
            raise OptionError("option 'startingOffsets' = 'latest' is not allowed in batch reads")
        for name in ("maxrecordspertrigger", "maxbytespertrigger", "subscriptionname"):
            if name in opts:
                label = {
                    "maxrecordspertrigger": "maxRecordsPerTrigger",
                    "maxbytespertrigger": "maxBytesPerTrigger",
                    "subscriptionname": "subscriptionName",
                }[name]
                raise OptionError(f"option {label!r} applies to readStream only, not batch reads")
    default = "latest" if streaming else "earliest"
    try:
        fail = _bool(opts.get("failondataloss", "true"))
    except ValueError as exc:
        raise OptionError(f"option 'failOnDataLoss': {exc}") from None
    poll = _positive_int(opts, "polltimeoutms", "pollTimeoutMs") or 120_000
    try:
        wait = _bool(opts.get("waitingfornonexistedtopic", "false"))
    except ValueError as exc:
        raise OptionError(f"option 'waitingForNonExistedTopic': {exc}") from None
    try:
        pushdown = _bool(opts.get("filterpushdown", "false"))
    except ValueError as exc:
        raise OptionError(f"option 'filterPushdown': {exc}") from None
    if pushdown and streaming:
        raise OptionError("option 'filterPushdown' applies to batch reads only, not readStream")
    read_path = opts.get("readpath", "").strip().lower() or None
    if read_path is not None and read_path not in READ_PATHS:
        raise OptionError(
            f"option 'readPath': {opts['readpath']!r} is neither 'storage' (sealed ledgers "
            "straight from the bookies) nor 'broker'"
        )
    if read_path == "storage" and client.admin_url is None:
        raise OptionError(
            "option 'readPath' = 'storage' needs option 'admin.url' (the broker's HTTP admin "
            "URL: the planner asks it for the topic's ledgers and bookies); or set "
            "readPath=broker"
        )
    if read_path == "storage" and passed["pulsar.reader."].get("is_read_compacted"):
        raise OptionError(
            "options 'readPath' = 'storage' and 'pulsar.reader.readCompacted' conflict: the "
            "compacted view is read through the broker (readPath=broker)"
        )
    sub = opts.get("subscriptionname")
    if sub is not None and not sub.strip():
        raise OptionError("option 'subscriptionName' must not be empty")
    return ReadOptions(
        client=client,
        selection=selection,
        starting=starting or OffsetSpec(default),
        ending=ending or OffsetSpec("latest"),
        starting_time_ms=start_t,
        ending_time_ms=end_t,
        fail_on_data_loss=fail,
        max_records_per_trigger=_positive_int(opts, "maxrecordspertrigger", "maxRecordsPerTrigger"),
        max_bytes_per_trigger=_positive_int(opts, "maxbytespertrigger", "maxBytesPerTrigger"),
        subscription_name=sub.strip() if sub else None,
        poll_timeout_ms=poll,
        reader_kwargs=passed["pulsar.reader."],
        wait_for_topics=wait,
        filter_pushdown=pushdown,
        read_path=read_path,
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_positive_int(
            opts, "maxrecordsperpartition", "maxRecordsPerPartition"
        ),
        offload=passed["pulsar.offload."],
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    passed = _split_passthrough(opts, ("pulsar.client.", "pulsar.producer."))
    _check_unknown(opts, _WRITE_KEYS)
    client = _client_settings(opts, passed["pulsar.client."])
    topic = opts.get("topic", "").strip() or None
    if topic is not None and "," in topic:
        raise OptionError("option 'topic' takes one topic when writing")
    try:
        exactly_once = _bool(opts.get("exactlyonce", "true"))
    except ValueError as exc:
        raise OptionError(f"option 'exactlyOnce': {exc}") from None
    producer = passed["pulsar.producer."]
    if "batching_max_publish_delay_ms" in producer:
        raise OptionError(
            "option 'pulsar.producer.batchingMaxPublishDelayMs' is not supported: the sink cuts "
            "batches by count and size only (batchingMaxMessages, batchingMaxBytes), so a "
            "retried task cuts them the same way"
        )
    for key, name in (
        ("batching_max_messages", "batchingMaxMessages"),
        ("batching_max_allowed_size_in_bytes", "batchingMaxBytes"),
    ):
        if key in producer and producer[key] <= 0:
            raise OptionError(f"option 'pulsar.producer.{name}' must be positive")
    if exactly_once:
        if producer.get("chunking_enabled"):
            raise OptionError(
                "option 'pulsar.producer.chunkingEnabled' conflicts with exactlyOnce=true"
            )
        if client.admin_url is None:
            raise OptionError(
                "exactlyOnce=true needs option 'admin.url' (the broker's HTTP admin URL), to check "
                "and enable deduplication on the target topics; or set exactlyOnce=false "
                "for at-least-once writes"
            )
    return WriteOptions(
        client=client,
        topic=full_topic_name(topic) if topic else None,
        exactly_once=exactly_once,
        producer_kwargs=producer,
    )


__all__ = [
    "OFFLOAD_SETTINGS",
    "ClientSettings",
    "OffsetSpec",
    "OptionError",
    "ReadOptions",
    "TopicSelection",
    "WriteOptions",
    "full_topic_name",
    "read_options",
    "write_options",
]
