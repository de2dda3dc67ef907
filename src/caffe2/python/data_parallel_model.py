"""Caffe2's ``data_parallel_model``: one model replicated on CPU or GPU devices, and on several hosts.

:func:`Parallelize` builds the model once per device, each copy under the name scope
``cpu_<d>/`` (or ``gpu_<d>/``) and the device option CPU (or CUDA) ``d``, scales each loss by
``1 / (devices * shards)``, adds the gradients (asyncnet's autodiff), sums every parameter's
gradient across the devices and copies the sum back, inside the same net so asyncnet's
executor runs the copies in parallel, calls the optimizer builder once, and makes the init net
give every device the first device's initial parameters. The net runs with
``num_threads_per_device`` workers per device.

* CPU (``cpu_device=True``): a ``Sum`` into the first device's gradient, a ``Copy`` back to the
  others (Caffe2's single-host CPU reduction).
* GPU (the default, as in Caffe2): each peer's gradient is first copied to the first GPU
  (``gpu_<d0>/<grad>_gpu<d>_copy``, what Caffe2 did without peer access), summed there, and
  copied back by a ``Copy`` on each peer's device. ``use_nccl`` takes the same path (asyncnet
  has no NCCL ops; the sum is the same).
* Several hosts (``rendezvous`` with ``num_shards`` > 1, its ``kv_handler`` a store blob from
  ``FileStoreHandlerCreate``, or None under ``torchrun``): the init net creates the common world
  (``CreateCommonWorld``: torch.distributed with gloo) and broadcasts every parameter from shard
  0; after the local sum, ``Allreduce`` averages each gradient over the shards and a ``Scale``
  by ``num_shards`` makes it their sum, as Caffe2's Gloo all-reduce gave.

On CPU devices, ``shared_model`` keeps one parameter set (the first device's, read by every
device, updated with the devices' summed gradients) and ``combine_spatial_bn`` makes each
SpatialBN use the statistics of all the devices' batches (ChannelStats, ChannelBackpropStats).
:func:`Parallelize_BMUF` trains with block-wise model-update filtering.

Not here: ``ideep`` devices, MPI rendezvous, ``shared_model`` across hosts; each raises a clear
error.

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

from asyncnet.errors import DeviceError
from caffe2.convert import device_id_of
from caffe2.proto import caffe2_pb2
from caffe2.python import core, scope, utils, workspace

__all__ = [
    "AddBlobSync",
    "ConvertNetForDevice",
    "FinalizeAfterCheckpoint",
    "GetCheckpointParams",
    "GetDevices",
    "GetLearningRateBlobNames",
    "OptimizeGradientMemory",
    "Parallelize",
    "Parallelize_BMUF",
    "Parallelize_CPU",
    "Parallelize_CPU_BMUF",
    "Parallelize_GPU",
    "Parallelize_GPU_BMUF",
    "RunInitNet",
    "RunNet",
    "RunWarmup",
    "Synchronize",
    "stripBlobName",
]

log = logging.getLogger("data_parallel_model")


class DeviceScopeError(DeviceError, AssertionError):
    """``Parallelize`` was called inside a non-CPU device scope (Caffe2 asserted there was none)."""


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


_RENDEZVOUS_KEYS = ("kv_handler", "shard_id", "num_shards")


def _check_supported(
    devices: list[int], ideep: bool, rendezvous: Any, shared_model: bool, combine_spatial_bn: bool
) -> None:
    if ideep:
        raise NotImplementedError("data_parallel_model: ideep devices are not supported; use cpu_device=True")
    if rendezvous is not None:
        missing = [k for k in _RENDEZVOUS_KEYS if k not in rendezvous]
        if missing:
            raise ValueError(f"data_parallel_model: rendezvous needs {list(_RENDEZVOUS_KEYS)}; missing {missing}")
        if rendezvous.get("mpi_rendezvous"):
            raise NotImplementedError(
                "data_parallel_model: MPI rendezvous is not supported; give a kv_handler store "
                "(FileStoreHandlerCreate) or run under torchrun with kv_handler=None"
            )
        if rendezvous.get("engine", "GLOO") not in ("GLOO", "gloo"):
            raise NotImplementedError(
                f"data_parallel_model: engine {rendezvous['engine']!r} is not supported; the shards "
                "all-reduce through torch.distributed with gloo (engine GLOO)"
            )
    if shared_model and rendezvous is not None and _num_shards(rendezvous) > 1:
        raise NotImplementedError("data_parallel_model: shared_model works on a single host")


def _num_shards(rendezvous: Any) -> int:
    return 1 if rendezvous is None else int(rendezvous["num_shards"])


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
    current = scope.CurrentDeviceScope()
    if current is not None and current.device_type != caffe2_pb2.CPU:
        raise DeviceScopeError(f"Parallelize: expected no device scope (or a CPU one) around the call, found {current}")
    model = model_helper_obj
    devices = list(devices if devices is not None else [0])
    _check_supported(devices, ideep, rendezvous, shared_model, combine_spatial_bn)
    if shared_model and not cpu_device:
        raise ValueError("Shared model only supported on CPU")
    if combine_spatial_bn and not cpu_device:
        raise ValueError("combine_spatial_bn is currently only supported on the CPU")
    if param_update_builder_fun is not None and optimizer_builder_fun is not None:
        raise ValueError("Can only specify one of param_update_builder_fun, optimizer_builder_fun")
    _setup_devices(model, devices, cpu_device, rendezvous)
    model._shared_model = shared_model
    model._optimizer = None
    model.net.Proto().num_workers = len(devices) * num_threads_per_device
    model.net.Proto().type = net_type
    non_datapar = list(model.params)
    updates = param_update_builder_fun is not None or optimizer_builder_fun is not None
    loss_scale = 1.0 / (len(devices) * _num_shards(rendezvous))
    if use_nccl:
        log.info("data_parallel_model: use_nccl: gradients are summed by Copy and Sum ops (no NCCL ops here)")
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
    if combine_spatial_bn and len(devices) > 1:
        _interleave_ops(model)
        _inter_device_batch_normalization(model)
    grads = [model.param_to_grad[p] for p in model.params[len(non_datapar) :] if p in model.param_to_grad]
    grouped_grads = _group_by_device(model, grads)
    model._device_grouped_blobs.update(grouped_grads)
    model._grad_names = list(grouped_grads)
    for name in reversed(model._grad_names):
        _all_reduce(model, model.net, name, grouped_grads[name], devices)
    all_params = set(model.GetParams(""))
    if shared_model:
        _prune_parameters_for_sharing(model)
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
    if shared_model:
        _remap_parameters_for_shared_model(model, all_params)


def Parallelize_CPU(*args: Any, **kwargs: Any) -> None:
    """:func:`Parallelize` on CPU devices."""
    kwargs["cpu_device"] = True
    Parallelize(*args, **kwargs)


def Parallelize_GPU(*args: Any, **kwargs: Any) -> None:
    """:func:`Parallelize` on GPU devices."""
    kwargs["cpu_device"] = False
    Parallelize(*args, **kwargs)


def _interleave_ops(model: Any) -> None:
    """Put the devices' copies of each op next to each other (op j of every device, in device
    order), so the devices progress together, as the combined batch norm needs; an op reading
    several devices' blobs (or none) stays where it is, between the interleaved runs."""
    devices = model._devices
    ordered: list[Any] = []
    run: dict[int, list[Any]] = {d: [] for d in devices}

    def flush() -> None:
        counts = {len(ops) for ops in run.values()}
        if len(counts) != 1:
            raise ValueError(f"Number of ops per device in original net is not uniform: {sorted(counts)}")
        for j in range(counts.pop()):
            if len({run[d][j].type for d in devices}) != 1:
                raise ValueError(f"Type mismatch: {[run[d][j].type for d in devices]}")
            ordered.extend(run[d][j] for d in devices)
        for d in devices:
            run[d] = []

    for op in model.net.Proto().op:
        on = {_device_of(model, b) for b in [*op.input, *op.output] if _scoped(model, b)}
        if len(on) == 1:
            run[on.pop()].append(op)
        else:
            flush()
            ordered.append(op)
    flush()
    del model.net.Proto().op[:]
    model.net.Proto().op.extend(ordered)


