"""A zoo model (:mod:`asyncnet.model.zoo`) behind the interface the trainers use.

The trainers build a worker's nets from ``init_net``, ``train_net(name, sync_blob=, iter_op=,
mutex_blob=, bucket_mb=)``, ``forward_net(name)`` (here the eval net, in test mode),
``checkpoint_blobs`` and ``save``/``load``: what :class:`asyncnet.train.model.MLP` offers.
:class:`ZooModel` gives the same for any :class:`~asyncnet.model.ModelHelper`: its gradient net,
then the gradient sync (bucketed ``AllreduceStart``/``Wait`` or one ``Allreduce``), then the
optimizer builder's update, whose ``Iter`` becomes ``AtomicIter`` for Hogwild.

    >>> from asyncnet.train.zoo_model import ZooModel
    >>> m = ZooModel("cnn", seed=0)
    >>> [op.type for op in m.train_net(sync_blob="s", bucket_mb=None).ops if op.type in ("Allreduce", "Iter")]
    ['Allreduce', 'Iter']
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from asyncnet.core.net import Net
from asyncnet.errors import NetDefinitionError
from asyncnet.train.buckets import DEFAULT_BUCKET_MB, add_bucketed_allreduce, gradient_buckets

__all__ = ["ZooModel", "ZOO_MODELS"]

ZOO_MODELS = ("mlp", "cnn", "lstm", "dlrm")
_DEFAULT_GAMMA = {"fixed": 1.0, "step": 0.1, "exp": 0.999}


def _build(name: str, seed: int, **kw: Any) -> Any:
    from asyncnet.model import zoo

    if name not in ("cnn", "lstm", "dlrm"):
        raise NetDefinitionError(f"expected a zoo model cnn, lstm or dlrm, got {name!r}", "ZooModel")
    return getattr(zoo, name)(seed=seed, **kw)


class ZooModel:
    """The zoo model ``name`` ("cnn", "lstm", "dlrm") with one optimizer, as the trainers use it.

    ``optimizer`` "sgd", "momentum" or "adam" (sparse tables: sgd only); ``lr_policy``,
    ``lr_step``, ``lr_gamma`` as :class:`~asyncnet.train.model.MLP`; ``model_kw`` go to the zoo
    function (e.g. ``table_sizes`` of dlrm).
    """

    def __init__(self, name: str, seed: int = 0, optimizer: str = "sgd", lr: float = 0.1, momentum: float = 0.9,
                 lr_policy: str = "fixed", lr_step: int = 1000, lr_gamma: float | None = None, weight_decay: float = 0.0,
                 net_type: str = "simple", num_workers: int | None = None, lr_args: dict[str, Any] | None = None,
                 **model_kw: Any):
        self.name = name
        self.helper = _build(name, seed, net_type=net_type, num_workers=num_workers, **model_kw)
        self.optimizer, self.lr, self.momentum, self.weight_decay = optimizer, float(lr), float(momentum), float(weight_decay)
        self.lr_args = {"lr_policy": lr_policy, "stepsize": int(lr_step),
                        "gamma": float(_DEFAULT_GAMMA[lr_policy] if lr_gamma is None else lr_gamma)}
        if lr_args:  # a schedule of the model's own (dlrm's warm-up and decay) replaces lr_policy's
            self.lr_args = dict(lr_args)
        self.train_net("probe")  # adds the optimizer state to init_net, which the workers run first

    @property
    def init_net(self) -> Net:
        return self.helper.init_net

    @property
    def params(self) -> list[str]:
        return self.helper.params

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self.helper.shapes

    @property
    def dtype(self) -> np.dtype:
        return self.helper.dtype

    @property
    def sparse(self) -> set[str]:
        """The embedding tables: updated by row, in place."""
        return self.helper.sparse

    @property
    def binary(self) -> bool:
        """True for a click model (``prob``, ``click``), False for a classifier (``softmax``, ``label``)."""
        return any(op.type == "SigmoidCrossEntropyWithLogits" or (op.type == "Sigmoid" and "prob" in op.outputs)
                   for op in self.helper.forward_net().ops)

    @property
    def checkpoint_blobs(self) -> list[str]:
        return self.helper.checkpoint_blobs

    def forward_net(self, name: str = "eval") -> Net:
        """The eval net: test mode (Dropout off, SpatialBN on running statistics)."""
        return self.helper.eval_net(name)

    def train_net(self, name: str = "train", sync_blob: str | None = None, iter_op: str | None = "Iter",
                  mutex_blob: str | None = None, bucket_mb: float | None = DEFAULT_BUCKET_MB) -> Net:
        """Forward, backward, (with ``sync_blob``) the dense gradients averaged in place, update."""
        from asyncnet.model.optimizer import build_optimizer

        h = self.helper
        net, grads = h.gradient_net(name)
        if sync_blob is not None:
            grads = _densified(net, grads)
            dense = [grads[p] for p in h.params]
            if bucket_mb is None:
                net.Allreduce([sync_blob, *dense], dense)
            else:
                nbytes = {grads[p]: int(np.prod(h.shapes[p])) * h.dtype.itemsize for p in h.params}
                add_bucketed_allreduce(net, sync_blob, gradient_buckets(net, dense, nbytes, max(1, int(bucket_mb * 2**20))))
        build_optimizer(h, net, grads, self.optimizer, self.lr, momentum=self.momentum, weight_decay=self.weight_decay,
                        **self.lr_args)
        return _with_iter_op(net, iter_op, mutex_blob)

    def save(self, ws: Any, path: str | os.PathLike[str]) -> None:
        from asyncnet.model.checkpoint import save

        save(self.helper, ws, path)

    def load(self, ws: Any, path: str | os.PathLike[str]) -> None:
        from asyncnet.model.checkpoint import load

        load(self.helper, ws, path)

    def __repr__(self) -> str:
        return f"ZooModel({self.name!r}, optimizer={self.optimizer!r}, lr={self.lr})"


def _densified(net: Net, grads: dict[str, Any]) -> dict[str, str]:
    """Every gradient as a dense blob: a table's (indices, values) scattered by ``SparseToDense``
    (rows summed) into ``{table}_grad_dense``, so sync mode can all-reduce it. Table-sized, but
    the replicas' rows differ and an all-reduce needs one shape; local and Hogwild stay sparse."""
    out = {}
    for p, g in grads.items():
        if isinstance(g, str):
            out[p] = g
        else:
            out[p] = net.SparseToDense([g.indices, g.values, p], f"{p}_grad_dense")
            out[p] = str(out[p])
    return out


def _with_iter_op(net: Net, iter_op: str | None, mutex_blob: str | None) -> Net:
    """``net`` with its ``Iter`` kept ("Iter"), made atomic ("AtomicIter" under ``mutex_blob``) or dropped (None)."""
    if iter_op == "Iter":
        return net
    if iter_op not in ("AtomicIter", None):
        raise NetDefinitionError(f"expected iter_op 'Iter', 'AtomicIter' or None, got {iter_op!r}", "iter_op")
    ops = []
    for op in net.ops:
        if op.type == "Iter":
            if iter_op is None:
                continue
            op = dataclasses.replace(op, type="AtomicIter", inputs=[mutex_blob or "iter_mutex", *op.inputs])
        ops.append(op)
    net.ops[:] = ops
    return net
