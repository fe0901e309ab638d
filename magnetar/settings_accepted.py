"""Pulsar and BookKeeper keys Magnetar knows without a setting of its own: the values each
accepts because they ask for what Magnetar does anyway, and why.

Owns: ``ACCEPTED_BROKER`` and ``ACCEPTED_BOOKIE``, one ``Accepted`` row per key of Pulsar's
shipped ``broker.conf`` / ``standalone.conf`` and BookKeeper's ``bk_server.conf`` that is not
an implemented setting (``settings.BROKER_ALIASES`` / ``BOOKIE_ALIASES``). Every key of those
files is therefore in one of three classes:

- implemented: an alias row of ``magnetar.settings`` (the value changes what Magnetar does);
- accepted: a row here whose ``fits(value)`` holds, because Magnetar does that anyway
  (``reason`` says why; the process logs these keys once at start);
- refused: a row here whose ``fits(value)`` fails: the value asks for something Magnetar
  does not do, and the error names the key, the value and ``supported``.

An empty value (``key=``) means "Pulsar's default", as in Pulsar, and is never checked.
Invariants: one row per key; no key is both here and an alias (an alias wins, and
``tests/unit/test_pulsar_conf_keys.py`` flags the overlap so the row is removed).
Must not know: any other Magnetar module (``magnetar.settings`` imports this).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Accepted:
    """``key`` is accepted when ``fits(value)``: ``reason`` says why that is what Magnetar
    does anyway; other values are refused with ``supported`` (the values that fit).
    ``warn``: accepted values still name something Magnetar does not serve (logged as a
    WARNING, not INFO), kept only where Pulsar's own shipped files set it."""

    key: str
    fits: Callable[[str], bool]
    supported: str
    reason: str
    warn: bool = False


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _at_most(value: str, bound: float) -> bool:
    """A number no greater than ``bound`` (a word is never one)."""
    number = _number(value)
    return number is not None and number <= bound


def _same(value: str, expected: str) -> bool:
    a, b = _number(value), _number(expected)
    if a is not None and b is not None:
        return a == b
    return value.strip().lower() == expected.strip().lower()


def any_value(key: str, reason: str) -> Accepted:
    return Accepted(key, lambda _v: True, "any value", reason)


def only(key: str, *values: str, reason: str) -> Accepted:
    """Accepted when the value is one of ``values`` (numbers compared as numbers, words
    case-insensitively)."""
    shown = " or ".join(repr(v) for v in values)
    return Accepted(key, lambda v: any(_same(v, e) for e in values), shown, reason)


def unset(key: str, reason: str) -> Accepted:
    """Only the empty value (Pulsar's default) fits: any value asks for what we lack."""
    return Accepted(key, lambda v: not v.strip(), "the key left empty", reason)


def no_limit(key: str, reason: str = "") -> Accepted:
    """Pulsar's "0 (or less) disables the limit": only that fits."""
    return Accepted(
        key,
        lambda v: _at_most(v, 0.0),
        "0 (no limit)",
        reason or "Magnetar has no such limit, which is what 0 asks for",
    )


def same_set(key: str, values: str, reason: str) -> Accepted:
    want = frozenset(p.strip().lower() for p in values.split(",") if p.strip())
    return Accepted(
        key,
        lambda v: frozenset(p.strip().lower() for p in v.split(",") if p.strip()) == want,
        repr(values),
        reason,
    )


ADMIN_BODY_BYTES_MAX = 8 << 20
"""The admin HTTP server's bound on a request body (``broker/admin/http_api.py``)."""

# Reasons shared by families of keys (each row still names its own).
THREADS = "Magnetar runs each process on one asyncio event loop: there is no thread pool to size"
JVM = "a JVM, Netty or Jetty tuning knob: Magnetar is a Python process, nothing to tune"
JAVA_TLS = (
    "Java keystores and TLS providers: Magnetar's TLS reads PEM files "
    "(tlsCertificateFilePath, tlsKeyFilePath, tlsTrustCertsFilePath)"
)
NO_TXN = "Magnetar has no transactions (transactionCoordinatorEnabled=false asks for none)"
NO_FUNCTIONS = "Magnetar has no Pulsar Functions, packages or connectors"
BUILT_IN_OFFLOADERS = (
    "Magnetar's offload drivers are built in (docs/tiered-storage.md): there is no directory "
    "of offloader packages to load"
)
NO_WEBSOCKET = "Magnetar serves no WebSocket API"
MODULAR_LB = (
    "a knob of Pulsar's extensible load manager (ExtensibleLoadManagerImpl); Magnetar's "
    "load manager is the modular one"
)
EXTRA_METRICS = "Magnetar's /metrics has no consumer, producer, cursor or bundle level series"
METADATA_BATCHING = (
    "Magnetar's metadata store client does not batch operations: each one is sent at once, "
    "which batching only delays"
)
DISPATCH_LOOP = (
    "dispatch is driven by acks and permits on the event loop, never by a polling timer or "
    "a read-failure back-off counter"
)
DELAYED_INDEX = (
    "Magnetar's delayed-delivery index is persisted and bounded by its own design "
    "(broker/delayed/); bucket tuning of Pulsar's index does not apply"
)
BK_CLIENT = (
    "Magnetar's BookKeeper client (broker/ledger/) talks gRPC to its bookies with its own "
    "timeouts and one stream per bookie"
)

