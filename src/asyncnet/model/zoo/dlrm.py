"""DLRM (Naumov et al. 2019, facebookresearch/dlrm) and a generated click log whose best AUC is known.

Dense features -> bottom MLP (ReLU on every layer) -> a vector of size d; each categorical
feature is a multi-hot list of ids pooled by sum from its own table (SparseLengthsSum, sparse
updates); the interaction is every pairwise dot product among the bottom output and the pooled
embeddings (``Z[:, i, j]`` for j < i, dlrm's order, no self-interaction) concatenated with the
bottom output -> top MLP (ReLU, then one logit) -> sigmoid cross entropy.

    >>> from asyncnet.model.zoo.dlrm import dlrm, click_log
    >>> m = dlrm(num_dense=4, table_sizes=(10, 10), dim=4)
    >>> m.sparse == {"emb0_table", "emb1_table"}
    True
    >>> log = click_log(100, num_dense=4, table_sizes=(10, 10))
    >>> sorted(log.batch(range(3)))
    ['click', 'dense', 'ids0', 'ids1', 'lengths0', 'lengths1']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncnet.errors import NetDefinitionError
from asyncnet.model.builder import ModelHelper

__all__ = [
    "dlrm",
    "md_dims",
    "lr_schedule",
    "split_model_args",
    "click_log",
    "ClickLog",
    "auc",
    "log_loss",
    "ASYNC_NET_TYPES",
    "SPLIT_MIN_WIDTH",
]


def _mlp(m: ModelHelper, x: str, name: str, dims: Sequence[int], relu_last: bool) -> str:
    """dlrm's create_mlp: W ~ N(0, 2/(in+out)), b ~ N(0, 1/out)."""
    for i, (d_in, d_out) in enumerate(zip(dims, dims[1:]), 1):
        x = m.fc(
            x,
            f"{name}{i}",
            d_in,
            d_out,
            weight_init="gaussian",
            mean=0.0,
            std=float(np.sqrt(2.0 / (d_in + d_out))),
            bias_std=float(np.sqrt(1.0 / d_out)),
        )
        if i < len(dims) - 1 or relu_last:
            x = m.relu(x, f"{name}{i}_relu")
    return x


#: net types whose executor runs independent ops at once: there dlrm splits its FC gradients ...
ASYNC_NET_TYPES = ("async_scheduling", "dag", "async_dag")
#: ... when an MLP layer is at least this wide: the split's three more ops a layer cost ~10 us of
#: Python each, more than the zoo's 16-wide layers overlap (async 0.80x simple split, 0.86x not)
SPLIT_MIN_WIDTH = 256


INTERACTIONS = ("dot", "cat")
LOSSES = ("bce", "mse", "wbce")
QR_OPERATIONS = ("mult", "add", "concat")


