"""8-bit rowwise quantization (fused and split layouts) and the quantized SparseLengths lookups,
against a numpy quantizer written from the documented formula and the float lookups."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op

import asyncnet as an

pytestmark = pytest.mark.timeout(60)


def _table(seed: int, rows: int = 7, cols: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-3, 3, (rows, cols)).astype(np.float32)


def test_fused_layout_stores_codes_then_scale_and_bias_bytes():
    x = _table(0)
    (q,) = run_op("FloatToFused8BitRowwiseQuantized", {"x": x})
    assert q.dtype == np.uint8 and q.shape == (7, 13)
    lo, hi = x.min(1), x.max(1)
    scale = np.frombuffer(q[:, 5:9].tobytes(), np.float32)
    bias = np.frombuffer(q[:, 9:13].tobytes(), np.float32)
    np.testing.assert_allclose(scale, (hi - lo) / 255, rtol=1e-6)
    np.testing.assert_array_equal(bias, lo)
    expected = np.rint((x - lo[:, None]) * (255 / (hi - lo + 1e-8))[:, None])
    assert np.abs(q[:, :5].astype(np.int64) - expected).max() <= 1  # float32 rounding of the product


def test_fused_round_trip_is_within_half_a_step():
    x = _table(1, 9, 16)
    (y,) = run_op("Fused8BitRowwiseQuantizedToFloat", {"q": run_op("FloatToFused8BitRowwiseQuantized", {"x": x})[0]})
    step = (x.max(1) - x.min(1)) / 255
    assert y.dtype == np.float32 and y.shape == x.shape
    assert np.all(np.abs(y - x) <= step[:, None] * 0.5 + 1e-5)


def test_split_layout_and_a_constant_row():
    x = _table(2, 4, 6)
    x[2] = 9.0
    codes, sb = run_op("FloatToRowwiseQuantized8Bits", {"x": x}, ["c", "sb"])
    assert codes.dtype == np.uint8 and sb.shape == (4, 2) and sb.dtype == np.float32
    np.testing.assert_array_equal(codes[2], 0)
    np.testing.assert_array_equal(sb[2], [1.0, 9.0])
    (y,) = run_op("Rowwise8BitQuantizedToFloat", {"c": codes, "sb": sb})
    step = (x.max(1) - x.min(1)) / 255
    assert np.all(np.abs(y - x) <= step[:, None] * 0.5 + 1e-5)
    np.testing.assert_array_equal(y[2], 9.0)


def _float_lookup(table: np.ndarray, idx: np.ndarray, lens: np.ndarray, w: np.ndarray | None, mean: bool):
    out, start = np.zeros((lens.size, table.shape[1]), np.float64), 0
    for b, n in enumerate(lens):
        rows = table[idx[start : start + n]].astype(np.float64)
        if w is not None:
            rows = rows * w[start : start + n, None]
        out[b] = rows.sum(0) / (max(n, 1) if mean else 1)
        start += n
    return out


@pytest.mark.parametrize("kind", ["Sum", "WeightedSum", "Mean"])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_quantized_lookups_equal_the_float_lookup_on_the_dequantized_table(kind, idx_dtype):
    rng = np.random.default_rng(3)
    x = _table(4, 10, 6)
    idx = rng.integers(0, 10, 12).astype(idx_dtype)
    lens = np.array([3, 0, 5, 4], np.int32)
    w = rng.uniform(0, 1, 12).astype(np.float32)
    (fused,) = run_op("FloatToFused8BitRowwiseQuantized", {"x": x})
    (deq,) = run_op("Fused8BitRowwiseQuantizedToFloat", {"q": fused})
    codes, sb = run_op("FloatToRowwiseQuantized8Bits", {"x": x}, ["c", "sb"])
    (deq2,) = run_op("Rowwise8BitQuantizedToFloat", {"c": codes, "sb": sb})
    weighted = kind == "WeightedSum"
    head = {"w": w} if weighted else {}
    (got,) = run_op(f"SparseLengths{kind}Fused8BitRowwise", {"q": fused, **head, "i": idx, "l": lens})
    (got2,) = run_op(f"SparseLengths{kind}8BitsRowwise", {"c": codes, **head, "i": idx, "l": lens, "sb": sb})
    wv = w if weighted else None
    np.testing.assert_allclose(got, _float_lookup(deq, idx, lens, wv, kind == "Mean"), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got2, _float_lookup(deq2, idx, lens, wv, kind == "Mean"), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], 0)


def test_lookup_errors_name_the_input():
    (fused,) = run_op("FloatToFused8BitRowwiseQuantized", {"x": _table(5)})
    with pytest.raises(Exception, match="indices in \\[0, 7\\)"):
        run_op("SparseLengthsSumFused8BitRowwise", {"q": fused, "i": np.array([7], np.int32), "l": np.array([1])})
    with pytest.raises(Exception, match="summing to 2"):
        run_op("SparseLengthsSumFused8BitRowwise", {"q": fused, "i": np.array([0, 1]), "l": np.array([1])})
    with pytest.raises(Exception, match="uint8"):
        run_op("Fused8BitRowwiseQuantizedToFloat", {"q": _table(5)})


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_rowwise8bit

    result = doctest.testmod(caffe2_rowwise8bit, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_weighted_mean_divides_the_weighted_sum_by_each_length():
    rng = np.random.default_rng(6)
    codes, sb = run_op("FloatToRowwiseQuantized8Bits", {"x": _table(7, 8, 4)}, ["c", "sb"])
    idx, lens = rng.integers(0, 8, 6).astype(np.int64), np.array([2, 0, 4], np.int32)
    w = rng.uniform(size=6).astype(np.float32)
    feeds = {"c": codes, "w": w, "i": idx, "l": lens, "sb": sb}
    (total,) = run_op("SparseLengthsWeightedSum8BitsRowwise", feeds)
    (mean,) = run_op("SparseLengthsWeightedMean8BitsRowwise", feeds)
    np.testing.assert_allclose(mean, total / np.array([[2], [1], [4]], np.float32), rtol=1e-6)


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather_fused_equals_gather_of_the_dequantized_table(idx_dtype):
    rng = np.random.default_rng(11)
    data = rng.standard_normal((7, 5)).astype(np.float32)
    idx = np.array([6, 0, 0, 3], idx_dtype)
    (q,) = run_op("FloatToFused8BitRowwiseQuantized", {"d": data}, ["q"])
    (table,) = run_op("Fused8BitRowwiseQuantizedToFloat", {"q": q}, ["t"])
    (got,) = run_op("GatherFused8BitRowwise", {"q": q, "i": idx}, ["g"])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, table[idx])
    (empty,) = run_op("GatherFused8BitRowwise", {"q": q, "i": np.zeros(0, idx_dtype)}, ["g"])
    assert empty.shape == (0, 5)
    with pytest.raises(an.OperatorError, match=r"INDICES in \[0, 7\)"):
        run_op("GatherFused8BitRowwise", {"q": q, "i": np.array([7], idx_dtype)}, ["g"])