ACCEPTED_BROKER: tuple[Accepted, ...] = (
    # --- general ------------------------------------------------------------------------
    unset(
        "metadataStoreConfigPath", "a file for RocksDB/etcd metadata stores, which Magnetar lacks"
    ),
    unset(
        "metadataSyncEventTopic", "metadata sync between clusters through a topic is not supported"
    ),
    unset("configurationMetadataSyncEventTopic", "metadata sync between clusters is not supported"),
    unset("webServiceTlsProtocols", "the web service's TLS uses tlsProtocols"),
    unset("webServiceTlsCiphers", "the web service's TLS uses tlsCiphers"),
    unset("bindAddresses", "extra bind addresses are not supported: bindAddress is the one"),
    only("haProxyProtocolEnabled", "false", reason="the HAProxy PROXY protocol is not spoken"),
    any_value("numAcceptorThreads", THREADS),
    any_value("numIOThreads", THREADS),
    any_value("numOrderedExecutorThreads", THREADS),
    any_value("numHttpServerThreads", THREADS),
    any_value("numExecutorThreadPoolSize", THREADS),
    any_value("numCacheExecutorThreadPoolSize", THREADS),
    only("enableBusyWait", "false", reason="the event loop never spin-waits"),
    any_value(
        "isRunningStandalone",
        "Magnetar knows it runs standalone from the command (`magnetar standalone`)",
    ),
    no_limit("maxTenants"),
    only("failureDomainsEnabled", "false", reason="placement knows no failure domains"),
    only(
        "metadataStoreOperationTimeoutSeconds",
        "30",
        reason="metadata operations time out after 30 s (zk/zookeeper.py)",
    ),
    any_value(
        "metadataStoreCacheExpirySeconds",
        "Magnetar's metadata caches are kept current by watches, never expired by age",
    ),
    any_value(
        "brokerShutdownTimeoutMs",
        "SIGTERM closes topics in order and the process exits when they are closed; nothing "
        "is cut short by a timer",
    ),
    only("skipBrokerShutdownOnOOM", "false", reason="a Python MemoryError ends the process"),
    unset("topicFactoryClassName", "no pluggable topic classes"),
    only(
        "forceDeleteTenantAllowed",
        "false",
        reason="a tenant with namespaces is never deleted (409), as Pulsar's false",
    ),
    only(
        "forceDeleteNamespaceAllowed",
        "false",
        reason="a namespace with topics is never deleted (409), as Pulsar's false",
    ),
    any_value(
        "activeConsumerFailoverDelayTimeMillis",
        "a Failover subscription switches its active consumer once the old one's messages "
        "are acked or returned, not after a fixed delay",
    ),
    no_limit("subscriptionExpirationTimeMinutes", "inactive subscriptions are never expired"),
    any_value(
        "subscriptionExpiryCheckIntervalInMinutes",
        "nothing to check: subscriptions never expire (subscriptionExpirationTimeMinutes=0)",
    ),
    same_set(
        "subscriptionTypesEnabled",
        "Exclusive,Shared,Failover,Key_Shared",
        "all four subscription types are always served",
    ),
    only(
        "subscriptionKeySharedUseConsistentHashing",
        "true",
        "false",
        reason="Key_Shared always uses the consistent-hash ring; Pulsar's range auto-split "
        "selector (false) gives the same guarantees (each key on one consumer, order per "
        "key), only another key-to-consumer spread",
    ),
    only(
        "subscriptionKeySharedConsistentHashingReplicaPoints",
        "100",
        reason="each Key_Shared consumer puts 100 points on the hash ring",
    ),
    any_value(
        "subscriptionBacklogScanMaxTimeMs",
        "the analyze-backlog admin operation does not exist in Magnetar",
    ),
    any_value(
        "subscriptionBacklogScanMaxEntries",
        "the analyze-backlog admin operation does not exist in Magnetar",
    ),
    only(
        "brokerDeduplicationMaxNumberOfProducers",
        "10000",
        reason="deduplication remembers the 10,000 most recent producers of a topic",
    ),
    any_value(
        "brokerDeduplicationSnapshotFrequencyInSeconds",
        "deduplication snapshots are taken every brokerDeduplicationEntriesInterval entries "
        "and when the topic closes, not by time: a new owner reads at most that many entries "
        "again; what is deduplicated is the same",
    ),
    any_value(
        "brokerDeduplicationSnapshotIntervalSeconds",
        "deduplication snapshots are taken every brokerDeduplicationEntriesInterval entries "
        "and when the topic closes, not by time: a new owner reads at most that many entries "
        "again; what is deduplicated is the same",
    ),
    any_value(
        "brokerDeduplicationProducerInactivityTimeoutMinutes",
        "deliberately better: a producer's last sequence id is kept until the 10,000-producer "
        "bound drops the least recent, never by time, so a producer back after any pause is "
        "still deduplicated",
    ),
    no_limit("maxNamespacesPerTenant"),
    no_limit("maxTopicsPerNamespace"),
    no_limit("brokerMaxConnections"),
    no_limit("brokerMaxConnectionsPerIp"),
    only("clientLibraryVersionCheckEnabled", "false", reason="client versions are not checked"),
    any_value(
        "clientLibraryVersionCheckAllowUnversioned",
        "client versions are not checked (clientLibraryVersionCheckEnabled=false)",
    ),
    any_value(
        "statusFilePath",
        "Magnetar's health is /admin/v2/brokers/health and `magnetar healthcheck`, not a file",
    ),
    only("preferLaterVersions", "false", reason="placement ignores broker versions"),
    no_limit("maxUnackedMessagesPerBroker"),
    any_value(
        "maxUnackedMessagesPerSubscriptionOnBrokerBlocked",
        "no per-broker unacked limit (maxUnackedMessagesPerBroker=0) to block on",
    ),
    only(
        "unblockStuckSubscriptionEnabled",
        "false",
        reason="no stuck-subscription sweeper: Key_Shared never blocks a whole subscription",
    ),
    any_value(
        "topicPublisherThrottlingTickTimeMillis",
        "publish rate limits are token buckets checked on each send, not on a tick",
    ),
    only(
        "preciseTopicPublishRateLimiterEnable",
        "false",
        reason="publish rate limiting is always the token bucket",
    ),
    any_value(
        "brokerPublisherThrottlingTickTimeMillis",
        "no broker-wide publish rate limit (brokerPublisherThrottlingMax*Rate=0)",
    ),
    no_limit("brokerPublisherThrottlingMaxMessageRate"),
    no_limit("brokerPublisherThrottlingMaxByteRate"),
    no_limit("subscribeThrottlingRatePerConsumer"),
    any_value(
        "subscribeRatePeriodPerConsumerInSecond",
        "no subscribe throttling (subscribeThrottlingRatePerConsumer=0)",
    ),
    no_limit("dispatchThrottlingRateInMsg"),
    no_limit("dispatchThrottlingRateInByte"),
    only(
        "dispatchThrottlingOnBatchMessageEnabled",
        "false",
        reason="dispatch rate limits count messages, not batches",
    ),
    no_limit("dispatchThrottlingRatePerReplicatorInMsg"),
    no_limit("dispatchThrottlingRatePerReplicatorInByte"),
    only(
        "dispatchThrottlingRateRelativeToPublishRate",
        "false",
        reason="dispatch rate limits are absolute",
    ),
    only(
        "dispatchThrottlingOnNonBacklogConsumerEnabled",
        "true",
        reason="dispatch rate limits apply to caught-up and backlogged consumers alike",
    ),
    any_value("dispatcherDispatchMessagesInSubscriptionThread", THREADS),
    any_value(
        "dispatcherMaxRoundRobinBatchSize",
        "a Shared subscription spreads entries by available permits, not in fixed batches",
    ),
    any_value("dispatcherReadFailureBackoffInitialTimeInMs", DISPATCH_LOOP),
    any_value("dispatcherReadFailureBackoffMaxTimeInMs", DISPATCH_LOOP),
    any_value("dispatcherReadFailureBackoffMandatoryStopTimeInMs", DISPATCH_LOOP),
    only(
        "preciseDispatcherFlowControl",
        "false",
        reason="permits are charged per message of each entry as dispatched",
    ),
    unset("entryFilterNames", "no pluggable entry filters"),
    unset("entryFiltersDirectory", "no pluggable entry filters"),
    only(
        "dispatchThrottlingForFilteredEntriesEnabled",
        "false",
        reason="no entry filters, so nothing is filtered",
    ),
    only("allowOverrideEntryFilters", "false", reason="no entry filters"),
    any_value(
        "maxConcurrentLookupRequest",
        "lookups are bounded by each connection's input budget (maxPendingPublishRequests"
        "PerConnection and the partial-frame bound), not a broker-wide semaphore",
    ),
    any_value(
        "maxConcurrentTopicLoadRequest",
        "topic loads are one per topic and bounded by the connections asking",
    ),
    any_value(
        "maxConcurrentNonPersistentMessagePerConnection",
        "a non-persistent message is forwarded as it arrives; none wait per connection",
    ),
    any_value("numWorkerThreadsForNonPersistentTopic", THREADS),
    only("enablePersistentTopics", "true", reason="persistent topics are always served"),
    only("enableNonPersistentTopics", "true", reason="non-persistent topics are always served"),
    only(
        "enableRunBookieTogether",
        "false",
        reason="`magnetar broker` runs no bookie (`magnetar standalone` runs both)",
    ),
    only(
        "enableRunBookieAutoRecoveryTogether",
        "false",
        reason="auto-recovery runs beside each bookie or as `magnetar autorecovery`",
    ),
    no_limit("maxSameAddressProducersPerTopic"),
    only(
        "encryptionRequireOnProducer",
        "false",
        reason="unencrypted messages are accepted (end-to-end encryption is the client's)",
    ),
    no_limit("maxSameAddressConsumersPerTopic"),
    no_limit("maxSubscriptionsPerTopic"),
    no_limit("maxConsumersPerSubscription"),
    any_value(
        "brokerServiceCompactionPhaseOneLoopTimeInSeconds",
        "Magnetar's compaction reads the topic once, with no phase-one time box",
    ),
    only(
        "delayedDeliveryTrackerFactoryClassName",
        "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory",
        "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
        reason="Magnetar's one delayed-delivery index is persisted and memory-bounded, what "
        "either of Pulsar's trackers provides at best",
    ),
    only(
        "isDelayedDeliveryDeliverAtTimeStrict",
        "false",
        reason="a delayed message is never held past its time by more than one tick",
    ),
    any_value("delayedDeliveryMinIndexCountPerBucket", DELAYED_INDEX),
    any_value("delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds", DELAYED_INDEX),
    any_value("delayedDeliveryMaxIndexesPerBucketSnapshotSegment", DELAYED_INDEX),
    any_value("delayedDeliveryMaxNumBuckets", DELAYED_INDEX),
    any_value("delayedDeliveryFixedDelayDetectionLookahead", DELAYED_INDEX),
    only(
        "acknowledgmentAtBatchIndexLevelEnabled",
        "true",
        "false",
        reason="deliberately better: acknowledgements of single messages of a batch are "
        "always kept, durably; with false Pulsar keeps only whole-entry acks and would "
        "redeliver acknowledged messages of a partly acknowledged batch",
    ),
    any_value(
        "maxMessagePublishBufferSizeInMB",
        "publishes in flight are bounded per connection (maxPendingPublishRequestsPer"
        "Connection), which bounds the broker's publish memory",
    ),
    any_value(
        "maxMessageSizeCheckIntervalInSeconds",
        "a topic's max message size policy takes effect when it changes, not on a timer",
    ),
    only(
        "zookeeperSessionExpiredPolicy",
        "reconnect",
        reason="after a lost metadata session the broker reconnects, stopping service of its "
        "bundles until it owns them again",
    ),
    only(
        "systemTopicEnabled",
        "true",
        reason="topic policies are kept by the broker (as Pulsar's system topic keeps them)",
    ),
    any_value(
        "schemaRegistryCompatibilityCheckers",
        "Magnetar's schema registry always checks Avro, JSON and Protobuf-native schemas",
    ),
    only(
        "systemTopicSchemaCompatibilityStrategy",
        "ALWAYS_COMPATIBLE",
        reason="Magnetar's internal topics carry no schema to check",
    ),
    no_limit("topicFencingTimeoutSeconds", "a fenced topic is closed at once"),
    only(
        "enableBrokerSideSubscriptionPatternEvaluation",
        "true",
        "false",
        reason="pattern consumers get every topic of the namespace and match on the client "
        "(GET_TOPICS_OF_NAMESPACE answers filtered=false), which is correct for either value",
    ),
    any_value(
        "subscriptionPatternMaxLength",
        "patterns are never evaluated on the broker, so their length costs it nothing",
    ),
    only("metadataStoreBatchingEnabled", "true", "false", reason=METADATA_BATCHING),
    any_value("metadataStoreBatchingMaxDelayMillis", METADATA_BATCHING),
    any_value("metadataStoreBatchingMaxOperations", METADATA_BATCHING),
    any_value("metadataStoreBatchingMaxSizeKb", METADATA_BATCHING),
    # --- authentication and TLS ---------------------------------------------------------
    unset("proxyRoles", "no Pulsar proxy roles: clients connect to the brokers"),
    only("authenticateOriginalAuthData", "false", reason="no Pulsar proxy in front"),
    only(
        "tlsAllowInsecureConnection",
        "false",
        reason="a client certificate that does not verify against the trusted CA is refused",
    ),
    only(
        "tlsHostnameVerificationEnabled",
        "false",
        reason="broker-to-broker TLS verifies the certificate chain, not host names",
    ),
    any_value("tlsProvider", JAVA_TLS),
    any_value("webServiceTlsProvider", JAVA_TLS),
    only("tlsEnabledWithKeyStore", "false", reason=JAVA_TLS),
    any_value("tlsKeyStoreType", JAVA_TLS),
    unset("tlsKeyStore", JAVA_TLS),
    unset("tlsKeyStorePassword", JAVA_TLS),
    any_value("tlsTrustStoreType", JAVA_TLS),
    unset("tlsTrustStore", JAVA_TLS),
    unset("tlsTrustStorePassword", JAVA_TLS),
    only("brokerClientTlsEnabledWithKeyStore", "false", reason=JAVA_TLS),
    any_value("brokerClientSslProvider", JAVA_TLS),
    any_value("brokerClientTlsKeyStoreType", JAVA_TLS),
    unset("brokerClientTlsKeyStore", JAVA_TLS),
    unset("brokerClientTlsKeyStorePassword", JAVA_TLS),
    any_value("brokerClientTlsTrustStoreType", JAVA_TLS),
    unset("brokerClientTlsTrustStore", JAVA_TLS),
    unset("brokerClientTlsTrustStorePassword", JAVA_TLS),
    unset("brokerClientTlsCiphers", "the broker's client uses Python's secure TLS defaults"),
    unset("brokerClientTlsProtocols", "the broker's client uses TLS 1.2 and newer"),
    only(
        "tlsEnabled",
        "false",
        "true",
        reason="deprecated in Pulsar: TLS is on when brokerServicePortTls / webServicePortTls "
        "are set, for either value",
    ),
    only(
        "authorizationProvider",
        "org.apache.pulsar.broker.authorization.PulsarAuthorizationProvider",
        reason="Magnetar's authorization decides as Pulsar's default provider does",
    ),
    only(
        "authorizationAllowWildcardsMatching",
        "false",
        reason="roles in grants are matched exactly",
    ),
    unset("athenzDomainNames", "no Athenz authentication"),
    any_value("saslJaasClientAllowedIds", "no SASL/Kerberos authentication provider"),
    any_value("saslJaasServerSectionName", "no SASL/Kerberos authentication provider"),
    unset("saslJaasServerRoleTokenSignerSecretPath", "no SASL/Kerberos authentication provider"),
    only(
        "authenticateMetricsEndpoint",
        "false",
        reason="/metrics is open, as Pulsar's default",
    ),
    # --- HTTP server --------------------------------------------------------------------
    Accepted(
        "httpMaxRequestSize",
        lambda v: _at_most(v, 0.0) or not _at_most(v, ADMIN_BODY_BYTES_MAX - 1),
        f"-1, or {ADMIN_BODY_BYTES_MAX} or more",
        "admin request bodies are bounded at 8 MiB and refused (413) beyond: what -1 (no "
        "bound) gets, deliberately bounded, and within any larger bound",
    ),
    only(
        "httpMaxRequestHeaderSize",
        "8192",
        reason="request lines and header fields are bounded at about 8 KiB by the HTTP server "
        "and refused (400) beyond",
    ),
    any_value(
        "disableHttpDebugMethods",
        "TRACE and TRACK are never served (405): what true asks for, and harmless for false",
    ),
    only("httpRequestsLimitEnabled", "false", reason="HTTP requests are not rate limited"),
    any_value(
        "httpRequestsMaxPerSecond",
        "HTTP requests are not rate limited (httpRequestsLimitEnabled=false)",
    ),
    any_value("httpServerThreadPoolQueueSize", JVM),
    any_value("httpServerAcceptQueueSize", JVM),
    any_value("maxHttpServerConnections", JVM),
    any_value("maxConcurrentHttpRequests", JVM),
    # --- BookKeeper client --------------------------------------------------------------
    unset(
        "bookkeeperMetadataServiceUri",
        "bookies are found in the broker's metadata store (metadataStoreUrl)",
    ),
    unset(
        "bookkeeperClientAuthenticationPlugin",
        "bookie authentication is TLS (bookkeeperTLSClientAuthentication)",
    ),
    unset(
        "bookkeeperClientAuthenticationParametersName",
        "bookie authentication is TLS (bookkeeperTLSClientAuthentication)",
    ),
    unset(
        "bookkeeperClientAuthenticationParameters",
        "bookie authentication is TLS (bookkeeperTLSClientAuthentication)",
    ),
    any_value(
        "bookkeeperClientTimeoutInSeconds",
        "a bookie request times out after 5 s (an add after 10 s) and a bookie that has not "
        "acked the oldest add within 3 s is replaced by an ensemble change; reads fail over to "
        "the next replica; an add is never failed by a client timeout",
    ),
    any_value("bookkeeperClientNumWorkerThreads", THREADS),
    any_value("bookkeeperClientNumIoThreads", THREADS),
    any_value("bookkeeperClientSeparatedIoThreadsEnabled", THREADS),
    only(
        "bookkeeperClientSpeculativeReadTimeoutInMillis",
        "0",
        reason="no speculative reads: a read goes to the next replica when one fails",
    ),
    any_value("bookkeeperNumberOfChannelsPerBookie", BK_CLIENT),
    only(
        "bookkeeperClientHealthCheckEnabled",
        "true",
        reason="a bookie that fails an add or read is always quarantined from new ensembles",
    ),
    any_value(
        "bookkeeperClientHealthCheckIntervalSeconds",
        "Magnetar quarantines a bookie on its first failure (for 30 s), without an error "
        "count per interval",
    ),
    any_value(
        "bookkeeperClientHealthCheckErrorThresholdPerInterval",
        "Magnetar quarantines a bookie on its first failure (for 30 s)",
    ),
    any_value(
        "bookkeeperClientHealthCheckQuarantineTimeInSeconds",
        "Magnetar's quarantine lasts 30 s and ends early when the bookie answers again",
    ),
    any_value("bookkeeperClientQuarantineRatio", "every broker quarantines a failing bookie"),
    any_value(
        "bookkeeperClientGetBookieInfoIntervalSeconds",
        "the bookie list is kept current by watches on their registrations",
    ),
    any_value(
        "bookkeeperClientGetBookieInfoRetryIntervalSeconds",
        "the bookie list is kept current by watches on their registrations",
    ),
    only(
        "bookkeeperClientRackawarePolicyEnabled",
        "true",
        reason="ensembles are placed across the racks bookies announce (bookie_rack)",
    ),
    only(
        "bookkeeperClientRegionawarePolicyEnabled",
        "false",
        reason="placement is rack-aware, not region-aware",
    ),
    only(
        "bookkeeperClientReorderReadSequenceEnabled",
        "true",
        "false",
        reason="reads always ask healthy replicas first; the order never changes what a read "
        "returns, only how fast it gets past a failed bookie",
    ),
    unset("bookkeeperClientIsolationGroups", "no bookie isolation groups"),
    unset("bookkeeperClientSecondaryIsolationGroups", "no bookie isolation groups"),
    unset("bookkeeperClientMinAvailableBookiesInIsolationGroups", "no bookie isolation groups"),
    any_value(
        "bookkeeperEnableStickyReads",
        "reads of a ledger go to the first healthy replica of each entry's write set",
    ),
    any_value("bookkeeperTLSProviderFactoryClass", JAVA_TLS),
    only("bookkeeperTLSKeyFileType", "PEM", reason="bookie TLS reads PEM files"),
    only("bookkeeperTLSTrustCertTypes", "PEM", reason="bookie TLS reads PEM files"),
    unset("bookkeeperTLSKeyStorePasswordPath", JAVA_TLS),
    unset("bookkeeperTLSTrustStorePasswordPath", JAVA_TLS),
    any_value(
        "bookkeeperTlsCertFilesRefreshDurationSeconds",
        "bookie TLS certificates are read when a connection to a bookie opens",
    ),
    only(
        "bookkeeper_tlsHostnameVerificationEnabled",
        "false",
        reason="bookie TLS verifies the certificate chain, not host names",
    ),
    only(
        "bookkeeperDiskWeightBasedPlacementEnabled",
        "false",
        reason="placement does not weigh bookies by free disk",
    ),
    any_value(
        "bookkeeperExplicitLacIntervalInMills",
        "the last-add-confirmed rides on every add and is read by tailing reads (ReadLac)",
    ),
    # --- managed ledger -----------------------------------------------------------------
    any_value(
        "managedLedgerCursorPositionFlushSeconds",
        "deliberately better: every acknowledgement is durable when acked (group-committed "
        "to the cursor ledger), nothing waits for a periodic flush",
    ),
    any_value("managedLedgerStatsPeriodSeconds", "stats are computed when /metrics is read"),
    only(
        "managedLedgerDigestType",
        "CRC32C",
        reason="every entry is checksummed with CRC32C",
    ),
    any_value("managedLedgerNumSchedulerThreads", THREADS),
    only(
        "managedLedgerCacheCopyEntries",
        "false",
        reason="cached entries are immutable bytes, shared not copied",
    ),
    any_value(
        "managedLedgerDefaultMarkDeleteRateLimit",
        "deliberately better: every acknowledgement is durable when acked; there is no "
        "rate-limited mark-delete persistence to lose on a crash",
    ),
    no_limit(
        "managedLedgerInactiveLedgerRolloverTimeSeconds",
        "ledgers of idle topics roll over by managedLedgerMaxLedgerRolloverTimeMinutes only",
    ),
    only(
        "managedLedgerMaxSizePerLedgerMbytes",
        "2048",
        reason="a ledger rolls over at 2 GiB",
    ),
    any_value(
        "managedLedgerMaxUnackedRangesToPersist",
        "deliberately better: the whole acknowledgement state is durable, with no cap on ranges",
    ),
    no_limit(
        "managedLedgerMaxReadsInFlightSizeInMB",
        "reads in flight are bounded by managedLedgerReadAheadTotalMaxSizeBytes instead",
    ),
    any_value(
        "managedLedgerMaxUnackedRangesToPersistInMetadataStore",
        "acknowledgement ranges are always kept in the cursor ledger, never in the metadata store",
    ),
    only(
        "autoSkipNonRecoverableData",
        "false",
        reason="a ledger that cannot be read is an error, never skipped silently",
    ),
    only("lazyCursorRecovery", "false", reason="cursors are recovered when a topic loads"),
    any_value(
        "managedLedgerMetadataOperationsTimeoutSeconds",
        "metadata operations time out after metadataStoreOperationTimeoutSeconds (30 s)",
    ),
    no_limit(
        "managedLedgerReadEntryTimeoutSeconds",
        "a read fails over to the next replica when a bookie fails, with no overall timeout",
    ),
    no_limit(
        "managedLedgerAddEntryTimeoutSeconds",
        "an add completes or its ledger is failed by an ensemble change, with no overall timeout",
    ),
    any_value("managedLedgerPrometheusStatsLatencyRolloverSeconds", EXTRA_METRICS),
    any_value("managedLedgerTraceTaskExecution", THREADS),
    any_value(
        "managedLedgerNewEntriesCheckDelayInMillis",
        "a tailing cursor is woken by the add itself, with no polling delay",
    ),
    any_value(
        "managedLedgerMinimumBacklogCursorsForCaching",
        "the entry cache is shared by every cursor and bounded by managedLedgerCacheSizeMB",
    ),
    any_value(
        "managedLedgerMinimumBacklogEntriesForCaching",
        "the entry cache is shared by every cursor and bounded by managedLedgerCacheSizeMB",
    ),
    any_value(
        "managedLedgerMaxBacklogBetweenCursorsForCaching",
        "the entry cache is shared by every cursor and bounded by managedLedgerCacheSizeMB",
    ),
    any_value(
        "managedLedgerUnackedRangesOpenCacheSetEnabled",
        "the acknowledgement state has one compact range encoding",
    ),
    any_value(
        "managedLedgerCacheEvictionFrequency",
        "deprecated in Pulsar: eviction runs every managedLedgerCacheEvictionIntervalMs",
    ),
    any_value(
        "managedLedgerMaxUnackedRangesToPersistInZooKeeper",
        "deprecated in Pulsar; ranges are never kept in the metadata store",
    ),
    only(
        "persistentUnackedRangesWithMultipleEntriesEnabled",
        "false",
        "true",
        reason="the acknowledgement state is always written in as many cursor-ledger "
        "entries as it needs, with no cap (what true asks for)",
    ),
    # --- load balancer ------------------------------------------------------------------
    any_value(
        "loadBalancerHostUsageCheckIntervalMinutes",
        "host usage is sampled for each load report (loadBalancerReportUpdate*)",
    ),
    any_value(
        "loadBalancerBrokerMaxTopics",
        "placement weighs resource usage, not topic counts",
    ),
    any_value(
        "loadBalancerResourceQuotaUpdateIntervalMinutes",
        "no resource quotas are kept in the metadata store",
    ),
    only(
        "loadManagerClassName",
        "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
        "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
        reason="Magnetar's load manager is Pulsar's modular one; standalone's NoopLoadManager "
        "is what one broker needs (loadBalancerEnabled decides)",
    ),
    any_value(
        "supportedNamespaceBundleSplitAlgorithms",
        "Magnetar splits with range_equally_divide and topic_count_equally_divide "
        "(defaultNamespaceBundleSplitAlgorithm picks)",
    ),
    only(
        "lowerBoundarySheddingEnabled",
        "false",
        reason="the ThresholdShedder sheds only brokers above the average",
    ),
    only(
        "loadBalancerLoadPlacementStrategy",
        "org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight",
        "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate",
        reason="placement is LeastResourceUsageWithWeight: the least loaded broker by "
        "weighted usage, which is what LeastLongTermMessageRate approximates by message rates",
    ),
    any_value(
        "loadBalancerPlacementStrategy",
        "pre-2.x name of loadBalancerLoadPlacementStrategy; placement is by weighted usage",
    ),
    any_value(
        "loadBalancerMsgRateDifferenceShedderThreshold",
        "a UniformLoadShedder threshold; Magnetar sheds with the Threshold/OverloadShedder",
    ),
    any_value(
        "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold",
        "a UniformLoadShedder threshold; Magnetar sheds with the Threshold/OverloadShedder",
    ),
    only(
        "loadBalancerDirectMemoryResourceWeight",
        "1.0",
        reason="direct memory is not a Python resource (memory: loadBalancerMemoryResourceWeight)",
    ),
    any_value(
        "namespaceBundleUnloadingTimeoutMs",
        "an unload closes the bundle's topics and releases ownership when they are closed",
    ),
    any_value(
        "loadBalancerBrokerUnderloadedThresholdPercentage",
        "a knob of Pulsar 1.x's SimpleLoadManager; not read by the modular load manager",
    ),
    any_value(
        "loadBalancerBrokerComfortLoadLevelPercentage",
        "a knob of Pulsar 1.x's SimpleLoadManager; not read by the modular load manager",
    ),
    only("loadBalancerDebugModeEnabled", "false", reason=MODULAR_LB),
    any_value("loadBalancerBrokerLoadTargetStd", MODULAR_LB),
    any_value("loadBalancerSheddingConditionHitCountThreshold", MODULAR_LB),
    any_value("loadBalancerTransferEnabled", MODULAR_LB),
    any_value("loadBalancerMaxNumberOfBrokerSheddingPerCycle", MODULAR_LB),
    any_value("loadBalanceSheddingDelayInSeconds", MODULAR_LB),
    any_value("loadBalancerBrokerLoadDataTTLInSeconds", MODULAR_LB),
    any_value("loadBalancerMaxNumberOfBundlesInBundleLoadReport", MODULAR_LB),
    any_value("loadBalancerMaxNumberOfBundlesToSplitPerCycle", MODULAR_LB),
    any_value("loadBalancerNamespaceBundleSplitConditionHitCountThreshold", MODULAR_LB),
    any_value("loadBalancerServiceUnitStateTombstoneDelayTimeInSeconds", MODULAR_LB),
    # --- replication --------------------------------------------------------------------
    any_value(
        "replicationConnectionsPerBroker",
        "a broker's replicators reach each remote cluster through one client, whose "
        "connections are one per remote broker",
    ),
    only(
        "replicatorPrefix",
        "pulsar.repl",
        reason="replicator cursors and producers are named pulsar.repl.<cluster>",
    ),
    any_value(
        "replicationTlsEnabled",
        "deprecated in Pulsar: a replicator uses TLS when the remote cluster's registration "
        "says so (brokerServiceUrlTls, brokerClientTlsEnabled)",
    ),
    unset("bootstrapNamespaces", "no namespaces are bootstrapped besides public/default"),
    # --- WebSocket ----------------------------------------------------------------------
    Accepted(
        "webSocketServiceEnabled",
        lambda _v: True,
        "any value",
        NO_WEBSOCKET + ": with true (Pulsar's shipped standalone.conf) WebSocket clients get "
        "404; logged as a warning, not refused, so that file starts",
        warn=True,
    ),
    any_value("webSocketNumIoThreads", NO_WEBSOCKET),
    any_value("webSocketNumServiceThreads", NO_WEBSOCKET),
    any_value("webSocketConnectionsPerBroker", NO_WEBSOCKET),
    any_value("webSocketSessionIdleTimeoutMillis", NO_WEBSOCKET),
    any_value("webSocketMaxTextFrameSize", NO_WEBSOCKET),
    # --- metrics and stats --------------------------------------------------------------
    only("exposeConsumerLevelMetricsInPrometheus", "false", reason=EXTRA_METRICS),
    any_value("metricsBufferResponse", "/metrics is rendered per request"),
    only("exposeProducerLevelMetricsInPrometheus", "false", reason=EXTRA_METRICS),
    only(
        "exposeManagedLedgerMetricsInPrometheus",
        "true",
        reason="managed-ledger series are always on /metrics",
    ),
    only("exposeManagedCursorMetricsInPrometheus", "false", reason=EXTRA_METRICS),
    any_value("metricsServletTimeoutMs", "/metrics is rendered without a time box"),
    only("exposeBundlesMetricsInPrometheus", "false", reason=EXTRA_METRICS),
    only(
        "exposePublisherStats",
        "true",
        reason="topic stats always list their publishers",
    ),
    any_value("statsUpdateFrequencyInSecs", "stats are computed when asked"),
    any_value("statsUpdateInitialDelayInSecs", "stats are computed when asked"),
    any_value(
        "exposePreciseBacklogInPrometheus",
        "backlogs are counted exactly from the acknowledgement state",
    ),
    only(
        "splitTopicAndPartitionLabelInPrometheus",
        "false",
        reason="the topic label carries the partition suffix",
    ),
    only(
        "aggregatePublisherStatsByProducerName",
        "false",
        reason="partitioned stats list publishers per partition",
    ),
    no_limit("clusterMigrationCheckDurationSeconds", "no cluster migration"),
    # --- functions, schema storage, offload, transactions, packages ---------------------
    only("functionsWorkerEnabled", "false", reason=NO_FUNCTIONS),
    only("functionsWorkerEnablePackageManagement", "false", reason=NO_FUNCTIONS),
    only(
        "schemaRegistryStorageClassName",
        "org.apache.pulsar.broker.service.schema.BookkeeperSchemaStorageFactory",
        reason="schemas are stored in ledgers on the bookies, as this factory does",
    ),
    any_value("offloadersDirectory", BUILT_IN_OFFLOADERS),
    any_value("narExtractionDirectory", "no NAR plugins are loaded"),
    only("transactionCoordinatorEnabled", "false", reason=NO_TXN),
    any_value("transactionMetadataStoreProviderClassName", NO_TXN),
    any_value("transactionBufferSnapshotMaxTransactionCount", NO_TXN),
    any_value("transactionBufferSnapshotMinTimeInMillis", NO_TXN),
    any_value("transactionBufferSegmentedSnapshotEnabled", NO_TXN),
    any_value("transactionBufferSnapshotSegmentSize", NO_TXN),
    any_value("transactionBufferClientMaxConcurrentRequests", NO_TXN),
    any_value("maxActiveTransactionsPerCoordinator", NO_TXN),
    any_value("transactionPendingAckLogIndexMinLag", NO_TXN),
    any_value("transactionBufferClientOperationTimeoutInMills", NO_TXN),
    any_value("transactionLogBatchedWriteEnabled", NO_TXN),
    any_value("transactionLogBatchedWriteMaxRecords", NO_TXN),
    any_value("transactionLogBatchedWriteMaxSize", NO_TXN),
    any_value("transactionLogBatchedWriteMaxDelayInMillis", NO_TXN),
    any_value("transactionPendingAckBatchedWriteEnabled", NO_TXN),
    any_value("transactionPendingAckBatchedWriteMaxRecords", NO_TXN),
    any_value("transactionPendingAckBatchedWriteMaxSize", NO_TXN),
    any_value("transactionPendingAckBatchedWriteMaxDelayInMillis", NO_TXN),
    only("enablePackagesManagement", "false", reason=NO_FUNCTIONS),
    any_value("packagesManagementStorageProvider", NO_FUNCTIONS),
    any_value("packagesReplicas", NO_FUNCTIONS),
    any_value("packagesManagementLedgerRootPath", NO_FUNCTIONS),
    only(
        "strictBookieAffinityEnabled",
        "false",
        reason="no bookie affinity groups (see bookkeeperClientIsolationGroups)",
    ),
    # --- deprecated in Pulsar -----------------------------------------------------------
    only(
        "zooKeeperOperationTimeoutSeconds",
        "-1",
        "30",
        reason="deprecated in Pulsar (metadataStoreOperationTimeoutSeconds): 30 s",
    ),
    any_value(
        "zooKeeperCacheExpirySeconds",
        "deprecated in Pulsar; metadata caches are kept current by watches",
    ),
    any_value(
        "brokerServicePurgeInactiveFrequencyInSeconds",
        "deprecated in Pulsar for brokerDeleteInactiveTopicsFrequencySeconds, and read by neither",
    ),
    only(
        "subscriptionKeySharedEnable",
        "true",
        reason="deprecated in Pulsar (subscriptionTypesEnabled); Key_Shared is always served",
    ),
    # --- BookKeeper keys of Pulsar's standalone.conf (its embedded bookie) --------------
    only(
        "ledgerStorageClass",
        "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        reason="Magnetar's bookie storage is shaped like DbLedgerStorage",
    ),
    any_value(
        "nettyMaxFrameSizeBytes",
        "bookie frames are bounded by the broker's maxMessageSize and the bookie's entry bound",
    ),
    any_value("dbStorage_writeCacheMaxSizeMb", "standalone's bookies size their own caches"),
    any_value("dbStorage_readAheadCacheMaxSizeMb", "standalone's bookies size their own caches"),
    any_value("dbStorage_readAheadCacheBatchSize", "standalone's bookies size their own caches"),
    any_value("flushInterval", "standalone's bookies checkpoint on their own schedule"),
    any_value("dbStorage_rocksDB_blockCacheSize", "RocksDB tuning of the bookie index"),
    any_value("dbStorage_rocksDB_writeBufferSizeMB", "RocksDB tuning of the bookie index"),
    any_value("dbStorage_rocksDB_sstSizeInMB", "RocksDB tuning of the bookie index"),
    any_value("dbStorage_rocksDB_blockSize", "RocksDB tuning of the bookie index"),
    any_value("dbStorage_rocksDB_bloomFilterBitsPerKey", "RocksDB tuning of the bookie index"),
    any_value("dbStorage_rocksDB_numLevels", "RocksDB tuning of the bookie index"),
    any_value("dbStorage_rocksDB_numFilesInLevel0", "RocksDB tuning of the bookie index"),
    any_value("dbStorage_rocksDB_maxSizeInLevel1MB", "RocksDB tuning of the bookie index"),
    any_value(
        "journalMaxGroupWaitMSec",
        "the journal group-commits after ~1 ms or ~512 KB, whichever first",
    ),
    only(
        "journalSyncData",
        "false",
        "true",
        reason="deliberately safer: standalone's bookie always syncs its journal before an "
        "add is acknowledged",
    ),
    any_value("diskUsageThreshold", "standalone's bookies use their own disk thresholds"),
    any_value("diskUsageWarnThreshold", "standalone's bookies use their own disk thresholds"),
    only("allowLoopback", "true", reason="standalone's bookies listen on loopback"),
    any_value("gcWaitTime", "standalone's bookies run garbage collection on their own schedule"),
)
"""The broker's accepted keys (``magnetar broker`` and ``magnetar standalone``)."""

