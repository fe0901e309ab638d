"""Administration: the admin REST API (Pulsar's ``/admin/v2`` paths, HTTP lookup, health),
topic administration beyond CRUD, and the Prometheus metrics.

Owns: HTTP handlers and their input checks, admin operations over the service's topics.
Must not know: the binary protocol's connections (``protocol/``); it drives the broker
through ``service``, ``namespace`` and ``topics``.
"""

from magnetar.broker.admin.http_api import AdminApi
from magnetar.broker.admin.metrics import BrokerMetrics
from magnetar.broker.admin.topic_ops import TopicOperations

__all__ = ["AdminApi", "BrokerMetrics", "TopicOperations"]