def _inter_device_batch_normalization(model: Any) -> None:
    """Each run of SpatialBN ops (one per device) computes its statistics over every device's
    batch (ChannelStats, summed, as inputs 5 and 6 with ``num_batches``), and each run of
    SpatialBNGradient ops uses the scale and bias gradients summed over the devices
    (ChannelBackpropStats), as Caffe2's combine_spatial_bn rewrote the net."""
    n = len(model._devices)
    first = f"{model._device_prefix}_{model._devices[0]}/"
    out: list[Any] = []
    i, ops = 0, list(model.net.Proto().op)
    while i < len(ops):
        j = i
        while j < len(ops) and ops[j].type == ops[i].type and ops[i].type in ("SpatialBN", "SpatialBNGradient"):
            j += 1
        if j == i:
            out.append(ops[i])
            i += 1
            continue
        run = ops[i:j]
        out.extend(_combined_bn(run, n) if ops[i].type == "SpatialBN" else _combined_bn_grad(run, n, first))
        i = j
    del model.net.Proto().op[:]
    model.net.Proto().op.extend(out)


def _combined_bn(run: list[Any], n: int) -> list[Any]:
    base = run[0].input[0]
    stats = [core.CreateOperator("ChannelStats", op.input[0], [op.input[0] + "_sums", op.input[0] + "_sumsq"])
             for op in run]  # fmt: skip
    sums = [core.CreateOperator("Sum", [op.input[0] + "_sums" for op in run], base + "_sums_combined"),
            core.CreateOperator("Sum", [op.input[0] + "_sumsq" for op in run], base + "_sumsq_combined")]  # fmt: skip
    for op in run:
        op.input.extend([base + "_sums_combined", base + "_sumsq_combined"])
        op.arg.extend([utils.MakeArgument("num_batches", n)])
    return [*stats, *sums, *run]


