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

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from asyncnet.model.builder import ModelHelper

__all__ = ["dlrm", "click_log", "ClickLog", "auc", "log_loss", "ASYNC_NET_TYPES", "SPLIT_MIN_WIDTH"]


def _mlp(m: ModelHelper, x: str, name: str, dims: Sequence[int], relu_last: bool) -> str:
    """dlrm's create_mlp: W ~ N(0, 2/(in+out)), b ~ N(0, 1/out)."""
    for i, (d_in, d_out) in enumerate(zip(dims, dims[1:]), 1):
        x = m.fc(x, f"{name}{i}", d_in, d_out, weight_init="gaussian", mean=0.0, std=float(np.sqrt(2.0 / (d_in + d_out))),
                 bias_std=float(np.sqrt(1.0 / d_out)))
        if i < len(dims) - 1 or relu_last:
            x = m.relu(x, f"{name}{i}_relu")
    return x


#: net types whose executor runs independent ops at once: there dlrm splits its FC gradients ...
ASYNC_NET_TYPES = ("async_scheduling", "dag", "async_dag")
#: ... when an MLP layer is at least this wide: the split's three more ops a layer cost ~10 us of
#: Python each, more than the zoo's 16-wide layers overlap (async 0.80x simple split, 0.86x not)
SPLIT_MIN_WIDTH = 256


def dlrm(num_dense: int = 8, table_sizes: Sequence[int] = (100, 100, 100), dim: int = 8,
         bottom: Sequence[int] = (16,), top: Sequence[int] = (16,), seed: int = 0,
         split_fc_gradients: bool | None = None, **kw: Any) -> ModelHelper:
    """Inputs ``dense`` [B, num_dense] float, ``ids{k}`` (int64) and ``lengths{k}`` [B] (int32)
    per table, ``click`` [B, 1] float; outputs ``prob`` [B, 1] and ``loss`` (0-d).

    ``split_fc_gradients`` sets :attr:`ModelHelper.split_fc_gradients`: each FC layer's dX runs
    first and its dW beside the layers below and the tables' updates (the same bits either way).
    Default: on the async net types (:data:`ASYNC_NET_TYPES`) when a bottom or top layer is at
    least :data:`SPLIT_MIN_WIDTH` wide."""
    m = ModelHelper("dlrm", seed=seed, **kw)
    if split_fc_gradients is None:
        split_fc_gradients = m.net_type in ASYNC_NET_TYPES and max(*bottom, *top) >= SPLIT_MIN_WIDTH
    m.split_fc_gradients = bool(split_fc_gradients)
    # The bottom MLP first in op order, then the lookups: an async executor's caller takes the
    # first root (the MLP's GEMMs) and its pool thread the lookups, so the dense and the
    # memory-bound sparse work overlap (two lookups at once mostly share memory bandwidth; the
    # lookups first measured 1.22x-1.24x simple on the large DLRM, this order 1.32x-1.34x).
    x = _mlp(m, "dense", "bot", [num_dense, *bottom, dim], relu_last=True)
    pooled = [m.embedding_bag(f"ids{k}", f"lengths{k}", f"emb{k}", n, dim) for k, n in enumerate(table_sizes)]
    feats = m.op("Concat", [x, *pooled], ["feats", "feats_split"], axis=1, add_axis=True)[0]   # [B, F, d]
    z = m.op("BatchMatMul", [feats, feats], "z", trans_b=True)                                  # [B, F, F]
    f = len(table_sizes) + 1
    # row i of the strict lower triangle is one slice Z[:, i, :i]: F-1 slices, not F(F-1)/2
    rows = [m.op("Slice", z, f"z_row{i}", starts=[0, i, 0], ends=[-1, i + 1, i]) for i in range(1, f)]      # [B, 1, i]
    zflat = m.flatten(m.concat(rows, "z_pairs", axis=2), "z_flat")                               # [B, F(F-1)/2]
    r = m.concat([x, zflat], "interaction", axis=1)
    logit = _mlp(m, r, "top", [dim + f * (f - 1) // 2, *top, 1], relu_last=False)
    m.sigmoid_xent_loss(logit, "click")
    return m


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


def click_log(n: int, num_dense: int = 8, table_sizes: Sequence[int] = (100, 100, 100), max_ids: int = 3,
              seed: int = 0, truth_seed: int = 1234) -> ClickLog:
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
