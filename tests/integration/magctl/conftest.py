"""Fixtures of the magctl tier (see ``support.magctl``)."""

from support.magctl import config_file, magctl, magctl_proc, magctl_term, server  # noqa: F401
