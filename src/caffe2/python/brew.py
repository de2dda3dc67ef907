"""Caffe2's ``brew``: layer helpers that add a layer's parameters to the init net and its op to
the model's net, and ``arg_scope`` to give helpers default arguments.

A helper takes the model first; the model's ``arg_scope`` (``order``, ``use_cudnn``...) and the
innermost ``brew.arg_scope`` fill arguments the call leaves out::

    >>> from caffe2.python import brew, model_helper
    >>> m = model_helper.ModelHelper(name="brew_doc")
    >>> with brew.arg_scope([brew.conv], kernel=3):
    ...     c = brew.conv(m, "data", "conv1", dim_in=1, dim_out=4)
    >>> r = brew.relu(m, c, c)
    >>> [(op.type, op.engine, [a.name for a in op.arg]) for op in m.net.Proto().op]
    [('Conv', 'CUDNN', ['kernel', 'order', 'exhaustive_search']), ('Relu', 'CUDNN', ['order', 'cudnn_exhaustive_search'])]

(``use_cudnn`` and ``cudnn_exhaustive_search`` come from the model's default ``arg_scope``, as in
Caffe2; asyncnet ignores the engine and drops the arguments an op does not take, with a warning.)
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

from caffe2.proto import caffe2_pb2
from caffe2.python import core, scope
from caffe2.python.modeling import initializers
from caffe2.python.modeling.parameter_info import ParameterTags

__all__ = [
    "Register",
    "accuracy",
    "add_weight_decay",
    "arg_scope",
    "average_pool",
    "batch_mat_mul",
    "concat",
    "cond",
    "conv",
    "conv_nd",
    "conv_transpose",
    "db_input",
    "depth_concat",
    "dropout",
    "elementwise_linear",
    "fc",
    "image_input",
    "instance_norm",
    "get_current_scope",
    "has_helper",
    "iter",
    "layer_norm",
    "loop",
    "lrn",
    "mat_mul",
    "max_pool",
    "prelu",
    "relu",
    "sigmoid",
    "softmax",
    "spatial_bn",
    "sum",
    "tanh",
    "transpose",
]

_scope = threading.local()


def get_current_scope() -> dict[str, dict[str, Any]]:
    if not hasattr(_scope, "current_scope"):
        _scope.current_scope = {}
    return _scope.current_scope


@contextlib.contextmanager
def arg_scope(single_helper_or_list: Any, **kwargs: Any) -> Iterator[None]:
    """Default keyword arguments for the given helpers inside the block (nested scopes add up)."""
    helpers = single_helper_or_list if isinstance(single_helper_or_list, list) else [single_helper_or_list]
    old = copy.deepcopy(get_current_scope())
    for helper in helpers:
        if not callable(helper):
            raise TypeError("arg_scope takes a helper function or a list of them")
        get_current_scope().setdefault(helper.__name__, {}).update(kwargs)
    try:
        yield
    finally:
        _scope.current_scope = old


_REGISTRY: dict[str, Callable[..., Any]] = {}


def Register(helper: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``helper`` a brew helper (``brew.<name>``), with the model's and the scope's defaults.
    A second helper of a name already registered raises AttributeError, as in Caffe2."""
    name = helper.__name__
    if name in _REGISTRY:
        raise AttributeError(f"Helper {name} already exists. Please change your helper name.")
    params = inspect.signature(helper).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    @functools.wraps(helper)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        model = args[0] if args else kwargs.get("model")
        if model is None or not hasattr(model, "arg_scope"):
            raise RuntimeError(
                "The first input of helper function should be model. Or you can provide it in kwargs "
                "as model=<your_model>."
            )
        new_kwargs = copy.deepcopy(model.arg_scope)
        if not takes_any:
            new_kwargs = {k: v for k, v in new_kwargs.items() if k in params}
        new_kwargs.update(get_current_scope().get(name, {}))
        new_kwargs.update(kwargs)
        return helper(*args, **new_kwargs)

    _REGISTRY[name] = wrapper
    globals()[name] = wrapper
    return wrapper


def has_helper(helper_or_helper_name: Any) -> bool:
    name = helper_or_helper_name if isinstance(helper_or_helper_name, str) else helper_or_helper_name.__name__
    return name in _REGISTRY


