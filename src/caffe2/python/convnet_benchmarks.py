"""Caffe2's ``convnet_benchmarks``: the classic image networks (AlexNet, OverFeat, VGG-A,
GoogLeNet's Inception v1) and a small MLP, built with ``brew``, and a timer that runs one of them
forward (or forward, backward and an SGD step) on synthetic data.

Each model function takes ``(order, cudnn_ws)`` and returns ``(model, input_size)``: the model's
net ends in ``softmax -> LabelCrossEntropy -> AveragedLoss("loss")`` over 1000 classes, reading
blobs ``data`` (N x 3 x size x size in NCHW) and ``label``. The layer stacks are written as
tables read by one builder:

* ``("conv", out_channels, kernel, stride, pad)`` + ReLU,
* ``("pool", kernel, stride, pad)`` max pooling, ``("avg", kernel, stride, pad)`` average pooling,
* ``("fc", out)`` + ReLU (the classifier's last FC has none),
* ``("inception", 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection)``.

From the command line (as Caffe2's script): ``python -m caffe2.python.convnet_benchmarks --model
AlexNet --batch_size 4 --cpu --forward_only --iterations 2 --warmup_iterations 1``.

    >>> model, size = MLP("NCHW", None)
    >>> size, [str(p) for p in model.params][:2]
    (256, ['fc1_w', 'fc1_b'])
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from caffe2.python import brew, model_helper, workspace

__all__ = ["MLP", "AlexNet", "OverFeat", "VGGA", "Inception", "AddParameterUpdate", "Benchmark", "GetArgumentParser"]

CLASSES = 1000

_ALEXNET = [
    ("conv", 64, 11, 4, 2),
    ("pool", 3, 2, 0),
    ("conv", 192, 5, 1, 2),
    ("pool", 3, 2, 0),
    ("conv", 384, 3, 1, 1),
    ("conv", 256, 3, 1, 1),
    ("conv", 256, 3, 1, 1),
    ("pool", 3, 2, 0),
    ("fc", 4096),
    ("fc", 4096),
]
_OVERFEAT = [
    ("conv", 96, 11, 4, 0),
    ("pool", 2, 2, 0),
    ("conv", 256, 5, 1, 0),
    ("pool", 2, 2, 0),
    ("conv", 512, 3, 1, 1),
    ("conv", 1024, 3, 1, 1),
    ("conv", 1024, 3, 1, 1),
    ("pool", 2, 2, 0),
    ("fc", 3072),
    ("fc", 4096),
]
_VGGA = [
    *[("conv", 64, 3, 1, 1), ("pool", 2, 2, 0)],
    *[("conv", 128, 3, 1, 1), ("pool", 2, 2, 0)],
    *[("conv", 256, 3, 1, 1), ("conv", 256, 3, 1, 1), ("pool", 2, 2, 0)],
    *[("conv", 512, 3, 1, 1), ("conv", 512, 3, 1, 1), ("pool", 2, 2, 0)],
    *[("conv", 512, 3, 1, 1), ("conv", 512, 3, 1, 1), ("pool", 2, 2, 0)],
    ("fc", 4096),
    ("fc", 4096),
]
_INCEPTION_V1 = [
    ("conv", 64, 7, 2, 3),
    ("pool", 3, 2, 1),
    ("conv", 64, 1, 1, 0),
    ("conv", 192, 3, 1, 1),
    ("pool", 3, 2, 1),
    ("inception", 64, 96, 128, 16, 32, 32),
    ("inception", 128, 128, 192, 32, 96, 64),
    ("pool", 3, 2, 1),
    ("inception", 192, 96, 208, 16, 48, 64),
    ("inception", 160, 112, 224, 24, 64, 64),
    ("inception", 128, 128, 256, 24, 64, 64),
    ("inception", 112, 144, 288, 32, 64, 64),
    ("inception", 256, 160, 320, 32, 128, 128),
    ("pool", 3, 2, 1),
    ("inception", 256, 160, 320, 32, 128, 128),
    ("inception", 384, 192, 384, 48, 128, 128),
    ("avg", 7, 1, 0),
]


class _Builder:
    """Adds one layer table to a model, tracking the current blob, channels and spatial size."""

    def __init__(self, model: Any, order: str, cudnn_ws: int | None, size: int, channels: int = 3):
        self.model, self.order, self.blob = model, order, "data"
        self.channels, self.size, self.flat = channels, size, None
        self.conv_args: dict[str, Any] = {} if cudnn_ws is None else {"ws_nbytes_limit": cudnn_ws}
        self.count = 0

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def conv(self, blob: str, c_in: int, c_out: int, kernel: int, stride: int, pad: int, name: str) -> str:
        out = brew.conv(
            self.model,
            blob,
            name,
            c_in,
            c_out,
            kernel,
            stride=stride,
            pad=pad,
            order=self.order,
            **self.conv_args,
        )
        return brew.relu(self.model, out, out, order=self.order)

    def pool(self, blob: str, kernel: int, stride: int, pad: int, name: str, average: bool = False) -> str:
        helper = brew.average_pool if average else brew.max_pool
        return helper(self.model, blob, name, kernel=kernel, stride=stride, pad=pad, order=self.order)

    def inception(self, spec: Sequence[int]) -> None:
        one, red3, out3, red5, out5, proj = spec
        name = self._name("inc")
        c = self.channels
        a = self.conv(self.blob, c, one, 1, 1, 0, f"{name}_1x1")
        b = self.conv(self.conv(self.blob, c, red3, 1, 1, 0, f"{name}_3x3_reduce"), red3, out3, 3, 1, 1, f"{name}_3x3")
        d = self.conv(self.conv(self.blob, c, red5, 1, 1, 0, f"{name}_5x5_reduce"), red5, out5, 5, 1, 2, f"{name}_5x5")
        p = self.conv(self.pool(self.blob, 3, 1, 1, f"{name}_pool"), c, proj, 1, 1, 0, f"{name}_pool_proj")
        self.blob = brew.concat(self.model, [a, b, d, p], f"{name}_out", axis=1 if self.order == "NCHW" else 3)
        self.channels = one + out3 + out5 + proj

    def layer(self, spec: tuple[Any, ...]) -> None:
        kind = spec[0]
        if kind == "conv":
            _, c_out, kernel, stride, pad = spec
            self.blob = self.conv(self.blob, self.channels, c_out, kernel, stride, pad, self._name("conv"))
            self.channels, self.size = c_out, (self.size + 2 * pad - kernel) // stride + 1
        elif kind in ("pool", "avg"):
            _, kernel, stride, pad = spec
            self.blob = self.pool(self.blob, kernel, stride, pad, self._name(kind), average=kind == "avg")
            self.size = (self.size + 2 * pad - kernel) // stride + 1
        elif kind == "fc":
            self.blob = self.fc(spec[1])
            self.blob = brew.relu(self.model, self.blob, self.blob)
        elif kind == "inception":
            self.inception(spec[1:])
        else:
            raise ValueError(f"unknown layer kind {kind!r} in a benchmark table")

    def fc(self, out: int) -> str:
        width = self.flat if self.flat is not None else self.channels * self.size * self.size
        blob = brew.fc(self.model, self.blob, self._name("fc"), width, out)
        self.flat = out
        return blob

    def classifier(self) -> None:
        logits = self.fc(CLASSES)
        pred = brew.softmax(self.model, logits, "pred")
        xent = self.model.net.LabelCrossEntropy([pred, "label"], "xent")
        self.model.net.AveragedLoss(xent, "loss")


def _build(name: str, table: Sequence[tuple[Any, ...]], size: int, order: str, cudnn_ws: int | None) -> tuple[Any, int]:
    model = model_helper.ModelHelper(name=name, arg_scope={"order": order, "use_cudnn": True})
    builder = _Builder(model, order, cudnn_ws, size)
    for spec in table:
        builder.layer(spec)
    builder.classifier()
    return model, size


def MLP(order: str, cudnn_ws: int | None) -> tuple[Any, int]:
    """Four 256-wide hidden layers with ReLU over a 256-long input."""
    model = model_helper.ModelHelper(name="MLP")
    builder = _Builder(model, order, cudnn_ws, 1, channels=256)
    builder.flat = 256
    for _ in range(4):
        builder.layer(("fc", 256))
    builder.classifier()
    return model, 256


def AlexNet(order: str, cudnn_ws: int | None) -> tuple[Any, int]:
    """AlexNet (one tower: 64-192-384-256-256 convolutions, two 4096 FCs) on 224 x 224 images."""
    return _build("alexnet", _ALEXNET, 224, order, cudnn_ws)


def OverFeat(order: str, cudnn_ws: int | None) -> tuple[Any, int]:
    """OverFeat's fast model (96-256-512-1024-1024 convolutions, 3072 and 4096 FCs) on 231 x 231."""
    return _build("overfeat", _OVERFEAT, 231, order, cudnn_ws)


