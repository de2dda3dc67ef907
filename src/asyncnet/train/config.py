"""A training run's settings: :class:`TrainConfig`, its defaults and its validation.

>>> TrainConfig(model="cnn").optimizer, TrainConfig(model="cnn").lr
('adam', 0.005)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from asyncnet.errors import TrainConfigError
from asyncnet.model.optimizer import LR_POLICIES, OPTIMIZERS

__all__ = [
    "TrainConfig",
    "MODES",
    "MODELS",
    "BACKENDS",
    "OPTIMIZERS",
    "LR_POLICIES",
    "DEFAULT_LR",
    "MODEL_DEFAULTS",
    "HOGWILD_DEFAULTS",
    "HOGWILD_STALE_WORKERS",
    "DIVERGENCE_FACTOR",
    "is_model_spec",
]

MODES = ("local", "sync", "hogwild")
MODELS = ("mlp", "cnn", "lstm", "dlrm")  # the zoo; a user's model is "module:function" or "file.py:function"
BACKENDS = ("threads", "processes", "torch")
#: The learning rate each optimizer gets when ``lr`` is not given: momentum 0.9 multiplies the
#: step by ~10 and Adam normalizes it, so one rate for all would diverge or crawl.
DEFAULT_LR = {"sgd": 0.2, "momentum": 0.05, "adagrad": 0.05, "adam": 0.01, "rwsadagrad": 0.05}
#: Each model's optimizer and learning rate when not given (chosen so that the defaults reach
#: the README's targets in 10 epochs); other optimizers of that model take :data:`DEFAULT_LR`.
MODEL_DEFAULTS = {"mlp": ("sgd", 0.2), "cnn": ("adam", 0.005), "lstm": ("adam", 0.01), "dlrm": ("sgd", 0.05)}
#: Hogwild's defaults where they differ: Adam's two moment arrays race (one worker's first
#: moment over another's near-zero second moment makes a huge step: seen on cnn, 1 run in 6),
#: so Hogwild trains with plain SGD, as in Niu et al. 2011.
HOGWILD_DEFAULTS = {"cnn": ("sgd", 0.1), "lstm": ("sgd", 0.5)}
#: Hogwild workers beyond this on the dense MLP read parameters many updates old: a warning.
HOGWILD_STALE_WORKERS = 8


#: A run fails as diverged when a step's loss exceeds this factor times its reference: log(classes)
#: for a classifier (its loss at chance), else the first step's loss. 0 turns the check off
#: (NaN and inf still fail the run).
DIVERGENCE_FACTOR = 100.0


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a run; plain data, so it pickles into worker processes and
    round-trips through the ``config`` block of metrics.json (:meth:`to_dict`, :meth:`from_dict`).

    ``batch_size`` is the global batch of one step: sync mode splits it over the workers,
    Hogwild gives each worker steps of ``batch_size / workers`` samples from its own part of
    the data. ``lr=None`` picks the optimizer's default (:data:`DEFAULT_LR`); ``lr_gamma=None``
    the policy's (0.1 for step, 0.999 for exp).
    ``target_accuracy`` stops the run (through the shared stop flag) at the end of the first
    epoch whose test accuracy reaches it. Every check raises :class:`TrainConfigError`:

        >>> TrainConfig(optimizer="momentum").lr
        0.05
        >>> TrainConfig(workers=0)
        Traceback (most recent call last):
        ...
        asyncnet.errors.TrainConfigError: workers must be an int >= 1, got 0
    """

    mode: str = "sync"
    workers: int = 2
    backend: str = "threads"
    epochs: int = 10
    batch_size: int = 32
    lr: float | None = None
    optimizer: str | None = None  # None: the model's (MODEL_DEFAULTS)
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_policy: str = "fixed"
    lr_step: int = 1000
    lr_gamma: float | None = None
    hidden: tuple[int, ...] = (128,)
    seed: int = 0
    net_type: str | None = None  # None: the cheapest executor with the same bits (see __post_init__)
    net_threads: int = 1
    threads: int | None = None
    timeout: float = 120.0
    target_accuracy: float | None = None
    trace: bool = True
    tensor: str = "numpy"
    device: str = "cpu"
    bucket_mb: float | None = 25.0  # gradient buckets overlapped with the backward pass; None: one Allreduce
    threads_per_rank: int = 1  # backend "torch": W worker threads per rank (workers = W x ranks)
    model: str = "mlp"  # mlp (hidden), cnn, lstm (the digits), dlrm (its click log), or "module:function"
    checkpoint_every: int | None = None  # steps between checkpoints inside an epoch (sync/local); None: epoch ends
    divergence_factor: float = DIVERGENCE_FACTOR  # 0: only NaN/inf fail the run (see DIVERGENCE_FACTOR)
    model_args: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the zoo model (dlrm's options)

    def __post_init__(self) -> None:
        _check(
            isinstance(self.model, str) and (self.model in MODELS or is_model_spec(self.model)),
            f"model must be one of {', '.join(MODELS)}, got {self.model!r}; a model of yours is a function "
            "building a ModelHelper: 'my_module:build' or 'path/to/file.py:build'",
        )
        default_opt, default_lr = (HOGWILD_DEFAULTS if self.mode == "hogwild" else MODEL_DEFAULTS).get(
            self.model, MODEL_DEFAULTS.get(self.model, ("sgd", 0.2))
        )
        if self.optimizer is None:
            object.__setattr__(self, "optimizer", default_opt)
        _check(self.mode in MODES, f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        # net_type None: with one executor thread, "straight" (same ops in net order, same bits,
        # cheapest per op) wherever nothing can overlap: local and Hogwild nets, and sync nets with
        # at most one all-reduce (decided when the nets are built); else "async_scheduling"
        if self.net_type is None and (self.net_threads > 1 or self.mode != "sync"):
            object.__setattr__(self, "net_type", "straight" if self.net_threads == 1 else "async_scheduling")
        _check(self.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        _check(
            self.optimizer in OPTIMIZERS, f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"
        )
        _check(
            isinstance(self.model_args, dict) and all(isinstance(k, str) for k in self.model_args),
            f"model_args must be an object of keyword arguments, got {self.model_args!r}",
        )
        _check(not self.model_args or self.model == "dlrm", f"model_args are dlrm's options, not {self.model}'s")
        _check(
            self.optimizer != "rwsadagrad" or self.model == "dlrm",
            f"optimizer rwsadagrad trains dlrm's tables row by row, not {self.model}",
        )
        _check(
            self.lr_policy in LR_POLICIES, f"lr_policy must be one of {', '.join(LR_POLICIES)}, got {self.lr_policy!r}"
        )
        for name in ("workers", "epochs", "batch_size", "net_threads", "lr_step", "threads_per_rank"):
            v = getattr(self, name)
            _check(_is_int(v) and v >= 1, f"{name} must be an int >= 1, got {v!r}")
        _check(
            self.threads is None or (_is_int(self.threads) and self.threads >= 1),
            f"threads must be an int >= 1 or None, got {self.threads!r}",
        )
        _check(_is_int(self.seed) and self.seed >= 0, f"seed must be an int >= 0, got {self.seed!r}")
        if self.lr is None:
            object.__setattr__(self, "lr", default_lr if self.optimizer == default_opt else DEFAULT_LR[self.optimizer])
        _check(_is_number(self.lr) and self.lr > 0, f"lr must be a positive number, got {self.lr!r}")
        _check(
            _is_number(self.momentum) and 0 <= self.momentum < 1, f"momentum must be in [0, 1), got {self.momentum!r}"
        )
        _check(
            _is_number(self.weight_decay) and self.weight_decay >= 0,
            f"weight_decay must be a number >= 0, got {self.weight_decay!r}",
        )
        _check(
            self.lr_gamma is None or (_is_number(self.lr_gamma) and 0 < self.lr_gamma <= 1),
            f"lr_gamma must be in (0, 1], got {self.lr_gamma!r}",
        )
        _check(
            _is_number(self.timeout) and self.timeout > 0,
            f"timeout must be a positive number of seconds, got {self.timeout!r}",
        )
        _check(
            self.target_accuracy is None or (_is_number(self.target_accuracy) and 0 < self.target_accuracy <= 1),
            f"target_accuracy must be in (0, 1], e.g. 0.95, got {self.target_accuracy!r}",
        )
        _check(
            isinstance(self.hidden, (tuple, list))
            and len(self.hidden) >= 1
            and all(_is_int(h) and h >= 1 for h in self.hidden),
            f"hidden must be one or more positive ints, got {self.hidden!r}",
        )
        _check_tensor(self.tensor, self.device)
        _check(
            self.checkpoint_every is None or (_is_int(self.checkpoint_every) and self.checkpoint_every >= 1),
            f"checkpoint_every must be an int >= 1 (steps) or None, got {self.checkpoint_every!r}",
        )
        _check(
            self.checkpoint_every is None or self.mode != "hogwild",
            "checkpoint_every saves inside an epoch in sync and local modes; hogwild workers never hold still "
            "inside one: its checkpoints come at each epoch's end",
        )
        _check(
            _is_number(self.divergence_factor) and (self.divergence_factor == 0 or self.divergence_factor > 1),
            f"divergence_factor must be 0 (off) or a number > 1, got {self.divergence_factor!r}",
        )
        _check(
            self.bucket_mb is None or (_is_number(self.bucket_mb) and self.bucket_mb > 0),
            f"bucket_mb must be a positive number of MiB or None, got {self.bucket_mb!r}",
        )
        object.__setattr__(self, "hidden", tuple(self.hidden))
        _check(
            self.batch_size >= self.workers or self.mode == "local",
            f"batch_size ({self.batch_size}) must be at least the number of {self.mode} workers ({self.workers}): "
            "every worker needs one sample per step",
        )
        if self.backend == "torch":
            _check(
                self.mode == "sync",
                f"backend torch trains in sync mode (one data-parallel worker per rank), "
                f"not {self.mode}: hogwild needs shared memory, local has one worker",
            )

    @property
    def num_workers(self) -> int:
        """Workers actually used: local mode always has one."""
        return 1 if self.mode == "local" else self.workers

    def intra_op_threads(self) -> int:
        """BLAS/torch threads per kernel: ``threads`` if set, else this host's cores shared out
        so that workers x executor threads x intra-op threads <= cores (a torchrun rank's
        cores are already its share of the host: :func:`asyncnet.tensor.threads.process_cores`)."""
        if self.threads is not None:
            return self.threads
        from asyncnet.tensor.threads import process_cores

        on_host = 1 if self.backend == "torch" else self.num_workers
        return max(1, process_cores() // (on_host * self.net_threads))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        d["num_workers"] = self.num_workers
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "config") -> TrainConfig:
        """The config of ``d`` (the shape :meth:`to_dict` writes; ``num_workers`` is derived and
        ignored). Unknown keys and bad values raise :class:`TrainConfigError` naming ``where``."""
        if not isinstance(d, dict):
            raise TrainConfigError(f"{where}: expected a JSON object of training settings, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in d if k not in known and k != "num_workers")
        if unknown:
            raise TrainConfigError(f"{where}: unknown setting(s) {unknown}; known: {sorted(known)}")
        kwargs = {k: v for k, v in d.items() if k in known}
        if isinstance(kwargs.get("hidden"), list):
            kwargs["hidden"] = tuple(kwargs["hidden"])
        try:
            return cls(**kwargs)
        except TrainConfigError as e:
            raise TrainConfigError(f"{where}: {e}") from None

    def with_(self, **changes: Any) -> TrainConfig:
        return replace(self, **changes)

    def check_data(self, n_train: int) -> None:
        """The checks that need the data set size (``n_train`` training examples)."""
        _check(
            self.batch_size <= n_train,
            f"batch_size ({self.batch_size}) is larger than the training set ({n_train} examples): "
            f"use at most --batch-size {n_train}",
        )
        if self.mode == "hogwild":
            _check(
                self.batch_size // self.workers >= 1,
                f"hogwild with {self.workers} workers needs batch_size >= workers (each worker steps on "
                f"batch_size / workers samples), got batch_size {self.batch_size}",
            )


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise TrainConfigError(message)


def _check_tensor(tensor: str, device: str) -> None:
    """``tensor`` numpy|torch and ``device`` cpu|cuda|cuda:N, present here (one DeviceError line)."""
    from asyncnet.tensor.place import DeviceError, parse_device, require_device

    _check(tensor in ("numpy", "torch"), f"tensor must be numpy or torch, got {tensor!r}")
    try:
        name = parse_device(device)
        _check(
            name == "cpu" or tensor == "torch", f"device {name!r} needs tensor 'torch' (numpy arrays live on the cpu)"
        )
        if name != "cpu":
            require_device(name)
    except DeviceError as e:  # a config error like the others: the command line shows it as one line
        raise TrainConfigError(str(e)) from None


def is_model_spec(text: str) -> bool:
    """True for ``module:function`` or ``path/to/file.py:function`` (a user's model builder).

    >>> is_model_spec("my_models:tiny"), is_model_spec("cnn")
    (True, False)
    """
    where, sep, fn = text.rpartition(":")
    return bool(sep and where and fn.isidentifier())
