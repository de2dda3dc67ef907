"""Caffe2's ``ModelHelper``: a training net and its parameter-init net, the parameters, and
their gradients (asyncnet's autodiff, through ``core.Net.AddGradientOperators``).

    >>> from caffe2.python import brew, model_helper
    >>> model = model_helper.ModelHelper(name="mh_doc")
    >>> fc = brew.fc(model, "data", "fc", dim_in=4, dim_out=2)
    >>> [str(p) for p in model.params], [op.type for op in model.param_init_net.Proto().op]
    (['fc_w', 'fc_b'], ['XavierFill', 'ConstantFill'])
"""

from __future__ import annotations

from typing import Any

from caffe2.python import core, scope
from caffe2.python.modeling.parameter_info import ParameterInfo, ParameterTags
from caffe2.python.optimizer_context import DEFAULT_OPTIM, OptimizerContext

__all__ = ["ExtractPredictorNet", "ModelHelper"]


def _context_optimizer(tags: Any) -> Any:
    """The optimizer ``UseOptimizer`` gives a new parameter: the one of its last tag that has
    one, else the ``DEFAULT`` one, else None."""
    ctx = OptimizerContext.current()
    found = None
    for tag in [] if tags is None else [tags] if isinstance(tags, str) else list(tags):
        if ctx.has_optimizer(tag):
            found = ctx.get_optimizer(tag)
    if found is None and ctx.has_optimizer(DEFAULT_OPTIM):
        found = ctx.get_optimizer(DEFAULT_OPTIM)
    return found