def VGGA(order: str, cudnn_ws: int | None) -> tuple[Any, int]:
    """VGG's configuration A (eight 3x3 convolutions, two 4096 FCs) on 224 x 224 images."""
    return _build("vgga", _VGGA, 224, order, cudnn_ws)


def Inception(order: str, cudnn_ws: int | None) -> tuple[Any, int]:
    """GoogLeNet (Inception v1: nine inception modules, global average pooling) on 224 x 224."""
    return _build("inception", _INCEPTION_V1, 224, order, cudnn_ws)


def AddParameterUpdate(model: Any) -> None:
    """Plain SGD on every parameter (a tiny step-decayed rate: a timing run, not training)."""
    rate = model.net.LearningRate(
        brew.iter(model, "iter"), "LR", base_lr=-1e-8, policy="step", stepsize=10000, gamma=0.999
    )
    one = model.param_init_net.ConstantFill([], "ONE", shape=[1], value=1.0)
    for param, grad in [(p, model.param_to_grad[p]) for p in model.params]:
        model.net.WeightedSum([param, one, grad, rate], param)


def _input_shape(arg: Any, size: int) -> list[int]:
    if arg.model == "MLP":
        return [arg.batch_size, size]
    if arg.order == "NCHW":
        return [arg.batch_size, 3, size, size]
    return [arg.batch_size, size, size, 3]


