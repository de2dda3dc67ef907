"""The array namespace, devices and host copies: dispatch, errors, the Copy ops, feed/fetch."""

import subprocess
import sys

import numpy as np
import pytest

import asyncnet as an
from asyncnet.tensor import namespace as ns
from asyncnet.tensor.place import DeviceError, cuda_available, parse_device, place, require_device

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(60)
HAS_CUDA = cuda_available() > 0
needs_cuda = pytest.mark.skipif(
    not HAS_CUDA, reason="no CUDA device on this machine (torch.cuda.is_available() is False)"
)
without_cuda = pytest.mark.skipif(HAS_CUDA, reason="checks the error given where CUDA is absent")


def test_import_asyncnet_does_not_import_torch():
    code = (
        "import sys, numpy as np, asyncnet as an; ws = an.Workspace(); ws.feed('x', np.ones(2)); "
        "n = an.Net('n'); n.Relu('x', 'y'); ws.run_net_once(n); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_library_and_device_of_blobs():
    assert ns.library_of(np.zeros(2)) == "numpy" and ns.device_of(np.zeros(2)) == "cpu"
    assert ns.library_of(torch.zeros(2)) == "torch" and ns.device_of(torch.zeros(2)) == "cpu"
    assert ns.library_of(object()) is None and ns.library_of(3.0) is None


def test_namespace_picks_the_library_and_ignores_opaque_blobs():
    assert ns.namespace(None, np.ones(2), np.ones(3)) is ns.NUMPY
    assert ns.namespace(None, torch.ones(2), object()).name == "torch"
    assert ns.namespace(None, object()) is ns.NUMPY


def test_namespace_refuses_two_libraries_naming_both():
    with pytest.raises(TypeError, match=r"input 0 \(numpy on cpu\) and input 2 \(torch on cpu\)"):
        ns.namespace(None, np.ones(2), object(), torch.ones(2))


def test_to_numpy_copies_a_tensor_to_the_host():
    t = torch.arange(3.0)
    a = ns.to_numpy(t)
    a[0] = 9
    assert isinstance(a, np.ndarray) and t[0].item() == 0.0


@pytest.mark.parametrize(
    "make", [lambda: torch.arange(6.0).reshape(2, 3).t(), lambda: torch.ones(2, requires_grad=True)]
)
def test_to_numpy_copies_strided_and_grad_tensors(make):
    t = make()
    a = ns.to_numpy(t)
    np.testing.assert_array_equal(a, t.detach().numpy())
    assert a.dtype == np.float32 and not np.shares_memory(a, t.detach().numpy())


@pytest.mark.parametrize("text, name", [("cpu", "cpu"), ("CUDA", "cuda:0"), ("cuda:3", "cuda:3"), (" cpu:0 ", "cpu")])
def test_parse_device(text, name):
    assert parse_device(text) == name


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:-1", "cpu:1", ""])
def test_malformed_devices_are_one_error(bad):
    with pytest.raises(DeviceError, match="expected a device|one host device"):
        parse_device(bad)


@without_cuda
def test_cuda_where_absent_is_one_device_error():
    with pytest.raises(DeviceError, match=r"'cuda:0' requested but this machine has no CUDA"):
        require_device("cuda")
    with pytest.raises(DeviceError):
        an.Workspace().feed("x", np.ones(2), device="cuda")


def test_feed_places_and_fetch_host_gives_numpy():
    ws = an.Workspace()
    a = np.arange(3.0)
    ws.feed("t", a, library="torch")
    t = ws.fetch("t")
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64
    t[0] = 5.0  # on the CPU a change of library shares memory
    assert a[0] == 5.0
    host = ws.fetch("t", host=True)
    assert isinstance(host, np.ndarray) and host.tolist() == [5.0, 1.0, 2.0]
    host[1] = -1
    assert t[1].item() == 1.0  # the host copy is a copy
    assert ws.fetch("t", copy=True) is not t
    ws.feed("n", torch.ones(2), device="cpu", library="numpy")
    assert isinstance(ws.fetch("n"), np.ndarray)
    with pytest.raises(DeviceError, match="numpy arrays live on 'cpu'"):
        place(np.ones(2), "cuda:0", "numpy")


@pytest.mark.parametrize("op", ["EnsureCPUOutput", "CopyFromCPUInput", "Copy"])
@pytest.mark.parametrize("make", [np.array, torch.tensor], ids=["numpy", "torch"])
def test_host_copies_keep_the_library_and_copy(op, make):
    ws = an.Workspace()
    x = make([1.0, 2.0])
    ws.feed("x", x)
    net = an.Net("n")
    net.add_op(op, ["x"], ["y"])
    ws.run_net_once(net)
    y = ws.fetch("y")
    assert type(y) is type(x) and y is not x and y.tolist() == [1.0, 2.0]
    y[0] = 7
    assert x[0] == 1.0


def test_gpu_copies_are_cuda_ops():
    net = an.Net("n")
    for op in ("CopyCPUToGPU", "CopyGPUToCPU"):
        with pytest.raises(an.NetDefinitionError, match=r"device 'cpu' not supported; the op runs on \['cuda'\]"):
            net.add_op(op, ["x"], ["y"])


@without_cuda
def test_copy_to_gpu_without_cuda_names_the_device():
    ws = an.Workspace()
    ws.feed("x", np.ones(2, np.float32))
    net = an.Net("n", device_option=an.DeviceOption("cuda", 0))
    net.CopyCPUToGPU("x", "y")
    with pytest.raises(an.OperatorError, match="no CUDA") as info:
        ws.run_net_once(net)
    assert isinstance(info.value.__cause__, DeviceError)


def test_copy_gpu_to_cpu_refuses_a_host_input():
    ws = an.Workspace()
    ws.feed("x", torch.ones(2))
    net = an.Net("n", device_option=an.DeviceOption("cuda", 0))
    net.CopyGPUToCPU("x", "y")
    with pytest.raises(an.OperatorError, match=r"expected input 0 'x' on 'cuda:0', got torch on 'cpu'"):
        ws.run_net_once(net)


def test_gpu_copies_are_each_others_gradient():
    from asyncnet.core.defs import OperatorDef
    from asyncnet.core.registry import get_schema

    cuda = an.DeviceOption("cuda", 1)
    ops, grads = get_schema("CopyCPUToGPU").gradient(
        OperatorDef("CopyCPUToGPU", ["x"], ["y"], device_option=cuda), ["dy"]
    )
    assert [(o.type, o.inputs, o.device_option) for o in ops] == [("CopyGPUToCPU", ["dy"], cuda)] and grads == ["#dx"]
    ops, _ = get_schema("CopyGPUToCPU").gradient(OperatorDef("CopyGPUToCPU", ["x"], ["y"], device_option=cuda), ["dy"])
    assert ops[0].type == "CopyCPUToGPU"


@needs_cuda
def test_round_trip_through_the_gpu():
    ws = an.Workspace()
    ws.feed("x", np.arange(4, dtype=np.float32))
    net = an.Net("n", device_option=an.DeviceOption("cuda", 0))
    net.CopyCPUToGPU("x", "g")
    net.Relu("g", "r")
    net.CopyGPUToCPU("r", "y")
    net.EnsureCPUOutput("r", "z")
    ws.run_net_once(net)
    assert ws.fetch("g").device.type == "cuda" and ws.fetch("y").device.type == "cpu"
    assert ws.fetch("z", host=True).tolist() == [0.0, 1.0, 2.0, 3.0]


@needs_cuda
def test_fills_on_a_cuda_op_give_cuda_tensors():
    ws = an.Workspace()
    net = an.Net("n", device_option=an.DeviceOption("cuda", 0, random_seed=1))
    net.GaussianFill([], "w", shape=[3])
    ws.run_net_once(net)
    assert ws.fetch("w").device.type == "cuda"
