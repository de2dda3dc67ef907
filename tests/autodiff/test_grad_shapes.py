"""Every registered gradient gives each input a gradient of that input's shape and dtype.

For each op with a gradient, hypothesis draws inputs (float32 or float64, shapes with size-1
dims, broadcasting where the op broadcasts), the op runs, a loss sum_i mean(out_i * r_i) (random
r_i) is put on its float outputs, and :func:`asyncnet.autodiff.add_gradient_ops` builds the
backward ops. Each dense input gradient must have its input's shape and dtype; a sparse one
(``GradientSlice``) must have values of shape ``[len(indices), *DATA.shape[1:]]`` and DATA's dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.core.registry import _REGISTRY, _no_gradient_maker
from asyncnet.ops.sparse import GradientSlice

pytestmark = pytest.mark.timeout(300)

Case = tuple[list[np.ndarray], dict[str, Any], int, list[int], list[int]]  # inputs, args, n_out, wrt, loss outputs
BUILDERS: dict[str, Callable[[Any, np.dtype], Case]] = {}
NO_CPU_CASE = {"CopyCPUToGPU", "CopyGPUToCPU"}  # need a cuda device
INPLACE = "__inplace__"  # in a case's args: {output index: input index} that must be the same blob


def builder(*names: str):
    def deco(fn):
        for n in names:
            BUILDERS[n] = fn
        return fn

    return deco


def dims(draw, lo: int = 1, hi: int = 4, low: int = 1, high: int = 4) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(low, high), min_size=lo, max_size=hi)))


def arr(draw, shape, dt, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    seed = draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dt)


# -- elementwise and shape ops ----------------------------------------------------------------
@builder("Relu", "Sigmoid", "Tanh", "Copy", "AveragedLoss")
def _unary(draw, dt):
    x = arr(draw, dims(draw, 0), dt)
    return [x], {}, 1, [0], [0]


@builder("Abs", "Exp", "Sqr", "Cube", "Negative", "Cos", "Sin", "Tan", "Softsign")
def _caffe2_unary(draw, dt):
    return [arr(draw, dims(draw, 0), dt, -1.0, 1.0)], {}, 1, [0], [0]


@builder("Log", "Sqrt", "Rsqrt", "Reciprocal")
def _caffe2_unary_positive(draw, dt):
    return [arr(draw, dims(draw, 0), dt, 0.5, 2.0)], {}, 1, [0], [0]


@builder("LeakyRelu", "Elu")
def _caffe2_parametric(draw, dt):
    return [arr(draw, dims(draw, 0), dt)], {"alpha": draw(st.floats(0.01, 2.0))}, 1, [0], [0]


@builder("PRelu")
def _prelu(draw, dt):
    shape = dims(draw, 2, 4)
    n = draw(st.sampled_from([1, shape[1]]))
    return [arr(draw, shape, dt), arr(draw, (n,), dt, 0.05, 0.5)], {}, 1, [0, 1], [0]


@builder(*(f"Reduce{side}{kind}" for side in ("Front", "Back") for kind in ("Sum", "Mean", "Max")))
def _caffe2_reduce(draw, dt):
    shape = dims(draw, 1, 4)
    return [arr(draw, shape, dt)], {"num_reduce_dim": draw(st.integers(0, len(shape)))}, 1, [0], [0]


@builder("Swish", "NanCheck")
def _caffe2_swish(draw, dt):
    return [arr(draw, dims(draw, 0), dt)], {}, 1, [0], [0]


@builder("Pow")
def _caffe2_pow(draw, dt):
    shape = dims(draw, 1)
    x = arr(draw, shape, dt, 0.5, 2.0)
    if draw(st.booleans()):
        return [x], {"exponent": draw(st.floats(-2.0, 3.0))}, 1, [0], [0]
    return [x, arr(draw, shape[draw(st.integers(0, len(shape))) :], dt)], {}, 1, [0, 1], [0]


@builder(*(f"Reduce{kind}" for kind in ("Sum", "Mean", "Max", "Min")))
def _caffe2_reduce_axes(draw, dt):
    shape = dims(draw, 1, 4)
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda a: a % len(shape)))
    return [arr(draw, shape, dt)], {"axes": axes, "keepdims": draw(st.booleans())}, 1, [0], [0]


@builder("LRN")
def _caffe2_lrn(draw, dt):
    shape = dims(draw, 2, 4)
    args = {
        "size": draw(st.integers(1, 4)),
        "alpha": 0.1,
        "beta": 0.75,
        "order": draw(st.sampled_from(["NCHW", "NHWC"])),
    }
    return [arr(draw, shape, dt)], args, draw(st.integers(1, 2)), [0], [0]


@builder("SpatialSoftmaxWithLoss")
def _caffe2_spatial_softmax_with_loss(draw, dt):
    n, d, h, w = dims(draw, 4, 4)
    label = np.random.default_rng(draw(st.integers(0, 99))).integers(-1, d, (n, h, w)).astype(np.int32)
    weight = [arr(draw, (n, h, w), dt, 0.1, 1.0)] if draw(st.booleans()) else []
    return [arr(draw, (n, d, h, w), dt), label, *weight], {}, 2, [0], [1]


@builder("Logit")
def _caffe2_logit(draw, dt):
    return [arr(draw, dims(draw, 0), dt, 0.05, 0.95)], {"eps": 0.01}, 1, [0], [0]


@builder("EnsureDense", "FlattenToVec")
def _caffe2_ensure_dense(draw, dt):
    return [arr(draw, dims(draw, 0), dt)], {}, 1, [0], [0]


@builder("RowMul")
def _caffe2_row_mul(draw, dt):
    shape = dims(draw, 1, 4)
    return [arr(draw, shape, dt), arr(draw, shape[:1], dt)], {}, 1, [0, 1], [0]


@builder("DotProduct")
def _caffe2_dot_product(draw, dt):
    shape = dims(draw, 1, 2)
    return [arr(draw, shape, dt), arr(draw, shape, dt)], {}, 1, [0, 1], [0]


@builder("DotProductWithPadding")
def _caffe2_dot_product_with_padding(draw, dt):
    n, m = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    k = m * draw(st.integers(1, 3))
    x, y = arr(draw, (n, m), dt), arr(draw, (n, k), dt)
    args = {"replicate": draw(st.booleans()), "pad_value": 0.5}
    return ([y, x] if draw(st.booleans()) else [x, y]), args, 1, [0, 1], [0]


@builder("Max", "Min")
def _caffe2_minmax(draw, dt):
    shape = dims(draw, 0)
    n = draw(st.integers(1, 3))
    return [arr(draw, shape, dt) for _ in range(n)], {}, 1, list(range(n)), [0]


def _python_double(inputs, outputs):
    outputs[0].feed(inputs[0].data * 2)


def _python_double_grad(inputs, outputs):  # inputs: x, y, dy
    outputs[0].feed(inputs[2].data * 2)


@builder("Python")
def _python(draw, dt):
    from caffe2.python import _python_op

    token = _python_op.register(_python_double, _python_double_grad)
    return [arr(draw, dims(draw, 0), dt)], {"token": token}, 1, [0], [0]


@builder("Selu", "Softplus", "ThresholdedRelu", "NegateGradient")
def _caffe2_pointwise(draw, dt):
    return [arr(draw, dims(draw, 0), dt)], {}, 1, [0], [0]


@builder("LpNorm")
def _caffe2_lp_norm(draw, dt):
    args = {"p": draw(st.sampled_from([1, 2])), "average": draw(st.booleans())}
    return [arr(draw, dims(draw, 0), dt)], args, 1, [0], [0]


@builder("Mean")
def _caffe2_mean(draw, dt):
    shape = dims(draw, 0)
    n = draw(st.integers(1, 3))
    return [arr(draw, shape, dt) for _ in range(n)], {}, 1, list(range(n)), [0]


@builder("SquareRootDivide")
def _caffe2_square_root_divide(draw, dt):
    shape = dims(draw, 1, 3)
    scale = np.asarray(draw(st.lists(st.integers(-1, 5), min_size=shape[0], max_size=shape[0])), np.int32)
    return [arr(draw, shape, dt), scale], {}, 1, [0], [0]


@builder("LengthsTile")
def _caffe2_lengths_tile(draw, dt):
    rows = draw(st.integers(1, 4))
    lengths = np.asarray(draw(st.lists(st.integers(1, 3), min_size=rows, max_size=rows)), np.int32)
    return [arr(draw, (rows, *dims(draw, 0, 2)), dt), lengths], {}, 1, [0], [0]


@builder("LengthsSum", "PackSegments")
def _caffe2_segments(draw, dt):
    lengths = np.asarray(draw(st.lists(st.integers(1, 3), min_size=1, max_size=4)), np.int32)
    data = arr(draw, (int(lengths.sum()), *dims(draw, 0, 2)), dt)
    return [lengths, data], {}, 1, [1], [0]


@builder("LengthsSum")
def _caffe2_lengths_sum(draw, dt):
    lengths, data = _caffe2_segments(draw, dt)[0]
    return [data, lengths], {}, 1, [0], [0]


@builder("UnpackSegments")
def _caffe2_unpack_segments(draw, dt):
    lengths = np.asarray(draw(st.lists(st.integers(1, 3), min_size=1, max_size=4)), np.int32)
    packed = arr(draw, (lengths.size, 3, *dims(draw, 0, 2)), dt)
    return [lengths, packed], {}, 1, [1], [0]


@builder("Normalize")
def _caffe2_normalize(draw, dt):
    x = arr(draw, dims(draw, 1), dt, 0.5, 1.0)
    return [x], {"axis": draw(st.integers(-x.ndim, x.ndim - 1))}, 1, [0], [0]


@builder("InstanceNorm")
def _caffe2_instance_norm(draw, dt):
    order = draw(st.sampled_from(["NCHW", "NHWC"]))
    n, c, spatial = draw(st.integers(1, 3)), draw(st.integers(1, 3)), dims(draw, 1, 2, 2)
    shape = (n, c, *spatial) if order == "NCHW" else (n, *spatial, c)
    return [arr(draw, shape, dt), arr(draw, (c,), dt), arr(draw, (c,), dt)], {"order": order}, 1, [0, 1, 2], [0]


@builder("TopK")
def _caffe2_top_k(draw, dt):
    shape = dims(draw, 1, 3)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    x = arr(draw, shape, dt)
    return [x], {"k": draw(st.integers(1, shape[axis])), "axis": axis}, 2, [0], [0]


@builder("Tile")
def _caffe2_tile(draw, dt):
    shape = dims(draw, 1, 3)
    return (
        [arr(draw, shape, dt)],
        {"tiles": draw(st.integers(1, 3)), "axis": draw(st.integers(0, len(shape) - 1))},
        1,
        [0],
        [0],
    )


@builder("AddPadding")
def _caffe2_add_padding(draw, dt):
    lengths = np.asarray(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)), np.int32)
    inner = dims(draw, 0, 2)
    data = arr(draw, (int(lengths.sum()), *inner), dt)
    pads = [arr(draw, inner, dt) for _ in range(draw(st.integers(0, 2)))]
    args = {"padding_width": draw(st.integers(1, 2)), "end_padding_width": draw(st.integers(0, 2))}
    return [data, lengths, *pads], args, 2, [0] + list(range(2, 2 + len(pads))), [0]


@builder("ReversePackedSegs")
def _caffe2_reverse_packed_segs(draw, dt):
    t, b = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    lengths = np.asarray(draw(st.lists(st.integers(0, t), min_size=b, max_size=b)), np.int32)
    return [arr(draw, (t, b, *dims(draw, 0, 2)), dt), lengths], {}, 1, [0], [0]


@builder("CosineSimilarity", "L1Distance")
def _caffe2_row_distance(draw, dt):
    shape = dims(draw, 1, 2)
    return [arr(draw, shape, dt), arr(draw, shape, dt)], {}, 1, [0, 1], [0]


@builder("MarginRankingCriterion")
def _caffe2_margin_ranking(draw, dt):
    shape = dims(draw, 1, 2)
    y = np.where(np.random.default_rng(draw(st.integers(0, 99))).random(shape) < 0.5, -1, 1).astype(np.int32)
    return [arr(draw, shape, dt), arr(draw, shape, dt), y], {"margin": 0.5}, 1, [0, 1], [0]


@builder("CosineEmbeddingCriterion")
def _caffe2_cosine_embedding(draw, dt):
    shape = dims(draw, 1, 2)
    y = np.where(np.random.default_rng(draw(st.integers(0, 99))).random(shape) < 0.5, -1, 1).astype(np.int32)
    return [arr(draw, shape, dt), y], {"margin": 0.1}, 1, [0], [0]


@builder("ChannelShuffle")
def _caffe2_channel_shuffle(draw, dt):
    g, per = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return [arr(draw, (draw(st.integers(1, 2)), g * per, *dims(draw, 1, 2)), dt)], {"group": g}, 1, [0], [0]


@builder("SumElements")
def _caffe2_sum_elements(draw, dt):
    return [arr(draw, dims(draw, 0), dt)], {"average": draw(st.booleans())}, 1, [0], [0]


@builder("RowwiseMax", "ColwiseMax")
def _caffe2_rowcol_max(draw, dt):
    return [arr(draw, dims(draw, 3, 3), dt)], {}, 1, [0], [0]


@builder("PrependDim")
def _caffe2_prepend_dim(draw, dt):
    d, rest = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return [arr(draw, (d * rest, *dims(draw, 0, 2)), dt)], {"dim_size": d}, 1, [0], [0]


@builder("CrossEntropy")
def _caffe2_cross_entropy(draw, dt):
    shape = dims(draw, 2, 2)
    return [arr(draw, shape, dt, 0.1, 1.0), arr(draw, shape, dt, 0.0, 1.0)], {}, 1, [0], [0]


@builder("WeightedSigmoidCrossEntropyWithLogits")
def _caffe2_weighted_sigmoid_xent(draw, dt):
    shape = dims(draw, 1, 3)
    return [arr(draw, shape, dt), arr(draw, shape, dt, 0.0, 1.0), arr(draw, shape, dt, 0.1, 1.0)], {}, 1, [0], [0]


@builder("SparseToDenseMask")
def _caffe2_sparse_to_dense_mask(draw, dt):
    n = draw(st.integers(1, 5))
    ids = np.asarray(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int64)
    inner = dims(draw, 0, 2)
    return [ids, arr(draw, (n, *inner), dt), arr(draw, inner, dt)], {"mask": [3, 0, 1]}, 1, [1], [0]


@builder("PairWiseLoss")
def _caffe2_pair_wise_loss(draw, dt):
    n = draw(st.integers(1, 5))
    label = np.asarray(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dt)
    return [arr(draw, (n, 1), dt), label], {}, 1, [0], [0]


@builder("ConvTranspose")
def _caffe2_conv_transpose(draw, dt):
    c, m, k = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    order = draw(st.sampled_from(["NCHW", "NHWC"]))
    x = arr(draw, (1, c, 3, 2) if order == "NCHW" else (1, 3, 2, c), dt)
    w = arr(draw, (c, m, k, k) if order == "NCHW" else (c, k, k, m), dt)
    args = {"kernel": k, "stride": draw(st.integers(1, 2)), "order": order}
    return [x, w, arr(draw, (m,), dt)], args, 1, [0, 1, 2], [0]


@builder("Clip")
def _clip(draw, dt):
    x = arr(draw, dims(draw, 0), dt)
    lo = draw(st.floats(-2, 0))
    return [x], {"min": lo, "max": lo + draw(st.floats(0, 2))}, 1, [0], [0]


@builder("MakeTwoClass")
def _make_two_class(draw, dt):
    return [arr(draw, dims(draw, 0), dt, 0.0, 1.0)], {}, 1, [0], [0]


@builder("UnsortedSegmentSum")
def _unsorted_segment_sum(draw, dt):
    data_shape = dims(draw, 1, 3)
    ids = np.asarray(draw(st.lists(st.integers(0, 3), min_size=data_shape[0], max_size=data_shape[0])))
    args = {"num_segments": 4} if draw(st.booleans()) else {}
    return [arr(draw, data_shape, dt), ids.astype(draw(st.sampled_from([np.int32, np.int64])))], args, 1, [0], [0]


_SEGMENT_OPS = (
    [
        f"{p}{r}"
        for p in ("SortedSegment", "SparseSortedSegment", "SparseUnsortedSegment")
        for r in ("Sum", "Mean", "WeightedSum")
    ]
    + ["UnsortedSegmentMean", "UnsortedSegmentWeightedSum", "LengthsMean", "LengthsMax", "LengthsWeightedSum"]
    + [f"SortedSegmentRange{r}" for r in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp")]
)


def _segment_case(draw, dt, op):
    rows = draw(st.integers(1, 5))
    data = arr(draw, (draw(st.integers(1, 4)), *dims(draw, 0, 2)), dt)
    n = rows if op.startswith("Sparse") else data.shape[0]
    inputs = [data]
    if op.endswith("WeightedSum"):
        inputs.append(arr(draw, (n,), dt))
    if op.startswith("Sparse"):
        inputs.append(np.asarray(draw(st.lists(st.integers(0, data.shape[0] - 1), min_size=n, max_size=n)), np.int64))
    ids = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int32)
    if op.startswith("Lengths"):
        inputs.append(np.bincount(ids, minlength=4).astype(np.int32))
        inputs[0] = inputs[0][np.argsort(ids, kind="stable")]
    else:
        inputs.append(np.sort(ids) if "Unsorted" not in op else ids)
    on_w = op.endswith("WeightedSum") and draw(st.booleans())
    return inputs, {"grad_on_weights": True} if on_w else {}, 1, [0, 1] if on_w else [0], [0]


for _op in _SEGMENT_OPS:
    builder(_op)(lambda draw, dt, op=_op: _segment_case(draw, dt, op))


@builder("BooleanMask")
def _caffe2_boolean_mask(draw, dt):
    x = arr(draw, dims(draw, 1, 3), dt)
    mask = np.asarray(draw(st.lists(st.booleans(), min_size=x.shape[0], max_size=x.shape[0])), bool)
    mask[draw(st.integers(0, x.shape[0] - 1))] = True  # a non-empty output for the loss
    return [x, mask], {}, 1, [0], [0]


@builder("LengthsTopK")
def _caffe2_lengths_top_k(draw, dt):
    lengths = np.asarray(draw(st.lists(st.integers(0, 4), min_size=1, max_size=4)), np.int32)
    return [arr(draw, (int(lengths.sum()),), dt), lengths], {"k": draw(st.integers(1, 3))}, 2, [0], [0]


def _batch_sparse(draw, width):
    lengths = np.asarray(draw(st.lists(st.integers(1, width), min_size=1, max_size=4)), np.int32)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    indices = np.concatenate([rng.permutation(width)[:n] for n in lengths]).astype(np.int64)
    return lengths, indices


@builder("BatchSparseToDense")
def _caffe2_batch_sparse_to_dense(draw, dt):
    width = draw(st.integers(1, 4))
    lengths, indices = _batch_sparse(draw, width)
    return [lengths, indices, arr(draw, indices.shape, dt)], {"dense_last_dim": width}, 1, [2], [0]


@builder("BatchDenseToSparse")
def _caffe2_batch_dense_to_sparse(draw, dt):
    width = draw(st.integers(1, 4))
    lengths, indices = _batch_sparse(draw, width)
    return [lengths, indices, arr(draw, (lengths.size, width), dt)], {}, 1, [2], [0]


@builder("PadImage")
def _caffe2_pad_image(draw, dt):
    x = arr(draw, (1, 2, draw(st.integers(4, 5)), draw(st.integers(4, 5))), dt)  # reflect needs pad < size
    pads = {k: draw(st.integers(-1, 2)) for k in ("pad_t", "pad_l", "pad_b", "pad_r")}
    return [x], {**pads, "mode": draw(st.sampled_from(["constant", "reflect", "edge"]))}, 1, [0], [0]


@builder("ResizeNearest")
def _caffe2_resize_nearest(draw, dt):
    x = arr(draw, (1, 2, draw(st.integers(2, 5)), draw(st.integers(2, 5))), dt)
    scales = {"height_scale": draw(st.sampled_from([0.5, 1.0, 2.0])), "width_scale": draw(st.sampled_from([1.0, 1.5]))}
    return [x], scales, 1, [0], [0]


@builder("LpPool")
def _caffe2_lp_pool(draw, dt):
    x = arr(draw, (1, 2, draw(st.integers(2, 5)), draw(st.integers(2, 5))), dt, 0.2, 2.0)  # Y > 0
    return (
        [x],
        {"kernel": 2, "stride": draw(st.integers(1, 2)), "p": draw(st.sampled_from([1.0, 2.0, 3.0]))},
        1,
        [0],
        [0],
    )


@builder("BernoulliJSD")
def _caffe2_bernoulli_jsd(draw, dt):
    shape = dims(draw, 1, 2)
    return [arr(draw, shape, dt, 0.05, 0.95), arr(draw, shape, dt, 0.05, 0.95)], {}, 1, [0], [0]


def _rnn_lengths(draw):
    return np.asarray(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)), np.int32)


@builder("PackRNNSequence")
def _caffe2_pack_rnn(draw, dt):
    lengths = _rnn_lengths(draw)
    return [arr(draw, (int(lengths.sum()), *dims(draw, 0, 2)), dt), lengths], {}, 1, [0], [0]


@builder("UnpackRNNSequence")
def _caffe2_unpack_rnn(draw, dt):
    lengths = _rnn_lengths(draw)
    return [arr(draw, (int(lengths.max()), lengths.size, *dims(draw, 0, 2)), dt), lengths], {}, 1, [0], [0]


@builder("FlexibleTopK")
def _caffe2_flexible_top_k(draw, dt):
    shape = dims(draw, 2, 3)
    rows = int(np.prod(shape[:-1]))
    k = np.asarray(draw(st.lists(st.integers(1, shape[-1]), min_size=rows, max_size=rows)), np.int64)
    return [arr(draw, shape, dt), k], {}, 2, [0], [0]


@builder("Im2Col")
def _caffe2_im2col(draw, dt):
    x = arr(draw, (1, 2, draw(st.integers(3, 5)), draw(st.integers(3, 5))), dt)
    return [x], {"kernel": 2, "stride": draw(st.integers(1, 2)), "pad": draw(st.integers(0, 1))}, 1, [0], [0]


@builder("Col2Im")
def _caffe2_col2im(draw, dt):
    h, w, s = draw(st.integers(3, 5)), draw(st.integers(3, 5)), draw(st.integers(1, 2))
    oh, ow = (h - 2) // s + 1, (w - 2) // s + 1
    return [arr(draw, (1, 8, oh, ow), dt), arr(draw, (1, 2, h, w), dt)], {"kernel": 2, "stride": s}, 1, [0], [0]


@builder("Scale")
def _scale(draw, dt):
    x = arr(draw, dims(draw, 0), dt)
    return [x], {"scale": draw(st.floats(-3, 3))}, 1, [0], [0]


@builder("Cast")
def _cast(draw, dt):
    x = arr(draw, dims(draw, 0), dt)
    source = "float" if np.dtype(dt) == np.float32 else "double"
    return [x], {"to": draw(st.sampled_from(["float", "double"])), "from_type": source}, 1, [0], [0]


@builder("Softmax")
def _softmax(draw, dt):
    shape = dims(draw, 1)
    return [arr(draw, shape, dt)], {"axis": draw(st.integers(0, len(shape) - 1))}, 1, [0], [0]


@builder("Dropout")
def _dropout(draw, dt):
    x = arr(draw, dims(draw, 1), dt)
    return [x], {"ratio": draw(st.sampled_from([0.0, 0.5])), "is_test": False}, 2, [0], [0]


@builder("Flatten")
def _flatten(draw, dt):
    shape = dims(draw, 1)
    return [arr(draw, shape, dt)], {"axis": draw(st.integers(0, len(shape)))}, 1, [0], [0]


@builder("Transpose")
def _transpose(draw, dt):
    shape = dims(draw, 1)
    axes = draw(st.permutations(range(len(shape))))
    return [arr(draw, shape, dt)], {"axes": list(axes)}, 1, [0], [0]


@builder("NHWC2NCHW", "NCHW2NHWC")
def _layout_switch(draw, dt):
    return [arr(draw, dims(draw, 3, 5), dt)], {}, 1, [0], [0]


@builder("FloatToHalf")
def _float_to_half(draw, dt):
    return [arr(draw, dims(draw, 0), np.float32)], {}, 1, [0], [0]


@builder("HalfToFloat")
def _half_to_float(draw, dt):
    return [arr(draw, dims(draw, 0), np.float16)], {}, 1, [0], [0]


@builder("ExpandDims")
def _expand_dims(draw, dt):
    shape = dims(draw, 0, 3)
    k = draw(st.integers(1, 2))
    out_rank = len(shape) + k
    where = sorted(draw(st.lists(st.integers(0, out_rank - 1), min_size=k, max_size=k, unique=True)))
    return [arr(draw, shape, dt)], {"dims": where}, 1, [0], [0]


@builder("Squeeze")
def _squeeze(draw, dt):
    shape = dims(draw, 1, 4, 1, 3)
    ones = [i for i, d in enumerate(shape) if d == 1]
    if not ones:
        shape, ones = (1, *shape), [0]
    where = sorted(draw(st.lists(st.sampled_from(ones), min_size=1, max_size=len(ones), unique=True)))
    return [arr(draw, shape, dt)], {"dims": where}, 1, [0], [0]


@builder("Reshape")
def _reshape(draw, dt):
    shape = dims(draw, 1)
    new = list(draw(st.permutations(shape)))
    if draw(st.booleans()):
        new[draw(st.integers(0, len(new) - 1))] = -1
    return [arr(draw, shape, dt)], {"shape": new}, 2, [0], [0]


@builder("Slice")
def _slice(draw, dt):
    shape = dims(draw, 1, 3, 1, 5)
    k = draw(st.integers(1, len(shape)))
    starts, ends = [], []
    for d in shape[:k]:
        s = draw(st.integers(0, d - 1))
        starts.append(s)
        ends.append(draw(st.sampled_from([-1, *range(s + 1, d + 1)])))
    return [arr(draw, shape, dt)], {"starts": starts, "ends": ends}, 1, [0], [0]


def _broadcast_pair(draw):
    """Two shapes numpy broadcasts together (each side may have size-1 dims or fewer dims)."""
    full = dims(draw, 0, 4)
    a = tuple(1 if draw(st.booleans()) and draw(st.booleans()) else d for d in full)
    b = tuple(1 if draw(st.booleans()) else d for d in full)
    b = b[draw(st.integers(0, len(b))) :]
    return (a, b) if draw(st.booleans()) else (b, a)


@builder("Add", "Sub", "Mul", "Div")
def _binary(draw, dt):
    if draw(st.booleans()):  # numpy broadcasting
        sa, sb = _broadcast_pair(draw)
        args: dict[str, Any] = {}
    else:  # Caffe2's legacy broadcast: B's shape a contiguous run of A's, at axis
        sa = dims(draw, 1)
        start = draw(st.integers(0, len(sa) - 1))
        stop = draw(st.integers(start + 1, len(sa)))
        sb = sa[start:stop]
        args = {"broadcast": True, "axis": start}
    b = arr(draw, sb, dt, 0.5, 2.0) * np.where(arr(draw, sb, dt) < 0, -1, 1).astype(dt)
    return [arr(draw, sa, dt), b.astype(dt)], args, 1, [0, 1], [0]


@builder("Sum")
def _sum(draw, dt):
    shape = dims(draw, 0)
    k = draw(st.integers(1, 3))
    return [arr(draw, shape, dt) for _ in range(k)], {}, 1, list(range(k)), [0]


@builder("WeightedSum")
def _weighted_sum(draw, dt):
    shape = dims(draw, 0)
    k = draw(st.integers(1, 3))
    on_w = draw(st.booleans())
    inputs = []
    for _ in range(k):
        inputs += [arr(draw, shape, dt), arr(draw, draw(st.sampled_from([(1,), (), (1, 1)])), dt)]
    wrt = list(range(0, 2 * k, 2)) + (list(range(1, 2 * k, 2)) if on_w else [])
    return inputs, {"grad_on_w": on_w}, 1, sorted(wrt), [0]


# -- dense layers -----------------------------------------------------------------------------
@builder("FC")
def _fc(draw, dt):
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    lead = dims(draw, 0, 2)
    x = arr(draw, (*lead, m, k), dt)
    axis = len(lead) + 1
    return [x, arr(draw, (n, k), dt), arr(draw, (n,), dt)], {"axis": axis}, 1, [0, 1, 2], [0]


def _fc_t(draw, dt):
    inputs, args, n_out, wrt, outs = _fc(draw, dt)
    inputs[1] = np.ascontiguousarray(inputs[1].T)
    return inputs, args, n_out, wrt, outs


BUILDERS["FCTransposed"] = _fc_t


@builder("MatMul")
def _matmul(draw, dt):
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    a = arr(draw, (k, m) if ta else (m, k), dt)
    b = arr(draw, (n, k) if tb else (k, n), dt)
    return [a, b], {"trans_a": ta, "trans_b": tb}, 1, [0, 1], [0]


@builder("BatchMatMul")
def _batch_matmul(draw, dt):
    m, k, n = (draw(st.integers(1, 3)) for _ in range(3))
    sa = sb = dims(draw, 0, 2, 1, 3)  # broadcast=1 has no gradient (as in Caffe2)
    args: dict[str, Any] = {"trans_a": draw(st.booleans()), "trans_b": draw(st.booleans())}
    a = arr(draw, (*sa, k, m) if args["trans_a"] else (*sa, m, k), dt)
    b = arr(draw, (*sb, n, k) if args["trans_b"] else (*sb, k, n), dt)
    return [a, b], args, 1, [0, 1], [0]


@builder("Concat", "DepthConcat")
def _concat(draw, dt):
    shape = dims(draw, 1, 3)
    axis = draw(st.integers(0, len(shape) - 1))
    k = draw(st.integers(1, 3))
    xs = []
    for _ in range(k):
        s = list(shape)
        s[axis] = draw(st.integers(1, 3))
        xs.append(arr(draw, tuple(s), dt))
    return xs, {"axis": axis}, 2, list(range(k)), [0]


@builder("Split", "DepthSplit")
def _split(draw, dt):
    shape = list(dims(draw, 1, 3))
    axis = draw(st.integers(0, len(shape) - 1))
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    shape[axis] = sum(sizes)
    return [arr(draw, tuple(shape), dt)], {"axis": axis, "split": sizes}, len(sizes), [0], list(range(len(sizes)))


# -- convolution and pooling ------------------------------------------------------------------
def _spatial(draw, nd: int):
    size = [draw(st.integers(1, 5)) for _ in range(nd)]
    kernel = [draw(st.integers(1, s)) for s in size]
    return size, kernel


@builder("Conv", "Conv2D", "Conv1D")
def _conv(draw, dt, nd=2):
    n, c, m = (draw(st.integers(1, 3)) for _ in range(3))
    size, kernel = _spatial(draw, nd)
    x = arr(draw, (n, c, *size), dt)
    w = arr(draw, (m, c, *kernel), dt)
    inputs = [x, w] + ([arr(draw, (m,), dt)] if draw(st.booleans()) else [])
    args = {"kernels": kernel, "strides": [draw(st.integers(1, 2)) for _ in range(nd)]}
    return inputs, args, 1, list(range(len(inputs))), [0]


BUILDERS["Conv1D"] = lambda draw, dt: _conv(draw, dt, nd=1)


@builder("MaxPool", "MaxPool2D", "AveragePool", "AveragePool2D")
def _pool(draw, dt, nd=2):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    size, kernel = _spatial(draw, nd)
    x = arr(draw, (n, c, *size), dt)
    args: dict[str, Any] = {"kernels": kernel, "strides": [draw(st.integers(1, 2)) for _ in range(nd)]}
    if draw(st.booleans()):
        args = {"global_pooling": True}
    return [x], args, 1, [0], [0]


BUILDERS["MaxPool1D"] = BUILDERS["AveragePool1D"] = lambda draw, dt: _pool(draw, dt, nd=1)
BUILDERS["Conv3D"] = lambda draw, dt: _conv(draw, dt, nd=3)
BUILDERS["MaxPool3D"] = BUILDERS["AveragePool3D"] = lambda draw, dt: _pool(draw, dt, nd=3)


def _lc(draw, dt, nd):
    n, c, m = (draw(st.integers(1, 2)) for _ in range(3))
    size, kernel = _spatial(draw, nd)
    out = [s - k + 1 for s, k in zip(size, kernel)]
    inputs = [arr(draw, (n, c, *size), dt), arr(draw, (*out, m, c, *kernel), dt)]
    if draw(st.booleans()):
        inputs.append(arr(draw, (*out, m), dt))
    return inputs, {}, 1, list(range(len(inputs))), [0]


BUILDERS["LC1D"] = lambda draw, dt: _lc(draw, dt, 1)
BUILDERS["LC"] = BUILDERS["LC2D"] = lambda draw, dt: _lc(draw, dt, 2)
BUILDERS["LC3D"] = lambda draw, dt: _lc(draw, dt, 3)


@builder("HSoftmax")
def _hsoftmax(draw, dt):
    from caffe2.proto import hsm_pb2
    from caffe2.python import hsm_util

    tree = hsm_pb2.TreeProto()
    tree.root_node.CopyFrom(hsm_util.create_node_with_nodes([hsm_util.create_node_with_words([0, 1])]))
    tree.root_node.word_ids.append(2)
    hierarchy = hsm_util.create_hierarchy(tree).SerializeToString().decode("utf-8", "surrogateescape")
    n, d = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    labels = np.array([draw(st.integers(0, 2)) for _ in range(n)], np.int32)
    inputs = [arr(draw, (n, d), dt), arr(draw, (4, d), dt), arr(draw, (4,), dt), labels]
    return inputs, {"hierarchy": hierarchy}, 2, [0, 1, 2], [0]


@builder("LambdaRankNdcg")
def _lambda_rank(draw, dt):
    n = draw(st.integers(1, 6))
    relevance = np.floor(arr(draw, (n,), dt, 0.0, 3.0))
    return [arr(draw, (n,), dt), relevance], {}, 2, [0], [0]


@builder("SpaceToBatch")
def _space_to_batch(draw, dt):
    block = draw(st.integers(1, 3))
    pad = draw(st.integers(0, block - 1))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = (block * draw(st.integers(1, 3)) for _ in range(2))  # the padded size: a multiple of the block
    x = arr(draw, (n, c, h - pad, w - pad), dt)
    return [x], {"block_size": block, "pad_t": pad, "pad_l": pad, "pad_b": 0, "pad_r": 0}, 1, [0], [0]


@builder("BatchToSpace")
def _batch_to_space(draw, dt):
    block, pad = draw(st.integers(1, 3)), draw(st.integers(0, 1))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    x = arr(draw, (n * block * block, c, h + pad, w + pad), dt)
    return [x], {"block_size": block, "pad": pad * block // 2}, 1, [0], [0]


# -- lookups ----------------------------------------------------------------------------------
@builder("Gather")
def _gather(draw, dt):
    data_shape = dims(draw, 1, 3)
    idx = np.asarray(draw(st.lists(st.integers(0, data_shape[0] - 1), min_size=1, max_size=4)))
    idx = idx.reshape(draw(st.sampled_from([(len(idx),), (1, len(idx))])))
    args = {"dense_gradient": draw(st.booleans())}
    return [arr(draw, data_shape, dt), idx.astype(draw(st.sampled_from([np.int32, np.int64])))], args, 1, [0], [0]


@builder("BatchGather")
def _batch_gather(draw, dt):
    data_shape = dims(draw, 2, 3)
    idx = np.asarray(draw(st.lists(st.integers(0, data_shape[1] - 1), min_size=1, max_size=4)))
    return [arr(draw, data_shape, dt), idx], {}, 1, [0], [0]


def _bags(draw, rows: int):
    lengths = np.asarray(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)), np.int32)
    indices = np.asarray(
        draw(st.lists(st.integers(0, rows - 1), min_size=int(lengths.sum()), max_size=int(lengths.sum()))), np.int64
    )
    return indices, lengths


@builder("SparseLengthsSum")
def _sls(draw, dt):
    data_shape = dims(draw, 1, 3)
    indices, lengths = _bags(draw, data_shape[0])
    return [arr(draw, data_shape, dt), indices, lengths], {}, 1, [0], [0]


@builder("SparseLengthsMean")
def _slm(draw, dt):
    data_shape = dims(draw, 1, 3)
    indices, lengths = _bags(draw, data_shape[0])
    return [arr(draw, data_shape, dt), indices, lengths], {}, 1, [0], [0]


@builder("SparseLengthsWeightedSum")
def _slws(draw, dt):
    data_shape = dims(draw, 1, 3)
    indices, lengths = _bags(draw, data_shape[0])
    on_w = draw(st.booleans())
    inputs = [arr(draw, data_shape, dt), arr(draw, indices.shape, dt), indices, lengths]
    return inputs, {"grad_on_weights": on_w}, 1, [0, 1] if on_w else [0], [0]


@builder("SparseToDense")
def _sparse_to_dense(draw, dt):
    row = dims(draw, 0, 2)
    rows = draw(st.integers(1, 4))
    idx = np.asarray(draw(st.lists(st.integers(0, rows - 1), min_size=1, max_size=4)), np.int64)
    inputs = [idx, arr(draw, (len(idx), *row), dt)]
    if draw(st.booleans()):
        inputs.append(arr(draw, (rows, *row), dt))
    return inputs, {}, 1, [1], [0]


# -- losses and normalization -----------------------------------------------------------------
@builder("LabelCrossEntropy")
def _label_xent(draw, dt):
    n, d = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    x = arr(draw, (n, d), dt, 0.05, 1.0)
    return [x, np.asarray(draw(st.lists(st.integers(0, d - 1), min_size=n, max_size=n)), np.int32)], {}, 1, [0], [0]


@builder("SoftmaxWithLoss")
def _softmax_loss(draw, dt):
    n, d = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    label = np.asarray(draw(st.lists(st.integers(0, d - 1), min_size=n, max_size=n)), np.int32)
    inputs = [arr(draw, (n, d), dt), label]
    if draw(st.booleans()):
        inputs.append(arr(draw, (n,), dt, 0.1, 2.0))
    return inputs, {}, 2, [0], [1]


@builder("SigmoidCrossEntropyWithLogits")
def _sigmoid_xent(draw, dt):
    shape = dims(draw, 1, 3)
    return [arr(draw, shape, dt), arr(draw, shape, dt, 0.0, 1.0)], {}, 1, [0], [0]


@builder("SquaredL2", "SquaredL2Distance")
def _squared_l2(draw, dt):
    shape = dims(draw, 1, 3)
    return [arr(draw, shape, dt), arr(draw, shape, dt)], {}, 1, [0, 1], [0]


@builder("LayerNorm")
def _layer_norm(draw, dt):
    shape = dims(draw, 1, 3)
    axis = draw(st.integers(0, len(shape) - 1))
    inputs = [arr(draw, shape, dt)]
    args: dict[str, Any] = {"axis": axis}
    if draw(st.booleans()):
        inputs += [arr(draw, shape[axis:], dt), arr(draw, shape[axis:], dt)]
        args["elementwise_affine"] = True
    return inputs, args, 3, list(range(len(inputs))), [0]


@builder("SpatialBN")
def _spatial_bn(draw, dt):
    n, c = draw(st.integers(2, 3)), draw(st.integers(1, 3))
    x = arr(draw, (n, c, *dims(draw, 0, 2)), dt)
    inputs = [x, arr(draw, (c,), dt), arr(draw, (c,), dt), arr(draw, (c,), dt), arr(draw, (c,), dt, 0.5, 2.0)]
    return inputs, {"is_test": False, INPLACE: {1: 3, 2: 4}}, 5, [0, 1, 2], [0]


@builder("LSTMUnit")
def _lstm_unit(draw, dt):
    n, d = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, c, gates = (arr(draw, s, dt, -0.5, 0.5) for s in ((1, n, d), (1, n, d), (1, n, 4 * d)))
    step = np.array([draw(st.integers(0, 3))], np.int32)
    if draw(st.booleans()):  # with seq_lengths: some sequences may have ended
        lengths = np.asarray(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int32)
        return [h, c, gates, lengths, step], {"drop_states": draw(st.booleans())}, 2, [0, 1, 2], [0, 1]
    return [h, c, gates, step], {"sequence_lengths": False}, 2, [0, 1, 2], [0, 1]


@builder("ElementwiseLinear")
def _elementwise_linear(draw, dt):
    shape = dims(draw, 1, 3)
    axis = draw(st.integers(0, len(shape)))
    cols = int(np.prod(shape[axis:]))
    x, a, b = arr(draw, shape, dt), arr(draw, (cols,), dt), arr(draw, (cols,), dt)
    return [x, a, b], {"axis": axis}, 1, [0, 1, 2], [0]


@builder("SequenceMask")
def _sequence_mask(draw, dt):
    shape = dims(draw, 2, 3)
    axis = draw(st.integers(1, len(shape) - 1))
    rows = int(np.prod(shape[:axis]))
    lengths = np.asarray(draw(st.lists(st.integers(0, 4), min_size=rows, max_size=rows)), np.int32)
    return [arr(draw, shape, dt), lengths], {"mode": "sequence", "axis": axis, "fill_val": -5.0}, 1, [0], [0]


@builder("GRUUnit")
def _gru_unit(draw, dt):
    n, d = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, gates = arr(draw, (1, n, d), dt, -0.5, 0.5), arr(draw, (1, n, 3 * d), dt, -0.5, 0.5)
    step = np.array([draw(st.integers(0, 3))], np.int32)
    if draw(st.booleans()):  # with seq_lengths: some sequences may have ended
        lengths = np.asarray(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int32)
        return [h, gates, lengths, step], {"drop_states": draw(st.booleans())}, 1, [0, 1], [0]
    return [h, gates, step], {"sequence_lengths": False}, 1, [0, 1], [0]


@builder("LSTM")
def _lstm(draw, dt):
    t, n, i, h = (draw(st.integers(1, 3)) for _ in range(4))
    shapes = [(t, n, i), (n, h), (n, h), (4 * h, i), (4 * h, h), (4 * h,), (4 * h,)]
    return [arr(draw, s, dt, -0.5, 0.5) for s in shapes], {}, 4, list(range(7)), [0, 1, 2]


@builder("RecurrentNetwork")
def _recurrent_network(draw, dt):
    from asyncnet.autodiff import backward_ops

    t, n, h = (draw(st.integers(1, 3)) for _ in range(3))
    step = an.Net("rnn_step")
    step.FC(["h_prev", "in2", "in3"], "z", axis=2)  # the op feeds its inputs to the step net by name
    step.Add(["z", "x_t"], "s")
    step.Tanh("s", "h")
    ops, g = backward_ops(step.to_def().ops, {"h": "h_grad"})
    h0_shape = draw(st.sampled_from([(1, n, h), (n, h), (h,)]))
    args = {
        "step_net": step.to_def().to_json(),
        "backward_step_net": an.NetDef("rnn_step_bwd", ops).to_json(),
        "recurrent_states": ["h_states"],
        "initial_recurrent_state_ids": [1],
        "link_internal": ["h_prev", "h", "x_t"],
        "link_external": ["h_states", "h_states", "in0"],
        "link_offset": [0, 1, 0],
        "alias_src": ["h_states", "h_states"],
        "alias_dst": ["out0", "out1"],
        "alias_offset": [1, -1],
        "param": [2, 3],
        "param_grads": [g["in2"], g["in3"]],
        "backward_link_internal": ["h_grad", g["h_prev"], g["x_t"]],
        "backward_link_external": ["h_states_grad", "h_states_grad", "in0_grad"],
        "backward_link_offset": [1, 0, 0],
        "outputs_with_grads": [0, 1],
    }
    inputs = [arr(draw, s, dt, -0.5, 0.5) for s in ((t, n, h), h0_shape, (h, h), (h,))]
    return inputs, args, 3, [0, 1, 2, 3], [0, 1]


# -- the check --------------------------------------------------------------------------------
GRADIENT_OPS = sorted(
    n
    for n, s in _REGISTRY.items()  # the package's ops (tests register ops of their own)
    if s.gradient is not None
    and s.gradient is not _no_gradient_maker
    and s.gradient.__module__.startswith(("asyncnet.", "caffe2."))
    and s.fn.__module__.startswith(("asyncnet.", "caffe2."))
)


def test_every_op_with_a_gradient_has_a_case():
    missing = [n for n in GRADIENT_OPS if n not in BUILDERS and n not in NO_CPU_CASE]
    assert not missing, f"ops with a gradient but no shape case here: {missing}"


def gradients(op_type: str, case: Case, dt: np.dtype) -> tuple[list[np.ndarray], dict[str, Any], an.Workspace]:
    inputs, args, n_out, wrt, loss_outs = case
    args = dict(args)
    same = args.pop(INPLACE, {})
    names = [f"in{i}" for i in range(len(inputs))]
    outs = [names[same[j]] if j in same else f"out{j}" for j in range(n_out)]
    ws = an.Workspace()
    for n, v in zip(names, inputs):
        ws.feed(n, v)
    probe = an.Net("probe")
    probe.add_op(op_type, names, outs, **args)
    ws.run_net_once(probe)
    net = an.Net("grad")
    net.add_op(op_type, names, outs, **args)
    losses = []
    for j in loss_outs:
        y = np.asarray(ws.fetch(outs[j]))
        ws.feed(f"r{j}", np.random.default_rng(j).uniform(0.5, 1.5, y.shape).astype(y.dtype))
        net.Mul([outs[j], f"r{j}"], f"yr{j}")
        losses.append(net.AveragedLoss(f"yr{j}", f"l{j}"))
    loss = net.Sum(losses, "loss") if len(losses) > 1 else losses[0]
    grads = add_gradient_ops(net, loss, wrt=[names[i] for i in wrt], dtype=np.dtype(dt).name)
    ws.run_net_once(net)
    return inputs, grads, ws


def check_shapes(op_type: str, case: Case, dt: np.dtype) -> None:
    inputs, grads, ws = gradients(op_type, case, dt)
    for i in case[3]:
        x, g = inputs[i], grads[f"in{i}"]
        where = f"{op_type}: gradient of input {i} {x.dtype}{list(x.shape)}, args {case[1]}"
        if isinstance(g, GradientSlice):
            idx, values = np.asarray(ws.fetch(g.indices)), np.asarray(ws.fetch(g.values))
            assert values.shape == (idx.size, *x.shape[1:]) or values.shape == (*idx.shape, *x.shape[1:]), (
                f"{where}: sparse values {list(values.shape)} for {idx.size} indices"
            )
            assert values.dtype == x.dtype, f"{where}: sparse values dtype {values.dtype}"
            continue
        gv = ws.fetch(g)
        assert isinstance(gv, np.ndarray), f"{where}: a {type(gv).__name__}, not an array"
        assert gv.shape == x.shape, f"{where}: shape {list(gv.shape)}"
        assert gv.dtype == x.dtype, f"{where}: dtype {gv.dtype}"


@pytest.mark.parametrize("op_type", [n for n in GRADIENT_OPS if n not in NO_CPU_CASE])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), dt=st.sampled_from([np.float32, np.float64]))
def test_input_gradients_have_the_inputs_shape_and_dtype(op_type, data, dt):
    case = BUILDERS[op_type](data.draw, dt)
    check_shapes(op_type, case, dt)


def test_weighted_sum_gradient_of_one_pair_is_one_array():
    """The one-pair case once gave the 1-tuple (dX,) as the blob: shape (1, n, d) as an array."""
    ws = an.Workspace()
    ws.feed("dy", np.arange(6, dtype=np.float32).reshape(3, 2))
    ws.feed("x", np.ones((3, 2), np.float32))
    ws.feed("w", np.full((1,), 2.0, np.float32))
    ws.run_operator_once(an.OperatorDef("WeightedSumGradient", ["dy", "x", "w"], ["dx"]))
    np.testing.assert_array_equal(ws.fetch("dx"), 2.0 * np.arange(6, dtype=np.float32).reshape(3, 2))
    ws.run_operator_once(an.OperatorDef("WeightedSumGradient", ["dy", "x", "w"], ["dx", "dw"], {"grad_on_w": True}))
    assert ws.fetch("dw").shape == (1,) and ws.fetch("dw").dtype == np.float32 and ws.fetch("dw")[0] == 15.0
