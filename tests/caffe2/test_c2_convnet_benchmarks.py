"""caffe2.python.convnet_benchmarks: the networks have their published sizes, and the benchmark
runs a model forward and forward-backward on the host."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import convnet_benchmarks as cb
from caffe2.python import workspace

pytestmark = pytest.mark.timeout(300)


def _param_count(model):
    shapes = {}
    for op in model.param_init_net.Proto().op:
        for a in op.arg:
            if a.name == "shape":
                shapes[op.output[0]] = int(np.prod(list(a.ints)))
    return sum(shapes[str(p)] for p in model.params)


@pytest.mark.parametrize(
    ("gen", "count", "first_fc"),
    [
        (cb.AlexNet, 61_100_840, [4096, 256 * 6 * 6]),  # torchvision's alexnet: the same one-tower network
        (cb.VGGA, 132_863_336, [4096, 512 * 7 * 7]),  # VGG-11 (configuration A)
        (cb.OverFeat, None, [3072, 1024 * 6 * 6]),
        (cb.Inception, None, [1000, 1024]),
    ],
)
def test_networks_have_their_published_sizes(gen, count, first_fc):
    model, size = gen("NCHW", None)
    assert size in (224, 231)
    fc_shapes = [
        list(a.ints)
        for op in model.param_init_net.Proto().op
        if op.output[0].startswith("fc") and op.output[0].endswith("_w")
        for a in op.arg
        if a.name == "shape"
    ]
    assert fc_shapes[0] == first_fc
    if count is not None:
        assert _param_count(model) == count


@pytest.mark.parametrize("forward_only", [True, False])
@pytest.mark.parametrize("name", ["MLP", "Inception"])
def test_benchmark_runs_on_the_host(name, forward_only):
    flags = f"--batch_size 1 --model {name} --cpu --iterations 1 --warmup_iterations 1 --layer_wise_benchmark"
    args = cb.GetArgumentParser().parse_args((flags + (" --forward_only" if forward_only else "")).split())
    result = cb.Benchmark(getattr(cb, name), args)
    assert result["ms_per_iter"] > 0 and "FC" in result["ms_per_op_type"]
    assert ("FCGradient" in result["ms_per_op_type"]) is not forward_only
    loss = workspace.FetchBlob("loss")
    assert np.isfinite(loss).all() and float(loss) > 0


def test_the_command_line_refuses_an_unknown_model(capsys):
    assert cb.main(["--model", "LeNet"]) == 2
    assert "expected --model one of" in capsys.readouterr().out
