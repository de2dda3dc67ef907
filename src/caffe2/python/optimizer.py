"""Caffe2's ``caffe2.python.optimizer``: parameter updates emitted as Caffe2's own op sequences.

Every optimizer shares one mutex-guarded iteration counter (``optimizer_iteration``:
ConstantFill + CreateMutex in the init net, ``AtomicIter`` in the net), a ``LearningRate`` op
with a *negative* ``base_lr`` (the update adds ``lr * grad``), then per parameter:

* SGD: ``WeightedSum([param, ONE, grad, lr], param)``; with momentum ``MomentumSGDUpdate``;
  sparse gradients ``ScatterWeightedSum`` / ``SparseMomentumSGDUpdate``.
* Adagrad: ``Adagrad([param, param_squared_sum, grad, lr])`` (``SparseAdagrad``,
  ``RowWiseSparseAdagrad`` for sparse gradients).
* Adam: ``Adam([param, m1, m2, grad, lr, iter])`` (``SparseAdam`` for sparse gradients).
* Weight decay: ``WeightedSum([grad, ONE, param, wd], grad)`` on the weights.

    >>> from caffe2.python import brew, model_helper, optimizer
    >>> m = model_helper.ModelHelper(name="opt_doc")
    >>> fc = brew.fc(m, "x", "fc", dim_in=3, dim_out=1)
    >>> loss = m.AveragedLoss(fc, "loss")
    >>> _ = m.AddGradientOperators([loss])
    >>> _ = optimizer.build_sgd(m, base_learning_rate=0.1)
    >>> [op.type for op in m.net.Proto().op][-4:]
    ['AtomicIter', 'LearningRate', 'WeightedSum', 'WeightedSum']
"""

from __future__ import annotations

from collections import defaultdict, namedtuple
from typing import Any

import numpy as np

from asyncnet.ops.caffe2_yellowfin import SCALARS as _YELLOWFIN_SCALARS
from caffe2.proto import caffe2_pb2
from caffe2.python import core, scope, utils, workspace
from caffe2.python.modeling.parameter_info import ParameterInfo

__all__ = [
    "AdagradOptimizer",
    "AdamOptimizer",
    "AuxOptimizerParams",
    "FP16SgdOptimizer",
    "FtrlOptimizer",
    "MultiPrecisionSgdOptimizer",
    "Optimizer",
    "RmsPropOptimizer",
    "SgdOptimizer",
    "YellowFinOptimizer",
    "WeightDecayBuilder",
    "add_weight_decay",
    "build_adagrad",
    "build_adam",
    "build_fp16_sgd",
    "build_ftrl",
    "build_multi_precision_sgd",
    "build_rms_prop",
    "build_sgd",
    "build_yellowfin",
    "get_lr_injection",
    "get_param_device",
    "set_lr_injection",
]

AuxOptimizerParams = namedtuple("AuxOptimizerParams", ["local", "shared"])
_optimizer_instance_count: defaultdict[str, int] = defaultdict(int)
_LEARNING_RATE_INJECTION = "lr_injection"


