"""What the three trainers share: the run configuration, one worker's workspace and nets,
evaluation, the per-epoch statistics, and the one-step trace.

A worker owns one :class:`~asyncnet.Workspace` holding its parameters (or views of shared
ones), its data blobs ``data``/``label``, and two nets created on the async_scheduling
executor: the train net (gradients, optional ``Allreduce``, update) and the eval net.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

import asyncnet as an
from asyncnet.errors import TrainConfigError, TrainingDivergedError
from asyncnet.train.report import EpochMetrics
from asyncnet.tensor.namespace import cpu_tensors, to_numpy

__all__ = ["MODELS", "TrainConfig", "Resume", "WorkerResult", "WorkerNets", "MODES", "BACKENDS", "OPTIMIZERS", "LR_POLICIES", "DEFAULT_LR"]

MODES = ("local", "sync", "hogwild")
MODELS = ("mlp", "cnn", "lstm", "dlrm")
BACKENDS = ("threads", "processes", "torch")
OPTIMIZERS = ("sgd", "momentum", "adam", "adagrad", "rwsadagrad")  # the last two: dlrm's tables
LR_POLICIES = ("fixed", "step", "exp")
#: The learning rate each optimizer gets when ``lr`` is not given: momentum 0.9 multiplies the
#: step by ~10 and Adam normalizes it, so one rate for all would diverge or crawl.
DEFAULT_LR = {"sgd": 0.2, "momentum": 0.05, "adam": 0.01, "adagrad": 0.05, "rwsadagrad": 0.05}
#: Each model's optimizer and learning rate when not given (chosen so that the defaults reach
#: the README's targets in 10 epochs); other optimizers of that model take :data:`DEFAULT_LR`.
MODEL_DEFAULTS = {"mlp": ("sgd", 0.2), "cnn": ("adam", 0.005), "lstm": ("adam", 0.01), "dlrm": ("sgd", 0.05)}
#: Hogwild's defaults where they differ: Adam's two moment arrays race (one worker's first
#: moment over another's near-zero second moment makes a huge step: seen on cnn, 1 run in 6),
#: so Hogwild trains with plain SGD, as in Niu et al. 2011.
HOGWILD_DEFAULTS = {"cnn": ("sgd", 0.1), "lstm": ("sgd", 0.5)}
#: Hogwild workers beyond this on the dense MLP read parameters many updates old: a warning.
HOGWILD_STALE_WORKERS = 8


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
    model: str = "mlp"  # mlp (hidden), cnn, lstm (the digits) or dlrm (its click log): asyncnet.model.zoo
    model_args: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the zoo model (dlrm's options)

    def __post_init__(self) -> None:
        _check(self.model in MODELS, f"model must be one of {', '.join(MODELS)}, got {self.model!r}")
        default_opt, default_lr = (HOGWILD_DEFAULTS if self.mode == "hogwild" else MODEL_DEFAULTS).get(
            self.model, MODEL_DEFAULTS.get(self.model, ("sgd", 0.2)))
        if self.optimizer is None:
            object.__setattr__(self, "optimizer", default_opt)
        _check(self.mode in MODES, f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        _check(isinstance(self.model_args, dict) and all(isinstance(k, str) for k in self.model_args),
               f"model_args must be an object of keyword arguments, got {self.model_args!r}")
        _check(not self.model_args or self.model == "dlrm", f"model_args are dlrm's options, not {self.model}'s")
        _check(self.optimizer not in ("adagrad", "rwsadagrad") or self.model == "dlrm",
               f"optimizer {self.optimizer} trains dlrm (its tables row by row), not {self.model}")
        _check(self.optimizer != "rwsadagrad" or self.mode != "sync",
               "optimizer rwsadagrad updates the tables from their sparse gradients: use mode local or hogwild "
               "(sync mode all-reduces dense table gradients)")
        # net_type None: with one executor thread, "straight" (same ops in net order, same bits,
        # cheapest per op) wherever nothing can overlap: local and Hogwild nets, and sync nets with
        # at most one all-reduce (decided when the nets are built); else "async_scheduling"
        if self.net_type is None and (self.net_threads > 1 or self.mode != "sync"):
            object.__setattr__(self, "net_type", "straight" if self.net_threads == 1 else "async_scheduling")
        _check(self.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        _check(self.optimizer in OPTIMIZERS, f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        _check(self.lr_policy in LR_POLICIES, f"lr_policy must be one of {', '.join(LR_POLICIES)}, got {self.lr_policy!r}")
        for name in ("workers", "epochs", "batch_size", "net_threads", "lr_step", "threads_per_rank"):
            v = getattr(self, name)
            _check(_is_int(v) and v >= 1, f"{name} must be an int >= 1, got {v!r}")
        _check(self.threads is None or (_is_int(self.threads) and self.threads >= 1),
               f"threads must be an int >= 1 or None, got {self.threads!r}")
        _check(_is_int(self.seed) and self.seed >= 0, f"seed must be an int >= 0, got {self.seed!r}")
        if self.lr is None:
            object.__setattr__(self, "lr", default_lr if self.optimizer == default_opt else DEFAULT_LR[self.optimizer])
        _check(_is_number(self.lr) and self.lr > 0, f"lr must be a positive number, got {self.lr!r}")
        _check(_is_number(self.momentum) and 0 <= self.momentum < 1, f"momentum must be in [0, 1), got {self.momentum!r}")
        _check(_is_number(self.weight_decay) and self.weight_decay >= 0,
               f"weight_decay must be a number >= 0, got {self.weight_decay!r}")
        _check(self.lr_gamma is None or (_is_number(self.lr_gamma) and 0 < self.lr_gamma <= 1),
               f"lr_gamma must be in (0, 1], got {self.lr_gamma!r}")
        _check(_is_number(self.timeout) and self.timeout > 0, f"timeout must be a positive number of seconds, got {self.timeout!r}")
        _check(self.target_accuracy is None or (_is_number(self.target_accuracy) and 0 < self.target_accuracy <= 1),
               f"target_accuracy must be in (0, 1], e.g. 0.95, got {self.target_accuracy!r}")
        _check(isinstance(self.hidden, (tuple, list)) and len(self.hidden) >= 1
               and all(_is_int(h) and h >= 1 for h in self.hidden),
               f"hidden must be one or more positive ints, got {self.hidden!r}")
        _check_tensor(self.tensor, self.device)
        _check(self.bucket_mb is None or (_is_number(self.bucket_mb) and self.bucket_mb > 0),
               f"bucket_mb must be a positive number of MiB or None, got {self.bucket_mb!r}")
        object.__setattr__(self, "hidden", tuple(self.hidden))
        _check(self.batch_size >= self.workers or self.mode == "local",
               f"batch_size ({self.batch_size}) must be at least the number of {self.mode} workers ({self.workers}): "
               "every worker needs one sample per step")
        if self.backend == "torch":
            _check(self.mode == "sync", f"backend torch trains in sync mode (one data-parallel worker per rank), "
                                        f"not {self.mode}: hogwild needs shared memory, local has one worker")

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
    def from_dict(cls, d: Any, where: str = "config") -> "TrainConfig":
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

    def with_(self, **changes: Any) -> "TrainConfig":
        return replace(self, **changes)

    def check_data(self, n_train: int) -> None:
        """The checks that need the data set size (``n_train`` training examples)."""
        _check(self.batch_size <= n_train,
               f"batch_size ({self.batch_size}) is larger than the training set ({n_train} examples): "
               f"use at most --batch-size {n_train}")
        if self.mode == "hogwild":
            _check(self.batch_size // self.workers >= 1,
                   f"hogwild with {self.workers} workers needs batch_size >= workers (each worker steps on "
                   f"batch_size / workers samples), got batch_size {self.batch_size}")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise TrainConfigError(message)


def click_figures(ds: Any, test_loss: float, test_auc: float) -> dict[str, float]:
    """The EpochMetrics fields of a click model (``test_auc`` not NaN): AUC, log loss (the eval
    net's mean binary cross entropy) and the ground truth's AUC; none for a classifier."""
    if math.isnan(test_auc):
        return {}
    return {"test_auc": float(test_auc), "test_log_loss": float(test_loss), "optimal_auc": ds.optimal_auc()}


def wants_checkpoints(reporter: Any) -> bool:
    """True when ``reporter`` saves the run every epoch (so the worker copies its arrays)."""
    return reporter is not None and getattr(reporter, "on_checkpoint", None) is not None


def diverged(cfg: TrainConfig, where: str, loss: float) -> TrainingDivergedError:
    """The error of a non-finite loss at ``where`` (e.g. "epoch 1, step 3 of worker 0")."""
    fix = f"lower the learning rate (lr {cfg.lr:g}, --lr)"
    if cfg.mode == "hogwild":
        fix += f" or the number of Hogwild workers ({cfg.workers}, --workers)"
    return TrainingDivergedError(f"training diverged: the loss is {loss} at {where}; {fix}")


@dataclass(frozen=True)
class Resume:
    """Where a resumed run starts: the checkpoint's arrays (parameters, optimizer state,
    ``iter``) and the epochs already trained (their metrics). Batches are a pure function of
    (seed, epoch), so epoch ``len(epochs) + 1`` sees the data it would have seen unbroken."""

    arrays: dict[str, np.ndarray]
    epochs: tuple[EpochMetrics, ...] = ()

    @property
    def start_epoch(self) -> int:
        """The last epoch already trained (0: none)."""
        return len(self.epochs)


def _check_tensor(tensor: str, device: str) -> None:
    """``tensor`` numpy|torch and ``device`` cpu|cuda|cuda:N, present here (one DeviceError line)."""
    from asyncnet.tensor.place import DeviceError, parse_device, require_device

    _check(tensor in ("numpy", "torch"), f"tensor must be numpy or torch, got {tensor!r}")
    try:
        name = parse_device(device)
        _check(name == "cpu" or tensor == "torch", f"device {name!r} needs tensor 'torch' (numpy arrays live on the cpu)")
        if name != "cpu":
            require_device(name)
    except DeviceError as e:  # a config error like the others: the command line shows it as one line
        raise TrainConfigError(str(e)) from None


@dataclass
class WorkerResult:
    """What a worker hands back: its epochs (rank 0 only has test figures), final parameters
    (rank 0), and the trace events of one training step (rank 0)."""

    worker_id: int
    epochs: list[EpochMetrics] = field(default_factory=list)
    params: dict[str, np.ndarray] | None = None
    trace_events: list[dict[str, Any]] | None = None
    steps: int = 0


def build_model(cfg: TrainConfig, input_dim: int, num_classes: int) -> Any:
    """The model of this run (same seed everywhere, so every replica starts equal): the
    :class:`~asyncnet.train.model.MLP`, or a :class:`~asyncnet.train.zoo_model.ZooModel`."""
    from asyncnet.train.model import MLP

    if cfg.model != "mlp":
        from asyncnet.train.zoo_model import ZooModel

        kw = {} if cfg.model == "dlrm" else {"num_classes": num_classes}
        lr_args = None
        if cfg.model == "dlrm":
            from asyncnet.model.zoo.dlrm import split_model_args

            kw, lr_args = split_model_args(cfg.model_args)
        return ZooModel(cfg.model, seed=cfg.seed, optimizer=cfg.optimizer, lr=cfg.lr, momentum=cfg.momentum,
                        lr_policy=cfg.lr_policy, lr_step=cfg.lr_step, lr_gamma=cfg.lr_gamma, lr_args=lr_args,
                        weight_decay=cfg.weight_decay, net_type=cfg.net_type or "async_scheduling", num_workers=cfg.net_threads, **kw)

    return MLP(input_dim, hidden=tuple(cfg.hidden), num_classes=num_classes, seed=cfg.seed, optimizer=cfg.optimizer,
               lr=cfg.lr, momentum=cfg.momentum, lr_policy=cfg.lr_policy, lr_step=cfg.lr_step, lr_gamma=cfg.lr_gamma,
               weight_decay=cfg.weight_decay, net_type=cfg.net_type or "async_scheduling", num_workers=cfg.net_threads)


def _private_pool(net: Any) -> Any:
    """The net's definition with a pool of its own: workers of one process must not share
    executor threads, or one worker's blocked ``Allreduce`` could hold the thread a peer's
    ``Allreduce`` needs."""
    net_def = net.to_def()
    net_def.own_pool = True
    return net_def


def _tensor_placer(cfg: TrainConfig, ws: Any, blobs: list[str]) -> Any:
    """With ``cfg.tensor == "torch"``: moves the params and optimizer state in ``ws`` to torch
    tensors on ``cfg.device`` (on the CPU sharing the numpy arrays' memory, so Hogwild's shared
    parameters stay shared; ``iter`` stays a host counter, as in Caffe2) and returns the function
    that places each batch; with numpy, the identity."""
    if cfg.tensor == "numpy":
        return lambda a: a
    import torch

    device = torch.device(cfg.device)
    for name in blobs:
        if name != "iter":
            ws.feed(name, ws.fetch(name), device=cfg.device, library="torch")
    if device.type == "cpu":
        return torch.from_numpy
    return lambda a: torch.from_numpy(a).to(device, non_blocking=True)


def _host_view(x: Any) -> np.ndarray:
    """A blob as a numpy array to read at once: numpy arrays as they are, torch CPU tensors as a
    view of their memory (no copy), others copied to the host."""
    if type(x) is np.ndarray:
        return x
    return x.numpy() if cpu_tensors(x) else to_numpy(x)


class WorkerNets:
    """One worker's workspace, with its train and eval nets created.

    ``shared`` maps blob names to arrays that must be used as they are (Hogwild: the same
    arrays in every worker, updated in place); without it, the init net makes fresh ones.
    """

    def __init__(self, cfg: TrainConfig, model: Any, *, sync: Any = None, shared: dict[str, Any] | None = None,
                 iter_op: str = "Iter", mutex: Any = None, feeds: Any = None):
        from asyncnet.tensor.threads import claim_threads

        self.cfg = cfg
        self.model = model
        self._feeds = feeds  # Dataset.feeds (examples -> blobs) of a click log; None: "data" and "label"
        self._binary = getattr(model, "binary", False)
        self.ws = an.Workspace()
        if shared is None:
            self.ws.run_net_once(model.init_net)
        else:
            for k, v in shared.items():
                self.ws.feed(k, v)
        sync_blob = None
        if sync is not None and getattr(sync, "num_workers", 1) > 1:
            sync_blob = "gradient_sync"
            self.ws.feed(sync_blob, sync)
        mutex_blob = None
        if mutex is not None:
            mutex_blob = "iter_mutex"
            self.ws.feed(mutex_blob, mutex)
        train = _private_pool(model.train_net("train", sync_blob=sync_blob, iter_op=iter_op, mutex_blob=mutex_blob,
                                                bucket_mb=cfg.bucket_mb))
        # Train accuracy is read off the softmax in step(): an Accuracy op would be a side branch
        # that the executor hands to a pool thread, which then competes for a core with the
        # other workers' kernels while every worker waits for the slowest at the Allreduce.
        train.ops = [op for op in train.ops if op.type != "Accuracy"]
        self._to_tensor = _tensor_placer(cfg, self.ws, model.checkpoint_blobs)
        evaluate = _private_pool(model.forward_net("eval"))
        if cfg.net_type is None and sum(op.type in ("Allreduce", "AllreduceStart") for op in train.ops) <= 1:
            train.type = evaluate.type = "straight"  # one all-reduce at the end: nothing to overlap it with
        self.train_net = self.ws.create_net(train)
        self.eval_net = self.ws.create_net(evaluate)
        # released in close(); an automatic share is a ceiling the user's environment may lower
        self._threads = claim_threads(threads=cfg.threads) if cfg.threads else claim_threads(at_most=cfg.intra_op_threads())

    def step(self, xb: np.ndarray, yb: np.ndarray) -> tuple[float, float]:
        """One training step on this batch; returns its (loss, accuracy)."""
        ws, to = self.ws, self._to_tensor
        if self._feeds is None:
            ws.feed("data", to(xb))
            ws.feed("label", to(yb))
        else:
            for name, value in self._feeds(xb, yb).items():
                ws.feed(name, to(value))
        self.train_net.run()  # no timeout: this thread runs the chains itself; syncs have their own
        return float(ws.fetch("loss")), self._accuracy(yb)  # float() of a 0-d array or tensor, no host copy

    def _accuracy(self, y: np.ndarray) -> float:
        if self._binary:  # a click predicted when its probability is above one half
            return float(np.mean((self.ws.fetch("prob", host=True)[:, 0] > 0.5) == (y > 0)))
        p = self.ws.fetch("softmax")
        # argmax takes the first of tied scores, as the Accuracy op does; the count over the
        # length is np.mean's value (an exact sum of 0s and 1s, one division) at a third of its cost
        return np.count_nonzero((p if type(p) is np.ndarray else _host_view(p)).argmax(axis=1) == y) / len(y)

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
        """(loss, accuracy, AUC) of the current parameters on ``x, y``; the AUC of a click model
        (of ``prob``), NaN for a classifier."""
        for name, value in (self._feeds(x, y) if self._feeds else {"data": x, "label": y}).items():
            self.ws.feed(name, self._to_tensor(value))
        self.eval_net.run()
        loss = float(self.ws.fetch("loss", host=True))
        if not self._binary:
            return loss, float(self.ws.fetch("accuracy", host=True)), math.nan
        from asyncnet.model.zoo.dlrm import auc

        return loss, self._accuracy(y), auc(y, self.ws.fetch("prob", host=True))

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Overwrite this worker's parameters, optimizer state and ``iter`` in place (shared
        Hogwild arrays stay shared)."""
        from asyncnet.tensor.namespace import namespace

        for name in self.model.checkpoint_blobs:
            dst = self.ws.fetch(name)  # a numpy array or (--tensor torch) a torch tensor
            namespace(None, dst).copyto(dst, arrays[name])

    def iteration(self) -> int:
        """The step counter ``iter``."""
        return int(self.ws.fetch("iter")[0])

    def lr(self) -> float:
        """The learning rate of the last step (the base rate before the first)."""
        return float(np.asarray(self.ws.fetch("lr"))) if self.ws.has("lr") else float(self.cfg.lr)

    def params(self) -> dict[str, np.ndarray]:
        """Copies of what a checkpoint holds: parameters, optimizer state and ``iter``."""
        return {p: np.array(self.ws.fetch(p, host=True), copy=True) for p in self.model.checkpoint_blobs}

    def traced_step(self, xb: np.ndarray, yb: np.ndarray, worker: int = 0) -> tuple[tuple[float, float], list[dict[str, Any]]]:
        """One training step with per-op timings recorded; returns its figures and the
        Chrome-trace events (plain dicts, so they travel back from worker processes) of process
        ``worker + 1`` named "worker N", in absolute times for :func:`merge_chrome_traces`."""
        from asyncnet.exec.trace import chrome_trace, profile

        with profile(self.train_net) as timeline:
            out = self.step(xb, yb)
        return out, chrome_trace(timeline.events, origin=0.0, pid=worker + 1, process_name=f"worker {worker}")["traceEvents"]

    def close(self) -> None:
        self.ws.reset()
        self._threads.release()


def write_trace(traces: list[list[dict[str, Any]]], path: str | Path) -> Path:
    """Write the workers' traced steps (one list of events per worker, from
    :meth:`WorkerNets.traced_step`) as one Chrome-trace JSON (Perfetto or chrome://tracing)."""
    from asyncnet._atomicio import atomic_write_text
    from asyncnet.exec.trace import merge_chrome_traces

    atomic_write_text(path, json.dumps(merge_chrome_traces(traces)) + "\n")
    return Path(path)


class EpochClock:
    """Accumulates one epoch's training time and batch statistics of this worker."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.loss_sum = 0.0
        self.acc_sum = 0.0
        self.batches = 0
        self.samples = 0
        self._t = 0.0

    def start(self) -> None:
        self._t = time.perf_counter()

    def stop(self) -> None:
        self.seconds += time.perf_counter() - self._t

    def add(self, loss: float, acc: float, samples: int) -> None:
        self.loss_sum += loss
        self.acc_sum += acc
        self.batches += 1
        self.samples += samples

    def stats(self) -> np.ndarray:
        """[loss_sum, acc_sum, batches, samples] as float64, for a cross-worker mean."""
        return np.array([self.loss_sum, self.acc_sum, self.batches, self.samples], np.float64)
