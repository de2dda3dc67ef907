"""Caffe2's predictor exporter: a model saved as one database holding a MetaNetDef (its nets)
and its parameters, and loaded back ready to run.

    >>> import os, tempfile, numpy as np
    >>> from caffe2.python import brew, model_helper, workspace
    >>> import caffe2.python.predictor.predictor_exporter as pe
    >>> m = model_helper.ModelHelper(name="pe_doc")
    >>> _ = brew.fc(m, "data", "y", dim_in=3, dim_out=2)
    >>> _ = workspace.RunNetOnce(m.param_init_net); _ = workspace.FeedBlob("data", np.ones((1, 3), np.float32))
    >>> _ = workspace.RunNetOnce(m.net)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.minidb")
    >>> meta = pe.PredictorExportMeta(predict_net=m.net.Proto(), parameters=[str(p) for p in m.params],
    ...                               inputs=["data"], outputs=["y"])
    >>> expected = workspace.FetchBlob("y"); pe.save_to_db("minidb", path, meta)
    >>> _ = workspace.ResetWorkspace()
    >>> net = pe.prepare_prediction_net(path, "minidb")
    >>> _ = workspace.FeedBlob("data", np.ones((1, 3), np.float32)); _ = workspace.RunNet(net)
    >>> bool(np.allclose(workspace.FetchBlob("y"), expected))
    True
"""

from __future__ import annotations

import collections
from typing import Any

from caffe2.proto import caffe2_pb2, metanet_pb2
from caffe2.python import core, workspace
from caffe2.python.predictor import predictor_py_utils as utils
from caffe2.python.predictor import serde
from caffe2.python.predictor_constants import predictor_constants

__all__ = [
    "PredictorExportMeta",
    "get_meta_net_def",
    "load_from_db",
    "prepare_prediction_net",
    "save_to_db",
    "set_model_info",
]

_FIELDS = (
    "predict_net, parameters, inputs, outputs, shapes, name, extra_init_net, global_init_net, net_type, "
    "num_workers, trainer_prefix"
)


class PredictorExportMeta(collections.namedtuple("PredictorExportMeta", _FIELDS)):
    """What to export: the predict net, its parameters, inputs and outputs (and optional shapes, name...)."""

    def __new__(
        cls,
        predict_net: Any,
        parameters: Any,
        inputs: Any,
        outputs: Any,
        shapes: Any = None,
        name: str = "",
        extra_init_net: Any = None,
        global_init_net: Any = None,
        net_type: Any = None,
        num_workers: Any = None,
        trainer_prefix: Any = None,
    ) -> PredictorExportMeta:
        inputs = [str(i) for i in inputs]
        outputs = [str(o) for o in outputs]
        if len(set(inputs)) != len(inputs):
            raise ValueError("All inputs to the predictor should be unique")
        parameters = [str(p) for p in parameters]
        both = set(parameters) & set(inputs)
        if both:
            raise ValueError(f"Parameters and inputs are required to be disjoint. Cannot be both: {both}")
        both = set(parameters) & set(outputs)
        if both:
            raise ValueError(f"Parameters and outputs are required to be disjoint. Cannot be both: {both}")
        if predict_net is not None:
            if isinstance(predict_net, (core.Net, core.Plan)):
                predict_net = predict_net.Proto()
            if not isinstance(predict_net, (caffe2_pb2.NetDef, caffe2_pb2.PlanDef)):
                raise TypeError(f"predict_net must be a NetDef or a PlanDef, got {type(predict_net).__name__}")
        return super().__new__(
            cls,
            predict_net,
            parameters,
            inputs,
            outputs,
            shapes or {},
            name,
            extra_init_net,
            global_init_net,
            net_type,
            num_workers,
            trainer_prefix,
        )

    def inputs_name(self) -> str:
        return utils.get_comp_name(predictor_constants.INPUTS_BLOB_TYPE, self.name)

    def outputs_name(self) -> str:
        return utils.get_comp_name(predictor_constants.OUTPUTS_BLOB_TYPE, self.name)

    def parameters_name(self) -> str:
        return utils.get_comp_name(predictor_constants.PARAMETERS_BLOB_TYPE_FULL, self.name)

    def global_init_name(self) -> str:
        return utils.get_comp_name(predictor_constants.GLOBAL_INIT_NET_TYPE, self.name)

    def predict_init_name(self) -> str:
        return utils.get_comp_name(predictor_constants.PREDICT_INIT_NET_TYPE, self.name)

    def predict_net_name(self) -> str:
        return utils.get_comp_name(predictor_constants.PREDICT_NET_TYPE, self.name)


