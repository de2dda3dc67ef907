"""Small Caffe2 feature-processing ops.

- ``KeySplit(KEYS)`` with ``categorical_limit`` outputs: output k holds the positions (int32)
  of the keys equal to k.
- ``MergeIdLists(LENGTHS_0, VALUES_0, ...)``: per row, the sorted union of the rows' id lists;
  outputs the merged LENGTHS (int32) and VALUES.
- ``IndexHash(INDICES)``: each index hashed (seed, then every byte of it, ``h = h * 65537 + byte``
  in the index's integer type) and mapped into ``[0, modulo)``.
- ``LengthsToShape(LENGTHS)``: ``[len(LENGTHS), LENGTHS[0]]`` for equal lengths.
- ``SinusoidPositionEncoding(POSITIONS)``: ``[*POSITIONS.shape, embedding_size]`` float32, entry k
  of position x being ``amplitude * sin(x / alpha^(k / embedding_size))`` for even k, ``cos`` for odd.
- ``BernoulliJSD(P, Q)``: the Jensen-Shannon divergence of Bernoulli(P) and Bernoulli(Q),
  elementwise; ``BernoulliJSDGradient`` gives dP.
- ``NGramFromCategorical(FLOATS)``: the mixed-radix id of each row's categorical columns.
- ``SparseNormalize(PARAM, INDICES[, GRAD])``: rows INDICES of PARAM rescaled to norm ``norm``
  (only those above it with ``use_max_norm``, the default), in place.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("k", np.array([1, 0, 1, 2], np.int64))
    >>> net = an.Net("ks"); _ = net.KeySplit("k", ["a", "b", "c"], categorical_limit=3)
    >>> ws.run_net_once(net); ws.fetch("a"), ws.fetch("b")
    (array([1], dtype=int32), array([0, 2], dtype=int32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops.grad import GradOut, MakerResult, output_grad

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _where(ctx: Any, i: int) -> str:
    return f"input {i} {ctx.op.inputs[i]!r}"


def _ints(ctx: Any, x: Any, i: int, ndim: int | None = 1) -> np.ndarray:
    x = _np(x)
    if (ndim is not None and x.ndim != ndim) or x.dtype.kind not in "iu":
        raise TypeError(f"expected {ndim}-D ints in {_where(ctx, i)}, got {x.dtype} {x.shape}")
    return x


# -- KeySplit, MergeIdLists, IndexHash, LengthsToShape --------------------------------------------


@register_op(
    "KeySplit",
    outputs=(1, None),
    args=[Arg("categorical_limit", int, Arg.REQUIRED, "the number of outputs (keys lie in [0, limit))")],
    inputs_doc=("KEYS (1-D ints)",),
    outputs_doc=("one int32 vector per key value: the positions of that key",),
    doc="Split positions by key: output k lists (int32) where KEYS equals k.",
)
def key_split(ctx: Any, keys: Any) -> Any:
    k = _ints(ctx, keys, 0)
    limit = ctx.args["categorical_limit"]
    if len(ctx.op.outputs) != limit:
        raise ValueError(f"expected categorical_limit={limit} outputs, got {len(ctx.op.outputs)}")
    if k.size and (k.min() < 0 or k.max() >= limit):
        raise ValueError(f"expected keys in [0, {limit}) in {_where(ctx, 0)}, got [{k.min()}, {k.max()}]")
    out = tuple(np.flatnonzero(k == v).astype(np.int32) for v in range(limit))
    return out[0] if limit == 1 else out


@register_op(
    "MergeIdLists",
    inputs=(2, None),
    outputs=2,
    inputs_doc=("LENGTHS_0 [B]", "VALUES_0", "... more (LENGTHS, VALUES) pairs of the same B"),
    outputs_doc=("MERGED_LENGTHS [B] int32", "MERGED_VALUES: each row's sorted distinct ids"),
    doc="Merge id lists row by row: each row's ids from every list, sorted, duplicates dropped.",
)
def merge_id_lists(ctx: Any, *pairs: Any) -> tuple[np.ndarray, np.ndarray]:
    if len(pairs) % 2:
        raise ValueError(f"expected (LENGTHS, VALUES) pairs of inputs, got {len(pairs)} inputs")
    rows: list[list[np.ndarray]] = []
    for j in range(0, len(pairs), 2):
        lens, vals = _ints(ctx, pairs[j], j), _ints(ctx, pairs[j + 1], j + 1)
        if (lens.size and lens.min() < 0) or int(lens.sum()) != vals.size:
            raise ValueError(f"expected lengths in {_where(ctx, j)} summing to {vals.size}, got {lens.tolist()}")
        if rows and lens.size != len(rows):
            raise ValueError(f"expected {len(rows)} rows in {_where(ctx, j)}, got {lens.size}")
        rows = rows or [[] for _ in range(lens.size)]
        for b, piece in enumerate(np.split(vals, np.cumsum(lens)[:-1]) if lens.size else []):
            rows[b].append(piece)
    dtype = _np(pairs[1]).dtype
    merged = [np.unique(np.concatenate(r)).astype(dtype) for r in rows]
    values = np.concatenate(merged) if merged else np.zeros(0, dtype)
    return np.array([m.size for m in merged], np.int32), values


def _index_hash(x: np.ndarray, seed: int, modulo: int) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    mask = (1 << bits) - 1
    out = np.empty(x.shape, x.dtype)
    flat = out.reshape(-1)
    for i, raw in enumerate(x.reshape(-1)):
        h = (0xDEADBEEF * seed) & mask
        for b in np.array([raw], x.dtype).view(np.int8):
            h = (h * 65537 + int(b)) & mask
        h = h - (1 << bits) if h >> (bits - 1) else h  # as the signed index type
        rem = h % modulo if h >= 0 else -(-h % modulo)  # C++'s remainder: the sign of h
        flat[i] = (modulo + rem) % modulo
    return out


@register_op(
    "IndexHash",
    args=[Arg("seed", int, 0, "the hash's seed"), Arg("modulo", int, 2**31 - 1, "the hashed range [0, modulo)")],
    inputs_doc=("INDICES (int32/int64)",),
    outputs_doc=("HASHED_INDICES (same type and shape)",),
    doc="Hash each index (seed, then its bytes, h = h * 65537 + byte in the index type) into [0, modulo).",
)
def index_hash(ctx: Any, indices: Any) -> np.ndarray:
    x = _np(indices)
    if x.dtype not in (np.int32, np.int64):
        raise TypeError(f"expected int32 or int64 indices in {_where(ctx, 0)}, got {x.dtype}")
    if ctx.args["modulo"] <= 0:
        raise ValueError(f"expected a positive modulo, got {ctx.args['modulo']}")
    return _index_hash(x, ctx.args["seed"], ctx.args["modulo"])


@register_op(
    "LengthsToShape",
    inputs_doc=("LENGTHS (1-D ints, all equal)",),
    outputs_doc=("SHAPE [len(LENGTHS), LENGTHS[0]] int32",),
    doc="The shape of the matrix equal LENGTHS describe: [len(LENGTHS), LENGTHS[0]].",
)
def lengths_to_shape(ctx: Any, lengths: Any) -> np.ndarray:
    lens = _ints(ctx, lengths, 0)
    if lens.size and np.any(lens != lens[0]):
        raise ValueError(f"expected equal lengths in {_where(ctx, 0)}, got {lens.tolist()}")
    return np.array([lens.size, int(lens[0]) if lens.size else 0], np.int32)


register_no_gradient("KeySplit", "MergeIdLists", "IndexHash", "LengthsToShape")


# -- SinusoidPositionEncoding ---------------------------------------------------------------------


@register_op(
    "SinusoidPositionEncoding",
    args=[
        Arg("embedding_size", int, 100, "the encoding's length"),
        Arg("alpha", float, 10000.0, "the wavelength base"),
        Arg("amplitude", float, 1.0, "the sinusoids' amplitude"),
    ],
    inputs_doc=("POSITIONS (ints, any shape)",),
    outputs_doc=("OUTPUT [*POSITIONS.shape, embedding_size] float32",),
    doc="Sinusoid position encodings: amplitude * sin (even k) or cos (odd k) of x / alpha^(k / embedding_size).",
)
def sinusoid_position_encoding(ctx: Any, positions: Any) -> np.ndarray:
    pos = _ints(ctx, positions, 0, None).astype(np.float64)
    size = ctx.args["embedding_size"]
    k = np.arange(size)
    x = pos[..., None] / np.power(ctx.args["alpha"], k / size)
    out = np.where(k % 2 == 0, np.sin(x), np.cos(x)) * ctx.args["amplitude"]
    return out.astype(np.float32)


register_no_gradient("SinusoidPositionEncoding")


# -- BernoulliJSD ---------------------------------------------------------------------------------

_LOG_FLOOR = 1e-20


def _entropy(p: np.ndarray) -> np.ndarray:
    inside = (p > 0) & (p < 1)
    q = np.where(inside, p, 0.5)
    return np.where(inside, -q * np.log(q) - (1 - q) * np.log(1 - q), 0.0)


def _logit(p: np.ndarray) -> np.ndarray:
    return -np.log(1.0 / np.maximum(p, _LOG_FLOOR) - 1.0)


def _pq(ctx: Any, p: Any, q: Any) -> tuple[np.ndarray, np.ndarray]:
    p, q = _np(p), _np(q)
    if p.shape != q.shape or p.dtype.kind != "f":
        raise ValueError(f"expected float P and Q of one shape, got {p.dtype} {p.shape} and {q.dtype} {q.shape}")
    return p, q


@register_op(
    "BernoulliJSD",
    inputs=2,
    differentiable=True,
    inputs_doc=("P (probabilities)", "Q (probabilities, P's shape)"),
    outputs_doc=("L: H((P + Q) / 2) - (H(P) + H(Q)) / 2, elementwise",),
    doc="The Jensen-Shannon divergence of Bernoulli(P) and Bernoulli(Q), elementwise.",
)
def bernoulli_jsd(ctx: Any, p: Any, q: Any) -> np.ndarray:
    p, q = _pq(ctx, p, q)
    p64, q64 = p.astype(np.float64), q.astype(np.float64)
    return (_entropy((p64 + q64) / 2) - (_entropy(p64) + _entropy(q64)) / 2).astype(p.dtype)


@register_op(
    "BernoulliJSDGradient",
    inputs=3,
    inputs_doc=("dL", "P", "Q"),
    outputs_doc=("dP",),
    doc="Gradient of BernoulliJSD with respect to P: dL * (logit(P) - logit((P + Q) / 2)) / 2.",
)
def bernoulli_jsd_gradient(ctx: Any, dl: Any, p: Any, q: Any) -> np.ndarray:
    p, q = _pq(ctx, p, q)
    dl = _np(dl)
    if dl.shape != p.shape:
        raise ValueError(f"expected dL of P's shape {p.shape}, got {dl.shape}")
    p64, q64 = p.astype(np.float64), q.astype(np.float64)
    return (dl * (_logit(p64) - _logit((p64 + q64) / 2)) / 2).astype(p.dtype)


@register_gradient("BernoulliJSD")
def _bernoulli_jsd_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    gop = OperatorDef("BernoulliJSDGradient", [output_grad(op, gout), op.inputs[0], op.inputs[1]], ["#dp"])
    return [gop], ["#dp", None]


# -- SparseNormalize ------------------------------------------------------------------------------


@register_op(
    "SparseNormalize",
    inputs=(2, 3),
    allow_inplace={0: 0},
    args=[
        Arg("use_max_norm", bool, True, "only rescale rows whose norm exceeds norm"),
        Arg("norm", float, 1.0, "the target norm"),
    ],
    inputs_doc=("PARAM [N, ...]", "INDICES (rows to normalize)", "GRAD (optional, unused)"),
    outputs_doc=("PARAM with rows INDICES rescaled to the target norm",),
    doc="Rescale rows INDICES of PARAM to norm (with use_max_norm, only the rows above it).",
)
def sparse_normalize(ctx: Any, param: Any, indices: Any, *grad: Any) -> np.ndarray:
    w = _np(param).copy()
    idx = _ints(ctx, indices, 1, None).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= w.shape[0]):
        raise ValueError(f"expected indices in [0, {w.shape[0]}) in {_where(ctx, 1)}, got [{idx.min()}, {idx.max()}]")
    target = ctx.args["norm"]
    for i in np.unique(idx):
        n = float(np.linalg.norm(w[i].astype(np.float64))) + 1e-12
        if not ctx.args["use_max_norm"] or n > target:
            w[i] = w[i] * (target / n)
    return w


register_no_gradient("SparseNormalize")


# -- NGramFromCategorical -------------------------------------------------------------------------


@register_op(
    "NGramFromCategorical",
    args=[
        Arg("col_ids", list, Arg.REQUIRED, "the columns of FLOATS read", item_type=int),
        Arg("categorical_limits", list, Arg.REQUIRED, "each column's vocabulary size", item_type=int),
        Arg("vals", list, Arg.REQUIRED, "the vocabularies, concatenated in col_ids order", item_type=int),
    ],
    inputs_doc=("FLOATS [N, D]",),
    outputs_doc=("OUTPUT [N] int32: the mixed-radix code of each row's vocabulary positions",),
    doc="Encode each row's categorical columns as one id: sum over columns k of "
    "(position of round(FLOATS[i, col_ids[k]]) in vocabulary k, 0 if absent) * prod(limits before k).",
)
def ngram_from_categorical(ctx: Any, floats: Any) -> np.ndarray:
    x = _np(floats)
    cols, limits, vals = ctx.args["col_ids"], ctx.args["categorical_limits"], ctx.args["vals"]
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D FLOATS in {_where(ctx, 0)}, got shape {x.shape}")
    if len(cols) != len(limits) or sum(limits) != len(vals):
        raise ValueError(
            f"expected one limit per column and sum(categorical_limits) = {sum(limits)} vals, "
            f"got {len(cols)} columns, {len(limits)} limits, {len(vals)} vals"
        )
    if cols and (min(cols) < 0 or max(cols) >= x.shape[1]):
        raise ValueError(f"expected col_ids in [0, {x.shape[1]}), got {cols}")
    out = np.zeros(x.shape[0], np.int64)
    base, start = 1, 0
    for col, limit in zip(cols, limits):
        vocab = {v: i for i, v in reversed(list(enumerate(vals[start : start + limit])))}
        rounded = np.sign(x[:, col]) * np.floor(np.abs(x[:, col].astype(np.float64)) + 0.5)  # C's round
        out += base * np.array([vocab.get(int(v), 0) for v in rounded], np.int64)
        base, start = base * limit, start + limit
    return out.astype(np.int32)


register_no_gradient("NGramFromCategorical")
