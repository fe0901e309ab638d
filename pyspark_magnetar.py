"""Spark's automatic discovery of the ``magnetar`` data source.

Spark 4 imports every top-level module named ``pyspark_*`` and registers its ``DefaultSource``
(a ``pyspark.sql.datasource.DataSource``) under that class's ``name()``. Installing
``magnetar[spark]`` installs this module, so ``format("magnetar")`` works without
``magnetar.spark.register(spark)``.
"""

from magnetar.spark.source import MagnetarDataSource as DefaultSource

__all__ = ["DefaultSource"]
