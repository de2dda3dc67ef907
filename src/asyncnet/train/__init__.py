"""Training: any model built with :class:`~asyncnet.model.ModelHelper` (a zoo model or a user's)
on any data, local, data-parallel (sync) or Hogwild, on threads, processes or torchrun.

    >>> from asyncnet.train import train, TrainConfig
    >>> result = train("mlp", epochs=1, workers=2)                          # doctest: +SKIP
    >>> result.history.final.test_accuracy > 0.8                          # doctest: +SKIP
    True

Layout: :mod:`~asyncnet.train.config` (TrainConfig), :mod:`~asyncnet.train.program` (a model ->
its nets), :mod:`~asyncnet.train.worker`, :mod:`~asyncnet.train.loop` (the one epoch loop, its
strategies and launchers), :mod:`~asyncnet.train.data`, :mod:`~asyncnet.train.report`,
:mod:`~asyncnet.train.api` (train(), TrainResult). Messages go to the ``asyncnet.train`` logger.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from asyncnet.errors import CheckpointError, TrainConfigError, TrainingDivergedError
from asyncnet.train.api import TrainResult, train
from asyncnet.train.config import TrainConfig
from asyncnet.train.loop import Resume
from asyncnet.train.program import Program

__all__ = [
    "train",
    "TrainConfig",
    "TrainResult",
    "Resume",
    "Program",
    "MLP",
    "CheckpointError",
    "TrainConfigError",
    "TrainingDivergedError",
]


def MLP(
    input_dim: int,
    hidden: Sequence[int] = (64,),
    num_classes: int = 10,
    seed: int = 0,
    optimizer: str = "sgd",
    lr: float = 0.1,
    momentum: float = 0.9,
    lr_policy: str = "fixed",
    lr_step: int = 1000,
    lr_gamma: float | None = None,
    weight_decay: float = 0.0,
    dtype: Any = np.float32,
    net_type: str = "simple",
    num_workers: int | None = None,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> Program:
    """Deprecated: the zoo mlp as a :class:`Program`; use
    ``Program(asyncnet.model.zoo.mlp(input_dim, hidden, num_classes), optimizer=...)``."""
    from asyncnet.train.program import mlp_program

    warnings.warn(
        "asyncnet.train.MLP is deprecated: use asyncnet.train.Program(asyncnet.model.zoo.mlp(...), optimizer=...)",
        DeprecationWarning,
        stacklevel=2,
    )
    return mlp_program(
        input_dim,
        hidden,
        num_classes,
        seed=seed,
        dtype=dtype,
        net_type=net_type,
        num_workers=num_workers,
        optimizer=optimizer,
        lr=lr,
        momentum=momentum,
        lr_policy=lr_policy,
        lr_step=lr_step,
        lr_gamma=lr_gamma,
        weight_decay=weight_decay,
        betas=betas,
        eps=eps,
    )
