"""Fixtures of the magctl tier (see ``support.magctl``)."""

from support.magctl import config_file, magctl, magctl_proc, server  # noqa: F401