class ModelHelper:
    """A model: ``net`` (the training net), ``param_init_net``, ``params`` and, after
    :meth:`AddGradientOperators`, ``param_to_grad``. Op types not defined here are methods of
    ``net`` (``model.Relu(...)`` is ``model.net.Relu(...)``)."""

    def __init__(
        self,
        name: str | None = None,
        init_params: bool = True,
        allow_not_known_ops: bool = True,
        skip_sparse_optim: bool = False,
        param_model: ModelHelper | None = None,
        arg_scope: dict[str, Any] | None = None,
    ):
        self.name = name or "model"
        self.net = core.Net(self.name)
        if param_model is not None:
            self.param_init_net = param_model.param_init_net
            self.param_to_grad = param_model.param_to_grad
            self.params = param_model.params
            self._parameters_info = param_model._parameters_info
            self._computed_params = param_model._computed_params
        else:
            self.param_init_net = core.Net(self.name + "_init")
            self.param_to_grad: dict[Any, Any] = {}
            self.params: list[Any] = []
            self._parameters_info: dict[str, ParameterInfo] = {}
            self._computed_params: list[Any] = []
        self._devices: list[Any] = []
        self.gradient_ops_added = False
        self.init_params = init_params
        self.allow_not_known_ops = allow_not_known_ops
        self.skip_sparse_optim = skip_sparse_optim
        self.weights: list[Any] = []
        self.biases: list[Any] = []
        self.grad_map: dict[str, Any] = {}
        self._arg_scope: dict[str, Any] = {"order": "NCHW", "use_cudnn": True, "cudnn_exhaustive_search": False}
        if arg_scope is not None:
            self._arg_scope.update(arg_scope)

    @property
    def arg_scope(self) -> dict[str, Any]:
        return self._arg_scope

    def get_name(self) -> str:
        return self.name

    # -- parameters ------------------------------------------------------------------------------
    def create_param(self, param_name: Any, shape: Any, initializer: Any, tags: Any = None) -> Any:
        """The blob of parameter ``param_name`` (scoped), filled by ``initializer`` in the init net
        (made once: a second call with the same name and shape returns the same blob)."""
        name = (
            str(param_name)
            if isinstance(param_name, core.BlobReference)
            else scope.CurrentNameScope() + str(param_name)
        )
        if name in self._parameters_info:
            if self._parameters_info[name].shape != shape:
                raise ValueError(
                    f"parameter {name!r} exists with shape {self._parameters_info[name].shape}, asked for {shape}"
                )
            return self._parameters_info[name].blob
        info = initializer.create_param(param_name=core.BlobReference(name), init_net=self.param_init_net, shape=shape)
        info.optimizer = _context_optimizer(tags)
        self._parameters_info[name] = info
        self.AddParameter(info.blob, tags)
        return info.blob

    def get_param_info(self, param: Any) -> ParameterInfo | None:
        return self._parameters_info.get(str(param))

    def add_param_DEPRECATED(self, param: Any, key: Any = None, shape: Any = None, length: Any = None) -> Any:
        self.AddParameter(param)
        return param

    def AddParameter(self, param: Any, tags: Any = None) -> None:
        if not isinstance(param, core.BlobReference):
            raise TypeError(f"a parameter is a BlobReference, got {type(param).__name__}")
        tags = [] if tags is None else [tags] if isinstance(tags, str) else list(tags)
        if ParameterTags.COMPUTED_PARAM in tags:
            self._computed_params.append(param)
        else:
            self.params.append(param)
        if ParameterTags.WEIGHT in tags:
            self.weights.append(param)
        if ParameterTags.BIAS in tags:
            self.biases.append(param)

    def GetParams(self, namescope: str | None = None, top_scope: bool = False) -> list[Any]:
        """The parameters under ``namescope`` (the current name scope by default)."""
        if namescope is None:
            namescope = scope.CurrentNameScope()
        elif namescope and not namescope.endswith(scope._NAMESCOPE_SEPARATOR):
            namescope += scope._NAMESCOPE_SEPARATOR
        if namescope == "":
            return self.params[:]
        return [p for p in self.params if p.GetNameScope().startswith(namescope)]

    def GetComputedParams(self, namescope: str | None = None) -> list[Any]:
        namescope = scope.CurrentNameScope() if namescope is None else namescope
        return [p for p in self._computed_params if str(p).startswith(namescope)]

    def GetAllParams(self, namescope: str | None = None) -> list[Any]:
        return self.GetParams(namescope) + self.GetComputedParams(namescope)

    def get_param_to_grad(self, params: Any) -> dict[Any, Any]:
        return {p: self.grad_map[str(p)] for p in params if str(p) in self.grad_map}

    def GetOptimizationParamInfo(self, params: Any = None) -> list[ParameterInfo]:
        """The ParameterInfo of every parameter with a gradient (sparse ones left out with ``skip_sparse_optim``)."""
        if not self.gradient_ops_added:
            raise RuntimeError("Need to call AddGradientOperators first")
        param_to_grad = self.get_param_to_grad(params) if params else self.param_to_grad
        return [
            self.get_param_info(p)
            for p, g in param_to_grad.items()
            if not self.skip_sparse_optim or not isinstance(g, core.GradientSlice)
        ]

    # -- nets ------------------------------------------------------------------------------------
    def _Validate(self) -> list[str]:
        """The parameters registered more than once, sorted."""
        names = sorted(str(p) for p in self.params)
        return sorted({a for a, b in zip(names, names[1:]) if a == b})

    def Validate(self) -> None:
        """Assert that no parameter is registered twice (Caffe2's duplicate-parameter check)."""
        dupes = self._Validate()
        if dupes:
            raise AssertionError(f"Duplicate params: {dupes}")

    def AddGradientOperators(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``net.AddGradientOperators(losses)``, once; fills ``param_to_grad``."""
        if self.gradient_ops_added:
            raise RuntimeError("You cannot run AddGradientOperators twice.")
        self.Validate()
        self.gradient_ops_added = True
        self.grad_map = self.net.AddGradientOperators(*args, **kwargs)
        self.param_to_grad = self.get_param_to_grad(self.params)
        for param, grad in self.param_to_grad.items():
            info = self.get_param_info(param)
            if info is not None:
                info.grad = grad
            else:
                self._parameters_info[str(param)] = ParameterInfo(param_id=None, param=param, grad=grad)
        return self.grad_map

    def Proto(self) -> Any:
        return self.net.Proto()

    def InitProto(self) -> Any:
        return self.param_init_net.Proto()

    def RunAllOnGPU(self, *args: Any, **kwargs: Any) -> None:
        self.param_init_net.RunAllOnGPU(*args, **kwargs)
        self.net.RunAllOnGPU(*args, **kwargs)

    def CreateDB(self, blob_out: Any, db: str, db_type: str, **kwargs: Any) -> Any:
        return self.param_init_net.CreateDB([], blob_out, db=db, db_type=db_type, **kwargs)

    def TensorProtosDBInput(
        self, unused_blob_in: Any, blob_out: Any, batch_size: int, db: str, db_type: str, **kwargs: Any
    ) -> Any:
        dbreader_name = "dbreader_" + db
        dbreader = self.param_init_net.CreateDB([], dbreader_name, db=db, db_type=db_type)
        return self.net.TensorProtosDBInput(dbreader, blob_out, batch_size=batch_size)

    def GetDevices(self) -> list[Any]:
        return self._devices

    def __getattr__(self, op_type: str) -> Any:
        if op_type.startswith("_"):
            raise AttributeError(op_type)
        if not core.IsOperator(op_type):
            raise AttributeError(f"Method {op_type} is not a registered operator.")
        return getattr(self.net, op_type)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self.net)))


def ExtractPredictorNet(
    net_proto: Any,
    input_blobs: Any,
    output_blobs: Any,
    device: Any = None,
    renames: dict[str, str] | None = None,
    disabled_inputs: Any = None,
) -> tuple[Any, list[Any]]:
    """The ops of ``net_proto`` needed to compute ``output_blobs`` from ``input_blobs`` (gradient
    and training-only ops left out), as a new net; returns (net, the parameters it reads)."""
    renames = renames or {}
    inputs = {str(b) for b in input_blobs}
    outputs = [str(b) for b in output_blobs]
    ops = [op for op in net_proto.op if not op.is_gradient_op and not op.type.endswith("Gradient")]
    needed, keep = set(outputs), []
    for op in reversed(ops):
        if any(o in needed for o in op.output) and not set(op.output) <= inputs:
            keep.append(op)
            needed.update(i for i in op.input if i not in inputs)
    keep.reverse()
    produced = {o for op in keep for o in op.output}
    params = sorted({i for op in keep for i in op.input if i not in produced and i not in inputs})
    net = core.Net(net_proto.name + "_predict")
    for op in keep:
        new = net.Proto().op.add()
        new.CopyFrom(op)
        for field in (new.input, new.output):
            names = [renames.get(b, b) for b in field]
            del field[:]
            field.extend(names)
        if device is not None:
            new.device_option.CopyFrom(device)
    net.Proto().external_input.extend([renames.get(b, b) for b in sorted(inputs)] + params)
    net.Proto().external_output.extend(renames.get(b, b) for b in outputs)
    return net, [core.BlobReference(p) for p in params]