def _combined_bn_grad(run: list[Any], n: int, first: str) -> list[Any]:
    stats = [core.CreateOperator("ChannelBackpropStats", [op.input[0], op.input[3], op.input[4], op.input[2]],
                                 [op.output[1], op.output[2]]) for op in run]  # fmt: skip
    scale_blob = first + stripBlobName(run[0].output[1]) + "_combined"
    bias_blob = first + stripBlobName(run[0].output[2]) + "_combined"
    combine = [core.CreateOperator("Sum", [op.output[1] for op in run], scale_blob),
               core.CreateOperator("Sum", [op.output[2] for op in run], bias_blob)]  # fmt: skip
    combine += [core.CreateOperator("Copy", scale_blob, op.output[1]) for op in run]
    combine += [core.CreateOperator("Copy", bias_blob, op.output[2]) for op in run]
    for op in run:
        op.arg.extend([utils.MakeArgument("num_batches", n)])
        op.input.extend([op.output[1], op.output[2]])
    return [*stats, *combine, *run]


def _prune_parameters_for_sharing(model: Any) -> None:
    """Only the first device's parameters get updates (the others' ops will read them)."""
    master_prefix = f"{model._device_prefix}_{model._devices[0]}/"
    model.params = model.GetParams(master_prefix)
    kept = set(model.params)
    model.param_to_grad = {p: g for p, g in model.param_to_grad.items() if p in kept}
    model.weights = [w for w in model.weights if w in kept]
    model.biases = [b for b in model.biases if b in kept]


