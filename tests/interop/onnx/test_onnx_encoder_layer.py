"""Transformer encoder layers exported by ``torch.onnx.export`` become one ``ONNXEncoderLayer`` at
import: outputs equal onnxruntime's (and torch's own unfused module) within 1e-4 on every executor
and tensor library; a layer that differs from the pattern (another attention scale, pre-norm)
keeps its ops and still gives onnxruntime's outputs; the op's kernels agree with torch's module."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from torch import nn

import asyncnet as an
from asyncnet.interop.onnx import backend
from asyncnet.ops.onnx_attention import encoder_layer_numpy

pytestmark = pytest.mark.timeout(300)


class Encoder(nn.Module):
    def __init__(self, batch_first: bool = True, norm_first: bool = False, layers: int = 2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model=32, nhead=4, dim_feedforward=48, dropout=0.0, batch_first=batch_first, norm_first=norm_first
        )
        self.enc = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.enc(x)


def _export(model: nn.Module, x: np.ndarray, batch_axis: int = 0) -> bytes:
    f = io.BytesIO()
    axes = {"x": {batch_axis: "batch"}, "y": {batch_axis: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.from_numpy(x),),
            f,
            dynamo=False,
            opset_version=17,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes=axes,
        )
    return f.getvalue()


def _encoder(batch_first: bool = True, norm_first: bool = False, seed: int = 0) -> tuple[nn.Module, np.ndarray]:
    torch.manual_seed(seed)
    model = Encoder(batch_first, norm_first).eval()
    shape = (3, 6, 32) if batch_first else (6, 3, 32)
    return model, np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ort(blob: bytes, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _fused_count(blob: bytes) -> int:
    return sum(op.type == "ONNXEncoderLayer" for op in an.onnx.load(blob).predict_net.ops)


def _check_all_configs(blob: bytes, x: np.ndarray, want: np.ndarray) -> None:
    for net_type in ("simple", "async_scheduling"):
        for tensors in ("numpy", "torch"):
            with backend.prepare(blob, net_type=net_type, num_workers=2, tensors=tensors) as rep:
                got = rep.run([x])[0]
                again = rep.run([x])[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{net_type} {tensors}")
            np.testing.assert_array_equal(got, again)


@pytest.mark.parametrize("batch_first", [True, False])
def test_exported_encoder_layers_are_fused_and_match_onnxruntime(batch_first: bool) -> None:
    model, x = _encoder(batch_first)
    blob = _export(model, x, 0 if batch_first else 1)
    assert _fused_count(blob) == 2
    ops = an.onnx.load(blob).predict_net.ops
    assert [op.type for op in ops] == ["ONNXEncoderLayer", "ONNXEncoderLayer"]
    assert ops[0].args["num_heads"] == 4 and ops[0].args["batch_first"] is batch_first
    want = _ort(blob, x)
    _check_all_configs(blob, x, want)
    with torch.enable_grad():  # torch's own unfused path (its fused one is off while parameters need gradients)
        unfused = model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(want, unfused, rtol=1e-4, atol=1e-4)
    other = np.random.default_rng(1).standard_normal((5, 6, 32) if batch_first else (6, 5, 32)).astype(np.float32)
    _check_all_configs(blob, other, _ort(blob, other))  # another batch size through the dynamic axis


def test_fused_weights_replace_the_transposed_initializers() -> None:
    model, x = _encoder()
    m = an.onnx.load(_export(model, x))
    made = {op.outputs[0]: op for op in m.init_net.ops}
    fused = m.predict_net.ops[0]
    qkv = next(op for op in m.init_net.ops if op.outputs[0] == fused.inputs[1])
    ws = an.Workspace()
    ws.run_operator_once(qkv)
    np.testing.assert_array_equal(ws.fetch(qkv.outputs[0]), model.enc.layers[0].self_attn.in_proj_weight.detach())
    transposed = [n for n in made if n.endswith("__transposed")]
    assert len(transposed) == 6  # in-projection and two feed-forward weights per layer
    assert not {n.removesuffix("__transposed") for n in transposed} & set(made)  # the originals are gone


def _scale_changed(blob: bytes) -> bytes:
    """The model with the first layer's attention scale on q doubled (a Mul by a Sqrt of the head size)."""
    mp = onnx.load_from_string(blob)
    sqrt = {o for node in mp.graph.node if node.op_type == "Sqrt" for o in node.output}
    for node in mp.graph.node:
        if node.op_type == "Mul" and "layers.0/self_attn" in node.name and node.input[1] in sqrt:
            c = onnx.helper.make_node(
                "Constant", [], [node.input[1] + "_x2"], value=onnx.numpy_helper.from_array(np.float32(2.0))
            )
            m2 = onnx.helper.make_node("Mul", [node.input[1], c.output[0]], [node.input[1] + "_scaled"])
            node.input[1] = m2.output[0]
            idx = list(mp.graph.node).index(node)
            mp.graph.node.insert(idx, m2)
            mp.graph.node.insert(idx, c)
            break
    else:
        raise AssertionError("no attention Mul in the export")
    return mp.SerializeToString()


