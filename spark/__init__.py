"""``magnetar.spark``: the PySpark data source ``magnetar`` (Spark 4's Python Data Source API).

    import magnetar.spark
    magnetar.spark.register(spark)
    df = (spark.read.format("magnetar")
          .option("service.url", "pulsar://localhost:6650").option("topic", "events").load())

Batch and streaming reads and writes through ``magnetar.client`` (no JVM jar), with
pulsar-spark's option names and columns; exactly-once writes through broker deduplication.
Installed as ``magnetar[spark]``, the source is also found by Spark itself (the top-level
module ``pyspark_magnetar``). See ``docs/spark.md``.

Must not import anything of Magnetar but ``magnetar.client`` (import-linter contract).
"""

from __future__ import annotations

from typing import Any

from magnetar.spark.cluster import DataLossError, DeduplicationError
from magnetar.spark.options import OptionError
from magnetar.spark.source import MagnetarDataSource
from magnetar.spark.write import WriteError


def register(spark: Any) -> None:
    """Register the ``magnetar`` format with a ``SparkSession``."""
    spark.dataSource.register(MagnetarDataSource)


__all__ = [
    "DataLossError",
    "DeduplicationError",
    "MagnetarDataSource",
    "OptionError",
    "WriteError",
    "register",
]