class Optimizer:
    """Base class: ``optimizer(net, param_init_net, param, grad)`` adds the update of one parameter."""

    def __init__(self) -> None:
        self._aux_params = AuxOptimizerParams(local=[], shared=[])
        self._instance_num = _optimizer_instance_count[self.__class__.__name__]
        _optimizer_instance_count[self.__class__.__name__] += 1
        self._lr_multiplier: Any = None
        self._local_lr_multiplier: Any = None

    def __call__(self, net: Any, param_init_net: Any, param: Any, grad: Any = None) -> None:
        if grad is None:
            if not isinstance(param, ParameterInfo) or param.grad is None:
                raise ValueError("Expected a ParameterInfo with a gradient when grad is not given")
        else:
            if isinstance(param, str):
                param = core.BlobReference(param)
            param = ParameterInfo(param_id=None, param=param, grad=grad)
        self._run(net, param_init_net, param)

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo) -> None:
        raise NotImplementedError("Optimizer needs to implement _run function")

    def get_cpu_blob_name(self, base_str: str, node_name: str = "") -> str:
        return f"{self.__class__.__name__}_{self._instance_num}_{base_str}{node_name}_cpu"

    def get_gpu_blob_name(self, base_str: str, gpu_id: int, node_name: str) -> str:
        return f"{self.__class__.__name__}_{self._instance_num}_{base_str}{node_name}_gpu{gpu_id}"

    def make_unique_blob_name(self, base_str: str) -> str:
        """``<Class>_<n>_<base>_cpu`` (or ``_gpu<id>`` under a CUDA device scope)."""
        dev = scope.CurrentDeviceScope()
        if dev is None:
            return self.get_cpu_blob_name(base_str)
        if core.IsGPUDeviceType(dev.device_type):
            return self.get_gpu_blob_name(base_str, dev.device_id, dev.node_name)
        return self.get_cpu_blob_name(base_str, dev.node_name)

    def build_lr(
        self,
        net: Any,
        param_init_net: Any,
        base_learning_rate: float,
        learning_rate_blob: Any = None,
        policy: str = "fixed",
        iter_val: int = 0,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        """The learning-rate blob (``LearningRate`` with ``base_lr = -base_learning_rate``) and the iteration counter."""
        if learning_rate_blob is None:
            learning_rate_blob = self.make_unique_blob_name("lr")
        iteration = utils.BuildUniqueMutexIter(param_init_net, net, iter_val=iter_val)
        if not net.BlobIsDefined(learning_rate_blob):
            lr = net.LearningRate([iteration], learning_rate_blob, base_lr=-base_learning_rate, policy=policy, **kwargs)
        else:
            lr = net.GetBlobRef(learning_rate_blob)
        if self._lr_multiplier is not None:
            multiplier = net.CopyFromCPUInput(self._lr_multiplier, self.make_unique_blob_name("lr_multiplier"))
            lr = net.Mul([lr, multiplier], self.make_unique_blob_name("scaled_lr"), broadcast=1)
        if self._local_lr_multiplier is not None:
            lr = net.Mul([lr, self._local_lr_multiplier], self.make_unique_blob_name("local_scaled_lr"), broadcast=1)
        return lr, iteration

    def add_lr_multiplier(self, lr_multiplier: Any) -> None:
        self._lr_multiplier = lr_multiplier

    def _add_local_lr_multiplier(self, local_lr_multiplier: Any, is_gpu_blob: bool = False) -> None:
        self._local_lr_multiplier = local_lr_multiplier

    @staticmethod
    def dedup(net: Any, sparse_dedup_aggregator: str | None, grad: Any) -> Any:
        if not isinstance(grad, core.GradientSlice):
            raise TypeError("Dedup only works for sparse gradients (GradientSlice)")
        if not sparse_dedup_aggregator:
            return grad
        unique, remap = net.Unique([grad.indices], 2)
        if sparse_dedup_aggregator.lower() != "sum":
            raise ValueError(f"sparse_dedup_aggregator {sparse_dedup_aggregator!r} is not supported; expected 'sum'")
        values = net.UnsortedSegmentSum([grad.values, remap], 1)
        return core.GradientSlice(indices=unique, values=values)

    def get_auxiliary_parameters(self) -> AuxOptimizerParams:
        return self._aux_params

    def scale_learning_rate(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("Optimizer needs to implement scale_learning_rate method.")


def _one(param_init_net: Any, with_node_name: bool = True) -> Any:
    dev = scope.CurrentDeviceScope() or core.DeviceOption(caffe2_pb2.CPU)
    name = f"ONE_{dev.device_type}_{dev.device_id}" + (dev.node_name if with_node_name else "")
    return param_init_net.ConstantFill([], name, shape=[1], value=1.0)


class SgdOptimizer(Optimizer):
    """SGD, with optional (Nesterov) momentum."""

    def __init__(
        self,
        base_learning_rate: float = 0.01,
        policy: str = "fixed",
        momentum: float = 0.0,
        nesterov: bool = True,
        sparse_dedup_aggregator: str | None = None,
        lars: Any = None,
        **kwargs: Any,
    ):
        super().__init__()
        self.base_learning_rate = base_learning_rate
        self.policy = policy
        self.momentum = momentum
        self.nesterov = nesterov
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.lars = lars
        self.init_kwargs = kwargs

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo) -> None:
        param, grad = param_info.blob, param_info.grad
        if self.base_learning_rate == 0:
            return
        if self.base_learning_rate < 0:
            raise ValueError(f"Expect positive base learning rate, got {self.base_learning_rate}")
        lr_sign = -1 if self.momentum else 1
        lr, _ = self.build_lr(
            net,
            param_init_net,
            base_learning_rate=self.base_learning_rate * lr_sign,
            policy=self.policy,
            **self.init_kwargs,
        )
        one = _one(param_init_net)
        self._aux_params.shared.append(one)
        if self.momentum > 0:
            momentum_data = param_init_net.ConstantFill(param, str(param) + "_momentum", value=0.0)
            self._aux_params.local.append(momentum_data)
        if isinstance(grad, core.GradientSlice):
            grad = self.dedup(net, self.sparse_dedup_aggregator, grad)
            if self.momentum > 0:
                net.SparseMomentumSGDUpdate(
                    [grad.values, momentum_data, lr, param, grad.indices],
                    [grad.values, momentum_data, param],
                    momentum=self.momentum,
                    nesterov=self.nesterov,
                )
            else:
                net.ScatterWeightedSum([param, one, grad.indices, grad.values, lr], param)
        elif self.momentum > 0:
            net.MomentumSGDUpdate(
                [grad, momentum_data, lr, param],
                [grad, momentum_data, param],
                momentum=self.momentum,
                nesterov=self.nesterov,
            )
        else:
            net.WeightedSum([param, one, grad, lr], param)

    def scale_learning_rate(self, scale: float) -> None:
        self.base_learning_rate *= scale


class MultiPrecisionSgdOptimizer(SgdOptimizer):
    """SGD on an fp32 master copy of fp16 parameters (plain SGD for fp32 parameters)."""

    def __init__(
        self,
        base_learning_rate: float = 0.1,
        momentum: float = 0.0,
        policy: str = "fixed",
        nesterov: bool = True,
        sparse_dedup_aggregator: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(
            base_learning_rate=base_learning_rate,
            policy=policy,
            momentum=momentum,
            nesterov=nesterov,
            sparse_dedup_aggregator=sparse_dedup_aggregator,
            **kwargs,
        )

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo) -> None:
        param = param_info.blob
        master = param_info.blob_copy[core.DataType.FLOAT] if param_info.blob_copy is not None else None
        if master is None:
            return SgdOptimizer._run(self, net, param_init_net, param_info)
        grad = param_info.grad
        if self.base_learning_rate == 0:
            return None
        lr, _ = self.build_lr(
            net, param_init_net, base_learning_rate=-self.base_learning_rate, policy=self.policy, **self.init_kwargs
        )
        momentum_data = param_init_net.ConstantFill(master, str(param) + "_momentum", value=0.0)
        self._aux_params.local.append(momentum_data)
        if isinstance(grad, core.GradientSlice):
            raise ValueError("MultiPrecisionSgd does not support sparse gradients")
        grad_fp32 = net.HalfToFloat(grad, grad + "_fp32")
        net.MomentumSGDUpdate(
            [grad_fp32, momentum_data, lr, master],
            [grad_fp32, momentum_data, master],
            momentum=self.momentum,
            nesterov=self.nesterov,
        )
        net.FloatToHalf(master, param)
        return None


class FP16SgdOptimizer(SgdOptimizer):
    """Momentum SGD with the weight decay fused into the update: ``FP16MomentumSGDUpdate`` on an
    fp16 parameter (``PseudoFP16Initializer``'s or ``ReversePseudoFP16Initializer``'s half copy),
    ``FP32MomentumSGDUpdate`` on an fp32 one (no copy, or a name holding "spatbn"). The moment is
    a ``ConstantFill`` in fp32 plus its ``FloatToHalf`` copy, as Caffe2 emits them.

        >>> from caffe2.python import brew, model_helper
        >>> from caffe2.python.modeling import initializers
        >>> m = model_helper.ModelHelper(name="fp16_doc")
        >>> fc = brew.fc(m, "x", "fc", 3, 1, WeightInitializer=initializers.PseudoFP16Initializer,
        ...              BiasInitializer=initializers.PseudoFP16Initializer)
        >>> _ = m.AddGradientOperators([m.AveragedLoss(m.HalfToFloat(fc, "fc32"), "loss")])
        >>> _ = build_fp16_sgd(m, 0.1, momentum=0.9, nesterov=1, weight_decay=1e-4)
        >>> [op.type for op in m.net.Proto().op][-2:]
        ['FP16MomentumSGDUpdate', 'FP16MomentumSGDUpdate']
    """

    def __init__(
        self,
        base_learning_rate: float = 0.1,
        momentum: float = 0.0,
        policy: str = "fixed",
        nesterov: bool = True,
        weight_decay: float = 0.0001,
        sparse_dedup_aggregator: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(
            base_learning_rate=base_learning_rate,
            policy=policy,
            momentum=momentum,
            nesterov=nesterov,
            sparse_dedup_aggregator=sparse_dedup_aggregator,
            **kwargs,
        )
        self.weight_decay = weight_decay

    @staticmethod
    def _fp16_and_fp32(param_info: ParameterInfo, fp32_update: bool) -> tuple[Any, Any, bool]:
        """(parameter to update, its fp32 version, whether the update is in fp32)."""
        if fp32_update or "spatbn" in str(param_info.blob) or param_info.blob_copy is None:
            return param_info.blob, param_info.blob, True
        if core.DataType.FLOAT in param_info.blob_copy:
            return param_info.blob, param_info.blob_copy[core.DataType.FLOAT], False
        if core.DataType.FLOAT16 in param_info.blob_copy:
            return param_info.blob_copy[core.DataType.FLOAT16], param_info.blob, False
        raise ValueError(f"Unrecognized parameter format to be updated by FP16 Optimizer. Parameter: {param_info.name}")

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo, fp32_update: bool = False) -> None:
        param, param_fp32, fp32 = self._fp16_and_fp32(param_info, fp32_update)
        grad = param_info.grad
        if self.base_learning_rate == 0:
            return
        if self.base_learning_rate < 0:
            raise ValueError(f"Expect positive base learning rate, got {self.base_learning_rate}")
        lr, _ = self.build_lr(
            net, param_init_net, base_learning_rate=-self.base_learning_rate, policy=self.policy, **self.init_kwargs
        )
        momentum_fp32 = param_init_net.ConstantFill(param_fp32, str(param) + "_momentum_fp32", value=0.0)
        momentum_data = param_init_net.FloatToHalf(momentum_fp32, str(param) + "_momentum")
        self._aux_params.local.append(momentum_data)
        if isinstance(grad, core.GradientSlice):
            raise ValueError("FP16Sgd does not support sparse gradients")
        update, moment = ("FP32MomentumSGDUpdate", momentum_fp32) if fp32 else ("FP16MomentumSGDUpdate", momentum_data)
        getattr(net, update)(
            [grad, moment, lr, param],
            [grad, moment, param],
            momentum=self.momentum,
            nesterov=self.nesterov,
            weight_decay=self.weight_decay,
        )


class WeightDecayBuilder(Optimizer):
    """Adds ``weight_decay * param`` to each weight's gradient."""

    def __init__(self, weight_decay: float):
        self.weight_decay = weight_decay

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo) -> None:
        dev = scope.CurrentDeviceScope() or core.DeviceOption(caffe2_pb2.CPU)
        one = param_init_net.ConstantFill([], f"ONE_{dev.device_type}_{dev.device_id}", shape=[1], value=1.0)
        wd = param_init_net.ConstantFill(
            [], f"wd_{dev.device_type}_{dev.device_id}", shape=[1], value=self.weight_decay
        )
        if isinstance(param_info.grad, core.GradientSlice):
            raise ValueError("Weight decay does not yet support sparse gradients")
        net.WeightedSum([param_info.grad, one, param_info.blob, wd], param_info.grad)


