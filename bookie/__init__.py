"""The bookie: BookKeeper's storage node, its gRPC service and the client brokers use.

Modules (imported by name; this package re-exports nothing, so importing one part, say the
``api`` value types, never loads gRPC or RocksDB): ``api`` (the contracts and value types),
``errors``, ``wire`` and ``add_frames`` (byte layouts), ``core`` (the storage engine:
``journal``, ``write_cache``, ``entry_log``, ``index``, ``read_cache``, ``ledger_storage``,
``gc``, ``files``), ``server`` and ``fast_add`` (the network face), ``client`` (the broker's
``BookieClient``), ``registration``, ``tls``, ``metrics``, ``main`` (the process),
``testing`` (an in-memory storage for the fast tiers).
"""

__all__: list[str] = []
