"""One worker: its workspace, its train and eval nets (created from a
:class:`~asyncnet.train.program.Program`), a step, an evaluation, and its epoch's statistics.

A worker owns one :class:`~asyncnet.Workspace` holding its parameters (or views of shared
ones) and its batch blobs, and two nets, each with an executor pool of its own: the train net
(gradients, optional all-reduce, update) and the eval net, whose blobs are named apart
(``eval/loss``) so that evaluating leaves the train net's ``loss`` as it is. The executor is
``cfg.net_type``: by default "straight" (the ops in net order: the same bits, cheapest per op)
wherever nothing can overlap, else "async_scheduling".

Random ops: every training-mode Dropout of worker ``rank`` gets the seed
:func:`dropout_seed` (the run's seed, or the op's own, mixed with the rank and the op's place),
as DDP users seed each rank: replicas draw different masks, and a run draws the same ones
every time. Their generators' states (:meth:`WorkerNets.random_states`) go into the
checkpoint, so that a resumed run continues their sequences.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import asyncnet as an
from asyncnet.tensor.namespace import cpu_tensors, to_numpy
from asyncnet.train.config import TrainConfig
from asyncnet.train.program import EVAL_PREFIX
from asyncnet.train.report import EpochMetrics

__all__ = ["WorkerNets", "WorkerResult", "EpochClock", "dropout_seed", "STATE_WORDS"]


@dataclass
class WorkerResult:
    """What a worker hands back: its epochs (rank 0 only has test figures), final parameters
    (rank 0), and the trace events of one training step (rank 0)."""

    worker_id: int
    epochs: list[EpochMetrics] = field(default_factory=list)
    params: dict[str, np.ndarray] | None = None
    trace_events: list[dict[str, Any]] | None = None
    steps: int = 0
    random_states: np.ndarray | None = None  # rank 0: every worker's generators at the end (uint64)


def _private_pool(net: Any) -> Any:
    """The net's definition with a pool of its own: workers of one process must not share
    executor threads, or one worker's blocked ``Allreduce`` could hold the thread a peer's
    ``Allreduce`` needs."""
    net_def = net.to_def()
    net_def.own_pool = True
    return net_def


def dropout_seed(seed: int, rank: int, index: int) -> int:
    """The seed of the ``index``-th training-mode Dropout of worker ``rank``: 63 bits of
    ``np.random.SeedSequence([seed, rank, index])`` (``seed``: the op's own when it has one,
    else the run's). A pure function, so a run repeats its masks; distinct across ranks.

        >>> dropout_seed(0, 0, 0) == dropout_seed(0, 0, 0) != dropout_seed(0, 1, 0)
        True
    """
    return int(
        np.random.SeedSequence([int(seed), int(rank), int(index)]).generate_state(1, np.uint64)[0] >> np.uint64(1)
    )


def _seed_random_ops(net_def: Any, seed: int, rank: int) -> None:
    """Give every training-mode Dropout of ``net_def`` its :func:`dropout_seed`."""
    import dataclasses

    k = 0
    for i, op in enumerate(net_def.ops):
        if op.type == "Dropout" and not op.args.get("is_test"):
            own = op.args.get("seed", -1)
            net_def.ops[i] = dataclasses.replace(
                op, args={**op.args, "seed": dropout_seed(own if own >= 0 else seed, rank, k)}
            )
            k += 1


#: uint64 words of one generator's state (PCG64: state and increment, 128 bits each, and the
#: buffered 32-bit draw)
STATE_WORDS = 6
_LOW = (1 << 64) - 1


def _encode(state: dict[str, Any]) -> list[int]:
    if state.get("bit_generator") != "PCG64":
        raise ValueError(f"expected a PCG64 generator, got {state.get('bit_generator')!r}")
    s, inc = state["state"]["state"], state["state"]["inc"]
    return [s >> 64, s & _LOW, inc >> 64, inc & _LOW, int(state["has_uint32"]), int(state["uinteger"])]


def _decode(words: np.ndarray) -> dict[str, Any]:
    w = [int(x) for x in words]
    return {
        "bit_generator": "PCG64",
        "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
        "has_uint32": w[4],
        "uinteger": w[5],
    }


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
        from asyncnet.tensor.route import fed_tensor

        return fed_tensor  # torch.from_numpy, the array kept for the net's numpy kernels
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

    def __init__(
        self,
        cfg: TrainConfig,
        model: Any,
        *,
        sync: Any = None,
        shared: dict[str, Any] | None = None,
        iter_op: str = "Iter",
        mutex: Any = None,
        feeds: Any = None,
        rank: int = 0,
    ):
        from asyncnet.tensor.threads import claim_threads

        self.cfg = cfg
        self.model = model
        # Dataset.feeds (examples -> blobs) of a click log; else x and y go to the model's input and label
        self._feeds = feeds if feeds is not None else batch_feeds(model)
        self._binary = model.binary
        self._loss, self._scores, self._acc = model.model.loss, model.scores, model.accuracy
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
        train = _private_pool(
            model.train_net(
                "train", sync_blob=sync_blob, iter_op=iter_op, mutex_blob=mutex_blob, bucket_mb=cfg.bucket_mb
            )
        )
        # Train accuracy is read off the softmax in step(): an Accuracy op would be a side branch
        # that the executor hands to a pool thread, which then competes for a core with the
        # other workers' kernels while every worker waits for the slowest at the Allreduce.
        train.ops = [op for op in train.ops if op.type != "Accuracy"]
        _seed_random_ops(train, cfg.seed, rank)
        self._to_tensor = _tensor_placer(cfg, self.ws, model.checkpoint_blobs)
        evaluate = _private_pool(model.eval_net("eval"))
        if cfg.net_type is None and sum(op.type in ("Allreduce", "AllreduceStart") for op in train.ops) <= 1:
            train.type = evaluate.type = "straight"  # one all-reduce at the end: nothing to overlap it with
        self.train_net = self.ws.create_net(train)
        self.eval_net = self.ws.create_net(evaluate)
        self._random_ops = sorted(
            (op for op in self.train_net.operators if op.type == "Dropout" and not op.ctx.args.get("is_test")),
            key=lambda op: op.index,
        )
        # released in close(); an automatic share is a ceiling the user's environment may lower
        self._threads = (
            claim_threads(threads=cfg.threads) if cfg.threads else claim_threads(at_most=cfg.intra_op_threads())
        )

    def step(self, xb: np.ndarray, yb: np.ndarray) -> tuple[float, float]:
        """One training step on this batch; returns its (loss, accuracy)."""
        ws, to = self.ws, self._to_tensor
        for name, value in self._feeds(xb, yb).items():
            ws.feed(name, to(value))
        self.train_net.run()  # no timeout: this thread runs the chains itself; syncs have their own
        return float(ws.fetch(self._loss)), self._accuracy(yb)  # float() of a 0-d array or tensor, no host copy

    def _accuracy(self, y: np.ndarray, prefix: str = "") -> float:
        if self._binary:  # a click predicted when its probability is above one half
            return float(np.mean((self.ws.fetch(prefix + self._scores, host=True)[:, 0] > 0.5) == (y > 0)))
        p = self.ws.fetch(prefix + self._scores)
        # argmax takes the first of tied scores, as the Accuracy op does; the count over the
        # length is np.mean's value (an exact sum of 0s and 1s, one division) at a third of its cost
        return np.count_nonzero((p if type(p) is np.ndarray else _host_view(p)).argmax(axis=1) == y) / len(y)

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
        """(loss, accuracy, AUC) of the current parameters on ``x, y``; the AUC of a click model
        (of ``prob``), NaN for a classifier."""
        for name, value in self._feeds(x, y).items():
            self.ws.feed(name, self._to_tensor(value))
        self.eval_net.run()
        loss = float(self.ws.fetch(EVAL_PREFIX + self._loss, host=True))
        if not self._binary:
            acc = (
                float(self.ws.fetch(EVAL_PREFIX + self._acc, host=True))
                if self._acc is not None
                else self._accuracy(y, EVAL_PREFIX)
            )
            return loss, acc, math.nan
        from asyncnet.model.zoo.dlrm import auc

        return loss, self._accuracy(y, EVAL_PREFIX), auc(y, self.ws.fetch(EVAL_PREFIX + self._scores, host=True))

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Overwrite this worker's parameters, optimizer state and ``iter`` in place (shared
        Hogwild arrays stay shared)."""
        from asyncnet.tensor.namespace import namespace

        for name in self.model.checkpoint_blobs:
            dst = self.ws.fetch(name)  # a numpy array or (--tensor torch) a torch tensor
            namespace(None, dst).copyto(dst, arrays[name])

    @property
    def random_ops(self) -> int:
        """How many ops of the train net draw random numbers (its training-mode Dropouts)."""
        return len(self._random_ops)

    def random_states(self) -> np.ndarray:
        """The states of the train net's random generators, uint64 [ops, :data:`STATE_WORDS`]."""
        from asyncnet.ops.norm import dropout_generator

        return np.array(
            [_encode(dropout_generator(op.ctx).bit_generator.state) for op in self._random_ops], np.uint64
        ).reshape(len(self._random_ops), STATE_WORDS)

    def set_random_states(self, states: np.ndarray) -> None:
        """Continue the generators from ``states`` (as :meth:`random_states` returned them)."""
        from asyncnet.ops.norm import dropout_generator

        for op, words in zip(self._random_ops, states, strict=True):
            dropout_generator(op.ctx).bit_generator.state = _decode(words)

    def iteration(self) -> int:
        """The step counter ``iter``."""
        return int(self.ws.fetch("iter")[0])

    def lr(self) -> float:
        """The learning rate of the last step (the base rate before the first)."""
        return float(np.asarray(self.ws.fetch("lr"))) if self.ws.has("lr") else float(self.cfg.lr)

    def params(self) -> dict[str, np.ndarray]:
        """Copies of what a checkpoint holds: parameters, optimizer state and ``iter``."""
        return {p: np.array(self.ws.fetch(p, host=True), copy=True) for p in self.model.checkpoint_blobs}

    def traced_step(
        self, xb: np.ndarray, yb: np.ndarray, worker: int = 0
    ) -> tuple[tuple[float, float], list[dict[str, Any]]]:
        """One training step with per-op timings recorded; returns its figures and the
        Chrome-trace events (plain dicts, so they travel back from worker processes) of process
        ``worker + 1`` named "worker N", in absolute times for :func:`merge_chrome_traces`."""
        from asyncnet.exec.trace import chrome_trace, profile

        with profile(self.train_net) as timeline:
            out = self.step(xb, yb)
        return out, chrome_trace(timeline.events, origin=0.0, pid=worker + 1, process_name=f"worker {worker}")[
            "traceEvents"
        ]

    def close(self) -> None:
        self.ws.reset()
        self._threads.release()


def batch_feeds(program: Any) -> Any:
    """The function placing a batch ``(x, y)`` in a model's blobs: ``x`` to its one input
    (``data`` in the zoo), ``y`` to its one label (``label``)."""
    inputs, labels = program.inputs, program.labels
    if len(inputs) != 1 or len(labels) != 1:
        from asyncnet.errors import TrainConfigError

        raise TrainConfigError(
            f"model {program.name!r} reads inputs {inputs} and labels {labels}: a batch feeds one "
            "array x and one array y, so the model needs exactly one of each"
        )
    data, label = inputs[0], labels[0]
    return lambda x, y: {data: x, label: y}


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

    def figures(self) -> np.ndarray:
        """[loss_sum, acc_sum, batches, samples, seconds] as float64 (exact for the counts)."""
        return np.array([self.loss_sum, self.acc_sum, self.batches, self.samples, self.seconds], np.float64)

    @classmethod
    def from_figures(cls, figures: np.ndarray) -> EpochClock:
        clock = cls()
        clock.loss_sum, clock.acc_sum, clock.seconds = float(figures[0]), float(figures[1]), float(figures[4])
        clock.batches, clock.samples = int(figures[2]), int(figures[3])
        return clock

    def state(self) -> dict[str, Any]:
        """This clock as JSON data (a checkpoint inside an epoch keeps it)."""
        return {
            "loss_sum": self.loss_sum,
            "acc_sum": self.acc_sum,
            "batches": self.batches,
            "samples": self.samples,
            "seconds": self.seconds,
        }

    @classmethod
    def restored(cls, state: dict[str, Any]) -> EpochClock:
        """The clock :meth:`state` described."""
        return cls.from_figures(
            np.array(
                [state["loss_sum"], state["acc_sum"], state["batches"], state["samples"], state["seconds"]], np.float64
            )
        )

    def stats(self) -> np.ndarray:
        """[loss_sum, acc_sum, batches, samples] as float64, for a cross-worker mean."""
        return np.array([self.loss_sum, self.acc_sum, self.batches, self.samples], np.float64)