class AdagradOptimizer(Optimizer):
    """Adagrad (dense ``Adagrad``; ``SparseAdagrad`` or, with ``rowWise``, ``RowWiseSparseAdagrad``)."""

    def __init__(
        self,
        alpha: float = 0.01,
        epsilon: float = 1e-4,
        decay: float = 1,
        weight_decay: float = 0.0,
        policy: str = "fixed",
        sparse_dedup_aggregator: str | None = None,
        rowWise: bool = False,
        engine: str = "",
        lars: Any = None,
        output_effective_lr: bool = False,
        output_effective_lr_and_update: bool = False,
        **kwargs: Any,
    ):
        super().__init__()
        self.alpha = alpha
        self.epsilon = epsilon
        self.decay = decay
        self.weight_decay = float(weight_decay)
        self.policy = policy
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.rowWise = rowWise
        self.engine = engine
        self.lars = lars
        self.output_effective_lr = output_effective_lr
        self.output_effective_lr_and_update = output_effective_lr_and_update
        self.init_kwargs = kwargs

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo) -> None:
        param, grad = param_info.blob, param_info.grad
        if self.alpha <= 0:
            return
        lr, _ = self.build_lr(
            net, param_init_net, base_learning_rate=self.alpha, policy=self.policy, **self.init_kwargs
        )
        if self.rowWise:
            if param_info.shape is None:
                raise ValueError(f"row-wise Adagrad needs the shape of {param}; create it with model.create_param")
            squared = param_init_net.ConstantFill(
                [], str(param) + "_avg_squared_sum", shape=[param_info.shape[0]], value=0.0
            )
        else:
            squared = param_init_net.ConstantFill([param], str(param) + "_squared_sum", value=0.0)
        self._aux_params.local.append(squared)
        extra = {"weight_decay": self.weight_decay} if self.weight_decay else {}
        if isinstance(grad, core.GradientSlice):
            if self.decay != 1:
                raise ValueError("Decay is not implemented for SparseAdagrad and must be set to 1")
            grad = self.dedup(net, self.sparse_dedup_aggregator, grad)
            op = "RowWiseSparseAdagrad" if self.rowWise else "SparseAdagrad"
            getattr(net, op)(
                [param, squared, grad.indices, grad.values, lr],
                [param, squared],
                epsilon=self.epsilon,
                engine=self.engine,
                **extra,
            )
        else:
            if self.rowWise:
                raise ValueError("row-wise Adagrad takes sparse gradients only")
            outputs = [param, squared]
            if self.output_effective_lr_and_update:
                outputs += [str(param) + "_effective_lr", str(param) + "_update"]
            elif self.output_effective_lr:
                outputs.append(str(param) + "_effective_lr")
            net.Adagrad(
                [param, squared, grad, lr],
                outputs,
                epsilon=self.epsilon,
                decay=float(self.decay),
                engine=self.engine,
                **extra,
            )

    def scale_learning_rate(self, scale: float) -> None:
        self.alpha *= scale