ACCEPTED_BOOKIE: tuple[Accepted, ...] = (
    unset("extraServerComponents", "no pluggable bookie server components"),
    any_value("httpServerHost", "the HTTP server binds the bookie's address"),
    any_value(
        "httpServerClass",
        "Magnetar's bookie has its own HTTP server (aiohttp)",
    ),
    only("httpServerTlsEnable", "false", reason="the bookie's HTTP server is plain HTTP"),
    unset("httpServerKeyStorePath", JAVA_TLS),
    unset("httpServerKeyStorePassword", JAVA_TLS),
    unset("httpServerTrustStorePath", JAVA_TLS),
    unset("httpServerTrustStorePassword", JAVA_TLS),
    any_value(
        "gcEntryLogMetadataCacheEnabled",
        "entry-log metadata for garbage collection is kept by the bookie's own index",
    ),
    only("zkEnableSecurity", "false", reason="ZooKeeper ACLs are not set"),
    any_value(
        "statsProviderClass",
        "the bookie's metrics are Prometheus, on its HTTP port",
    ),
    any_value(
        "stickyReadSEnabled",
        "reads of an entry go to the first healthy replica of its write set",
    ),
    only(
        "reorderReadSequenceEnabled",
        "true",
        "false",
        reason="reads always ask healthy replicas first; the order never changes what a read "
        "returns",
    ),
    any_value("storageserver.grpc.port", "no BookKeeper stream storage (table service)"),
    any_value("dlog.bkcEnsembleSize", "no DistributedLog"),
    any_value("dlog.bkcWriteQuorumSize", "no DistributedLog"),
    any_value("dlog.bkcAckQuorumSize", "no DistributedLog"),
    any_value("storage.range.store.dirs", "no BookKeeper stream storage (table service)"),
    any_value("storage.serve.readonly.tables", "no BookKeeper stream storage (table service)"),
    any_value(
        "storage.cluster.controller.schedule.interval.ms",
        "no BookKeeper stream storage (table service)",
    ),
)
"""The bookie's accepted keys (``magnetar bookie --config bk_server.conf``)."""


__all__ = [
    "ACCEPTED_BOOKIE",
    "ACCEPTED_BROKER",
    "Accepted",
    "any_value",
    "no_limit",
    "only",
    "same_set",
    "unset",
]
