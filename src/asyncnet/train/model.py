"""The trainers' MLP classifier: the builder's mlp (:func:`asyncnet.model.zoo.mlp`) plus optimizers,
learning-rate schedules, gradient buckets, accumulation and npz checkpoints, as an init net and
forward/gradient/update/train nets.

    >>> import numpy as np, asyncnet as an
    >>> from asyncnet.train.model import MLP
    >>> m = MLP(input_dim=4, hidden=(8,), num_classes=3, optimizer="momentum", lr=0.1)
    >>> ws = an.Workspace()
    >>> ws.run_net_once(m.init_net)
    >>> ws.feed("data", np.ones((5, 4), np.float32)); ws.feed("label", np.zeros(5, np.int32))
    >>> ws.run_net_once(m.train_net())
    >>> m.params, int(ws.fetch("iter")[0])
    (['fc1_w', 'fc1_b', 'fc2_w', 'fc2_b'], 1)

Blob names (the contract trainers rely on):

* inputs ``data`` [B, input_dim] (float, the model's dtype) and ``label`` [B] int32 class ids;
* outputs ``softmax`` [B, num_classes], ``loss`` and ``accuracy`` (both 0-d arrays);
* parameters ``fc{i}_w`` [out, in] and ``fc{i}_b`` [out], i = 1..len(hidden)+1, gradients
  ``.grads[p]`` (``fc1_w_grad``...);
* optimizer state: ``fc{i}_w_momentum`` (momentum), ``fc{i}_w_m1``/``fc{i}_w_m2`` (adam);
* ``iter``: the int64 step counter, shape [1], 0 after init and 1 during the first update;
  ``lr``: the 0-d learning rate of the current step.

Every update op writes into the existing parameter and state arrays, so workspaces (threads) or
processes sharing those arrays (Hogwild) see each other's updates.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Sequence

import numpy as np

from asyncnet._atomicio import atomic_write_npz
from asyncnet.autodiff import add_gradient_ops
from asyncnet.core.net import Net
from asyncnet.core.registry import registered_ops
from asyncnet.errors import CheckpointError, NetDefinitionError
from asyncnet.model.zoo import mlp
from asyncnet.train.buckets import (DEFAULT_BUCKET_MB, add_accumulate, add_accumulated_mean, add_bucketed_allreduce,
                                    gradient_buckets)

__all__ = ["MLP", "CheckpointError"]

OPTIMIZERS = ("sgd", "momentum", "adam")
LR_POLICIES = ("fixed", "step", "exp")
_DEFAULT_GAMMA = {"fixed": 1.0, "step": 0.1, "exp": 0.999}
_META = "__asyncnet_checkpoint__"
_META_MAX_CHARS = 4096  # a model description is a few dozen characters


class MLP:
    """A multi-layer perceptron classifier (FC + Relu layers, SoftmaxWithLoss) built as nets.

    Args:
        input_dim: features per example. hidden: widths of the hidden layers.
        num_classes: output classes. seed: seeds the parameter fills (layer i uses seed + i).
        optimizer: "sgd", "momentum" (torch-style, coefficient ``momentum``) or "adam"
            (``betas``, ``eps``). lr: base learning rate. lr_policy: "fixed", "step"
            (lr * gamma^floor(iter / lr_step)) or "exp" (lr * gamma^iter); ``lr_gamma`` defaults
            to 0.1 for step and 0.999 for exp. weight_decay: L2 penalty added to every gradient.
        dtype: parameter and data dtype. net_type / num_workers: the executor of every net built
            ("simple", or "async_scheduling" for the trainers).

    ``init_net`` fills the parameters and state; ``forward_net()``, ``gradient_net()``,
    ``update_net()`` and ``train_net()`` build fresh nets each call; ``save``/``load`` write and
    read npz checkpoints.
    """

    def __init__(self, input_dim: int, hidden: Sequence[int] = (64,), num_classes: int = 10, seed: int = 0,
                 optimizer: str = "sgd", lr: float = 0.1, momentum: float = 0.9, lr_policy: str = "fixed",
                 lr_step: int = 1000, lr_gamma: float | None = None, weight_decay: float = 0.0,
                 dtype: Any = np.float32, net_type: str = "simple", num_workers: int | None = None,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.dims = [_positive("input_dim", input_dim), *[_positive(f"hidden[{i}]", h) for i, h in enumerate(hidden)],
                     _positive("num_classes", num_classes)]
        _choice("optimizer", optimizer, OPTIMIZERS)
        _choice("lr_policy", lr_policy, LR_POLICIES)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise NetDefinitionError(f"expected dtype float32 or float64, got {self.dtype}", "MLP.dtype")
        if lr_step < 1:
            raise NetDefinitionError(f"expected lr_step >= 1, got {lr_step}", "MLP.lr_step")
        self.seed, self.optimizer, self.lr, self.momentum = int(seed), optimizer, float(lr), float(momentum)
        self.lr_policy, self.lr_step = lr_policy, int(lr_step)
        self.lr_gamma = float(_DEFAULT_GAMMA[lr_policy] if lr_gamma is None else lr_gamma)
        self.weight_decay, self.betas, self.eps = float(weight_decay), (float(betas[0]), float(betas[1])), float(eps)
        self.net_type, self.num_workers = net_type, num_workers
        # the layers, parameters and their fills are the builder's (asyncnet.model.zoo.mlp); this
        # class adds the trainers' optimizers, schedules, gradient buckets and checkpoints
        self.model = mlp(self.dims[0], self.dims[1:-1], self.dims[-1], seed=self.seed, dtype=self.dtype)
        self.params: list[str] = list(self.model.params)
        self.shapes: dict[str, tuple[int, ...]] = dict(self.model.shapes)
        self.state = {p: self._state_names(p) for p in self.params}
        self.grads: dict[str, str] = add_gradient_ops(self._forward(Net("probe")), "loss", wrt=self.params, dtype=self.dtype.name)
        self.init_net = self._init()

    # -- names ------------------------------------------------------------------------------
    def _state_names(self, p: str) -> list[str]:
        return {"sgd": [], "momentum": [f"{p}_momentum"], "adam": [f"{p}_m1", f"{p}_m2"]}[self.optimizer]

    @property
    def checkpoint_blobs(self) -> list[str]:
        """Every blob a checkpoint holds: params, optimizer state, and ``iter``."""
        return [*self.params, *(s for p in self.params for s in self.state[p]), "iter"]

    def _net(self, name: str) -> Net:
        return Net(name, type=self.net_type, num_workers=self.num_workers)

    # -- nets -------------------------------------------------------------------------------
    def _init(self) -> Net:
        net = Net("init")
        dt = self.dtype.name
        net.ops.extend(dataclasses.replace(op, args=dict(op.args)) for op in self.model.init_net.ops)
        for p in self.params:
            for s in self.state[p]:
                net.ConstantFill([], s, shape=list(self.shapes[p]), value=0.0, dtype=dt)
        net.ConstantFill([], "iter", shape=[1], value=0, dtype="int64")
        if "CreateMutex" in registered_ops():
            net.CreateMutex([], "iter_mutex")
        return net

    def _forward(self, net: Net) -> Net:
        net.ops.extend(self.model.forward_net().ops)  # fresh copies of the builder's ops
        return net

    def forward_net(self, name: str = "eval") -> Net:
        """data, label -> softmax, loss (0-d), accuracy (0-d). No parameter changes."""
        return self._forward(self._net(name))

    def gradient_net(self, name: str = "grad") -> Net:
        """The forward net plus the backward ops: also writes every ``self.grads[p]``."""
        net = self.forward_net(name)
        grads = add_gradient_ops(net, "loss", wrt=self.params, dtype=self.dtype.name)
        if grads != self.grads:  # the builder is deterministic; this guards the contract
            raise NetDefinitionError(f"gradient names changed: {grads} != {self.grads}")
        return net

    def update_net(self, name: str = "update", iter_op: str | None = "Iter", mutex_blob: str | None = None) -> Net:
        """Increments ``iter`` (``Iter``, or ``AtomicIter`` under ``mutex_blob``, default
        ``iter_mutex``; None skips it), computes ``lr``, and updates every param in place."""
        net = self._net(name)
        self._add_update(net, iter_op, mutex_blob)
        return net

    def train_net(self, name: str = "train", sync_blob: str | None = None, iter_op: str | None = "Iter",
                  mutex_blob: str | None = None, bucket_mb: float | None = DEFAULT_BUCKET_MB,
                  micro_batches: int = 1) -> Net:
        """Gradient net, then (with ``sync_blob``) the gradients averaged in place across
        workers, then the update.

        ``bucket_mb`` (25 MiB by default, as DDP) packs the gradients into buckets in the order
        the backward pass produces them; each bucket's ``AllreduceStart`` sits right after its
        last gradient, so the async executor overlaps it with the rest of the backward pass
        (:mod:`asyncnet.train.buckets`). ``bucket_mb=None`` puts one ``Allreduce`` of every
        gradient after the backward pass. Both give the same bits.

        ``micro_batches=k > 1`` is gradient accumulation (DDP's ``no_sync``): run
        :meth:`accumulate_net` on micro-batches 1..k-1 (``first=True`` on the first) and this
        net on micro-batch k; it syncs and applies the mean of the k gradients.
        """
        net = self.gradient_net(name)
        grads = [self.grads[p] for p in self.params]
        if micro_batches > 1:
            add_accumulated_mean(net, grads, micro_batches)
        elif micro_batches != 1:
            raise NetDefinitionError(f"expected micro_batches >= 1, got {micro_batches!r}", "micro_batches")
        if sync_blob is not None:
            if bucket_mb is None:
                net.Allreduce([sync_blob, *grads], grads)
            elif not bucket_mb > 0:
                raise NetDefinitionError(f"expected bucket_mb > 0 (or None: one Allreduce), got {bucket_mb!r}", "bucket_mb")
            else:
                nbytes = {self.grads[p]: int(np.prod(self.shapes[p])) * self.dtype.itemsize for p in self.params}
                add_bucketed_allreduce(net, sync_blob, gradient_buckets(net, grads, nbytes, max(1, int(bucket_mb * 2**20))))
        self._add_update(net, iter_op, mutex_blob)
        return net

    def accumulate_net(self, name: str = "accumulate", first: bool = False) -> Net:
        """A micro-batch of gradient accumulation: the gradient net, then each gradient
        copied (``first``) or added into its accumulator ``<grad>_acc``; no sync, no update."""
        net = self.gradient_net(name)
        add_accumulate(net, [self.grads[p] for p in self.params], first)
        return net

    def _add_update(self, net: Net, iter_op: str | None, mutex_blob: str | None) -> None:
        if iter_op == "Iter":
            net.Iter(["iter"], ["iter"])
        elif iter_op == "AtomicIter":
            net.AtomicIter([mutex_blob or "iter_mutex", "iter"], ["iter"])
        elif iter_op is not None:
            raise NetDefinitionError(f"expected iter_op 'Iter', 'AtomicIter' or None, got {iter_op!r}", "iter_op")
        net.LearningRate(["iter"], ["lr"], base_lr=self.lr, policy=self.lr_policy, stepsize=self.lr_step,
                         gamma=self.lr_gamma, dtype=self.dtype.name)
        wd = self.weight_decay
        for p in self.params:
            g = self.grads[p]
            if self.optimizer == "sgd":
                net.SGD([p, g, "lr"], [p], weight_decay=wd)
            elif self.optimizer == "momentum":
                m = self.state[p][0]
                net.MomentumSGDUpdate([g, m, "lr", p], [g, m, p], momentum=self.momentum, weight_decay=wd,
                                      formula="torch")
            else:
                m1, m2 = self.state[p]
                net.Adam([p, m1, m2, g, "lr", "iter"], [p, m1, m2], beta1=self.betas[0], beta2=self.betas[1],
                         epsilon=self.eps, weight_decay=wd, formula="torch")

    # -- checkpoints ------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        return {"dims": self.dims, "optimizer": self.optimizer, "dtype": self.dtype.name}

    def save(self, ws: Any, path: str | os.PathLike[str]) -> None:
        """Write params, optimizer state and ``iter`` from ``ws`` to the npz file ``path``
        (exactly that path) through :func:`asyncnet._atomicio.atomic_write_npz`: a private temp
        file beside it, fsynced, then renamed, so a crash leaves the old checkpoint or the new
        one, and strays of killed writers are removed. Raises :class:`CheckpointError` when the
        folder cannot be written."""
        arrays = {n: np.asarray(ws.fetch(n)) for n in self.checkpoint_blobs}
        arrays[_META] = np.array(json.dumps(self._meta()))
        try:
            atomic_write_npz(path, arrays)
        except OSError as e:
            raise CheckpointError(f"cannot write checkpoint {os.fspath(path)!r}: {e.strerror or e}") from e

    def load(self, ws: Any, path: str | os.PathLike[str]) -> None:
        """Read a checkpoint written by :meth:`save` into ``ws``. Every array is checked
        (present, shape, dtype) before any blob changes; existing arrays of the right shape are
        overwritten in place (shared Hogwild arrays stay shared). Raises :class:`CheckpointError`."""
        arrays = self._read(os.fspath(path))
        for n, a in arrays.items():
            cur = ws.fetch(n) if ws.has(n) else None
            if isinstance(cur, np.ndarray) and cur.shape == a.shape and cur.dtype == a.dtype and cur.flags.writeable:
                np.copyto(cur, a)
            else:
                ws.feed(n, a.copy())

    def _read(self, path: str) -> dict[str, np.ndarray]:
        try:
            f = np.load(path, allow_pickle=False)
            if not isinstance(f, np.lib.npyio.NpzFile):
                raise CheckpointError(f"checkpoint {path!r} is a single .npy array, not an npz archive")
            with f:
                data = {k: f[k] for k in f.files}
        except CheckpointError:
            raise
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {path!r} does not exist") from None
        except Exception as e:  # noqa: BLE001 - any unreadable file is one kind of error for the caller
            raise CheckpointError(f"checkpoint {path!r} is not a readable npz file: {type(e).__name__}: {e}") from e
        meta = data.pop(_META, None)
        if meta is not None:
            found = self._parse_meta(path, meta)
            if found != self._meta():
                raise CheckpointError(f"checkpoint {path!r} is for model {found}, not {self._meta()}")
        missing = [n for n in self.checkpoint_blobs if n not in data]
        if missing:
            raise CheckpointError(f"checkpoint {path!r} lacks {missing}; it has {sorted(data)}")
        out = {}
        for n in self.checkpoint_blobs:
            a = data[n]
            want = ((a.shape if a.size == 1 else (1,)), np.dtype(np.int64)) if n == "iter" else (self.shapes[self._param_of(n)], self.dtype)
            if (a.shape, a.dtype) != want:
                raise CheckpointError(f"checkpoint {path!r}: {n!r} has shape {a.shape} dtype {a.dtype}, "
                                      f"expected shape {want[0]} dtype {want[1]}")
            out[n] = a.reshape(1) if n == "iter" else a
        if out["iter"][0] < 0:
            raise CheckpointError(f"checkpoint {path!r}: 'iter' is {int(out['iter'][0])}, expected a step count >= 0")
        return out

    @staticmethod
    def _parse_meta(path: str, meta: np.ndarray) -> Any:
        """The metadata JSON object; anything else (bad type, bad JSON, too deep) is a CheckpointError."""
        if meta.shape != () or meta.dtype.kind != "U" or len(str(meta)) > _META_MAX_CHARS:
            raise CheckpointError(f"checkpoint {path!r}: metadata {_META!r} must be a short JSON string, "
                                  f"found dtype {meta.dtype} shape {meta.shape}")
        try:
            found = json.loads(str(meta))
        except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the stack
            raise CheckpointError(f"checkpoint {path!r}: metadata {_META!r} is not valid JSON: {type(e).__name__}") from None
        if not isinstance(found, dict):
            raise CheckpointError(f"checkpoint {path!r}: metadata {_META!r} must be a JSON object, found {type(found).__name__}")
        return found

    def _param_of(self, blob: str) -> str:
        return next(p for p in self.params if blob == p or blob in self.state[p])

    def __repr__(self) -> str:
        return f"MLP(dims={self.dims}, optimizer={self.optimizer!r}, lr={self.lr}, lr_policy={self.lr_policy!r})"


def _positive(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise NetDefinitionError(f"expected a positive int, got {v!r}", f"MLP.{name}")
    return int(v)


def _choice(name: str, v: Any, choices: Sequence[str]) -> None:
    if v not in choices:
        raise NetDefinitionError(f"expected one of {list(choices)}, got {v!r}", f"MLP.{name}")