def _init(model: Any, given_class: Any, given_pair: Any, default: tuple[str, dict[str, Any]]) -> Any:
    if not model.init_params:
        return initializers.ExternalInitializer()
    return initializers.update_initializer(given_class, given_pair, default)


def _out(model: Any, blob_out: Any) -> Any:
    return blob_out or model.net.NextName()


@Register
def fc(
    model: Any,
    blob_in: Any,
    blob_out: Any,
    dim_in: int,
    dim_out: int,
    weight_init: Any = None,
    bias_init: Any = None,
    WeightInitializer: Any = None,
    BiasInitializer: Any = None,
    enable_tensor_core: bool = False,
    float16_compute: bool = False,
    **kwargs: Any,
) -> Any:
    """A fully connected layer: ``blob_out = blob_in @ W.T + b``, W [dim_out, dim_in] (XavierFill), b zeros."""
    blob_out = _out(model, blob_out)
    weight = model.create_param(
        param_name=blob_out + "_w",
        shape=[dim_out, dim_in],
        initializer=_init(model, WeightInitializer, weight_init, ("XavierFill", {})),
        tags=ParameterTags.WEIGHT,
    )
    bias_tags = [ParameterTags.BIAS] + ([ParameterTags.COMPUTED_PARAM] if "freeze_bias" in kwargs else [])
    bias = model.create_param(
        param_name=blob_out + "_b",
        shape=[dim_out],
        tags=bias_tags,
        initializer=_init(model, BiasInitializer, bias_init, ("ConstantFill", {})),
    )
    if enable_tensor_core:
        kwargs["engine"] = "TENSORCORE"
    if float16_compute:
        kwargs["float16_compute"] = True
    return model.net.FC([blob_in, weight, bias], blob_out, **kwargs)


def _conv_base(
    model: Any,
    is_nd: bool,
    blob_in: Any,
    blob_out: Any,
    dim_in: int,
    dim_out: int,
    kernel: Any,
    weight_init: Any = None,
    bias_init: Any = None,
    WeightInitializer: Any = None,
    BiasInitializer: Any = None,
    group: int = 1,
    transform_inputs: Any = None,
    use_cudnn: bool = False,
    order: str = "NCHW",
    cudnn_exhaustive_search: bool = False,
    ws_nbytes_limit: Any = None,
    float16_compute: bool = False,
    **kwargs: Any,
) -> Any:
    kernels = (
        (kernel if isinstance(kernel, list) else [kernel])
        if is_nd
        else (kernel if isinstance(kernel, list) else [kernel] * 2)
    )
    engine = kwargs.get("engine")
    if engine is not None and use_cudnn and engine != "CUDNN":
        raise ValueError('When use_cudnn=True, the only engine you can specify is "CUDNN"')
    if engine == "CUDNN" and not use_cudnn:
        raise ValueError('When use_cudnn=False, the only engine you can specify is ""')
    if use_cudnn:
        kwargs["engine"] = "CUDNN"
        kwargs["exhaustive_search"] = cudnn_exhaustive_search
        if ws_nbytes_limit:
            kwargs["ws_nbytes_limit"] = ws_nbytes_limit
    use_bias = not kwargs.pop("no_bias", False)
    blob_out = _out(model, blob_out)
    shape = [dim_out] + ([int(dim_in / group)] + kernels if order == "NCHW" else kernels + [int(dim_in / group)])
    weight = model.create_param(
        param_name=blob_out + "_w",
        shape=shape,
        tags=ParameterTags.WEIGHT,
        initializer=_init(model, WeightInitializer, weight_init, ("XavierFill", {})),
    )
    inputs = [blob_in, weight]
    if use_bias:
        inputs.append(
            model.create_param(
                param_name=blob_out + "_b",
                shape=[dim_out],
                tags=ParameterTags.BIAS,
                initializer=_init(model, BiasInitializer, bias_init, ("ConstantFill", {})),
            )
        )
    if transform_inputs is not None:
        transform_inputs(model, blob_out, inputs)
    if float16_compute:
        kwargs["float16_compute"] = True
    if group != 1:
        kwargs["group"] = group
    if is_nd:
        return model.net.Conv(inputs, blob_out, kernels=kernels, order=order, **kwargs)
    if isinstance(kernel, list):
        return model.net.Conv(inputs, blob_out, kernel_h=kernel[0], kernel_w=kernel[1], order=order, **kwargs)
    return model.net.Conv(inputs, blob_out, kernel=kernel, order=order, **kwargs)


