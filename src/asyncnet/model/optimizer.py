"""Optimizer updates for every parameter of a :class:`~asyncnet.model.ModelHelper`.

Dense parameters use the optimizer ops with ``formula="torch"`` (torch.optim's updates);
embedding tables, whose gradient is a :class:`~asyncnet.autodiff.GradientSlice`, are updated by
row: SGD as Caffe2's ``ScatterWeightedSum([param, one, indices, values, -lr])``, Adagrad as
``SparseAdagrad`` (torch's sparse Adagrad), rwsadagrad as ``RowWiseSparseAdagrad``; when a
lookup's ``SparseLengthsSumGradient`` feeds nothing but the update, the two become one fused op
(``SparseAdagradFusedWithSparseLengthsSumGradient``...: the same values). Momentum and Adam have
no sparse form: a table's gradient is scattered into a dense one (``SparseToDense``) and every
row takes the dense step, as torch.optim's on a dense embedding gradient. The state blobs go
into the model's init net once.

    >>> from asyncnet.model import ModelHelper
    >>> m = ModelHelper(); _ = m.softmax_with_loss(m.fc("x", "fc", 4, 3), "y")
    >>> _ = m.train_net(optimizer="adagrad", lr=0.1)
    >>> m.optimizer_state
    ['fc_w_moment', 'fc_b_moment']
"""

from __future__ import annotations

import dataclasses
from typing import Any

from asyncnet.autodiff import Grad, GradientSlice
from asyncnet.core.net import Net
from asyncnet.core.registry import registered_ops
from asyncnet.errors import NetDefinitionError

__all__ = ["OPTIMIZERS", "LR_POLICIES", "DEFAULT_GAMMA", "ITER_OPS", "build_optimizer", "state_names"]

#: every optimizer a model can train with (sparse tables: sgd, adagrad and rwsadagrad, one moment per row)
OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam", "rwsadagrad")
#: learning-rate policies of the ``LearningRate`` op: fixed, step (lr * gamma^floor(iter / stepsize)),
#: exp (lr * gamma^iter)
LR_POLICIES = ("fixed", "step", "exp")
#: the decay factor of each policy when none is given
DEFAULT_GAMMA = {"fixed": 1.0, "step": 0.1, "exp": 0.999}
#: how the step counter advances: ``Iter``, ``AtomicIter`` under a mutex (Hogwild), or not at all
ITER_OPS = ("Iter", "AtomicIter", None)
_STATE = {"sgd": (), "momentum": ("momentum",), "adagrad": ("moment",), "adam": ("m1", "m2"), "rwsadagrad": ("moment",)}


def state_names(param: str, optimizer: str) -> list[str]:
    """The optimizer state blobs of ``param``: ``fc_w_momentum``, ``fc_w_m1``/``fc_w_m2``...

    >>> state_names("fc_w", "adam")
    ['fc_w_m1', 'fc_w_m2']
    """
    return [f"{param}_{s}" for s in _STATE[optimizer]]


