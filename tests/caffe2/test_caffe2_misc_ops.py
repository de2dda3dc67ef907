"""Print, Summarize, Clip, MakeTwoClass, Unique and UnsortedSegmentSum against numpy and Caffe2's
documented semantics; their gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(60)


def _run(net):
    workspace.RunNetOnce(net)


def _numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        g[idx] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_clip_and_its_gradient():
    x = np.array([-2.0, -0.5, 0.3, 0.9, 3.0])
    net = core.Net("clip")
    y = net.Clip("x", "y", min=-1.0, max=1.0)
    net.AveragedLoss(net.Mul([y, y], "yy"), "loss")
    net.AddGradientOperators(["loss"])
    workspace.FeedBlob("x", x)
    _run(net)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), np.clip(x, -1, 1))
    num = _numeric_grad(lambda v: np.mean(np.clip(v, -1, 1) ** 2), x)
    np.testing.assert_allclose(workspace.FetchBlob("x_grad"), num, atol=1e-6)


def test_make_two_class_and_its_gradient():
    x = np.array([[0.1, 0.7], [0.5, 0.2]])
    w = np.arange(8.0).reshape(2, 2, 2)
    net = core.Net("two")
    y = net.MakeTwoClass("x", "y")
    net.AveragedLoss(net.Mul([y, "w"], "yw"), "loss")
    net.AddGradientOperators(["loss"])
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("w", w)
    _run(net)
    np.testing.assert_allclose(workspace.FetchBlob("y"), np.stack([1 - x, x], -1))
    num = _numeric_grad(lambda v: np.mean(np.stack([1 - v, v], -1) * w), x)
    np.testing.assert_allclose(workspace.FetchBlob("x_grad"), num, atol=1e-7)


def test_unique_and_segment_sum_deduplicate_a_sparse_gradient():
    idx = np.array([4, 1, 4, 7, 1], np.int64)
    vals = np.arange(10.0).reshape(5, 2)
    net = core.Net("dedup")
    uniq, remap = net.Unique(["idx"], 2)
    net.UnsortedSegmentSum([core.BlobReference("vals"), remap], "summed")
    workspace.FeedBlob("idx", idx)
    workspace.FeedBlob("vals", vals)
    _run(net)
    np.testing.assert_array_equal(workspace.FetchBlob(uniq), [1, 4, 7])
    np.testing.assert_array_equal(workspace.FetchBlob(remap), [1, 0, 1, 2, 0])
    np.testing.assert_array_equal(workspace.FetchBlob("summed"), [[2 + 8, 3 + 9], [0 + 4, 1 + 5], [6, 7]])


def test_unsorted_segment_sum_gradient_is_a_gather():
    data = np.arange(6.0).reshape(3, 2)
    ids = np.array([1, 0, 1], np.int32)
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    net = core.Net("seg_grad")
    s = net.UnsortedSegmentSum(["data", "ids"], "s")
    net.AveragedLoss(net.Mul([s, "w"], "sw"), "loss")
    net.AddGradientOperators(["loss"])
    for k, v in (("data", data), ("ids", ids), ("w", w)):
        workspace.FeedBlob(k, v)
    _run(net)
    np.testing.assert_allclose(workspace.FetchBlob("data_grad"), w[ids] / w.size)
    with pytest.raises(an.AsyncNetError, match=r"segment ids must lie in \[0, 1\)"):
        bad = core.Net("seg_bad")
        bad.UnsortedSegmentSum(["data", "ids"], "s", num_segments=1)
        _run(bad)


def test_summarize_matches_numpy_and_writes_its_file(tmp_path):
    x = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    workspace.ResetWorkspace(str(tmp_path))
    net = core.Net("summ")
    net.Summarize("x", "stats")
    net.Summarize("x", [], to_file=1)
    workspace.FeedBlob("x", x)
    _run(net)
    _run(net)
    np.testing.assert_allclose(workspace.FetchBlob("stats"), [1, 8, x.mean(), x.std(ddof=1)], rtol=1e-6)
    lines = (tmp_path / "x.summary").read_text().splitlines()
    assert lines[0] == "min max mean std" and len(lines) == 3
    assert [float(v) for v in lines[1].split()] == pytest.approx([1, 8, 3.75, x.std(ddof=1)], rel=1e-5)


def test_print_to_the_log_and_to_file(tmp_path, caplog):
    workspace.ResetWorkspace(str(tmp_path))
    workspace.FeedBlob("v", np.array([1, 2, 3], np.int32))
    net = core.Net("printing")
    net.Print("v", [])
    net.Print("v", [], to_file=1, limit=2)
    with caplog.at_level("INFO", logger="asyncnet.ops.print"):
        _run(net)
    assert "Tensor v of type int32. Dims: (3,): 1,2,3" in caplog.text
    assert (tmp_path / "v.log").read_text().strip().endswith(": 1,2")


def test_save_load_relative_to_root_folder(tmp_path):
    workspace.ResetWorkspace(str(tmp_path))
    workspace.FeedBlob("p", np.ones(3, np.float32))
    workspace.RunOperatorOnce(core.CreateOperator("Save", ["p"], [], db="params.minidb", db_type="minidb"))
    assert (tmp_path / "params.minidb").exists()
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("Load", [], ["p"], db="params.minidb", db_type="minidb"))
    np.testing.assert_array_equal(workspace.FetchBlob("p"), np.ones(3))


def test_channel_stats_and_backprop_stats_against_spatial_bn():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 2, 5))
    dy = rng.standard_normal(x.shape)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("dy", dy)
    net = core.Net("stats")
    s, ss = net.ChannelStats("x", ["s", "ss"])
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("s"), x.sum((0, 2, 3)))
    np.testing.assert_allclose(workspace.FetchBlob("ss"), (x * x).sum((0, 2, 3)))
    n = x.size / 3
    mean = x.sum((0, 2, 3)) / n
    inv_std = 1 / np.sqrt((x * x).sum((0, 2, 3)) / n - mean**2 + 1e-5)
    workspace.FeedBlob("mean", mean)
    workspace.FeedBlob("inv_std", inv_std)
    back = core.Net("back_stats")
    back.ChannelBackpropStats(["x", "mean", "inv_std", "dy"], ["dscale", "dbias"])
    workspace.RunNetOnce(back)
    # the scale and bias gradients of SpatialBN (training mode) computed by asyncnet's autodiff
    bn = core.Net("bn")
    bn.SpatialBN(["x", "scale", "bias", "rm", "riv"], ["y", "rm", "riv", "sm", "siv"], epsilon=1e-5, is_test=0)
    bn.AveragedLoss(bn.Mul(["y", "dy"], "ydy"), "loss")
    bn.AddGradientOperators(["loss"])
    for k, v in (("scale", np.ones(3)), ("bias", np.zeros(3)), ("rm", np.zeros(3)), ("riv", np.ones(3))):
        workspace.FeedBlob(k, v)
    workspace.RunNetOnce(bn)
    np.testing.assert_allclose(workspace.FetchBlob("dscale") / x.size, workspace.FetchBlob("scale_grad"), rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("dbias") / x.size, workspace.FetchBlob("bias_grad"), rtol=1e-6)
