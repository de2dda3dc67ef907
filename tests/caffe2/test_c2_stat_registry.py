"""Caffe2's stat registry ops (stats_ops.cc) and AtomicIter's counter in it (sgd/iter_op.h:
``atomic_iter/stats/<iter blob>/num_iter``), in the style of Caffe2's stats_ops_test.py."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from caffe2.python import brew, core, model_helper, optimizer, workspace

pytestmark = pytest.mark.timeout(120)


def _export(inputs=(), reset=True, tag="e"):
    outs = [f"{tag}_k", f"{tag}_v", f"{tag}_t"]
    workspace.RunOperatorOnce(core.CreateOperator("StatRegistryExport", list(inputs), outs, reset=int(reset)))
    keys, values, stamps = (workspace.FetchBlob(o) for o in outs)
    return dict(zip((k.decode() for k in keys), values.tolist())), stamps


def test_update_export_and_private_registry_as_caffe2s_test():
    _export()  # the process's registry outlives workspaces, as in Caffe2: start from zeroed counters
    prefix = "test_c2_stat_registry/test_update"
    keys = [prefix + "/key1", prefix + "/key2"]
    workspace.FeedBlob("k", np.array(keys, dtype=str))
    workspace.FeedBlob("v", np.array([34, 45], np.int64))
    for _ in range(2):
        workspace.RunOperatorOnce(core.CreateOperator("StatRegistryUpdate", ["k", "v"], []))
    got, stamps = _export(tag="g")
    assert got[keys[0]] == 68 and got[keys[1]] == 90
    assert stamps.dtype == np.int64 and len(stamps) == len(got)
    workspace.RunOperatorOnce(core.CreateOperator("StatRegistryCreate", [], ["reg"]))
    workspace.RunOperatorOnce(core.CreateOperator("StatRegistryUpdate", ["g_k", "g_v", "reg"], []))
    private, _ = _export(["reg"], tag="p")
    assert private == got  # a copy of what the process's registry exported
    again, _ = _export(tag="a")
    assert again[keys[0]] == 0 and again[keys[1]] == 0  # reset by the export above


def test_reset_0_keeps_the_counts():
    workspace.RunOperatorOnce(core.CreateOperator("StatRegistryCreate", [], ["reg"]))
    workspace.FeedBlob("k", np.array(["x"], dtype=str))
    workspace.FeedBlob("v", np.array([5], np.int64))
    workspace.RunOperatorOnce(core.CreateOperator("StatRegistryUpdate", ["k", "v", "reg"], []))
    assert _export(["reg"], reset=False)[0] == {"x": 5}
    assert _export(["reg"])[0] == {"x": 5}
    assert _export(["reg"])[0] == {"x": 0}


def test_atomic_iter_counts_its_runs():
    workspace.FeedBlob("data", np.ones((4, 3), np.float32))
    workspace.FeedBlob("label", np.zeros((4, 1), np.float32))
    m = model_helper.ModelHelper(name="stats")
    dist = m.SquaredL2Distance([brew.fc(m, "data", "fc", 3, 1), "label"], "dist")
    m.AddGradientOperators([m.AveragedLoss(dist, "loss")])
    optimizer.build_sgd(m, base_learning_rate=0.1)
    (it,) = [op.input[1] for op in m.net.Proto().op if op.type == "AtomicIter"]
    workspace.RunNetOnce(m.param_init_net)
    workspace.CreateNet(m.net)
    _export()
    workspace.RunNet(m.net, num_iter=7)
    got, _ = _export()
    assert got[f"atomic_iter/stats/{it}/num_iter"] == 7
    assert int(workspace.FetchBlob(it)[0]) == 7


def test_bad_inputs_are_named():
    ws = an.Workspace()
    ws.feed("k", np.array(["a", "b"], object))
    ws.feed("v", np.array([1], np.int64))
    net = an.Net("bad")
    net.StatRegistryUpdate(["k", "v"], [])
    with pytest.raises(an.OperatorError, match="as many integer values as keys"):
        ws.run_net_once(net)
    ws.feed("v", np.array([1, 2], np.int64))
    net = an.Net("bad2")
    net.StatRegistryExport(["v"], ["a", "b", "c"])
    with pytest.raises(an.OperatorError, match="StatRegistryCreate"):
        ws.run_net_once(net)
