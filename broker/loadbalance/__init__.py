"""The load manager: load reports, placement of bundles, bundle split, load shedding.

The decisions (``load_data``, ``placement``, ``split``, ``shedding``) are pure code over
load reports, so they are tested directly and driven at scale by ``bench/lb_sim.py``.
"""

from magnetar.broker.loadbalance.load_data import (
    BrokerLoadReport,
    BundleData,
    BundleStats,
    ReportPolicy,
    ResourceUsage,
    ResourceWeights,
    needs_report,
)
from magnetar.broker.loadbalance.placement import (
    LeastResourceUsageWithWeight,
    NoBrokerAvailable,
    PlacementConfig,
)
from magnetar.broker.loadbalance.shedding import (
    OverloadShedder,
    SheddingConfig,
    ThresholdShedder,
    Unload,
)
from magnetar.broker.loadbalance.split import (
    SplitAlgorithm,
    SplitError,
    SplitThresholds,
    TopicLoad,
    bundles_to_split,
    split_boundaries,
)

__all__ = [
    "BrokerLoadReport",
    "BundleData",
    "BundleStats",
    "LeastResourceUsageWithWeight",
    "NoBrokerAvailable",
    "OverloadShedder",
    "PlacementConfig",
    "ReportPolicy",
    "ResourceUsage",
    "ResourceWeights",
    "SheddingConfig",
    "SplitAlgorithm",
    "SplitError",
    "SplitThresholds",
    "ThresholdShedder",
    "TopicLoad",
    "Unload",
    "bundles_to_split",
    "needs_report",
    "split_boundaries",
]