def build_optimizer(
    model: Any,
    net: Net,
    grads: dict[str, Grad],
    optimizer: str = "sgd",
    lr: float = 0.1,
    momentum: float = 0.9,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float | None = None,
    weight_decay: float = 0.0,
    lr_policy: str = "fixed",
    stepsize: int = 1000,
    gamma: float | None = None,
    iter_op: str | None = "Iter",
    mutex_blob: str | None = None,
    lr_args: dict[str, Any] | None = None,
) -> None:
    """Append the step counter (``iter_op``: ``Iter``, ``AtomicIter`` under ``mutex_blob``,
    default ``iter_mutex``, or None), ``LearningRate`` (blob ``lr``; ``lr_policy`` with
    ``stepsize`` and ``gamma``, default :data:`DEFAULT_GAMMA`) and one update per parameter to ``net``.

    ``lr_args``: a model's own schedule, the ``LearningRate`` op's arguments with its
    ``lr_policy`` (dlrm's warm-up and polynomial decay, :func:`asyncnet.model.zoo.dlrm.lr_schedule`),
    replacing ``lr_policy``, ``stepsize`` and ``gamma``."""
    where = f"model {model.name!r}"
    if optimizer not in OPTIMIZERS:
        raise NetDefinitionError(f"expected optimizer in {list(OPTIMIZERS)}, got {optimizer!r}", where)
    if lr_args:
        schedule = dict(lr_args)
        lr_policy = schedule.pop("lr_policy", lr_policy)
    elif lr_policy not in LR_POLICIES:
        raise NetDefinitionError(f"expected lr_policy in {list(LR_POLICIES)}, got {lr_policy!r}", where)
    if iter_op not in ITER_OPS:
        raise NetDefinitionError(f"expected iter_op 'Iter', 'AtomicIter' or None, got {iter_op!r}", "iter_op")
    if isinstance(stepsize, bool) or not isinstance(stepsize, int) or stepsize < 1:
        raise NetDefinitionError(f"expected lr_step >= 1, got {stepsize!r}", f"{where} lr_step")
    _add_state(model, optimizer)
    dt = model.dtype.name
    start = len(net.ops)
    if iter_op == "Iter":
        net.Iter(["iter"], ["iter"])
    elif iter_op == "AtomicIter":
        net.AtomicIter([mutex_blob or "iter_mutex", "iter"], ["iter"])
    if not lr_args:
        schedule = {"stepsize": int(stepsize), "gamma": float(DEFAULT_GAMMA[lr_policy] if gamma is None else gamma)}
    net.LearningRate(["iter"], ["lr"], base_lr=float(lr), policy=lr_policy, dtype=dt, **schedule)
    fused = _fusable_lookup_gradients(net, grads, start) if optimizer in _FUSED and not weight_decay else {}
    start -= len(fused)  # their gradient ops left the net, before the step counter
    if any(isinstance(g, GradientSlice) for g in grads.values()) and optimizer == "sgd":
        net.Scale("lr", "neg_lr", scale=-1.0)
        _join_sparse_chains(net, grads, start)
    for p in model.params:
        g = grads[p]
        state = state_names(p, optimizer)
        if isinstance(g, GradientSlice) and optimizer in ("momentum", "adam"):  # no sparse form: densified
            g = str(net.SparseToDense([g.indices, g.values, p], f"{p}_grad_dense"))
        if p in fused:
            _fused_update(net, p, g, fused[p], optimizer, state, eps)
        elif isinstance(g, GradientSlice):
            _sparse_update(model, net, p, g, optimizer, state, eps, weight_decay)
        elif optimizer == "sgd":
            net.SGD([p, g, "lr"], [p], weight_decay=weight_decay)
        elif optimizer == "momentum":
            net.MomentumSGDUpdate(
                [g, state[0], "lr", p], [g, state[0], p], momentum=momentum, weight_decay=weight_decay, formula="torch"
            )
        elif optimizer == "rwsadagrad" and p in model.sparse:  # a dense (all-reduced) table gradient
            net.RowWiseSparseAdagrad(
                [p, state[0], f"{p}_all_rows", g, "lr"],
                [p, state[0]],
                formula="torch",
                **({} if eps is None else {"epsilon": eps}),
            )
        elif optimizer in ("adagrad", "rwsadagrad"):  # rwsadagrad: dense parameters get Adagrad (dlrm's RWSAdagrad)
            net.Adagrad(
                [p, state[0], g, "lr"],
                [p, state[0]],
                weight_decay=weight_decay,
                formula="torch",
                **({} if eps is None else {"epsilon": eps}),
            )
        else:
            net.Adam(
                [p, *state, g, "lr", "iter"],
                [p, *state],
                beta1=betas[0],
                beta2=betas[1],
                epsilon=1e-8 if eps is None else eps,
                weight_decay=weight_decay,
                formula="torch",
            )


#: the sparse updates fused with the lookup's gradient (Caffe2's ...FusedWithSparseLengthsSumGradient)
_FUSED = {
    "sgd": "SparseSGDFusedWithSparseLengthsSumGradient",
    "adagrad": "SparseAdagradFusedWithSparseLengthsSumGradient",
    "rwsadagrad": "RowWiseSparseAdagradFusedWithSparseLengthsSumGradient",
}


def _fusable_lookup_gradients(net: Net, grads: dict[str, Grad], end: int) -> dict[str, tuple[str, str]]:
    """{table: (dY, LENGTHS)} of the tables whose gradient rows come from a
    ``SparseLengthsSumGradient`` that nothing else reads, and whose dY and LENGTHS no later op
    writes; those ops leave ``net`` (their update reads dY and LENGTHS itself: the same values,
    no [K, row] gradient rows written out)."""
    readers: dict[str, int] = {}
    for op in net.ops:
        for b in {*op.inputs, *op.control_inputs}:
            readers[b] = readers.get(b, 0) + 1
    fused, drop = {}, set()
    for p, g in grads.items():
        if not isinstance(g, GradientSlice):
            continue
        writers = [i for i, op in enumerate(net.ops[:end]) if g.values in op.outputs]
        if len(writers) != 1 or readers.get(g.values, 0):
            continue
        op = net.ops[writers[0]]
        later = {o for o2 in net.ops[writers[0] + 1 :] for o in o2.outputs}
        if op.type == "SparseLengthsSumGradient" and list(op.outputs) == [g.values] and not later & {*op.inputs}:
            fused[p] = (op.inputs[0], op.inputs[1])  # dY and LENGTHS as the update will read them
            drop.add(writers[0])
    net.ops[:] = [op for i, op in enumerate(net.ops) if i not in drop]
    return fused


