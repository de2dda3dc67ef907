"""Deprecated import path of the trainers: :func:`asyncnet.train.train` and the modules of
:mod:`asyncnet.train` (config, program, worker, loop, api) hold them now.

    >>> from asyncnet.train.trainers import TrainConfig, train
    >>> TrainConfig(mode="local").num_workers
    1
"""

from asyncnet.train.api import TrainResult, train, under_torchrun
from asyncnet.train.config import BACKENDS, DEFAULT_LR, LR_POLICIES, MODES, OPTIMIZERS, TrainConfig
from asyncnet.train.loop import Resume

__all__ = [
    "TrainConfig",
    "TrainResult",
    "Resume",
    "train",
    "MODES",
    "BACKENDS",
    "OPTIMIZERS",
    "LR_POLICIES",
    "DEFAULT_LR",
    "under_torchrun",
]