class AdamOptimizer(Optimizer):
    """Adam (dense ``Adam``; ``SparseAdam`` for sparse gradients)."""

    def __init__(
        self,
        alpha: float = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        policy: str = "fixed",
        use_lr_adaption: bool = False,
        lr_alpha: float = 0.01,
        normalized_lr_adaption: bool = True,
        sparse_dedup_aggregator: str | None = None,
        rowWise: bool = False,
        engine: str = "",
        enableRAdam: bool = False,
        **kwargs: Any,
    ):
        super().__init__()
        self.alpha = alpha
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.policy = policy
        self.use_lr_adaption = use_lr_adaption
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.rowWise = rowWise
        self.engine = engine
        self.enableRAdam = enableRAdam
        self.init_kwargs = kwargs

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo) -> None:
        param, grad = param_info.blob, param_info.grad
        if self.alpha <= 0:
            return
        if self.use_lr_adaption or self.rowWise:
            raise ValueError("Adam with use_lr_adaption or rowWise is not supported")
        lr, iteration = self.build_lr(
            net, param_init_net, base_learning_rate=self.alpha, policy=self.policy, **self.init_kwargs
        )
        m1 = param_init_net.ConstantFill([param], param + "_first_moment", value=0.0)
        m2 = param_init_net.ConstantFill([param], param + "_second_moment", value=0.0)
        self._aux_params.shared.append(iteration)
        self._aux_params.local.extend([m1, m2])
        if isinstance(grad, core.GradientSlice):
            grad = self.dedup(net, self.sparse_dedup_aggregator, grad)
            net.SparseAdam(
                [param, m1, m2, grad.indices, grad.values, lr, iteration],
                [param, m1, m2],
                beta1=self.beta1,
                beta2=self.beta2,
                epsilon=self.epsilon,
            )
        else:
            net.Adam(
                [param, m1, m2, grad, lr, iteration],
                [param, m1, m2],
                beta1=self.beta1,
                beta2=self.beta2,
                epsilon=self.epsilon,
            )

    def scale_learning_rate(self, scale: float) -> None:
        self.alpha *= scale