def _fused_update(
    net: Net, p: str, g: GradientSlice, dy_lengths: tuple[str, str], optimizer: str, state: list[str], eps: float | None
) -> None:
    dy, lengths = dy_lengths
    if optimizer == "sgd":
        net.SparseSGDFusedWithSparseLengthsSumGradient([p, g.indices, dy, "neg_lr", lengths], p)
        return
    getattr(net, _FUSED[optimizer])(
        [p, state[0], g.indices, dy, "lr", lengths],
        [p, state[0]],
        formula="torch",
        **({} if eps is None else {"epsilon": eps}),
    )


def _join_sparse_chains(net: Net, grads: dict[str, Grad], start: int) -> None:
    """Let each table's ``ScatterWeightedSum`` run in one executor chain with the op writing its
    gradient rows (op order and a control input only; the same values).

    The update reads the rows and ``neg_lr``; with those two parents it would start a chain of
    its own, and the async executor would keep the cheap gradient op, then the costly update,
    on the thread ending the interaction's gradient, ahead of the dense gradients. So the
    learning-rate ops (``net.ops[start:]``) move to the front of the net (a first root of a few
    microseconds) and each writer of a table's gradient rows takes ``neg_lr`` as a control
    input: the update then has one parent, and writer plus update form one costly chain that
    the executor hands to another thread.
    """
    rows = {g.values for g in grads.values() if isinstance(g, GradientSlice)}
    for i, op in enumerate(net.ops[:start]):
        if rows.intersection(op.outputs):
            net.ops[i] = dataclasses.replace(
                op, control_inputs=[*op.control_inputs, "neg_lr"]
            )  # never mutate: ops are shared
    lr_ops = net.ops[start:]
    del net.ops[start:]
    net.ops[0:0] = lr_ops


def _sparse_update(
    model: Any,
    net: Net,
    p: str,
    g: GradientSlice,
    optimizer: str,
    state: list[str],
    eps: float | None,
    weight_decay: float,
) -> None:
    if optimizer == "sgd":
        if weight_decay:
            raise NetDefinitionError("expected weight_decay=0 for a sparse SGD table (ScatterWeightedSum has none)", p)
        net.ScatterWeightedSum([p, "one", g.indices, g.values, "neg_lr"], p)
    elif optimizer == "adagrad":
        net.SparseAdagrad(
            [p, state[0], g.indices, g.values, "lr"],
            [p, state[0]],
            weight_decay=weight_decay,
            formula="torch",
            **({} if eps is None else {"epsilon": eps}),
        )
    elif optimizer == "rwsadagrad":  # one moment per row (dlrm's RWSAdagrad)
        net.RowWiseSparseAdagrad(
            [p, state[0], g.indices, g.values, "lr"],
            [p, state[0]],
            formula="torch",
            **({} if eps is None else {"epsilon": eps}),
        )
    else:
        raise NetDefinitionError(
            f"expected sgd or adagrad (or rwsadagrad) for the embedding table {p!r} (a sparse gradient), "
            f"got {optimizer!r}",
            f"model {model.name!r}",
        )


def _add_state(model: Any, optimizer: str) -> None:
    """Fill the optimizer's state once; a second optimizer on the same model is an error."""
    have = model.optimizer
    if have is not None:
        if have != optimizer:
            raise NetDefinitionError(
                f"expected the model's optimizer {have!r} again, got {optimizer!r}", f"model {model.name!r}"
            )
        return
    init, dt = model.init_net, model.dtype.name
    model.optimizer, model.optimizer_state = optimizer, []
    for p in model.params:
        for s in _STATE[optimizer]:
            shape = model.shapes[p][:1] if optimizer == "rwsadagrad" and p in model.sparse else model.shapes[p]
            init.ConstantFill([], f"{p}_{s}", shape=list(shape), value=0.0, dtype=dt)
            model.optimizer_state.append(f"{p}_{s}")
        if optimizer == "rwsadagrad" and p in model.sparse:  # every row, for a dense gradient's update
            init.GivenTensorInt64Fill([], f"{p}_num_rows", shape=[1], values=[int(model.shapes[p][0])])
            init.LengthsRangeFill([f"{p}_num_rows"], f"{p}_all_rows")
    init.ConstantFill([], "iter", shape=[1], value=0, dtype="int64")
    init.ConstantFill([], "one", shape=[1], value=1.0, dtype=dt)
    if "CreateMutex" in registered_ops():
        init.CreateMutex([], "iter_mutex")