def _remap_parameters_for_shared_model(model: Any, all_params: set[Any]) -> None:
    """Drop the ops making the other devices' parameters; their readers read the first device's."""
    master_prefix = f"{model._device_prefix}_{model._devices[0]}/"
    params = {str(p) for p in all_params}
    masters = {str(p) for p in model.GetParams()}
    for net in (model.param_init_net, model.net):
        proto = net.Proto()
        kept = []
        for op in proto.op:
            if any(o in params and o not in masters for o in op.output):
                continue
            for j, name in enumerate(op.input):
                if name in params and name not in masters:
                    op.input[j] = master_prefix + stripBlobName(name)
            kept.append(op)
        del proto.op[:]
        proto.op.extend(kept)


def _setup_devices(model: Any, devices: list[int], cpu_device: bool, rendezvous: Any) -> None:
    model._device_type = caffe2_pb2.CPU if cpu_device else caffe2_pb2.CUDA
    model._device_prefix = "cpu" if cpu_device else "gpu"
    model._devices = devices
    model._rendezvous = rendezvous
    model._shared_model = False
    model._common_world = None
    model._last_collective = None


def Parallelize_BMUF(
    model_helper_obj: Any,
    input_builder_fun: Callable[[Any], Any],
    forward_pass_builder_fun: Callable[[Any, float], Any],
    param_update_builder_fun: Callable[[Any], Any],
    block_learning_rate: float = 1.0,
    block_momentum: float | None = None,
    devices: Any = None,
    rendezvous: Any = None,
    net_type: str = "dag",
    master_device: int | None = None,
    use_nccl: bool = False,
    nesterov: bool = False,
    optimize_gradient_memory: bool = False,
    reset_momentum_sgd: bool = False,
    warmup_iterations: int | None = None,
    max_concurrent_distributed_ops: int = 4,
    add_blobs_to_sync: Any = None,
    num_threads_per_device: int = 4,
    cpu_device: bool = False,
) -> None:
    """Block-wise model-update filtering (Chen and Huo, ICASSP 2016), as Caffe2 built it.

    ``model.net`` runs each device's local updates (``param_update_builder_fun`` per device, no
    gradient exchange); ``model._global_model_param_updates_net``, run once per block, averages
    the parameters over all devices (and shards), takes a momentum step on the global model
    (``v = block_momentum * v + block_learning_rate * (avg - g)``; ``g += v``, with Nesterov
    ``g -= block_momentum * (v - v_prev)``) and gives every device ``g``.
    ``model._global_model_init_net`` makes ``v`` (zeros) and ``g`` (the first device's
    parameters). The blobs named in ``add_blobs_to_sync`` (unprefixed) are copied from the first
    device of shard 0 to every device at the end of the global update. Run them with :func:`RunInitNet`, :func:`RunNet` (and :func:`RunWarmup` when
    ``warmup_iterations`` is set)::

        >>> from caffe2.python import brew, model_helper, workspace
        >>> m = model_helper.ModelHelper(name="bmuf_doc")
        >>> def inputs(model):
        ...     model.param_init_net.ConstantFill([], "data", shape=[4, 3], value=1.0)
        ...     model.param_init_net.ConstantFill([], "label", shape=[4, 1], value=0.5)
        >>> def forward(model, loss_scale):
        ...     fc = brew.fc(model, "data", "fc", 3, 1, weight_init=("ConstantFill", {"value": 0.1}))
        ...     loss = model.AveragedLoss(model.SquaredL2Distance([fc, "label"], "d"), "l")
        ...     return [model.Scale(loss, "loss", scale=loss_scale)]
        >>> def update(model):
        ...     one = model.param_init_net.ConstantFill([], "one", shape=[1], value=1.0)
        ...     lr = model.param_init_net.ConstantFill([], "lr", shape=[1], value=-0.1)
        ...     for p in model.GetParams():
        ...         model.WeightedSum([p, one, model.param_to_grad[p], lr], p)
        >>> Parallelize_BMUF(m, inputs, forward, update, devices=[0, 1], cpu_device=True)
        >>> RunInitNet(m); RunNet(m, 3)
        >>> bool((workspace.FetchBlob("cpu_0/fc_w") == workspace.FetchBlob("cpu_1/fc_w")).all())
        True
    """
    model = model_helper_obj
    devices = list(devices if devices is not None else [0])
    master = devices[0] if master_device is None else master_device
    if master != devices[0]:
        raise NotImplementedError("Parallelize_BMUF: the master device must be the first of `devices` here")
    _check_supported(devices, False, rendezvous, False, False)
    _setup_devices(model, devices, cpu_device, rendezvous)
    num_devices = len(devices) * _num_shards(rendezvous)
    num_workers = num_threads_per_device * len(devices) + (8 if rendezvous else 0)
    if block_momentum is None:
        block_momentum = 1.0 - 1.0 / num_devices
    model.net.Proto().num_workers = num_workers
    model.net.Proto().type = net_type
    global_init = model._global_model_init_net = core.Net("global_model_init")
    updates = model._global_model_param_updates_net = core.Net("global_model")
    for net in (global_init, updates):
        net.Proto().type = net_type
        net.Proto().num_workers = num_workers
    non_datapar = list(model.params)
    losses_by_device: dict[int, list[Any]] = {}
    for d in devices:
        with _device_scope(model, d):
            input_builder_fun(model)
            losses_by_device[d] = forward_pass_builder_fun(model, 1.0 / num_devices)
    model._device_grouped_blobs = _group_by_device(model, model.params[len(non_datapar) :])
    model._param_names = list(model._device_grouped_blobs)
    model._losses_by_gpu = losses_by_device
    _add_gradient_operators(model, devices, losses_by_device)
    for d in devices:
        with _device_scope(model, d):
            param_update_builder_fun(model)
    names = list(model._device_grouped_blobs)
    master_opt = core.DeviceOption(model._device_type, master)
    if warmup_iterations is not None:
        model._warmup_iterations = warmup_iterations
        model._warmup_broadcast = core.Net("warmup-broadcast")
        model._warmup_broadcast.Proto().type = net_type
        model._warmup_broadcast.Proto().num_workers = num_workers
        _sync_params(model, model._warmup_broadcast, names, devices)
        for name in names:
            param = model._device_grouped_blobs[name][master]
            with core.DeviceScope(master_opt):
                model._warmup_broadcast.Copy(param, _g(param))
    for name in names:
        param = model._device_grouped_blobs[name][master]
        with core.DeviceScope(master_opt):
            global_init.ConstantFill(param, _v(param), value=0.0)
            global_init.Copy(param, _g(param))
            if nesterov:
                global_init.ConstantFill(param, _v_prev(param), value=0.0)
    model._last_collective = None
    for name in names:
        _all_reduce(model, updates, name, model._device_grouped_blobs[name], devices)
    for name in names:
        with core.DeviceScope(master_opt):
            _bmuf_step(updates, model._device_grouped_blobs[name][master], num_devices, block_learning_rate,
                       block_momentum, nesterov)  # fmt: skip
    _sync_params(model, updates, names, devices)
    if add_blobs_to_sync is not None:
        AddBlobSync(model, add_blobs_to_sync, net=updates)
    if reset_momentum_sgd:
        for op in [op for op in model.net.Proto().op if op.type == "MomentumSGDUpdate"]:
            with core.DeviceScope(op.device_option):
                updates.ConstantFill([op.input[1]], op.input[1], value=0.0)
    model._data_parallel_model_init_nets = [model.param_init_net, global_init]
    model._data_parallel_model_nets = [model.net, (updates, 1)]


