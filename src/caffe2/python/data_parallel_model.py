"""Caffe2's ``data_parallel_model`` for CPU devices in one process.

:func:`Parallelize` builds the model once per device, each copy under the name scope
``cpu_<d>/`` and the device option CPU ``d``, scales each loss by ``1 / devices``, adds the
gradients (asyncnet's autodiff), all-reduces every parameter's gradient across the devices (a
``Sum`` into the first device's gradient and a ``Copy`` back to the others, Caffe2's single-host
CPU reduction, inside the same net so asyncnet's executor runs the copies in parallel), calls
the optimizer builder once, and makes the init net give every device the first device's
initial parameters. The net runs with ``num_threads_per_device`` workers per device.

Not here: GPUs (``cpu_device=False``), multi-host rendezvous (Gloo), ``shared_model`` and
``combine_spatial_bn`` with more than one device; each raises a clear error.

    >>> from caffe2.python import brew, data_parallel_model, model_helper, optimizer
    >>> m = model_helper.ModelHelper(name="dpm_doc")
    >>> def inputs(model):
    ...     model.param_init_net.GaussianFill([], "data", shape=[4, 3])
    ...     model.param_init_net.ConstantFill([], "label", shape=[4], value=1.0)
    >>> def forward(model, loss_scale):
    ...     loss = model.SquaredL2Distance([brew.fc(model, "data", "fc", 3, 1), "label"], "dist")
    ...     return [model.Scale(model.AveragedLoss(loss, "avg"), "loss", scale=loss_scale)]
    >>> data_parallel_model.Parallelize(m, inputs, forward, optimizer_builder_fun=lambda model:
    ...     optimizer.build_sgd(model, 0.1), devices=[0, 1], cpu_device=True)
    >>> [n.split("_", 2)[2] for n in data_parallel_model.GetLearningRateBlobNames(m)]  # SgdOptimizer_<k>_lr_cpu
    ['lr_cpu']
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from caffe2.proto import caffe2_pb2
from caffe2.python import core, scope, workspace

__all__ = [
    "FinalizeAfterCheckpoint",
    "GetCheckpointParams",
    "GetDevices",
    "GetLearningRateBlobNames",
    "OptimizeGradientMemory",
    "Parallelize",
    "Parallelize_CPU",
    "stripBlobName",
]

log = logging.getLogger("data_parallel_model")


def stripBlobName(param: Any) -> str:
    """The blob name without its device scope (``cpu_0/fc_w`` -> ``fc_w``)."""
    name = str(param.values if isinstance(param, core.GradientSlice) else param)
    return name[name.index(scope._NAMESCOPE_SEPARATOR) + 1 :] if scope._NAMESCOPE_SEPARATOR in name else name


def _device_of(model: Any, blob: Any) -> int:
    prefix = f"{model._device_prefix}_"
    name = str(blob)
    if not name.startswith(prefix) or scope._NAMESCOPE_SEPARATOR not in name:
        raise ValueError(f"blob {name!r} is not in a device scope {prefix}<d>/")
    return int(name[len(prefix) : name.index(scope._NAMESCOPE_SEPARATOR)])


def _group_by_device(model: Any, blobs: list[Any]) -> OrderedDict[str, dict[int, Any]]:
    grouped: OrderedDict[str, dict[int, Any]] = OrderedDict()
    for b in blobs:
        ref = b.values if isinstance(b, core.GradientSlice) else b
        grouped.setdefault(stripBlobName(b), {})[_device_of(model, ref)] = b
    return grouped


def _check_supported(
    devices: list[int], cpu_device: bool, rendezvous: Any, shared_model: bool, combine_spatial_bn: bool
) -> None:
    if not cpu_device:
        raise NotImplementedError(
            "data_parallel_model: GPU devices are not supported here; use cpu_device=True "
            "(asyncnet runs CUDA nets through its own DeviceOption('cuda', i))"
        )
    if rendezvous is not None:
        raise NotImplementedError(
            "data_parallel_model: multi-host rendezvous (Gloo) is not supported; asyncnet "
            "trains across processes and hosts with its GradientSync backends (torchrun)"
        )
    if len(devices) > 1 and (shared_model or combine_spatial_bn):
        raise NotImplementedError("data_parallel_model: shared_model and combine_spatial_bn work with one device here")


def Parallelize(
    model_helper_obj: Any,
    input_builder_fun: Callable[[Any], Any],
    forward_pass_builder_fun: Callable[[Any, float], Any],
    param_update_builder_fun: Any = None,
    optimizer_builder_fun: Any = None,
    post_sync_builder_fun: Any = None,
    pre_grad_net_transformer_fun: Any = None,
    net_transformer_fun: Any = None,
    devices: Any = None,
    rendezvous: Any = None,
    net_type: str = "dag",
    broadcast_computed_params: bool = True,
    optimize_gradient_memory: bool = False,
    dynamic_memory_management: bool = False,
    blobs_to_keep: Any = None,
    use_nccl: bool = False,
    max_concurrent_distributed_ops: int = 16,
    cpu_device: bool = False,
    ideep: bool = False,
    num_threads_per_device: int = 4,
    shared_model: bool = False,
    combine_spatial_bn: bool = False,
    **kwargs: Any,
) -> None:
    """Replicate the model on CPU ``devices`` and synchronize their gradients (see the module doc)."""
    model = model_helper_obj
    devices = list(devices if devices is not None else [0])
    _check_supported(devices, cpu_device, rendezvous, shared_model, combine_spatial_bn)
    if param_update_builder_fun is not None and optimizer_builder_fun is not None:
        raise ValueError("Can only specify one of param_update_builder_fun, optimizer_builder_fun")
    model._device_type = caffe2_pb2.CPU
    model._device_prefix = "cpu"
    model._shared_model = shared_model
    model._devices = devices
    model._rendezvous = rendezvous
    model._optimizer = None
    model.net.Proto().num_workers = len(devices) * num_threads_per_device
    model.net.Proto().type = net_type
    non_datapar = list(model.params)
    updates = param_update_builder_fun is not None or optimizer_builder_fun is not None
    loss_scale = 1.0 / len(devices)
    losses_by_device: dict[int, list[Any]] = {}
    for d in devices:
        with _device_scope(model, d):
            input_builder_fun(model)
            losses = forward_pass_builder_fun(model, loss_scale)
            if updates and (not isinstance(losses, list) or not all(isinstance(x, core.BlobReference) for x in losses)):
                raise TypeError("Model builder function must return list of loss blobs")
            losses_by_device[d] = losses
    model._device_grouped_blobs = _group_by_device(model, model.params[len(non_datapar) :])
    model._device_grouped_blobs.update(_group_by_device(model, model.GetComputedParams("")))
    model._param_names = list(model._device_grouped_blobs)
    if pre_grad_net_transformer_fun:
        pre_grad_net_transformer_fun(model)
    if not updates:
        return
    _add_gradient_operators(model, devices, losses_by_device)
    grads = [model.param_to_grad[p] for p in model.params[len(non_datapar) :] if p in model.param_to_grad]
    grouped_grads = _group_by_device(model, grads)
    model._device_grouped_blobs.update(grouped_grads)
    model._grad_names = list(grouped_grads)
    for name in reversed(model._grad_names):
        _all_reduce(model, model.net, grouped_grads[name], devices)
    if param_update_builder_fun is not None:
        for d in devices:
            with _device_scope(model, d):
                param_update_builder_fun(model)
    else:
        model._optimizer = optimizer_builder_fun(model)
    _sync_init(model, devices)
    if post_sync_builder_fun is not None:
        for d in devices:
            with _device_scope(model, d):
                post_sync_builder_fun(model)
    model._data_parallel_model_init_nets = [model.param_init_net]
    model._data_parallel_model_nets = [model.net]


Parallelize_CPU = Parallelize


class _device_scope:
    """DeviceScope(CPU d) and NameScope(cpu_d) together."""

    def __init__(self, model: Any, d: int):
        self._dev = core.DeviceScope(core.DeviceOption(model._device_type, d))
        self._name = core.NameScope(f"{model._device_prefix}_{d}")

    def __enter__(self) -> None:
        self._dev.__enter__()
        self._name.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._name.__exit__(*exc)
        self._dev.__exit__(*exc)


def _add_gradient_operators(model: Any, devices: list[int], losses_by_device: dict[int, list[Any]]) -> None:
    seeds = {}
    for d in devices:
        with core.DeviceScope(core.DeviceOption(model._device_type, d)):
            for loss in losses_by_device[d]:
                seeds[str(loss)] = str(model.ConstantFill(loss, str(loss) + "_grad", value=1.0))
    model.AddGradientOperators(seeds)


def _all_reduce(model: Any, net: Any, by_device: dict[int, Any], devices: list[int]) -> None:
    if len(devices) < 2:
        return
    if any(isinstance(g, core.GradientSlice) for g in by_device.values()):
        raise NotImplementedError(
            "data_parallel_model: sparse (GradientSlice) gradients across devices are not supported"
        )
    first = by_device[devices[0]]
    with core.DeviceScope(core.DeviceOption(model._device_type, devices[0])):
        net.Sum([by_device[d] for d in devices], first, name="dpm")
    for d in devices[1:]:
        with core.DeviceScope(core.DeviceOption(model._device_type, d)):
            net.Copy(first, by_device[d])


def _sync_blobs(model: Any) -> tuple[list[Any], set[str]]:
    """The data-parallel blobs of the init net (all under a device scope), device 0 first."""
    prefix = f"{model._device_prefix}_"
    if model._shared_model:
        blobs = [str(p) for p in model.GetComputedParams("")]
    else:
        blobs = [o for op in model.param_init_net.Proto().op for o in op.output if o.startswith(prefix)]
    blobs = sorted(set(blobs), key=lambda b: (_device_of(model, b), b))
    return [core.BlobReference(b) for b in blobs], {stripBlobName(b) for b in blobs}


def _sync_init(model: Any, devices: list[int]) -> None:
    """In the init net: every device's copy of a blob becomes the first device's."""
    if len(devices) < 2:
        return
    blobs, _ = _sync_blobs(model)
    grouped = _group_by_device(model, blobs)
    for by_device in grouped.values():
        if devices[0] not in by_device:
            continue
        for d in devices[1:]:
            if d in by_device:
                with core.DeviceScope(core.DeviceOption(model._device_type, d)):
                    model.param_init_net.Copy(by_device[devices[0]], by_device[d])


def GetCheckpointParams(model: Any) -> set[Any]:
    """The blobs of a complete checkpoint: the first device's data-parallel blobs and the iteration counters."""
    blobs, _ = _sync_blobs(model)
    first = {b for b in blobs if str(b).startswith(f"{model._device_prefix}_{model._devices[0]}/")}
    iters = {
        op.output[0]
        for op in model.net.Proto().op
        if op.type in ("Iter", "AtomicIter") and not op.output[0].startswith(f"{model._device_prefix}_")
    }
    return first | {core.BlobReference(b) for b in iters}