def _get_param_to_device(model: Any) -> dict[str, Any]:
    return core.InferBlobDevices(model.param_init_net)


def get_param_device(
    param_name: str, grad: Any, param_to_device: dict[str, Any] | None = None, default_device: Any = None
) -> Any:
    """The device option of the op that creates ``param_name`` (else ``default_device``)."""
    return (param_to_device or {}).get(param_name, default_device)


def _build(
    model: Any,
    optimizer: Optimizer,
    weights_only: bool = False,
    use_param_info_optim: bool = True,
    max_gradient_norm: float | None = None,
    allow_lr_injection: bool = False,
) -> Optimizer:
    param_to_device = _get_param_to_device(model)
    model.Validate()
    params = [info for info in model.GetOptimizationParamInfo() if not weights_only or info.blob in model.weights]
    lr_multiplier = None
    if max_gradient_norm is not None:
        lr_multiplier = _calc_norm_ratio(model, params, "norm_clipped_grad_update", param_to_device, max_gradient_norm)
    if allow_lr_injection:
        injection = (
            model.param_init_net.ConstantFill([], _LEARNING_RATE_INJECTION, shape=[1], value=1.0)
            if not model.net.BlobIsDefined(_LEARNING_RATE_INJECTION)
            else _LEARNING_RATE_INJECTION
        )
        lr_multiplier = (
            injection
            if lr_multiplier is None
            else model.net.Mul([lr_multiplier, injection], "lr_multiplier", broadcast=1)
        )
    optimizer.add_lr_multiplier(lr_multiplier)
    for info in params:
        device = get_param_device(str(info.blob), info.grad, param_to_device)
        ctx = core.DeviceScope(device) if device is not None and device.ByteSize() else _null()
        with ctx:
            if getattr(info, "optimizer", None) and use_param_info_optim:
                info.optimizer(model.net, model.param_init_net, info)
            else:
                optimizer(model.net, model.param_init_net, info)
    return optimizer