def Parallelize_CPU_BMUF(*args: Any, **kwargs: Any) -> None:
    """:func:`Parallelize_BMUF` on CPU devices."""
    kwargs["cpu_device"] = True
    Parallelize_BMUF(*args, **kwargs)


def Parallelize_GPU_BMUF(*args: Any, **kwargs: Any) -> None:
    """:func:`Parallelize_BMUF` on GPU devices."""
    kwargs["cpu_device"] = False
    Parallelize_BMUF(*args, **kwargs)


def _v(param: Any) -> str:
    return f"{param}_v"


def _g(param: Any) -> str:
    return f"{param}_g"


def _v_prev(param: Any) -> str:
    return f"{param}_prev"


def _bmuf_step(net: Any, param: Any, num_devices: int, lr: float, momentum: float, nesterov: bool) -> None:
    """On the master device: ``param`` holds the sum over all devices; the global model moves."""
    net.Scale(param, param, scale=1.0 / num_devices)
    net.Sub([param, _g(param)], param)
    net.Scale(param, param, scale=lr)
    net.Scale(_v(param), _v(param), scale=momentum)
    net.Add([_v(param), param], _v(param))
    net.Add([_g(param), _v(param)], _g(param))
    if nesterov:
        net.Sub([_v(param), _v_prev(param)], _v_prev(param))
        net.Scale(_v_prev(param), _v_prev(param), scale=momentum)
        net.Sub([_g(param), _v_prev(param)], _g(param))
        net.Copy(_v(param), _v_prev(param))
    net.Copy(_g(param), param)