def dlrm(
    num_dense: int = 8,
    table_sizes: Sequence[int] = (100, 100, 100),
    dim: int = 8,
    bottom: Sequence[int] = (16,),
    top: Sequence[int] = (16,),
    seed: int = 0,
    split_fc_gradients: bool | None = None,
    *,
    interaction: str = "dot",
    interaction_itself: bool = False,
    loss: str = "bce",
    loss_weights: tuple[float, float] = (1.0, 1.0),
    loss_threshold: float = 0.0,
    weighted_pooling: str | None = None,
    qr_collisions: int = 0,
    qr_operation: str = "mult",
    qr_threshold: int = 200,
    md_dims: Sequence[int] | None = None,
    md_threshold: int = 200,
    **kw: Any,
) -> ModelHelper:
    """Inputs ``dense`` [B, num_dense] float, ``ids{k}`` (int64) and ``lengths{k}`` [B] (int32)
    per table, ``click`` [B, 1] float; outputs ``prob`` [B, 1] and ``loss`` (0-d).

    The options are facebookresearch/dlrm's flags, with their meanings:

    - ``interaction`` (``--arch-interaction-op``): "dot", the pairwise dot products of the
      bottom output and the pooled embeddings (with ``interaction_itself``,
      ``--arch-interaction-itself``, each vector's dot with itself too), concatenated with the
      bottom output; or "cat", the bottom output and the pooled embeddings side by side.
    - ``loss`` (``--loss-function``): "bce", "mse" (mean of (prob - click)^2) or "wbce" (bce of
      each example times ``loss_weights[click]``, ``--loss-weights``). ``loss_threshold``
      (``--loss-threshold``) in (0, 1) clamps the probability to [t, 1 - t] (no gradient past
      the clamp). asyncnet computes bce from the logit (exact when the sigmoid saturates).
    - ``weighted_pooling`` (``--weighted-pooling``): None, "learned" (a trained weight per table
      row, ones at first, scaling the row in its bag) or "fixed" (those weights, untrained).
    - ``qr_collisions`` > 0 (``--qr-flag``, ``--qr-collisions``): tables of more than
      ``qr_threshold`` rows become a quotient table of ceil(n / c) rows and a remainder table
      of c rows, combined by ``qr_operation`` ("mult", "add", or "concat", which doubles the
      width and needs ``interaction="cat"``).
    - ``md_dims`` (``--md-flag``, see :func:`md_dims`): a width per table; tables of more than
      ``md_threshold`` rows take theirs and a learned projection (no bias) up to ``dim``.

    ``split_fc_gradients`` sets :attr:`ModelHelper.split_fc_gradients`: each FC layer's dX runs
    first and its dW beside the layers below and the tables' updates (the same bits either way).
    Default: on the async net types (:data:`ASYNC_NET_TYPES`) when a bottom or top layer is at
    least :data:`SPLIT_MIN_WIDTH` wide."""
    _check_options(
        interaction,
        loss,
        loss_weights,
        loss_threshold,
        weighted_pooling,
        qr_collisions,
        qr_operation,
        md_dims,
        table_sizes,
    )
    m = ModelHelper("dlrm", seed=seed, **kw)
    if split_fc_gradients is None:
        split_fc_gradients = m.net_type in ASYNC_NET_TYPES and max(*bottom, *top) >= SPLIT_MIN_WIDTH
    m.split_fc_gradients = bool(split_fc_gradients)
    # The bottom MLP first in op order, then the lookups: an async executor's caller takes the
    # first root (the MLP's GEMMs) and its pool thread the lookups, so the dense and the
    # memory-bound sparse work overlap (two lookups at once mostly share memory bandwidth; the
    # lookups first measured 1.22x-1.24x simple on the large DLRM, this order 1.32x-1.34x).
    x = _mlp(m, "dense", "bot", [num_dense, *bottom, dim], relu_last=True)
    pooled, widths = [], []
    for k, n in enumerate(table_sizes):
        bag, width = _embedding(
            m,
            k,
            n,
            dim,
            weighted_pooling,
            qr_collisions if n > qr_threshold else 0,
            qr_operation,
            md_dims[k] if md_dims is not None and n > md_threshold else dim,
        )
        pooled.append(bag)
        widths.append(width)
    if interaction == "dot":
        r, width = _dot_interaction(m, x, pooled, dim, interaction_itself)
    else:
        r, width = m.concat([x, *pooled], "interaction", axis=1), dim + sum(widths)
    logit = _mlp(m, r, "top", [width, *top, 1], relu_last=False)
    _loss(m, logit, loss, loss_weights, loss_threshold)
    return m


def _check_options(
    interaction: str,
    loss: str,
    loss_weights: Sequence[float],
    loss_threshold: float,
    weighted_pooling: str | None,
    qr_collisions: int,
    qr_operation: str,
    md_dims: Sequence[int] | None,
    table_sizes: Sequence[int],
) -> None:
    def bad(what: str, got: Any) -> NetDefinitionError:
        return NetDefinitionError(f"expected {what}, got {got!r}", "dlrm")

    if interaction not in INTERACTIONS:
        raise bad(f"interaction in {list(INTERACTIONS)}", interaction)
    if loss not in LOSSES:
        raise bad(f"loss in {list(LOSSES)}", loss)
    if len(loss_weights) != 2:
        raise bad("loss_weights of two numbers (the weights of click 0 and click 1)", loss_weights)
    if not 0.0 <= loss_threshold < 0.5:
        raise bad("loss_threshold in [0, 0.5)", loss_threshold)
    if weighted_pooling not in (None, "learned", "fixed"):
        raise bad("weighted_pooling None, 'learned' or 'fixed'", weighted_pooling)
    if qr_collisions < 0 or qr_operation not in QR_OPERATIONS:
        raise bad(f"qr_collisions >= 0 and qr_operation in {list(QR_OPERATIONS)}", (qr_collisions, qr_operation))
    if qr_collisions and qr_operation == "concat" and interaction == "dot":
        raise bad("interaction 'cat' with qr_operation 'concat' (it doubles the pooled width)", interaction)
    if md_dims is not None and (len(md_dims) != len(table_sizes) or min(md_dims) < 1):
        raise bad(f"md_dims of {len(table_sizes)} positive widths (one per table)", list(md_dims))