def prepare_prediction_net(filename: str, db_type: str, device_option: Any = None) -> core.Net:
    """Load an exported model into the current workspace; returns its predict net, created."""
    meta = load_from_db(filename, db_type, device_option)
    workspace.RunNetOnce(utils.GetNet(meta, predictor_constants.GLOBAL_INIT_NET_TYPE))
    workspace.RunNetOnce(utils.GetNet(meta, predictor_constants.PREDICT_INIT_NET_TYPE))
    predict_net = core.Net(utils.GetNet(meta, predictor_constants.PREDICT_NET_TYPE))
    workspace.CreateNet(predict_net)
    return predict_net


def _global_init_net(meta: PredictorExportMeta, db_type: Any) -> Any:
    net = core.Net("global-init")
    net.Load([predictor_constants.PREDICTOR_DBREADER], meta.parameters)
    net.Proto().external_input.extend([predictor_constants.PREDICTOR_DBREADER])
    net.Proto().external_output.extend(meta.parameters)
    if meta.global_init_net:
        net.AppendNet(meta.global_init_net)
    utils.AddModelIdArg(meta, net.Proto())
    return net.Proto()


def get_meta_net_def(predictor_export_meta: PredictorExportMeta, ws: Any = None, db_type: Any = None) -> Any:
    """The MetaNetDef of an export: predict-init, global-init and predict nets, parameter/input/output lists."""
    pm = predictor_export_meta
    meta = metanet_pb2.MetaNetDef()
    utils.AddNet(meta, pm.predict_init_name(), utils.create_predict_init_net(ws, pm))
    utils.AddNet(meta, pm.global_init_name(), _global_init_net(pm, db_type))
    utils.AddNet(meta, pm.predict_net_name(), utils.create_predict_net(pm))
    utils.AddBlobs(meta, pm.parameters_name(), pm.parameters)
    utils.AddBlobs(meta, pm.inputs_name(), pm.inputs)
    utils.AddBlobs(meta, pm.outputs_name(), pm.outputs)
    return meta


def set_model_info(meta_net_def: Any, project_str: str, model_class_str: str, version: Any) -> None:
    """Record where the model comes from in the MetaNetDef."""
    meta_net_def.modelInfo.project = project_str
    meta_net_def.modelInfo.modelClass = model_class_str
    meta_net_def.modelInfo.version = str(version)


def save_to_db(
    db_type: str,
    db_destination: str,
    predictor_export_meta: PredictorExportMeta,
    use_ideep: bool = False,
    *args: Any,
    **kwargs: Any,
) -> None:
    """Write the MetaNetDef and the parameters (from the current workspace) to one database."""
    meta = get_meta_net_def(predictor_export_meta, db_type=db_type)
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU)):
        workspace.FeedBlob(predictor_constants.META_NET_DEF, serde.serialize_protobuf_struct(meta))
    blobs = [predictor_constants.META_NET_DEF] + predictor_export_meta.parameters
    op = core.CreateOperator(
        "Save",
        blobs,
        [],
        device_option=core.DeviceOption(caffe2_pb2.CPU),
        absolute_path=True,
        db=db_destination,
        db_type=db_type,
        **kwargs,
    )
    workspace.RunOperatorOnce(op)


def load_from_db(filename: str, db_type: str, device_option: Any = None, *args: Any, **kwargs: Any) -> Any:
    """Open the database (as the ``!!PREDICTOR_DBREADER`` blob) and return its MetaNetDef."""
    create_db = core.CreateOperator(
        "CreateDB", [], [core.BlobReference(predictor_constants.PREDICTOR_DBREADER)], db=filename, db_type=db_type
    )
    workspace.RunOperatorOnce(create_db)
    load_meta = core.CreateOperator(
        "Load",
        [core.BlobReference(predictor_constants.PREDICTOR_DBREADER)],
        [core.BlobReference(predictor_constants.META_NET_DEF)],
    )
    workspace.RunOperatorOnce(load_meta)
    blob = workspace.FetchBlob(predictor_constants.META_NET_DEF)
    meta = serde.deserialize_protobuf_struct(
        blob if isinstance(blob, bytes) else str(blob).encode("utf-8"), metanet_pb2.MetaNetDef
    )
    if device_option is None:
        from caffe2.python import scope

        device_option = scope.CurrentDeviceScope()
    if device_option is not None:
        for kv in meta.nets:
            for op in kv.value.op:
                op.device_option.CopyFrom(device_option)
    return meta