def _sync_params(model: Any, net: Any, names: list[str], devices: list[int]) -> None:
    """Every device (and shard) gets the master device's parameters (of shard 0), in ``net``."""
    shards = _num_shards(model._rendezvous)
    for name in sorted(names):
        by_device = model._device_grouped_blobs[name]
        master = by_device[devices[0]]
        if shards > 1:
            with core.DeviceScope(core.DeviceOption(model._device_type, devices[0])):
                last = model._last_collective
                net.Broadcast([_common_world(model), master], [master], root=0, control_input=[last] if last else None)
                model._last_collective = master
        _broadcast_local(model, net, by_device, devices)


def RunInitNet(model: Any) -> None:
    """Run the init nets of a ``Parallelize_BMUF`` model once and create its nets."""
    for init_net in model._data_parallel_model_init_nets:
        workspace.RunNetOnce(init_net)
    for net_iters in model._data_parallel_model_nets:
        workspace.CreateNet(net_iters[0] if isinstance(net_iters, tuple) else net_iters)


def RunWarmup(model: Any) -> None:
    """``warmup_iterations`` local iterations, then every device gets the master's parameters."""
    workspace.RunNet(model.net, model._warmup_iterations)
    workspace.RunNetOnce(model._warmup_broadcast)


def RunNet(model: Any, num_iterations: int) -> None:
    """One BMUF block: ``num_iterations`` local iterations, then the global update once."""
    for net_iter in model._data_parallel_model_nets:
        if isinstance(net_iter, tuple):
            workspace.RunNet(net_iter[0].Proto().name, net_iter[1])
        else:
            workspace.RunNet(net_iter, num_iterations)


def Synchronize(model: Any, timeout_sec: float = 30.0) -> None:
    """A barrier of the shards (nothing to do on one host)."""
    if model._rendezvous is None or _num_shards(model._rendezvous) <= 1:
        return
    world_blob = getattr(model, "_common_world", None)
    if world_blob is None or not workspace.HasBlob(str(world_blob)):
        world_blob = _barrier_world(model)
    workspace.FetchBlob(str(world_blob)).barrier()


def _barrier_world(model: Any) -> Any:
    """A common world of the shards for :func:`Synchronize` when the model's nets made none
    (no parameter to sync), created once by a net of its own (``sync_barrier_cw``)."""
    existing = getattr(model, "_sync_barrier_world", None)
    if existing is not None and workspace.HasBlob(str(existing)):
        return existing
    init = core.Net("sync_barrier_init_net")
    world = _create_common_world(model, init, "sync_barrier_cw")
    workspace.RunNetOnce(init)
    model._sync_barrier_world = world
    return world


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
    start = len(model.net.Proto().op)
    model.AddGradientOperators(seeds)
    if model._device_type != caffe2_pb2.CPU:
        _place_gradient_ops(model, start, devices)


