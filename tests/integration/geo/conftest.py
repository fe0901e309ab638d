"""Fixtures of the geo tests beyond ``support.fixtures``: magctl in-process (``support.magctl``)."""

from support.magctl import config_file, magctl  # noqa: F401