@Register
def conv(model: Any, blob_in: Any, blob_out: Any, dim_in: int, dim_out: int, kernel: Any, **kwargs: Any) -> Any:
    """A 2-D convolution; weight [dim_out, dim_in/group, k, k] (NCHW) XavierFill, bias zeros."""
    return _conv_base(model, False, blob_in, blob_out, dim_in, dim_out, kernel, **kwargs)


@Register
def conv_nd(model: Any, blob_in: Any, blob_out: Any, dim_in: int, dim_out: int, kernel: Any, **kwargs: Any) -> Any:
    """An N-d convolution (``kernels``)."""
    return _conv_base(model, True, blob_in, blob_out, dim_in, dim_out, kernel, **kwargs)


@Register
def conv_transpose(
    model: Any,
    blob_in: Any,
    blob_out: Any,
    dim_in: int,
    dim_out: int,
    kernel: int,
    weight_init: Any = None,
    bias_init: Any = None,
    use_cudnn: bool = False,
    order: str = "NCHW",
    cudnn_exhaustive_search: bool = False,
    ws_nbytes_limit: Any = None,
    **kwargs: Any,
) -> Any:
    """A transposed convolution; weight [dim_in, dim_out, k, k] (NCHW)."""
    blob_out = _out(model, blob_out)
    shape = [dim_in, dim_out, kernel, kernel] if order == "NCHW" else [dim_in, kernel, kernel, dim_out]
    weight = model.create_param(
        blob_out + "_w", shape, _init(model, None, weight_init, ("XavierFill", {})), ParameterTags.WEIGHT
    )
    bias = model.create_param(
        blob_out + "_b", [dim_out], _init(model, None, bias_init, ("ConstantFill", {})), ParameterTags.BIAS
    )
    if use_cudnn:
        kwargs["engine"] = "CUDNN"
        kwargs["exhaustive_search"] = cudnn_exhaustive_search
        if ws_nbytes_limit:
            kwargs["ws_nbytes_limit"] = ws_nbytes_limit
    return model.net.ConvTranspose([blob_in, weight, bias], blob_out, kernel=kernel, order=order, **kwargs)


def _cudnn(use_cudnn: bool, kwargs: dict[str, Any]) -> dict[str, Any]:
    if use_cudnn:
        kwargs["engine"] = "CUDNN"
    return kwargs


@Register
def max_pool(
    model: Any, blob_in: Any, blob_out: Any, use_cudnn: bool = False, order: str = "NCHW", **kwargs: Any
) -> Any:
    """MaxPool (``kernel``, ``stride``, ``pad``...)."""
    return model.net.MaxPool(blob_in, blob_out, order=order, **_cudnn(use_cudnn, kwargs))


@Register
def average_pool(
    model: Any, blob_in: Any, blob_out: Any, use_cudnn: bool = False, order: str = "NCHW", **kwargs: Any
) -> Any:
    """AveragePool (``kernel``, ``stride``, ``pad``, ``global_pooling``...)."""
    return model.net.AveragePool(blob_in, blob_out, order=order, **_cudnn(use_cudnn, kwargs))


@Register
def relu(model: Any, blob_in: Any, blob_out: Any, use_cudnn: bool = False, order: str = "NCHW", **kwargs: Any) -> Any:
    """Relu."""
    return model.net.Relu(blob_in, blob_out, order=order, **_cudnn(use_cudnn, kwargs))


@Register
def tanh(model: Any, blob_in: Any, blob_out: Any, use_cudnn: bool = False, order: str = "NCHW", **kwargs: Any) -> Any:
    """Tanh."""
    return model.net.Tanh(blob_in, blob_out, order=order, **_cudnn(use_cudnn, kwargs))


@Register
def sigmoid(
    model: Any, blob_in: Any, blob_out: Any, use_cudnn: bool = False, order: str = "NCHW", **kwargs: Any
) -> Any:
    """Sigmoid."""
    return model.net.Sigmoid(blob_in, blob_out, order=order, **_cudnn(use_cudnn, kwargs))