def _embedding(
    m: ModelHelper, k: int, n: int, dim: int, weighted: str | None, collisions: int, operation: str, width: int
) -> tuple[str, int]:
    """Table k's pooled bag [B, width'] and width': plain, weighted, quotient-remainder or
    mixed-dimension (projected up to ``dim``)."""
    ids, lengths = f"ids{k}", f"lengths{k}"
    weights, learned = None, False
    if weighted is not None:
        v = (
            m.param(f"emb{k}_row_w", (n,), "constant", value=1.0)
            if weighted == "learned"
            else m.buffer(f"emb{k}_row_w", (n,), 1.0)
        )
        if weighted == "learned":
            m.sparse.add(v)
        weights = m.op("Gather", [v, ids], f"emb{k}_bag_w")
        learned = weighted == "learned"
    if collisions:
        q_ids = m.op("Div", [ids, _int_const(m, f"emb{k}_qr_c", collisions)], f"emb{k}_q_ids", broadcast=1)
        r_ids = m.op(
            "Sub", [ids, m.op("Mul", [q_ids, f"emb{k}_qr_c"], f"emb{k}_qc", broadcast=1)], f"emb{k}_r_ids", broadcast=1
        )
        # the reference fills both tables U[sqrt(1/n), 1] (its reset_parameters)
        lo = float(np.sqrt(1.0 / n))
        q = _bag(m, f"emb{k}_q", q_ids, lengths, -(-n // collisions), dim, weights, learned, lo, 1.0)
        r = _bag(m, f"emb{k}_r", r_ids, lengths, collisions, dim, weights, learned, lo, 1.0)
        if operation == "concat":
            return m.concat([q, r], f"emb{k}"), 2 * dim
        return m.op("Mul" if operation == "mult" else "Add", [q, r], f"emb{k}"), dim
    bound = float(np.sqrt(1.0 / n))
    if width == dim:
        return _bag(m, f"emb{k}", ids, lengths, n, dim, weights, learned, -bound, bound, name=f"emb{k}"), dim
    bag = _bag(m, f"emb{k}_md", ids, lengths, n, width, weights, learned, -bound, bound)
    limit = float(np.sqrt(6.0 / (width + dim)))  # xavier_uniform_, as the reference's projection
    proj = m.param(f"emb{k}_proj_w", (dim, width), "uniform", min=-limit, max=limit)
    return m.op("MatMul", [bag, proj], f"emb{k}", trans_b=1), dim


def _bag(
    m: ModelHelper,
    table: str,
    ids: str,
    lengths: str,
    rows: int,
    width: int,
    weights: str | None,
    learned: bool,
    lo: float,
    hi: float,
    name: str | None = None,
) -> str:
    if weights is None:
        return m.embedding_bag(ids, lengths, table if name is None else name, rows, width, min=lo, max=hi)
    t = m.param(f"{table}_table", (rows, width), "uniform", min=lo, max=hi)
    m.sparse.add(t)
    return m.op(
        "SparseLengthsWeightedSum", [t, weights, ids, lengths], name or f"{table}_pooled", grad_on_weights=learned
    )


def _int_const(m: ModelHelper, name: str, value: int) -> str:
    return m.op("ConstantFill", [], name, shape=[1], value=int(value), dtype="int64")


def _const(m: ModelHelper, name: str, value: float) -> str:
    return m.op("ConstantFill", [], name, shape=[1], value=float(value), dtype=m.dtype.name)


def _dot_interaction(m: ModelHelper, x: str, pooled: list[str], dim: int, itself: bool) -> tuple[str, int]:
    feats = m.op("Concat", [x, *pooled], ["feats", "feats_split"], axis=1, add_axis=True)[0]  # [B, F, d]
    z = m.op("BatchMatMul", [feats, feats], "z", trans_b=True)  # [B, F, F]
    f = len(pooled) + 1
    # row i of the lower triangle is one slice Z[:, i, :i] (:i + 1 with the diagonal): F slices at most
    extra = 1 if itself else 0
    rows = [
        m.op("Slice", z, f"z_row{i}", starts=[0, i, 0], ends=[-1, i + 1, i + extra]) for i in range(1 - extra, f)
    ]  # [B, 1, i (+1)]
    zflat = m.flatten(m.concat(rows, "z_pairs", axis=2), "z_flat")  # [B, pairs]
    return m.concat([x, zflat], "interaction", axis=1), dim + f * (f - 1 + 2 * extra) // 2


def _loss(m: ModelHelper, logit: str, loss: str, weights: Sequence[float], threshold: float) -> None:
    """``prob`` = sigmoid(logit), clamped to [t, 1 - t] with a threshold (as the logit is); the
    loss from the logit (bce, wbce) or from prob (mse)."""
    if threshold > 0:
        lo, hi = float(np.log(threshold / (1 - threshold))), float(np.log((1 - threshold) / threshold))
        # clamp(z, lo, hi) = lo + relu(z - lo) - relu(z - hi): its gradient is 0 past either end
        above_lo = m.relu(
            m.op("Sub", [logit, _const(m, "logit_lo", lo)], "logit_minus_lo", broadcast=1), "logit_above_lo"
        )
        above_hi = m.relu(
            m.op("Sub", [logit, _const(m, "logit_hi", hi)], "logit_minus_hi", broadcast=1), "logit_above_hi"
        )
        inside = m.op("Sub", [above_lo, above_hi], "logit_shift")
        logit = m.op("Add", [inside, "logit_lo"], "logit_clamped", broadcast=1)
    if loss == "bce":
        m.sigmoid_xent_loss(logit, "click")
        return
    prob = m.sigmoid(logit, "prob")
    if loss == "mse":
        half = m.op("SquaredL2Distance", [prob, "click"], "loss_half_sq")  # [B]: (p - y)^2 / 2
        mean = m.op("AveragedLoss", half, "loss_half")
        m.loss = str(m.op("Scale", mean, "loss", scale=2.0))
        return
    xent = m.op("SigmoidCrossEntropyWithLogits", [logit, "click"], "loss_xent")  # [B]
    w0, w1 = (float(w) for w in weights)
    scaled = m.op("Scale", m.op("Squeeze", "click", "click_flat", dims=[1]), "click_w", scale=w1 - w0)
    per = m.op("Add", [scaled, _const(m, "loss_w0", w0)], "example_w", broadcast=1)
    m.loss = str(m.op("AveragedLoss", m.op("Mul", [xent, per], "loss_weighted"), "loss"))


def md_dims(table_sizes: Sequence[int], dim: int, temperature: float = 0.3, round_dims: bool = False) -> list[int]:
    """The mixed widths of facebookresearch/dlrm's ``--md-flag`` (its md_solver with d0 = dim):
    the smallest table gets ``dim``, a table of n rows dim * (n_min / n)^temperature (at least
    1), rounded, or to a power of two with ``round_dims`` (``--md-round-dims``).

        >>> md_dims([10, 1000, 100000], 16, temperature=0.5)
        [16, 2, 1]
    """
    n = np.asarray(table_sizes, np.float64)
    order = np.argsort(n, kind="stable")
    scale = dim * n[order][0] ** temperature
    d = np.maximum(scale * n[order] ** -temperature, 1.0)
    d[0] = dim
    d = np.round(d)
    if round_dims:
        d = 2.0 ** np.round(np.log2(d))
    out = np.empty_like(d)
    out[order] = d
    return [int(v) for v in out]


def lr_schedule(num_warmup_steps: int = 0, decay_start_step: int = 0, num_decay_steps: int = 0) -> dict[str, Any]:
    """The ``lr_args`` of :meth:`ModelHelper.train_net` (and of the trainers' ``Program``) for facebookresearch/dlrm's learning-rate
    policy (``--lr-num-warmup-steps``, ``--lr-decay-start-step``, ``--lr-num-decay-steps``):
    a linear warm-up, then a quadratic decay (LearningRate's policy ``warmupPolyDecay``).

        >>> lr_schedule(100, 200, 50)["lr_policy"]
        'warmupPolyDecay'
    """
    return {
        "lr_policy": "warmupPolyDecay",
        "num_iter": int(num_warmup_steps),
        "decay_start_iter": int(decay_start_step),
        "num_decay_iter": int(num_decay_steps),
    }


#: keys of a run's ``model_args`` that are not dlrm()'s: the Criteo readers' options and the schedule's
DATA_KEYS = ("max_ind_range", "bad_rows", "test_fraction", "data_sub_sample_rate", "numpy_rand_seed")
SCHEDULE_KEYS = ("lr_num_warmup_steps", "lr_decay_start_step", "lr_num_decay_steps")


def split_model_args(args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A run's ``model_args`` (``asyncnet train --model-arg KEY=VALUE``) as the keyword arguments
    of :func:`dlrm` and the :meth:`~asyncnet.model.ModelHelper.train_net` arguments of the
    schedule (None without one); the data options are dropped (the readers take them).

        >>> split_model_args({"interaction": "cat", "lr_num_warmup_steps": 10, "max_ind_range": 50})
        ({'interaction': 'cat'}, {'lr_policy': 'warmupPolyDecay', 'num_iter': 10, 'decay_start_iter': 0, 'num_decay_iter': 0})
    """
    import inspect

    known = set(inspect.signature(dlrm).parameters) - {"kw", "seed"}
    unknown = sorted(k for k in args if k not in known and k not in DATA_KEYS and k not in SCHEDULE_KEYS)
    if unknown:
        raise NetDefinitionError(
            f"expected dlrm options among {sorted(known | set(DATA_KEYS) | set(SCHEDULE_KEYS))}, got {unknown}",
            "dlrm model_args",
        )
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in args.items() if k in known}
    schedule = {k: int(args[k]) for k in SCHEDULE_KEYS if k in args}
    lr_args = (
        lr_schedule(
            schedule.get("lr_num_warmup_steps", 0),
            schedule.get("lr_decay_start_step", 0),
            schedule.get("lr_num_decay_steps", 0),
        )
        if schedule
        else None
    )
    return kw, lr_args


@dataclass
class ClickLog:
    """Examples of a click log: dense [N, D], ids [K][N, L] padded, lengths [N, K], clicks [N],
    and ``p`` [N], the ground-truth click probabilities they were drawn from."""

    dense: np.ndarray
    ids: list[np.ndarray]
    lengths: np.ndarray
    clicks: np.ndarray
    p: np.ndarray

    def __len__(self) -> int:
        return len(self.clicks)

    def batch(self, rows: Iterable[int]) -> dict[str, np.ndarray]:
        """The feeds of the examples ``rows`` for :func:`dlrm`."""
        rows = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows), np.int64)
        out = {"dense": self.dense[rows], "click": self.clicks[rows, None].astype(np.float32)}
        lengths = self.lengths[rows]
        for k, ids in enumerate(self.ids):
            lens = lengths[:, k]
            out[f"lengths{k}"] = lens.astype(np.int32)
            out[f"ids{k}"] = ids[rows][np.arange(ids.shape[1])[None, :] < lens[:, None]]  # row-major: bag by bag
        return out


def click_log(
    n: int,
    num_dense: int = 8,
    table_sizes: Sequence[int] = (100, 100, 100),
    max_ids: int = 3,
    seed: int = 0,
    truth_seed: int = 1234,
) -> ClickLog:
    """``n`` examples from a fixed logistic ground truth (drawn from ``truth_seed``):
    logit = dense . w + sum over tables and ids of u_k[id] + b, click ~ Bernoulli(sigmoid(logit)).
    ``seed`` draws the examples, so two seeds give a train and a test log of the same truth."""
    t = np.random.default_rng(truth_seed)
    w, b = t.normal(0.0, 0.5, num_dense), -0.5
    u = [t.normal(0.0, 0.8, size) for size in table_sizes]
    r = np.random.default_rng(seed)
    dense = r.normal(size=(n, num_dense)).astype(np.float32)
    lengths = r.integers(1, max_ids + 1, (n, len(table_sizes)))
    ids = [r.integers(0, size, (n, max_ids)) for size in table_sizes]
    logit = dense.astype(np.float64) @ w + b
    for k, (ik, uk) in enumerate(zip(ids, u)):
        logit += np.where(np.arange(max_ids)[None, :] < lengths[:, k, None], uk[ik], 0.0).sum(axis=1)
    p = 1.0 / (1.0 + np.exp(-logit))
    return ClickLog(dense, ids, lengths, (r.random(n) < p).astype(np.int64), p)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties counted half.

    >>> auc(np.array([0, 1, 1]), np.array([0.1, 0.9, 0.1]))
    0.75
    """
    labels, scores = np.asarray(labels).ravel().astype(bool), np.asarray(scores, np.float64).ravel()
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        raise ValueError(f"expected both classes in labels, found {pos} positives and {neg} negatives")
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    _, first, counts = np.unique(s, return_index=True, return_counts=True)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)  # average 1-based rank of ties
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def log_loss(labels: np.ndarray, probs: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross entropy of probabilities (clipped to [eps, 1 - eps])."""
    p = np.clip(np.asarray(probs, np.float64).ravel(), eps, 1 - eps)
    y = np.asarray(labels).ravel()
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