def _calc_norm_ratio(
    model: Any, params: list[Any], name_scope: str, param_to_device: Any, max_gradient_norm: float
) -> Any:
    """clip_norm / max(global gradient norm, clip_norm), Caffe2's learning-rate multiplier for
    ``max_gradient_norm``: the update of every parameter is scaled so the global norm is at most
    ``max_gradient_norm``."""
    with core.NameScope(name_scope):
        sums = []
        for i, info in enumerate(params):
            device = get_param_device(str(info.blob), info.grad, param_to_device)
            with core.DeviceScope(device) if device is not None and device.ByteSize() else _null():
                grad = info.grad.values if isinstance(info.grad, core.GradientSlice) else info.grad
                squared = model.net.SumSqrElements(grad, f"grad_{i}_squared_sum")
                sums.append(model.net.EnsureCPUOutput(squared))
        with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU)):
            full = model.net.Sum(sums, "grad_squared_full_sum")
            norm = model.net.Pow(full, "global_norm", exponent=0.5)
            clip = model.param_init_net.ConstantFill([], "clip_norm", shape=[], value=float(max_gradient_norm))
            top = model.net.Max([norm, clip], "max_norm")
            return model.net.Div([clip, top], "norm_ratio")


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def add_weight_decay(model: Any, weight_decay: float) -> None:
    """L2 regularization: ``grad += weight_decay * param`` for every weight (not biases)."""
    _build(model, WeightDecayBuilder(weight_decay=weight_decay), weights_only=True, use_param_info_optim=False)


def build_sgd(
    model: Any,
    base_learning_rate: float,
    max_gradient_norm: float | None = None,
    allow_lr_injection: bool = False,
    **kwargs: Any,
) -> Optimizer:
    """SGD updates for every parameter with a gradient (``policy``, ``stepsize``, ``gamma``, ``momentum``...)."""
    return _build(
        model,
        SgdOptimizer(base_learning_rate, **kwargs),
        max_gradient_norm=max_gradient_norm,
        allow_lr_injection=allow_lr_injection,
    )


def build_multi_precision_sgd(
    model: Any,
    base_learning_rate: float,
    max_gradient_norm: float | None = None,
    allow_lr_injection: bool = False,
    **kwargs: Any,
) -> Optimizer:
    """SGD on fp32 master copies of fp16 parameters (see :class:`MultiPrecisionSgdOptimizer`)."""
    return _build(
        model,
        MultiPrecisionSgdOptimizer(base_learning_rate, **kwargs),
        max_gradient_norm=max_gradient_norm,
        allow_lr_injection=allow_lr_injection,
    )


def build_fp16_sgd(model: Any, base_learning_rate: float, **kwargs: Any) -> Optimizer:
    """Momentum SGD with fused weight decay on fp16 parameters (see :class:`FP16SgdOptimizer`)."""
    return _build(model, FP16SgdOptimizer(base_learning_rate, **kwargs))


def build_adagrad(
    model: Any,
    base_learning_rate: float,
    parameters: Any = None,
    max_gradient_norm: float | None = None,
    allow_lr_injection: bool = False,
    **kwargs: Any,
) -> Optimizer:
    """Adagrad updates (``epsilon``, ``decay``, ``weight_decay``, ``rowWise``...)."""
    return _build(
        model,
        AdagradOptimizer(alpha=base_learning_rate, **kwargs),
        max_gradient_norm=max_gradient_norm,
        allow_lr_injection=allow_lr_injection,
    )


def build_adam(
    model: Any,
    base_learning_rate: float,
    max_gradient_norm: float | None = None,
    allow_lr_injection: bool = False,
    **kwargs: Any,
) -> Optimizer:
    """Adam updates (``beta1``, ``beta2``, ``epsilon``)."""
    return _build(
        model,
        AdamOptimizer(alpha=base_learning_rate, **kwargs),
        max_gradient_norm=max_gradient_norm,
        allow_lr_injection=allow_lr_injection,
    )


