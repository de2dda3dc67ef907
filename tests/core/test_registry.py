import pytest

import asyncnet as an
from asyncnet import NetDefinitionError, OperatorDef
from asyncnet.core.registry import Arg, get_schema, register_op, validate_op


def test_unknown_type_suggests_near_names():
    with pytest.raises(NetDefinitionError, match="Did you mean 'Relu'"):
        get_schema("Rellu")
    with pytest.raises(NetDefinitionError, match=r"ops\[0\]"):
        validate_op(OperatorDef("Rellu", ["x"], ["y"]), 0)


@pytest.mark.parametrize(
    "op, match",
    [
        (OperatorDef("Relu", [], ["y"]), "expected 1 inputs, got 0"),
        (OperatorDef("Relu", ["x"], ["y", "z"]), "expected 1 outputs, got 2"),
        (OperatorDef("MatMul", ["a", "b"], ["a"]), "may not overwrite input 0 in place"),
        (OperatorDef("Scale", ["x"], ["y"], {"scal": 2.0}), "did you mean 'scale'"),
        (OperatorDef("Scale", ["x"], ["y"], {"scale": "two"}), "expected float"),
        (OperatorDef("ConstantFill", [], ["y"], {"dtype": "complex"}), "expected one of"),
        (OperatorDef("ConstantFill", [], ["y"], {"shape": [1.5]}), "items"),
        (OperatorDef("Sum", ["a", "b"], ["b"]), "may not overwrite input 1"),
    ],
)
def test_schema_violations_name_op_and_rule(op, match):
    with pytest.raises(NetDefinitionError, match=match) as info:
        validate_op(op, 3)
    assert "ops[3]" in str(info.value) and op.type in str(info.value)


def test_args_defaults_and_coercion():
    _, args = validate_op(OperatorDef("Scale", ["x"], ["x"], {"scale": 2}), 0)
    assert args == {"scale": 2.0} and isinstance(args["scale"], float)
    _, args = validate_op(OperatorDef("ConstantFill", [], ["y"]), 0)
    assert args["dtype"] == "" and args["shape"] == []  # "": from the value's type, as Caffe2 (float32 here)


def test_enforced_inplace_and_required_args():
    @register_op("_TestEnforced", inputs=2, outputs=1, enforce_inplace={1: 0}, args=[Arg("k", int, Arg.REQUIRED)])
    def _k(ctx, a, b):
        return b

    with pytest.raises(NetDefinitionError, match="in-place enforced"):
        validate_op(OperatorDef("_TestEnforced", ["a", "b"], ["c"], {"k": 1}), 0)
    with pytest.raises(NetDefinitionError, match="missing required argument 'k'"):
        validate_op(OperatorDef("_TestEnforced", ["a", "b"], ["b"]), 0)
    validate_op(OperatorDef("_TestEnforced", ["a", "b"], ["b"], {"k": 1}), 0)
    with pytest.raises(ValueError, match="already registered"):
        register_op("_TestEnforced")(_k)


def test_device_support_checked():
    # CreateMutex is a host-only op (FC also runs on cuda)
    op = OperatorDef("CreateMutex", [], ["m"], device_option=an.DeviceOption("cuda", 0))
    with pytest.raises(NetDefinitionError, match="not supported"):
        validate_op(op, 0)


def test_every_registered_op_has_doc():
    for name, schema in an.registered_ops().items():
        if not name.startswith("_"):
            assert schema.doc, name


def test_int_args_keep_precision_and_bools_are_not_numbers():
    big = 2**62 + 1
    _, args = validate_op(OperatorDef("ConstantFill", [], ["y"], {"value": big, "dtype": "int64"}), 0)
    assert args["value"] == big and isinstance(args["value"], int)
    ws = an.Workspace()
    ws.run_operator_once(OperatorDef("ConstantFill", [], ["y"], {"shape": [1], "value": big, "dtype": "int64"}))
    assert int(ws.fetch("y")[0]) == big
    with pytest.raises(NetDefinitionError, match="got bool"):
        validate_op(OperatorDef("Scale", ["x"], ["y"], {"scale": True}), 0)
    _, args = validate_op(OperatorDef("MatMul", ["a", "b"], ["c"], {"trans_a": 1}), 0)
    assert args["trans_a"] is True