def test_a_layer_with_another_attention_scale_keeps_its_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncnet.interop.onnx import _optimize

    checks: list[bool] = []
    same = _optimize._same_output
    monkeypatch.setattr(_optimize, "_same_output", lambda *a: checks.append(same(*a)) or checks[-1])
    model, x = _encoder()
    blob = _scale_changed(_export(model, x))
    assert _fused_count(blob) == 1  # the second layer still matches
    assert sorted(checks) == [False, True]  # the first matched the structure and failed the numeric check
    _check_all_configs(blob, x, _ort(blob, x))


def test_a_pre_norm_layer_keeps_its_ops() -> None:
    model, x = _encoder(norm_first=True)
    blob = _export(model, x)
    assert _fused_count(blob) == 0
    _check_all_configs(blob, x, _ort(blob, x))


def test_no_fusion_without_optimize_gives_the_same_outputs() -> None:
    model, x = _encoder()
    blob = _export(model, x)
    plain = an.onnx.load(blob, optimize=False)
    assert not any(op.type == "ONNXEncoderLayer" for op in plain.predict_net.ops)
    with backend.prepare(blob) as rep:
        fused = rep.run([x])[0]
    np.testing.assert_allclose(fused, _ort(blob, x), rtol=1e-4, atol=1e-4)


def _layer_inputs(g: np.random.Generator, dtype: type, batch: int = 2, seq: int = 5) -> list[np.ndarray]:
    e, f = 8, 12
    shapes = [(batch, seq, e), (3 * e, e), (3 * e,), (e, e), (e,), (e,), (e,), (f, e), (f,), (e, f), (e,), (e,), (e,)]
    return [(g.standard_normal(s) * 0.5).astype(dtype) for s in shapes]