class FtrlOptimizer(Optimizer):
    """FTRL-proximal (``Ftrl``; ``SparseFtrl`` for sparse gradients) with a ``<param>_ftrl_nz``
    accumulator of shape ``param.shape + [2]`` per parameter."""

    def __init__(
        self,
        alpha: float = 0.01,
        beta: float = 1e-4,
        lambda1: float = 0,
        lambda2: float = 0,
        sparse_dedup_aggregator: str | None = None,
        engine: str | None = "",
    ):
        super().__init__()
        self.alpha, self.beta, self.lambda1, self.lambda2 = alpha, beta, lambda1, lambda2
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.engine = engine or ""

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo) -> None:
        param, grad = param_info.blob, param_info.grad
        if self.alpha <= 0:
            return
        nz = param_init_net.ConstantFill([param], str(param) + "_ftrl_nz", extra_shape=[2], value=0.0)
        self._aux_params.local.append(nz)
        hyper = {"alpha": self.alpha, "beta": self.beta, "lambda1": self.lambda1, "lambda2": self.lambda2}
        if isinstance(grad, core.GradientSlice):
            grad = self.dedup(net, self.sparse_dedup_aggregator, grad)
            net.SparseFtrl([param, nz, grad.indices, grad.values], [param, nz], engine=self.engine, **hyper)
        else:
            net.Ftrl([param, nz, grad], [param, nz], engine=self.engine, **hyper)

    def scale_learning_rate(self, scale: float) -> None:
        self.alpha *= scale


def build_ftrl(model: Any, engine: str | None = "SIMD", **kwargs: Any) -> Optimizer:
    """FTRL updates for every parameter (``alpha``, ``beta``, ``lambda1``, ``lambda2``); Caffe2's
    SIMD engine is the same numpy kernel here.

    >>> from caffe2.python import brew, model_helper, optimizer, workspace
    >>> m = model_helper.ModelHelper(name="ftrl_doc")
    >>> fc = brew.fc(m, "x", "y", dim_in=2, dim_out=1)
    >>> m.AddGradientOperators([m.net.AveragedLoss(fc, "loss")])  # doctest: +ELLIPSIS
    {...}
    >>> opt = optimizer.build_ftrl(m, alpha=0.1, beta=1.0)
    >>> sorted(str(p) for p in opt.get_auxiliary_parameters().local)
    ['y_b_ftrl_nz', 'y_w_ftrl_nz']
    """
    return _build(model, FtrlOptimizer(engine=engine, **kwargs))


class RmsPropOptimizer(Optimizer):
    """RMSProp: ``RmsProp([grad, mean_squares, mom, ONE])`` turns the gradient into the step
    ``mom``, then ``MomentumSGDUpdate`` (momentum 0) applies ``lr * step``; dense gradients only.

    >>> from caffe2.python import brew, model_helper
    >>> m = model_helper.ModelHelper(name="rms_doc")
    >>> fc = brew.fc(m, "x", "y", dim_in=2, dim_out=1)
    >>> m.AddGradientOperators([m.net.AveragedLoss(fc, "loss")])  # doctest: +ELLIPSIS
    {...}
    >>> opt = build_rms_prop(m, base_learning_rate=0.1, epsilon=0.1)
    >>> [op.type for op in m.net.Proto().op][-2:]
    ['RmsProp', 'MomentumSGDUpdate']
    """

    def __init__(
        self,
        alpha: float = 0.01,
        decay: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-5,
        policy: str = "fixed",
        engine: str = "",
        **kwargs: Any,
    ):
        super().__init__()
        self.alpha, self.decay, self.momentum, self.epsilon = alpha, decay, momentum, epsilon
        self.policy = policy
        self.engine = engine
        self.init_kwargs = kwargs

    def _run(self, net: Any, param_init_net: Any, param_info: ParameterInfo) -> None:
        param, grad = param_info.blob, param_info.grad
        if self.alpha <= 0:
            raise ValueError(f"Expect positive base learning rate, got {self.alpha}")
        if isinstance(grad, core.GradientSlice):
            raise ValueError(f"RmsPropOptimizer does not support sparse gradients (parameter {param})")
        one = _one(param_init_net, with_node_name=False)
        lr, _ = self.build_lr(
            net, param_init_net, base_learning_rate=-self.alpha, policy=self.policy, **self.init_kwargs
        )
        step = param_init_net.ConstantFill([param], str(param) + "_grad_o", value=0.0)
        ms = param_init_net.ConstantFill([param], str(param) + "_mean_squares", value=0.0)
        mom = param_init_net.ConstantFill([param], str(param) + "_momentum", value=0.0)
        self._aux_params.local.extend([ms, mom])
        net.RmsProp(
            [grad, ms, mom, one],
            [step, ms, mom],
            decay=self.decay,
            momentum=self.momentum,
            epsilon=self.epsilon,
            engine=self.engine,
        )
        net.MomentumSGDUpdate([step, mom, lr, param], [step, mom, param])

    def scale_learning_rate(self, scale: float) -> None:
        self.alpha *= scale


def build_rms_prop(
    model: Any,
    base_learning_rate: float,
    max_gradient_norm: float | None = None,
    allow_lr_injection: bool = False,
    **kwargs: Any,
) -> Optimizer:
    """RMSProp updates for every parameter (``decay``, ``momentum``, ``epsilon``); see :class:`RmsPropOptimizer`."""
    return _build(
        model,
        RmsPropOptimizer(alpha=base_learning_rate, **kwargs),
        max_gradient_norm=max_gradient_norm,
        allow_lr_injection=allow_lr_injection,
    )