@Register
def prelu(model: Any, blob_in: Any, blob_out: Any, num_channels: int = 1, slope_init: Any = None, **kwargs: Any) -> Any:
    """PRelu with a learned slope of ``num_channels`` (0.25 at first)."""
    slope_init = slope_init if slope_init else ("ConstantFill", {"value": 0.25})
    slope = model.create_param(
        blob_out + "_slope", [num_channels], _init(model, None, slope_init, slope_init), ParameterTags.WEIGHT
    )
    return model.net.PRelu([blob_in, slope], [blob_out])


@Register
def softmax(model: Any, blob_in: Any, blob_out: Any = None, use_cudnn: bool = False, **kwargs: Any) -> Any:
    """Softmax."""
    kwargs = _cudnn(use_cudnn, kwargs)
    return (
        model.net.Softmax(blob_in, blob_out, **kwargs) if blob_out is not None else model.net.Softmax(blob_in, **kwargs)
    )


@Register
def dropout(model: Any, blob_in: Any, blob_out: Any, use_cudnn: bool = False, **kwargs: Any) -> Any:
    """Dropout (``ratio``; ``is_test`` is required, as in Caffe2); returns the output."""
    kwargs["engine"] = "CUDNN" if use_cudnn else "DEFAULT"
    if "is_test" not in kwargs:
        raise ValueError("Argument 'is_test' is required")
    return model.net.Dropout(blob_in, [blob_out, "_" + str(blob_out) + "_mask"], **kwargs)[0]


@Register
def spatial_bn(
    model: Any,
    blob_in: Any,
    blob_out: Any,
    dim_in: int,
    init_scale: float = 1.0,
    init_bias: float = 0.0,
    ScaleInitializer: Any = None,
    BiasInitializer: Any = None,
    RunningMeanInitializer: Any = None,
    RunningVarianceInitializer: Any = None,
    order: str = "NCHW",
    **kwargs: Any,
) -> Any:
    """SpatialBN with a learned scale and bias and running mean and variance (computed params)."""
    blob_out = _out(model, blob_out)
    const = ("ConstantFill", {})
    scale = model.create_param(
        blob_out + "_s",
        [dim_in],
        _init(model, ScaleInitializer, ("ConstantFill", {"value": init_scale}), const),
        ParameterTags.WEIGHT,
    )
    bias = model.create_param(
        blob_out + "_b",
        [dim_in],
        _init(model, BiasInitializer, ("ConstantFill", {"value": init_bias}), const),
        ParameterTags.BIAS,
    )
    rm = model.create_param(
        blob_out + "_rm",
        [dim_in],
        _init(model, RunningMeanInitializer, ("ConstantFill", {"value": 0.0}), const),
        ParameterTags.COMPUTED_PARAM,
    )
    riv = model.create_param(
        blob_out + "_riv",
        [dim_in],
        _init(model, RunningVarianceInitializer, ("ConstantFill", {"value": 1.0}), const),
        ParameterTags.COMPUTED_PARAM,
    )
    inputs = [blob_in, scale, bias, rm, riv]
    if kwargs.get("is_test"):
        return model.net.SpatialBN(inputs, [blob_out], order=order, **kwargs)
    outs = model.net.SpatialBN(inputs, [blob_out, rm, riv, blob_out + "_sm", blob_out + "_siv"], order=order, **kwargs)
    return outs[0]


@Register
def layer_norm(
    model: Any,
    blob_in: Any,
    blob_out: Any,
    dim_in: int,
    axis: int = 1,
    epsilon: float = 1e-4,
    initial_scale: float = 1.0,
    initial_bias: float = 0.0,
) -> Any:
    """LayerNorm with a learned scale and bias; returns (output, mean, std)."""
    scale = model.create_param(
        blob_out + "_scale",
        [dim_in],
        initializers.Initializer("ConstantFill", value=initial_scale),
        ParameterTags.WEIGHT,
    )
    bias = model.create_param(
        blob_out + "_bias", [dim_in], initializers.Initializer("ConstantFill", value=initial_bias), ParameterTags.BIAS
    )
    normalized, mean, std = model.net.LayerNorm(
        blob_in, [blob_out + "_normalized", blob_out + "_mean", blob_out + "_std"], axis=axis, epsilon=epsilon
    )
    scaled = model.net.Mul([normalized, scale], [blob_out + "_scaled"], broadcast=1, axis=axis)
    biased = model.net.Add([scaled, bias], [blob_out], broadcast=1, axis=axis)
    return biased, mean, std


