"""Caffe2's parameter initializers (``caffe2.python.modeling.initializers``).

An initializer adds the fill op of one parameter to the init net::

    >>> from caffe2.python import core
    >>> from caffe2.python.modeling.initializers import Initializer
    >>> init = core.Net("init_doc")
    >>> info = Initializer("XavierFill").create_param("w", init, shape=[4, 3])
    >>> str(info.blob), init.Proto().op[0].type
    ('w', 'XavierFill')
"""

from __future__ import annotations

from typing import Any

from caffe2.python.modeling.parameter_info import ParameterInfo

__all__ = [
    "ExternalInitializer",
    "Initializer",
    "PseudoFP16Initializer",
    "ReversePseudoFP16Initializer",
    "create_xavier_fill_initializer",
    "update_initializer",
]


class Initializer:
    """Fills a parameter with the op ``operator_name`` and its keyword arguments."""

    def __init__(self, operator_name: str | None = None, **kwargs: Any):
        self.operator_name = operator_name
        self.operator_kwargs = kwargs

    def update(self, operator_name: str, kwargs: dict[str, Any]) -> None:
        if self.operator_name is not None:
            raise Exception("Operator name overwrites are not allowed")
        self.operator_name = operator_name
        self.operator_kwargs = kwargs

    def create_param(self, param_name: Any, init_net: Any, shape: Any) -> ParameterInfo:
        param = getattr(init_net, self.operator_name)([], param_name, shape=shape, **self.operator_kwargs)
        return ParameterInfo(param_id=None, param=param, shape=shape)


class ExternalInitializer:
    """A parameter someone else initializes (``init_params=False`` models): no op is added."""

    def create_param(self, param_name: Any, init_net: Any, shape: Any) -> ParameterInfo:
        from caffe2.python import core

        if isinstance(param_name, core.BlobReference):
            param = core.BlobReference(str(param_name), init_net)
        elif isinstance(param_name, str):
            param = core.ScopedBlobReference(param_name, init_net)
        else:
            raise TypeError("Unsupported type for param_name")
        return ParameterInfo(param_id=None, param=param, shape=shape)


class PseudoFP16Initializer(Initializer):
    """An fp32 master copy filled by the op, plus its fp16 copy (``FloatToHalf``) as the parameter."""

    def create_param(self, param_name: Any, init_net: Any, shape: Any) -> ParameterInfo:
        from caffe2.python import core

        master = getattr(init_net, self.operator_name)([], param_name + "_fp32", shape=shape, **self.operator_kwargs)
        param = init_net.FloatToHalf(master, param_name)
        return ParameterInfo(param_id=None, param=param, shape=shape, blob_copy={core.DataType.FLOAT: master})


class ReversePseudoFP16Initializer(Initializer):
    """An fp32 parameter plus an fp16 copy (``FloatToHalf``) kept beside it."""

    def create_param(self, param_name: Any, init_net: Any, shape: Any) -> ParameterInfo:
        from caffe2.python import core

        param = getattr(init_net, self.operator_name)([], param_name, shape=shape, **self.operator_kwargs)
        half = init_net.FloatToHalf(param, param_name + "_fp16")
        return ParameterInfo(param_id=None, param=param, shape=shape, blob_copy={core.DataType.FLOAT16: half})


def update_initializer(
    initializer_class: Any, operator_name_and_kwargs: Any, default_operator_name_and_kwargs: Any
) -> Any:
    """An initializer of ``initializer_class`` (default :class:`Initializer`) for the given
    ``(op name, kwargs)``, or for the default pair when none is given."""
    name, kwargs = operator_name_and_kwargs or default_operator_name_and_kwargs
    cls = initializer_class if initializer_class is not None else Initializer
    return cls(name, **kwargs)


def create_xavier_fill_initializer() -> Initializer:
    return Initializer("XavierFill")


def create_constant_fill_initializer(value: float | None = None) -> Initializer:
    """A ``ConstantFill`` initializer, with ``value`` when one is given (Caffe2's helper).

    >>> create_constant_fill_initializer(0.5).operator_kwargs
    {'value': 0.5}
    """
    return Initializer("ConstantFill", value=value) if value is not None else Initializer("ConstantFill")


#: Caffe2's names for the two pseudo-fp16 initializers before it renamed them (both spellings stay importable)
pFP16Initializer = PseudoFP16Initializer
ReversepFP16Initializer = ReversePseudoFP16Initializer
__all__ += ["create_constant_fill_initializer", "pFP16Initializer", "ReversepFP16Initializer"]