def _dump(model: Any, arg: Any) -> None:
    with open(f"{arg.model}_init_batch_{arg.batch_size}.pbtxt", "w") as f:
        f.write(str(model.param_init_net.Proto()))
    with open(f"{arg.model}.pbtxt", "w") as f:
        f.write(str(model.net.Proto()))


def _time_net(name: str, warmup: int, iterations: int, layer_wise: bool) -> dict[str, Any]:
    """Milliseconds per iteration of created net ``name`` (after ``warmup`` runs), and with
    ``layer_wise`` the milliseconds of each op type per iteration."""
    if warmup > 0:
        workspace.RunNet(name, warmup)
    started = time.perf_counter()
    workspace.RunNet(name, max(iterations, 1))
    result: dict[str, Any] = {"ms_per_iter": (time.perf_counter() - started) * 1000.0 / max(iterations, 1)}
    if layer_wise:
        from asyncnet.exec.trace import profile

        with profile(workspace.asyncnet_workspace().net(name)) as timeline:
            workspace.RunNet(name, max(iterations, 1))
        per_type: dict[str, float] = {}
        for event in timeline.events:
            per_type[event.op_type] = per_type.get(event.op_type, 0.0) + event.duration * 1000.0 / max(iterations, 1)
        result["ms_per_op_type"] = per_type
    return result