def FinalizeAfterCheckpoint(model: Any, blobs: Any = None, cpu_mode: bool = False) -> None:
    """After loading a checkpoint into the first device: copy its blobs to the other devices."""
    devices = model._devices
    if len(devices) < 2:
        return
    net = core.Net(f"{model.net.Name()}_sync_after_checkpoint")
    for by_device in _group_by_device(model, list(blobs or _sync_blobs(model)[0])).values():
        for d in devices[1:]:
            if devices[0] in by_device and d in by_device:
                net.Copy(by_device[devices[0]], by_device[d])
    workspace.RunNetOnce(net)


def GetLearningRateBlobNames(model: Any) -> list[str]:
    """The learning-rate blobs of the model's optimizer (or of every LearningRate op)."""
    if getattr(model, "_optimizer", None) is not None:
        return [model._optimizer.get_cpu_blob_name("lr")]
    return [op.output[0] for op in model.net.Proto().op if op.type == "LearningRate"]


def GetDevices(model: Any) -> list[int]:
    return model._devices


def OptimizeGradientMemory(model: Any, input_shapes: Any, excluded_blobs: Any, recycle_activations: bool) -> None:
    """Nothing to do: asyncnet frees and reuses blob memory itself (Caffe2 shared gradient blobs here)."""
    log.info("OptimizeGradientMemory: not needed with asyncnet; the net is unchanged")
