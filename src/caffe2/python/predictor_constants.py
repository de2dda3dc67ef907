"""Caffe2's predictor constants (the defaults of ``predictor_consts.proto``).

>>> from caffe2.python.predictor_constants import predictor_constants
>>> predictor_constants.META_NET_DEF, predictor_constants.PREDICT_NET_TYPE
('!!META_NET_DEF', 'predict')
"""

from __future__ import annotations

__all__ = ["PredictorConsts", "predictor_constants"]


class PredictorConsts:
    """Blob, net and type names an exported predictor uses (Caffe2's PredictorConsts defaults)."""

    META_NET_DEF = "!!META_NET_DEF"
    PREDICTOR_DBREADER = "!!PREDICTOR_DBREADER"
    PARAMETERS_BLOB_TYPE_FULL = "full_parameters"
    PARAMETERS_BLOB_TYPE_INCREMENTAL = "incremental_parameters"
    INPUTS_BLOB_TYPE = "inputs"
    OUTPUTS_BLOB_TYPE = "outputs"
    GLOBAL_INIT_NET_TYPE = "global_init"
    PREDICT_INIT_NET_TYPE = "predict_init"
    PREDICT_NET_TYPE = "predict"
    SINGLE_PREDICTOR = "SINGLE_PREDICTOR"
    MULTI_PREDICTOR = "MULTI_PREDICTOR"
    TRAIN_INIT_PLAN_TYPE = "train_init_plan"
    TRAIN_PLAN_TYPE = "train_plan"
    SHAPE_INFO_BLOB = "SHAPE_INFO_BLOB"
    DEFERRED_BLOB_READER = "__DEFERRED_BLOB_READER__"


predictor_constants = PredictorConsts()
