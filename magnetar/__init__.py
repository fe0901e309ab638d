"""Magnetar: a Pulsar-class messaging system in Python.

The distribution maps the repository's top-level folders onto this namespace:
``magnetar.zk`` (metadata), ``magnetar.bookie`` (storage), ``magnetar.broker``,
``magnetar.client`` and ``magnetar.spark``. This root package owns only the version.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
