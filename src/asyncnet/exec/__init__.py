"""Executors: they run a net's operators. Importing this package registers the net types."""

from asyncnet.exec import simple  # noqa: F401  (registers "simple")
