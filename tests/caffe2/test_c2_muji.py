"""caffe2.python.muji: the all-reduce nets leave the sum on every device. The same builders run
here on host device options (the public functions put each blob on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import core, muji, workspace

pytestmark = pytest.mark.timeout(60)


def _run(builder, n):
    net = core.Net(f"ar{n}")
    names = [f"g{i}" for i in range(n)]
    rng = np.random.default_rng(n)
    values = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(n)]
    for name, v in zip(names, values):
        workspace.FeedBlob(name, v)
    builder(net, names, "_red", [muji.OnCPU() for _ in range(n)])
    workspace.RunNetOnce(net)
    want = np.sum(np.stack(values), axis=0, dtype=np.float64)
    for name in names:
        np.testing.assert_allclose(workspace.FetchBlob(name + "_red"), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(workspace.FetchBlob("g0"), values[0])  # inputs untouched
    return net.Proto()


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_tree_and_fallback_sum_on_every_device(n):
    tree = _run(muji._tree, n)
    fallback = _run(muji._fallback, n)
    adds = [op for op in tree.op if op.type == "Add"]
    assert len(adds) == n - 1 and len([op for op in fallback.op if op.type == "Sum"]) == 1


def test_public_builders_place_ops_on_the_receiving_gpu():
    net = core.Net("ar4")
    muji.Allreduce4(net, ["a", "b", "c", "d"], "_r", [3, 2, 1, 0])
    ops = net.Proto().op
    assert all(op.device_option.device_type == caffe2_pb2.CUDA for op in ops)
    last = {op.output[0]: op.device_option.device_id for op in ops}
    assert [last[b + "_r"] for b in "abcd"] == [3, 2, 1, 0]


def test_wrong_counts_are_refused():
    with pytest.raises(ValueError, match="expected 8 blobs, got 2"):
        muji.Allreduce8(core.Net("x"), ["a", "b"], "_r", [0, 1])
    with pytest.raises(ValueError, match="one GPU index per blob"):
        muji.Allreduce(core.Net("x"), ["a", "b"], "_r", [0])
