"""A model and its optimizer as the nets a trainer runs: init, train (forward, backward, the
gradient sync, the update), eval (test mode, its blobs apart from the train net's) and
inference (no label, no loss). Any :class:`~asyncnet.model.ModelHelper` becomes one: a zoo
model or a user's.

    >>> import numpy as np, asyncnet as an
    >>> from asyncnet.model.zoo import mlp
    >>> p = Program(mlp(4, (8,), 3), optimizer="momentum", lr=0.1)
    >>> ws = an.Workspace(); ws.run_net_once(p.init_net)
    >>> ws.feed("data", np.ones((5, 4), np.float32)); ws.feed("label", np.zeros(5, np.int32))
    >>> ws.run_net_once(p.train_net())
    >>> p.params, int(ws.fetch("iter")[0])
    (['fc1_w', 'fc1_b', 'fc2_w', 'fc2_b'], 1)
    >>> ws.run_net_once(p.inference_net()); ws.fetch("softmax").shape
    (5, 3)

Blob names (the contract the trainers rely on): the model's inputs (a classifier's ``data``
and ``label``; :attr:`Program.inputs`, :attr:`Program.labels`); ``loss`` (0-d) and
``softmax`` (or ``prob`` for a click model) written by the train net; the eval net's outputs
under :data:`EVAL_PREFIX` (``eval/loss``, ``eval/accuracy``); parameters and their gradients
``.grads[p]``; optimizer state ``.state[p]``; ``iter``, the int64 step counter [1], and ``lr``.
Every update op writes into the existing parameter and state arrays, so workspaces (threads)
or processes sharing those arrays (Hogwild) see each other's updates.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from asyncnet.core.net import Net
from asyncnet.errors import NetDefinitionError
from asyncnet.model import checkpoint
from asyncnet.model.builder import ModelHelper
from asyncnet.model.optimizer import LR_POLICIES, OPTIMIZERS, build_optimizer, state_names
from asyncnet.train.buckets import (
    DEFAULT_BUCKET_MB,
    add_accumulate,
    add_accumulated_mean,
    add_bucketed_allreduce,
    gradient_buckets,
)

__all__ = ["Program", "EVAL_PREFIX"]

#: the eval and inference nets write their blobs under this prefix (``eval/loss``)
EVAL_PREFIX = "eval/"


class Program:
    """``model`` (a :class:`~asyncnet.model.ModelHelper` with a loss) trained by ``optimizer``.

    Args:
        optimizer: one of :data:`asyncnet.model.optimizer.OPTIMIZERS`. lr: base learning rate.
        momentum, betas, eps, weight_decay: the optimizer's settings. lr_policy: "fixed", "step"
            (lr * gamma^floor(iter / lr_step)) or "exp" (lr * gamma^iter); ``lr_gamma`` defaults
            to 0.1 for step and 0.999 for exp. lr_args: a model's own schedule replacing the policy
            (the ``LearningRate`` op's arguments with its ``lr_policy``; dlrm's warm-up and decay).

    Building the program adds the optimizer state to ``model.init_net``: run it afterwards.
    """

    def __init__(
        self,
        model: ModelHelper,
        optimizer: str = "sgd",
        lr: float = 0.1,
        momentum: float = 0.9,
        lr_policy: str = "fixed",
        lr_step: int = 1000,
        lr_gamma: float | None = None,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float | None = None,
        lr_args: dict[str, Any] | None = None,
    ):
        if not isinstance(model, ModelHelper):
            raise NetDefinitionError(f"expected a ModelHelper, got {type(model).__name__}", "Program.model")
        if model.loss is None:
            raise NetDefinitionError(
                "expected a model with a loss: call softmax_with_loss or sigmoid_xent_loss", f"model {model.name!r}"
            )
        _choice("optimizer", optimizer, OPTIMIZERS)
        _choice("lr_policy", lr_policy, LR_POLICIES)
        if isinstance(lr_step, bool) or not isinstance(lr_step, (int, np.integer)) or lr_step < 1:
            raise NetDefinitionError(f"expected lr_step >= 1, got {lr_step!r}", "Program.lr_step")
        self.model = model
        self.optimizer, self.lr, self.momentum = optimizer, float(lr), float(momentum)
        self.lr_policy, self.lr_step, self.lr_gamma = lr_policy, int(lr_step), lr_gamma
        self.weight_decay, self.betas, self.eps = float(weight_decay), (float(betas[0]), float(betas[1])), eps
        self.lr_args = dict(lr_args) if lr_args else None
        self.grads: dict[str, Any] = model.gradient_net("probe")[1]
        self.state = {p: state_names(p, optimizer) for p in model.params}
        self.train_net("probe")  # adds the optimizer state to init_net, which the workers run first

    # -- what the model is ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.model.name

    @property
    def init_net(self) -> Net:
        return self.model.init_net

    @property
    def params(self) -> list[str]:
        return self.model.params

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self.model.shapes

    @property
    def dtype(self) -> np.dtype:
        return self.model.dtype

    @property
    def sparse(self) -> set[str]:
        """The embedding tables: updated by row, in place."""
        return self.model.sparse

    @property
    def checkpoint_blobs(self) -> list[str]:
        """Parameters, buffers, optimizer state and ``iter``."""
        return self.model.checkpoint_blobs

    @property
    def binary(self) -> bool:
        """True for a click model (sigmoid cross entropy, or a sigmoid ``prob`` under an mse
        loss), False for a classifier (``softmax``)."""
        ops = self.model.forward_net().ops
        return any(op.type == "SigmoidCrossEntropyWithLogits" for op in ops) or bool(_click_probabilities(ops))

    @property
    def labels(self) -> list[str]:
        """The blobs the loss reads as targets."""
        return list(self.model.labels)

    @property
    def inputs(self) -> list[str]:
        """The blobs the forward definition reads that nothing writes and that are not
        parameters, buffers or labels: what a batch feeds besides the labels."""
        written, known, out = set(), {*self.params, *self.model.buffers, *self.labels}, []
        for op in self.model.forward_net().ops:
            for i in op.inputs:
                if i not in written and i not in known and i not in out:
                    out.append(i)
            written.update(op.outputs)
        return out

    @property
    def classes(self) -> int | None:
        """A softmax classifier's number of classes (the width of the logits), else None."""
        for op in self.model.forward_net().ops:
            if op.type == "SoftmaxWithLoss":
                for w in self.params:
                    if w.endswith("_w") and self._writes(w, op.inputs[0]):
                        return int(self.shapes[w][0])
        return 2 if self.binary else None

    @property
    def scores(self) -> str:
        """The blob of the predictions: a classifier's probabilities (``softmax``), a click
        model's ``prob`` (the Sigmoid of the cross entropy's logit, or the Sigmoid an mse loss reads)."""
        ops = self.model.forward_net().ops
        for op in ops:
            if op.type == "SoftmaxWithLoss":
                return op.outputs[0]
        found = _click_probabilities(ops)
        if not found:
            raise NetDefinitionError(
                "expected a SoftmaxWithLoss, or a Sigmoid beside the sigmoid cross entropy, to read predictions from",
                f"model {self.name!r}",
            )
        return found[0]

    @property
    def accuracy(self) -> str | None:
        """The blob an ``Accuracy`` op writes, if the model has one."""
        return next((op.outputs[0] for op in self.model.forward_net().ops if op.type == "Accuracy"), None)

    def _writes(self, weight: str, blob: str) -> bool:
        return any(
            op.type == "FC" and op.inputs[1] == weight and blob in op.outputs for op in self.model.forward_net().ops
        )

    # -- nets -------------------------------------------------------------------------------
    def forward_net(self, name: str = "eval") -> Net:
        """The eval net under the train net's blob names: inputs -> softmax, loss, accuracy."""
        return self.model.eval_net(name)

    def eval_net(self, name: str = "eval", prefix: str = EVAL_PREFIX) -> Net:
        """Test mode (Dropout off, SpatialBN on running statistics), writing ``prefix + blob``."""
        return self.model.eval_net(name, prefix=prefix)

    def inference_net(self, name: str = "inference", prefix: str = "") -> Net:
        """The eval net without label, loss or accuracy: inputs -> ``softmax`` (or ``prob``)."""
        return self.model.inference_net(name, prefix=prefix)

    def gradient_net(self, name: str = "grad") -> Net:
        """The forward net plus the backward ops: also writes every ``self.grads[p]``."""
        net, grads = self.model.gradient_net(name)
        self._check_grads(grads)
        return net

    def _check_grads(self, grads: dict[str, Any]) -> None:
        if grads != self.grads:  # the builder is deterministic; this guards the contract
            raise NetDefinitionError(f"gradient names changed: {grads} != {self.grads}")

    def update_net(self, name: str = "update", iter_op: str | None = "Iter", mutex_blob: str | None = None) -> Net:
        """Advances ``iter`` (``Iter``, ``AtomicIter`` under ``mutex_blob``, or None), computes
        ``lr`` and updates every parameter in place."""
        net = self.model._net(name)
        self._add_update(net, self.grads, iter_op, mutex_blob)
        return net

    def train_net(
        self,
        name: str = "train",
        sync_blob: str | None = None,
        iter_op: str | None = "Iter",
        mutex_blob: str | None = None,
        bucket_mb: float | None = DEFAULT_BUCKET_MB,
        micro_batches: int = 1,
    ) -> Net:
        """Gradient net, then (with ``sync_blob``) the dense gradients averaged in place across
        workers, then the update.

        ``bucket_mb`` (25 MiB by default, as DDP) packs the gradients into buckets in the order
        the backward pass produces them, each bucket's ``AllreduceStart`` right after its last
        gradient (:mod:`asyncnet.train.buckets`); ``None`` puts one ``Allreduce`` after the
        backward pass. Both give the same bits. ``micro_batches=k > 1`` is gradient
        accumulation: run :meth:`accumulate_net` on micro-batches 1..k-1 and this net on the k-th.
        """
        if not (micro_batches == 1 or micro_batches > 1):
            raise NetDefinitionError(f"expected micro_batches >= 1, got {micro_batches!r}", "micro_batches")

        def before_update(net: Net, grads: dict[str, Any]) -> dict[str, Any]:
            self._check_grads(grads)
            if micro_batches > 1:
                add_accumulated_mean(net, [g for g in grads.values() if isinstance(g, str)], micro_batches)
            if sync_blob is not None:
                grads = _densified(net, grads)
                self._add_allreduce(net, sync_blob, grads, bucket_mb)
            return grads

        return self.model.train_net(
            name, self.optimizer, self.lr, before_update=before_update, **self.update_settings(iter_op, mutex_blob)
        )

    def accumulate_net(self, name: str = "accumulate", first: bool = False) -> Net:
        """A micro-batch of gradient accumulation: the gradient net, then each gradient copied
        (``first``) or added into its accumulator ``<grad>_acc``; no sync, no update."""
        net = self.gradient_net(name)
        add_accumulate(net, [g for g in self.grads.values() if isinstance(g, str)], first)
        return net

    def _add_allreduce(self, net: Net, sync_blob: str, grads: dict[str, str], bucket_mb: float | None) -> None:
        dense = [grads[p] for p in self.params]
        if bucket_mb is None:
            net.Allreduce([sync_blob, *dense], dense)
        elif not (isinstance(bucket_mb, (int, float)) and bucket_mb > 0):
            raise NetDefinitionError(f"expected bucket_mb > 0 (or None: one Allreduce), got {bucket_mb!r}", "bucket_mb")
        else:
            nbytes = {grads[p]: int(np.prod(self.shapes[p])) * self.dtype.itemsize for p in self.params}
            add_bucketed_allreduce(net, sync_blob, gradient_buckets(net, dense, nbytes, max(1, int(bucket_mb * 2**20))))

    def update_settings(self, iter_op: str | None = "Iter", mutex_blob: str | None = None) -> dict[str, Any]:
        """The keyword arguments of :func:`~asyncnet.model.optimizer.build_optimizer` (and of
        :meth:`ModelHelper.train_net <asyncnet.model.ModelHelper.train_net>`) besides the
        optimizer and lr: this program's update.

            >>> mlp_program(2, (2,), 2, lr_step=5).update_settings()["stepsize"]
            5
        """
        return {
            "momentum": self.momentum,
            "betas": self.betas,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
            "lr_policy": self.lr_policy,
            "stepsize": self.lr_step,
            "gamma": self.lr_gamma,
            "iter_op": iter_op,
            "mutex_blob": mutex_blob,
            "lr_args": self.lr_args,
        }

    def _add_update(self, net: Net, grads: dict[str, Any], iter_op: str | None, mutex_blob: str | None) -> None:
        build_optimizer(self.model, net, grads, self.optimizer, self.lr, **self.update_settings(iter_op, mutex_blob))

    # -- checkpoints ------------------------------------------------------------------------
    def save(self, ws: Any, path: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> None:
        """Write params, buffers, optimizer state, ``iter`` and the metadata (:mod:`asyncnet.model.checkpoint`)."""
        checkpoint.save(self.model, ws, path, extra)

    def load(self, ws: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Read a checkpoint of this program into ``ws`` (in place); returns its metadata."""
        return checkpoint.load(self.model, ws, path)

    def __repr__(self) -> str:
        return f"Program({self.model.name!r}, optimizer={self.optimizer!r}, lr={self.lr})"


def _densified(net: Net, grads: dict[str, Any]) -> dict[str, str]:
    """Every gradient as a dense blob: a table's (indices, values) scattered by ``SparseToDense``
    (rows summed) into ``{table}_grad_dense``, so sync mode can all-reduce it. Table-sized, but
    the replicas' rows differ and an all-reduce needs one shape; local and Hogwild stay sparse."""
    out = {}
    for p, g in grads.items():
        out[p] = g if isinstance(g, str) else str(net.SparseToDense([g.indices, g.values, p], f"{p}_grad_dense"))
    return out


def _choice(name: str, v: Any, choices: Sequence[str]) -> None:
    if v not in choices:
        raise NetDefinitionError(f"expected one of {list(choices)}, got {v!r}", f"Program.{name}")


def mlp_program(
    input_dim: int,
    hidden: Sequence[int] = (64,),
    num_classes: int = 10,
    seed: int = 0,
    dtype: Any = np.float32,
    net_type: str = "simple",
    num_workers: int | None = None,
    **optimizer: Any,
) -> Program:
    """The zoo mlp (:func:`asyncnet.model.zoo.mlp`) as a program, its sizes checked.

    >>> mlp_program(64, (32,), 10, optimizer="adam").state["fc1_w"]
    ['fc1_w_m1', 'fc1_w_m2']
    """
    from asyncnet.model.zoo import mlp

    _positive("input_dim", input_dim)
    for i, h in enumerate(hidden):
        _positive(f"hidden[{i}]", h)
    _positive("num_classes", num_classes)
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise NetDefinitionError(f"expected dtype float32 or float64, got {np.dtype(dtype)}", "MLP.dtype")
    return Program(
        mlp(
            int(input_dim),
            tuple(int(h) for h in hidden),
            int(num_classes),
            seed=seed,
            dtype=dtype,
            net_type=net_type,
            num_workers=num_workers,
        ),
        **optimizer,
    )


def _positive(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise NetDefinitionError(f"expected a positive int, got {v!r}", f"MLP.{name}")


def executor_workers(net_type: str, threads: int) -> int:
    """Pool workers of a net meant to run its ops on ``threads`` threads: async_scheduling's
    caller runs chains beside its pool, so it gets one worker fewer (at least one); the other
    executors get ``threads``. Two threads on two cores: 1 worker + the caller ran the large
    DLRM's step in 27-29 ms, 2 workers + the caller (three threads on two cores) in 32-33 ms.

    >>> executor_workers("async_scheduling", 2), executor_workers("async_scheduling", 1), executor_workers("simple", 2)
    (1, 1, 2)
    """
    return max(1, threads - 1) if net_type == "async_scheduling" else threads


def build_program(cfg: Any, input_dim: int, num_classes: int, model: Any = None) -> Program:
    """The program of a run (same seed everywhere, so every replica starts equal): ``model``
    (a user's :class:`~asyncnet.model.ModelHelper`, copied, or a function building one), else
    ``cfg.model``: a zoo name (mlp with ``cfg.hidden``) or ``module:function``."""
    opts = dict(
        optimizer=cfg.optimizer,
        lr=cfg.lr,
        momentum=cfg.momentum,
        lr_policy=cfg.lr_policy,
        lr_step=cfg.lr_step,
        lr_gamma=cfg.lr_gamma,
        weight_decay=cfg.weight_decay,
    )
    net_type = cfg.net_type or "async_scheduling"
    threads = executor_workers(net_type, cfg.net_threads)
    if model is None and cfg.model == "mlp":
        return mlp_program(
            input_dim, tuple(cfg.hidden), num_classes, seed=cfg.seed, net_type=net_type, num_workers=threads, **opts
        )
    if model is None and cfg.model in ("cnn", "lstm", "dlrm"):
        from asyncnet.model import zoo

        kw = {} if cfg.model == "dlrm" else {"num_classes": num_classes}
        if cfg.model == "dlrm":
            from asyncnet.model.zoo.dlrm import split_model_args

            kw, lr_args = split_model_args(cfg.model_args)
            if lr_args:
                opts["lr_args"] = lr_args
        helper = getattr(zoo, cfg.model)(seed=cfg.seed, net_type=net_type, num_workers=threads, **kw)
    else:
        helper = user_model(model if model is not None else cfg.model)
        helper.net_type, helper.num_workers = net_type, threads
    return Program(helper, **opts)


def user_model(source: Any) -> ModelHelper:
    """A fresh :class:`~asyncnet.model.ModelHelper` from a user's ``source``: a ModelHelper
    (deep-copied: each worker adds its own optimizer state), a function returning one, or the
    text ``module:function`` / ``path/to/file.py:function`` naming such a function."""
    import copy

    from asyncnet.errors import TrainConfigError

    if isinstance(source, str):
        source = load_function(source)
    if isinstance(source, ModelHelper):
        if source.optimizer is not None:
            raise TrainConfigError(
                f"model {source.name!r} already has an optimizer ({source.optimizer}): pass the "
                "model before building its train net, or a function building it"
            )
        return copy.deepcopy(source)
    if callable(source):
        built = source()
        if not isinstance(built, ModelHelper):
            raise TrainConfigError(
                f"model function {getattr(source, '__name__', source)!r} returned "
                f"{type(built).__name__}, expected an asyncnet.model.ModelHelper"
            )
        return built
    raise TrainConfigError(
        f"expected a zoo model name, a ModelHelper or a function building one, got {type(source).__name__}"
    )


def load_function(spec: str) -> Any:
    """The function ``module:function`` or ``path/to/file.py:function`` names (one-line
    TrainConfigError when it cannot be loaded)."""
    import importlib
    import importlib.util

    from asyncnet.errors import TrainConfigError

    where, _, name = spec.rpartition(":")
    try:
        if where.endswith(".py") or os.sep in where:
            if not os.path.isfile(where):
                raise TrainConfigError(f"--model {spec}: no such file {where!r}")
            mod_name = "asyncnet_user_model_" + os.path.splitext(os.path.basename(where))[0]
            module_spec = importlib.util.spec_from_file_location(mod_name, where)
            module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
            module_spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(where)
    except TrainConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module may raise anything while importing
        raise TrainConfigError(f"--model {spec}: cannot import {where!r}: {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise TrainConfigError(f"--model {spec}: {where!r} has no function {name!r}")
    return fn


def _click_probabilities(ops: list) -> list[str]:
    """The Sigmoid outputs that are a click model's predictions: the Sigmoid of a sigmoid cross
    entropy's logit, or a Sigmoid writing ``prob`` (the one an mse loss reads)."""
    logits = {op.inputs[0] for op in ops if op.type == "SigmoidCrossEntropyWithLogits"}
    return [op.outputs[0] for op in ops if op.type == "Sigmoid" and (op.inputs[0] in logits or "prob" in op.outputs)]
