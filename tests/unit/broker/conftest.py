"""Fixtures of the broker unit tests: ``service``, a broker service on in-memory metadata and
storage (``support.broker_connection``)."""

from support.broker_connection import service

__all__ = ["service"]