def _place_gradient_ops(model: Any, start: int, devices: list[int]) -> None:
    """Give each backward op without a device option the GPU of its blobs (asyncnet's autodiff
    leaves them unset). The sum of the devices' losses that seeds the backward pass reads a
    scalar from every GPU: its inputs are first copied to the first GPU, where it runs."""
    proto = model.net.Proto()
    ops = list(proto.op)
    placed = ops[:start]
    for op in ops[start:]:
        if op.HasField("device_option"):
            placed.append(op)
            continue
        on = sorted({_device_of(model, b) for b in [*op.input, *op.output] if _scoped(model, b)})
        if len(on) > 1 and op.type == "Sum":
            placed.extend(_copies_to(model, op, devices[0]))
        op.device_option.CopyFrom(core.DeviceOption(model._device_type, on[0] if len(on) == 1 else devices[0]))
        placed.append(op)
    del proto.op[:]
    proto.op.extend(placed)


def _scoped(model: Any, blob: str) -> bool:
    prefix = f"{model._device_prefix}_"
    return blob.startswith(prefix) and scope._NAMESCOPE_SEPARATOR in blob and blob[len(prefix)].isdigit()


def _copies_to(model: Any, op: Any, d0: int) -> list[Any]:
    """Copy ops bringing ``op``'s inputs from other devices to ``d0`` (and ``op`` reads the copies)."""
    copies = []
    for i, b in enumerate(op.input):
        d = _device_of(model, b) if _scoped(model, b) else d0
        if d != d0:
            new = f"{model._device_prefix}_{d0}/{stripBlobName(b)}_gpu{d}_copy"
            copies.append(
                core.CreateOperator("Copy", [b], [new], device_option=core.DeviceOption(model._device_type, d0))
            )
            op.input[i] = new
    return copies


def _all_reduce(model: Any, net: Any, name: str, by_device: dict[int, Any], devices: list[int]) -> None:
    """Sum one gradient over the devices (and the shards) and give every device the sum."""
    shards = _num_shards(model._rendezvous)
    if len(devices) < 2 and shards < 2:
        return
    if any(isinstance(g, core.GradientSlice) for g in by_device.values()):
        raise NotImplementedError("data_parallel_model: sparse (GradientSlice) gradients are not synchronized here")
    first = by_device[devices[0]]
    master = core.DeviceOption(model._device_type, devices[0])
    with core.DeviceScope(master):
        if len(devices) > 1:
            net.Sum(_on_master(model, net, name, by_device, devices), first, name="dpm")
    if model._shared_model:  # the others' gradients are not read: only the first device's parameters update
        return
    with core.DeviceScope(master):
        if shards > 1:
            world = _common_world(model)
            # one torch.distributed group: every shard must issue its collectives in the same
            # order, so each Allreduce waits for the one before (Caffe2's control inputs)
            last = model._last_collective
            net.Allreduce([world, first], [first], name=name, engine="GLOO", control_input=[last] if last else None)
            model._last_collective = first
            net.Scale(first, first, scale=float(shards))
    _broadcast_local(model, net, by_device, devices)


def _on_master(model: Any, net: Any, name: str, by_device: dict[int, Any], devices: list[int]) -> list[Any]:
    """The devices' copies of a blob, each on the first device (GPU peers are copied there first)."""
    if model._device_type == caffe2_pb2.CPU:
        return [by_device[d] for d in devices]
    d0 = devices[0]
    blobs = [by_device[d0]]
    for d in devices[1:]:
        blobs.append(net.Copy(by_device[d], f"{model._device_prefix}_{d0}/{name}_gpu{d}_copy"))
    return blobs


def _broadcast_local(model: Any, net: Any, by_device: dict[int, Any], devices: list[int]) -> None:
    """A ``Copy`` of the first device's blob on each other device (Caffe2's _Broadcast)."""
    for d in devices[1:]:
        with core.DeviceScope(core.DeviceOption(model._device_type, d)):
            net.Copy(by_device[devices[0]], by_device[d])


def _common_world(model: Any) -> Any:
    """The common world blob of the shards, created once in the init net (``CreateCommonWorld``)."""
    existing = getattr(model, "_common_world", None)
    if existing is not None:
        return existing
    model._common_world = _create_common_world(model, model.param_init_net, "allreduce_0_cw")
    return model._common_world


