"""Helpers of the predictor exporter (Caffe2's ``predictor_py_utils``): MetaNetDef map fields,
and the predict and predict-init nets of an export."""

from __future__ import annotations

from typing import Any

from caffe2.python import core, scope, workspace

__all__ = [
    "AddBlobs",
    "AddModelIdArg",
    "AddNet",
    "AddPlan",
    "GetApplicationSpecificInfo",
    "GetArgumentByName",
    "GetBlobs",
    "GetNet",
    "GetPlan",
    "create_predict_init_net",
    "create_predict_net",
    "get_comp_name",
]


def create_predict_net(predictor_export_meta: Any) -> Any:
    """The predict net of an export: the model's ops, inputs and parameters as external inputs."""
    pm = predictor_export_meta
    net = core.Net(pm.predict_net.name or "predict")
    net.Proto().op.extend(pm.predict_net.op)
    net.Proto().partition_info.extend(pm.predict_net.partition_info)
    net.Proto().external_input.extend(pm.inputs + pm.parameters)
    net.Proto().external_output.extend(pm.outputs)
    net.Proto().arg.extend(pm.predict_net.arg)
    if pm.net_type is not None:
        net.Proto().type = pm.net_type
    if pm.num_workers is not None:
        net.Proto().num_workers = pm.num_workers
    return net.Proto()


def create_predict_init_net(ws: Any, predictor_export_meta: Any) -> Any:
    """A net zero-filling the inputs and outputs, shaped as ``shapes`` says or as the workspace holds them."""
    pm = predictor_export_meta
    net = core.Net("predict-init")

    def zero_fill(blob: str) -> None:
        shape = pm.shapes.get(blob)
        if shape is None:
            if not workspace.HasBlob(blob):
                raise KeyError(f"{blob} not in workspace but needed for shape: {workspace.Blobs()}")
            shape = workspace.FetchBlob(blob).shape
        with scope.EmptyDeviceScope():
            net.ConstantFill([], blob, shape=list(shape), value=0.0)

    external = pm.inputs + pm.outputs
    for blob in external:
        zero_fill(blob)
    net.Proto().external_input.extend(external)
    if pm.extra_init_net:
        net.AppendNet(pm.extra_init_net)
    AddModelIdArg(pm, net.Proto())
    return net.Proto()


def get_comp_name(string: str, name: str) -> str:
    return f"{string}_{name}" if name else string


def _ProtoMapGet(field: Any, key: str) -> Any:
    for v in field:
        if v.key == key:
            return v.value
    return None


def GetPlan(meta_net_def: Any, key: str) -> Any:
    return _ProtoMapGet(meta_net_def.plans, key)


def GetBlobs(meta_net_def: Any, key: str) -> Any:
    blobs = _ProtoMapGet(meta_net_def.blobs, key)
    return [] if blobs is None else blobs


def GetNet(meta_net_def: Any, key: str) -> Any:
    return _ProtoMapGet(meta_net_def.nets, key)


def GetApplicationSpecificInfo(meta_net_def: Any, key: str) -> Any:
    return _ProtoMapGet(meta_net_def.applicationSpecificInfo, key)


def AddBlobs(meta_net_def: Any, blob_name: str, blob_def: Any) -> None:
    blobs = _ProtoMapGet(meta_net_def.blobs, blob_name)
    if blobs is None:
        entry = meta_net_def.blobs.add()
        entry.key = blob_name
        blobs = entry.value
    for blob in blob_def:
        blobs.append(blob)


def AddPlan(meta_net_def: Any, plan_name: str, plan_def: Any) -> None:
    meta_net_def.plans.add(key=plan_name, value=plan_def)


def AddNet(meta_net_def: Any, net_name: str, net_def: Any) -> None:
    meta_net_def.nets.add(key=net_name, value=net_def)


def GetArgumentByName(net_def: Any, arg_name: str) -> Any:
    for arg in net_def.arg:
        if arg.name == arg_name:
            return arg
    return None


def AddModelIdArg(meta_net_def: Any, net_def: Any) -> None:
    """Copy the integer ``model_id`` argument of the predict net (if any) onto ``net_def``."""
    model_id = GetArgumentByName(meta_net_def.predict_net, "model_id")
    if model_id is None:
        return
    old = GetArgumentByName(net_def, "model_id")
    if old is not None:
        old.i = model_id.i
        return
    net_def.arg.add(name="model_id", i=model_id.i)