def get_lr_injection() -> np.ndarray:
    """The current ``lr_injection`` multiplier of every learning rate (built with ``allow_lr_injection=True``).

    >>> set_lr_injection(0.5)
    >>> float(get_lr_injection()[0])
    0.5
    """
    return workspace.FetchBlob(_LEARNING_RATE_INJECTION)


def set_lr_injection(lr_injection_value: float) -> None:
    """Set the ``lr_injection`` multiplier the next runs of the net apply to every learning rate."""
    workspace.FeedBlob(_LEARNING_RATE_INJECTION, np.array([float(lr_injection_value)], dtype=np.float32))


class YellowFinOptimizer(Optimizer):
    """YellowFin (https://arxiv.org/abs/1706.03471): momentum SGD whose learning rate and momentum
    are tuned per parameter by the ``YellowFin`` op; its state blobs are ``<param>_moment``,
    ``_lr_avg``, ``_mu_avg``, ``_curv_win``, ``_g_avg``, ``_g2_avg`` and ``_scalars_memory``.
    Dense gradients only.

    >>> from caffe2.python import brew, model_helper
    >>> m = model_helper.ModelHelper(name="yf_doc")
    >>> fc = brew.fc(m, "x", "y", dim_in=2, dim_out=1)
    >>> m.AddGradientOperators([m.net.AveragedLoss(fc, "loss")])  # doctest: +ELLIPSIS
    {...}
    >>> opt = build_yellowfin(m, base_learning_rate=0.1)
    >>> [op.type for op in m.net.Proto().op][-3:]
    ['AtomicIter', 'YellowFin', 'YellowFin']
    """

    _STATE = ("moment", "lr_avg", "mu_avg", "curv_win", "g_avg", "g2_avg", "scalars_memory")

    def __init__(
        self,
        alpha: float = 0.1,
        mu: float = 0.0,
        beta: float = 0.999,
        curv_win_width: int = 20,
        zero_debias: bool = True,
        epsilon: float = 0.1**6,
        policy: str = "fixed",
        sparse_dedup_aggregator: str | None = None,
        **kwargs: Any,
    ):
        super().__init__()
        self.alpha, self.mu, self.beta, self.epsilon = alpha, mu, beta, epsilon
        self.curv_win_width = curv_win_width
        self.zero_debias = zero_debias
        self.policy = policy
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.init_kwargs = kwargs

    def _state(self, param_init_net: Any, param: Any) -> list[Any]:
        """The seven state blobs, in the op's input order."""
        name = str(param)
        scalar = {"lr_avg": self.alpha, "mu_avg": self.mu}
        sizes = {"curv_win": self.curv_win_width, "scalars_memory": _YELLOWFIN_SCALARS}
        state = []
        for key in self._STATE:
            if key in scalar:
                blob = param_init_net.ConstantFill([], f"{name}_{key}", shape=[1], value=float(scalar[key]))
            elif key in sizes:
                blob = param_init_net.ConstantFill([], f"{name}_{key}", shape=[sizes[key]], value=0.0)
            else:
                blob = param_init_net.ConstantFill([param], f"{name}_{key}", value=0.0)
            state.append(blob)
        return state

    def _run(self, net: Any, param_init_net: Any, param_info: Any) -> None:
        param, grad = param_info.blob, param_info.grad
        if self.alpha <= 0:
            raise ValueError(f"Expect positive base learning rate, got {self.alpha}")
        if isinstance(grad, core.GradientSlice):
            raise ValueError(f"YellowFin does not support sparse gradients (parameter {param})")
        state = self._state(param_init_net, param)
        iteration = utils.BuildUniqueMutexIter(param_init_net, net)
        self._aux_params.shared.append(iteration)
        self._aux_params.local.extend(state)
        in_out = [param, *state]
        net.YellowFin(
            [*in_out, grad, iteration],
            in_out,
            beta=self.beta,
            epsilon=self.epsilon,
            curv_win_width=self.curv_win_width,
            zero_debias=self.zero_debias,
        )

    def scale_learning_rate(self, scale: float) -> None:
        self.alpha *= scale


def build_yellowfin(model: Any, base_learning_rate: float = 0.1, **kwargs: Any) -> Optimizer:
    """YellowFin updates for every parameter (``mu``, ``beta``, ``curv_win_width``, ``zero_debias``,
    ``epsilon``); see :class:`YellowFinOptimizer`."""
    return _build(model, YellowFinOptimizer(alpha=base_learning_rate, **kwargs))