@Register
def instance_norm(model: Any, blob_in: Any, blob_out: Any, dim_in: int, order: str = "NCHW", **kwargs: Any) -> Any:
    """InstanceNorm with a scale (``<out>_s``, ones) and a bias (``<out>_b``, zeros); in training the
    mean and inverse standard deviation go to ``<out>_sm`` and ``<out>_siv``. Returns the output."""
    blob_out = blob_out or model.net.NextName()
    scale = model.param_init_net.ConstantFill([], blob_out + "_s", shape=[dim_in], value=1.0)
    bias = model.param_init_net.ConstantFill([], blob_out + "_b", shape=[dim_in], value=0.0)
    model.AddParameter(scale, ParameterTags.WEIGHT)
    model.AddParameter(bias, ParameterTags.BIAS)
    if kwargs.get("is_test"):
        return model.net.InstanceNorm([blob_in, scale, bias], [blob_out], order=order, **kwargs)
    outs = [blob_out, blob_out + "_sm", blob_out + "_siv"]
    return model.net.InstanceNorm([blob_in, scale, bias], outs, order=order, **kwargs)[0]


@Register
def lrn(model: Any, blob_in: Any, blob_out: Any, order: str = "NCHW", use_cudnn: bool = False, **kwargs: Any) -> Any:
    """LRN (local response normalization)."""
    kwargs = _cudnn(use_cudnn, kwargs)
    return model.net.LRN(blob_in, [blob_out, "_" + str(blob_out) + "_scale"], order=order, **kwargs)[0]


@Register
def sum(model: Any, blob_in: Any, blob_out: Any, **kwargs: Any) -> Any:
    """Sum of the inputs."""
    return model.net.Sum(blob_in, blob_out, **kwargs)


@Register
def transpose(model: Any, blob_in: Any, blob_out: Any, use_cudnn: bool = False, **kwargs: Any) -> Any:
    return model.net.Transpose(blob_in, blob_out, **_cudnn(use_cudnn, kwargs))


@Register
def mat_mul(model: Any, blob_in: Any, blob_out: Any, **kwargs: Any) -> Any:
    return model.net.MatMul(blob_in, blob_out, **kwargs)


@Register
def batch_mat_mul(model: Any, blob_in: Any, blob_out: Any, enable_tensor_core: bool = False, **kwargs: Any) -> Any:
    if enable_tensor_core:
        kwargs["engine"] = "TENSORCORE"
    return model.net.BatchMatMul(blob_in, blob_out, **kwargs)


@Register
def concat(model: Any, blobs_in: Any, blob_out: Any, **kwargs: Any) -> Any:
    """Concat along ``axis`` (or ``order``'s channel axis); returns the output."""
    if kwargs.get("order") and kwargs.get("axis"):
        kwargs.pop("order")
    return model.net.Concat(blobs_in, [blob_out, "_" + str(blob_out) + "_concat_dims"], **kwargs)[0]


@Register
def depth_concat(model: Any, blobs_in: Any, blob_out: Any, **kwargs: Any) -> Any:
    return concat(model, blobs_in, blob_out, **kwargs)


@Register
def elementwise_linear(
    model: Any, blob_in: Any, blob_out: Any, dim: int, weight_init: Any = None, bias_init: Any = None, **kwargs: Any
) -> Any:
    """``blob_out = blob_in * w + b`` per column (ElementwiseLinear)."""
    w = model.create_param(
        blob_out + "_w", [dim], _init(model, None, weight_init, ("ConstantFill", {"value": 1.0})), ParameterTags.WEIGHT
    )
    b = model.create_param(
        blob_out + "_b", [dim], _init(model, None, bias_init, ("ConstantFill", {"value": 0.0})), ParameterTags.BIAS
    )
    return model.net.ElementwiseLinear([blob_in, w, b], blob_out, **kwargs)