def _place(model: Any, arg: Any) -> None:
    """Both nets on GPU 0 unless ``--cpu``; ``--engine`` set on every op of the main net."""
    for net in () if arg.cpu else (model.param_init_net, model.net):
        net.RunAllOnGPU()
    for op in model.net.Proto().op if arg.engine else ():
        op.engine = arg.engine


def Benchmark(model_gen: Any, arg: Any) -> dict[str, Any]:
    """Build ``model_gen``'s model as ``arg`` (from :func:`GetArgumentParser`) says, feed it
    synthetic data from its init net, and time it; prints and returns the figures."""
    model, size = model_gen(arg.order, arg.cudnn_ws)
    proto = model.net.Proto()
    proto.type, proto.num_workers = arg.net_type, arg.num_workers
    init = model.param_init_net
    init.GaussianFill([], "data", shape=_input_shape(arg, size), mean=0.0, std=1.0)
    init.UniformIntFill([], "label", shape=[arg.batch_size], min=0, max=CLASSES - 1)
    mode = "forward only" if arg.forward_only else "forward-backward"
    if not arg.forward_only:
        model.AddGradientOperators(["loss"])
        AddParameterUpdate(model)
    _place(model, arg)
    if arg.dump_model:
        _dump(model, arg)
    workspace.RunNetOnce(init)
    workspace.CreateNet(model.net)
    result = _time_net(model.net.Proto().name, arg.warmup_iterations, arg.iterations, arg.layer_wise_benchmark)
    print(f"{arg.model or model.net.Proto().name}: {mode}, {result['ms_per_iter']:.3f} ms per iteration")
    return result


_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--batch_size", {"type": int, "default": 128, "help": "images per iteration"}),
    ("--model", {"type": str, "help": "AlexNet, OverFeat, VGGA, Inception or MLP"}),
    ("--order", {"type": str, "default": "NCHW", "help": "NCHW or NHWC"}),
    ("--cudnn_ws", {"type": int, "help": "a workspace limit in bytes passed to the convolutions"}),
    ("--iterations", {"type": int, "default": 10, "help": "timed runs"}),
    ("--warmup_iterations", {"type": int, "default": 10, "help": "untimed runs first"}),
    ("--forward_only", {"action": "store_true", "help": "time the forward pass alone"}),
    ("--layer_wise_benchmark", {"action": "store_true", "help": "also time each op type"}),
    ("--cpu", {"action": "store_true", "help": "run on the host (else on GPU 0)"}),
    ("--engine", {"type": str, "default": "", "help": "the engine set on every op"}),
    ("--dump_model", {"action": "store_true", "help": "write both nets as text protos"}),
    ("--net_type", {"type": str, "default": "dag", "help": "the net's executor type"}),
    ("--num_workers", {"type": int, "default": 2, "help": "the executor's worker threads"}),
    ("--use-nvtx", {"default": False, "action": "store_true", "help": "accepted; no effect"}),
    ("--htrace_span_log_path", {"type": str, "help": "accepted; no effect"}),
]


def GetArgumentParser() -> argparse.ArgumentParser:
    """The command line of the benchmark (Caffe2's option names and defaults)."""
    parser = argparse.ArgumentParser(description="Time a classic convnet on synthetic data.")
    for flag, options in _OPTIONS:
        parser.add_argument(flag, **options)
    return parser


_MODELS = {"AlexNet": AlexNet, "OverFeat": OverFeat, "VGGA": VGGA, "Inception": Inception, "MLP": MLP}


def main(argv: Sequence[str] | None = None) -> int:
    args, _ = GetArgumentParser().parse_known_args(argv)
    if args.model not in _MODELS:
        print(f"expected --model one of {sorted(_MODELS)}, got {args.model!r}")
        return 2
    Benchmark(_MODELS[args.model], args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