def _create_common_world(model: Any, net: Any, name: str) -> Any:
    """A CPU ``CreateCommonWorld`` op on ``net`` for the model's rendezvous (gloo), named ``name``."""
    rdv = model._rendezvous
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU)):
        return net.CreateCommonWorld(
            [rdv["kv_handler"]] if rdv.get("kv_handler") else [],
            name,
            name=name,
            size=int(rdv["num_shards"]),
            rank=int(rdv["shard_id"]),
            engine="GLOO",
            transport=rdv.get("transport") or "tcp",
            interface=rdv.get("interface") or "",
            timeout_ms=30000,
        )


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
    """In the init net: every device's copy of a blob becomes the first device's, and with
    several shards every parameter first becomes shard 0's (``Broadcast``)."""
    shards = _num_shards(model._rendezvous)
    if len(devices) < 2 and shards < 2:
        return
    blobs, _ = _sync_blobs(model)
    grouped = _group_by_device(model, blobs)
    init = model.param_init_net
    for name in sorted(grouped):
        by_device = grouped[name]
        if devices[0] not in by_device:
            continue
        if shards > 1 and name in model._param_names:
            with core.DeviceScope(core.DeviceOption(model._device_type, devices[0])):
                init.Broadcast([_common_world(model), by_device[devices[0]]], [by_device[devices[0]]], root=0)
        _broadcast_local(model, init, by_device, [d for d in devices if d == devices[0] or d in by_device])


def GetCheckpointParams(model: Any) -> set[Any]:
    """The blobs of a complete checkpoint: the first device's data-parallel blobs and the iteration counters."""
    scope = f"{model._device_prefix}_{model._devices[0]}/"  # with shared_model too: the master parameters live there
    first = {core.BlobReference(o) for op in model.param_init_net.Proto().op for o in op.output if o.startswith(scope)}
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


def AddBlobSync(model: Any, blobs: list[str], net: Any = None) -> None:
    """Copy blobs ``blobs`` (unprefixed names) of the first device to the others (and, across
    shards, broadcast shard 0's) at the end of ``net`` (the model's net by default)."""
    names = [str(b) for b in blobs]
    prefixed = [b for b in names if b.startswith(model._device_prefix)]
    if prefixed:
        raise ValueError(f"AddBlobSync: expected unprefixed blob names, found {prefixed}")
    if not names:
        return
    for b in names:
        per_device = {d: core.BlobReference(f"{model._device_prefix}_{d}/{b}") for d in model._devices}
        model._device_grouped_blobs[b] = per_device
    _sync_params(model, model.net if net is None else net, names, list(model._devices))


def ConvertNetForDevice(net: Any, device: Any = None) -> Any:
    """A copy of ``net`` with every blob under the ``cpu_<d>/`` or ``gpu_<d>/`` name scope of
    ``device`` (the current device scope by default) and its ops placed there, for
    ``model.net.AppendNet`` inside a forward-pass builder."""
    target = device or scope.CurrentDeviceScope() or core.DeviceOption(caffe2_pb2.CPU, 0)
    kind = "gpu" if core.IsGPUDeviceType(target.device_type) else "cpu"
    scoped = f"{kind}_{device_id_of(target)}/"
    converted = net.Clone(f"{net.Name()}_converted")
    proto = converted.Proto()
    if any("RecurrentNetwork" in op.type for op in proto.op):
        raise NotImplementedError("ConvertNetForDevice: RecurrentNetwork ops are not converted")

    def rename(names: Any) -> list[str]:
        return [scoped + n for n in names]

    for op in proto.op:
        op.input[:], op.output[:], op.control_input[:] = rename(op.input), rename(op.output), rename(op.control_input)
        op.device_option.CopyFrom(target)
    proto.external_input[:], proto.external_output[:] = rename(proto.external_input), rename(proto.external_output)
    return converted
