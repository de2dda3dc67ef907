"""Deprecated import path of ``asyncnet.train.MLP``, the zoo mlp as a
:class:`~asyncnet.train.program.Program`: use ``Program(asyncnet.model.zoo.mlp(...), optimizer=...)``."""

from asyncnet.errors import CheckpointError
from asyncnet.train import MLP

__all__ = ["MLP", "CheckpointError"]