def _torch_module(ins: list[np.ndarray]) -> nn.Module:
    layer = nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, batch_first=True).double().eval()
    params = [
        layer.self_attn.in_proj_weight,
        layer.self_attn.in_proj_bias,
        layer.self_attn.out_proj.weight,
        layer.self_attn.out_proj.bias,
        layer.norm1.weight,
        layer.norm1.bias,
        layer.linear1.weight,
        layer.linear1.bias,
        layer.linear2.weight,
        layer.linear2.bias,
        layer.norm2.weight,
        layer.norm2.bias,
    ]
    with torch.no_grad():
        for p, v in zip(params, ins[1:]):
            p.copy_(torch.from_numpy(v.astype(np.float64)))
    return layer


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_op_equals_torchs_module_on_numpy_and_torch(dtype: type) -> None:
    ins = _layer_inputs(np.random.default_rng(3), dtype)
    with torch.enable_grad():  # the module's unfused path: an independent reference
        want = _torch_module(ins)(torch.from_numpy(ins[0].astype(np.float64))).detach().numpy()
    tol = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(encoder_layer_numpy(ins[0], tuple(ins[1:]), 2, 1e-5), want, rtol=tol, atol=tol)
    names = [f"i{k}" for k in range(13)]
    for lib in ("numpy", "torch"):
        for net_type in ("simple", "straight"):
            ws = an.Workspace()
            for n, v in zip(names, ins):
                ws.feed(n, v if lib == "numpy" else torch.from_numpy(v.copy()))
            net = an.Net("n", type=net_type)
            net.ONNXEncoderLayer(names, "y", num_heads=2)
            for _ in range(3):  # a straight net takes its specialized kernel from the second run on
                ws.run_net_once(net)
            got = ws.fetch("y")
            got = got.numpy() if lib == "torch" else got
            assert got.dtype == dtype and got.shape == ins[0].shape
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{lib} {net_type}")


def test_the_op_sequence_first_equals_batch_first() -> None:
    ins = _layer_inputs(np.random.default_rng(4), np.float32)
    names = [f"i{k}" for k in range(13)]
    ws = an.Workspace()
    for n, v in zip(names, ins):
        ws.feed(n, v)
    ws.feed("s", np.ascontiguousarray(ins[0].transpose(1, 0, 2)))
    net = an.Net("n")
    net.ONNXEncoderLayer(names, "y", num_heads=2)
    net.ONNXEncoderLayer(["s", *names[1:]], "z", num_heads=2, batch_first=False)
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("z").transpose(1, 0, 2), ws.fetch("y"), rtol=1e-6, atol=1e-6)


def test_the_op_names_a_misshapen_input() -> None:
    ins = _layer_inputs(np.random.default_rng(5), np.float32)
    ins[8] = np.zeros(5, np.float32)  # ffn1_bias of the wrong length
    names = [f"i{k}" for k in range(13)]
    ws = an.Workspace()
    for n, v in zip(names, ins):
        ws.feed(n, v)
    net = an.Net("n")
    net.ONNXEncoderLayer(names, "y", num_heads=2)
    with pytest.raises(an.OperatorError, match=r"ffn1_bias 'i8' of shape \(12,\), got \(5,\)"):
        ws.run_net_once(net)
    net3 = an.Net("m")
    net3.ONNXEncoderLayer(names, "y", num_heads=3)
    with pytest.raises(an.OperatorError, match="E divisible by num_heads=3"):
        ws.run_net_once(net3)
    with pytest.raises(an.NetDefinitionError, match="num_heads >= 1"):
        bad = an.Net("b")
        bad.ONNXEncoderLayer(names, "y", num_heads=0)
        ws.create_net(bad)


def test_the_kernel_depends_on_values_not_layouts_and_sees_weight_writes() -> None:
    ins = _layer_inputs(np.random.default_rng(6), np.float32)
    names = [f"i{k}" for k in range(13)]
    ws = an.Workspace()
    for n, v in zip(names, ins):
        ws.feed(n, v)
    net = an.Net("n", type="straight")
    net.ONNXEncoderLayer(names, "y", num_heads=2)
    ws.create_net(net)
    outs = []
    for x in (ins[0], np.asfortranarray(ins[0]), ins[0].copy()):  # another layout, then read-only
        if len(outs) == 2:
            x.flags.writeable = False
        ws.feed("i0", x)
        ws.run_net("n")
        outs.append(ws.fetch("y").copy())
    assert all(np.array_equal(o, outs[0]) for o in outs)
    ws.feed("i0", ins[0])
    ws.fetch("i12")[...] += 1.0  # norm2's bias, written in place: the kept views see it
    ws.run_net("n")
    np.testing.assert_allclose(ws.fetch("y"), outs[0] + 1.0, rtol=1e-5, atol=1e-5)