@Register
def accuracy(model: Any, blob_in: Any, blob_out: Any, **kwargs: Any) -> None:
    """Accuracy of predictions against labels (``top_k``); adds the op and returns None, as Caffe2."""
    dev = kwargs.get("device_option") or scope.CurrentDeviceScope()
    is_cpu = dev is None or dev.device_type == caffe2_pb2.CPU
    if not is_cpu and kwargs.get("top_k", 1) > 1:
        pred = model.net.CopyGPUToCPU(blob_in[0], str(blob_in[0]) + "_host")
        label = model.net.CopyGPUToCPU(blob_in[1], str(blob_in[1]) + "_host")
        model.net.Accuracy([pred, label], blob_out, device_option=core.DeviceOption(caffe2_pb2.CPU, 0), **kwargs)
    else:
        model.net.Accuracy(blob_in, blob_out, **{k: v for k, v in kwargs.items() if k in ("top_k",)})


@Register
def iter(model: Any, blob_out: Any, **kwargs: Any) -> Any:
    """An int64 [1] counter (0 in the init net) that ``Iter`` adds one to per run."""
    kwargs.pop("device_option", None)
    model.param_init_net.ConstantFill(
        [],
        blob_out,
        shape=[1],
        value=0,
        dtype=core.DataType.INT64,
        device_option=core.DeviceOption(caffe2_pb2.CPU, 0),
        **kwargs,
    )
    return model.net.Iter(blob_out, blob_out, **kwargs)


@Register
def db_input(model: Any, blobs_out: Any, batch_size: int, db: str, db_type: str) -> Any:
    """Read batches of TensorProtos records from a DB (``CreateDB`` in the init net, ``TensorProtosDBInput`` in the net)."""
    dbreader = model.param_init_net.CreateDB([], "dbreader_" + db, db=db, db_type=db_type)
    return model.net.TensorProtosDBInput(dbreader, blobs_out, batch_size=batch_size)


@Register
def image_input(
    model: Any, blob_in: Any, blob_out: Any, order: str = "NCHW", use_gpu_transform: bool = False, **kwargs: Any
) -> Any:
    """Caffe2's ``ImageInput`` on ``model.net`` (``is_test`` required); with ``order="NCHW"`` the
    op writes ``<data>_nhwc`` and an ``NHWC2NCHW`` gives ``blob_out[0]``; returns (data, label).

        >>> from caffe2.python import model_helper
        >>> m = model_helper.ModelHelper(name="images")
        >>> reader = m.CreateDB("reader", db="/tmp/images.lmdb", db_type="lmdb")
        >>> data, label = image_input(m, reader, ["data", "label"], batch_size=2, scale=8, crop=8, is_test=True)
        >>> [op.type for op in m.net.Proto().op], str(data)
        (['ImageInput', 'NHWC2NCHW'], 'data')
    """
    if "is_test" not in kwargs:
        raise ValueError("Argument 'is_test' is required")
    if order == "NCHW":
        if use_gpu_transform:
            kwargs["use_gpu_transform"] = 1
            return model.net.ImageInput(blob_in, blob_out, **kwargs)
        outputs = list(model.net.ImageInput(blob_in, [str(blob_out[0]) + "_nhwc", *blob_out[1:]], **kwargs))
        outputs[0] = model.net.NHWC2NCHW(outputs[0], blob_out[0])
        return tuple(outputs)
    return model.net.ImageInput(blob_in, blob_out, **kwargs)


def add_weight_decay(model: Any, weight_decay: float) -> None:
    """L2 weight decay on the model's weights (see :func:`caffe2.python.optimizer.add_weight_decay`)."""
    from caffe2.python import optimizer

    optimizer.add_weight_decay(model, weight_decay)


def cond(model: Any, cond_blob: Any, external_blobs: Any, then_model: Any, else_model: Any = None) -> None:
    """An ``If`` op on ``model.net`` running ``then_model``'s net when ``cond_blob`` holds, else
    ``else_model``'s; ``external_blobs`` are the outer blobs the branches read or write."""
    from caffe2.python.control_ops_util import add_if_op

    add_if_op(model.net, cond_blob, external_blobs, then_model.net, else_model.net if else_model else None)


def loop(model: Any, cond_blob: Any, external_blobs: Any, loop_model: Any, cond_model: Any = None) -> None:
    """A ``While`` op on ``model.net`` running ``loop_model``'s net while ``cond_blob`` holds
    (``cond_model``'s net recomputes it before each iteration)."""
    from caffe2.python.control_ops_util import add_while_op

    add_while_op(model.net, cond_blob, external_blobs, loop_model.net, cond_model.net if cond_model else None)
