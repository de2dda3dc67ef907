"""CreateMap, KeyValueToMap, MapToKeyValue against a dict, Save and Load of a map, and
Load(load_all=1) into named outputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.errors import NetDefinitionError, OperatorError

pytestmark = pytest.mark.timeout(120)


def _run(ws, op, inputs, outputs, **args):
    ws.run_operator_once(an.OperatorDef(op, list(inputs), list(outputs), args))


@settings(max_examples=25, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(-50, 50), st.integers(-(2**31), 2**31 - 1)), max_size=12),
    kdt=st.sampled_from([np.int32, np.int64]),
    vdt=st.sampled_from([np.int32, np.int64]),
)
def test_key_value_round_trip_matches_a_dict(pairs, kdt, vdt):
    ref = dict(pairs)  # a repeated key keeps its last value
    ws = an.Workspace()
    ws.feed("k", np.array([p[0] for p in pairs], kdt))
    ws.feed("v", np.array([p[1] for p in pairs], vdt))
    _run(ws, "KeyValueToMap", ["k", "v"], ["m"])
    _run(ws, "MapToKeyValue", ["m"], ["k2", "v2"])
    k2, v2 = ws.fetch("k2"), ws.fetch("v2")
    assert k2.dtype == kdt and v2.dtype == vdt
    assert dict(zip(k2.tolist(), v2.tolist())) == ref and len(k2) == len(ref)


def test_create_map_takes_caffe2_type_numbers_and_names():
    ws = an.Workspace()
    _run(ws, "CreateMap", [], ["m"], key_dtype=10, value_dtype="INT32")
    _run(ws, "MapToKeyValue", ["m"], ["k", "v"])
    assert ws.fetch("k").dtype == np.int64 and ws.fetch("v").dtype == np.int32 and ws.fetch("k").size == 0
    with pytest.raises(OperatorError, match="key_dtype INT32 or INT64"):
        _run(ws, "CreateMap", [], ["m"], key_dtype=1)


def test_a_map_survives_save_and_load_all(tmp_path):
    ws = an.Workspace()
    ws.feed("k", np.array([5, 2, 9], np.int64))
    ws.feed("v", np.array([1, 1, 0], np.int32))
    _run(ws, "KeyValueToMap", ["k", "v"], ["m"])
    db = str(tmp_path / "m.minidb")
    _run(ws, "Save", ["m"], [], db=db, db_type="minidb")
    other = an.Workspace()
    _run(other, "Load", [], ["m"], db=db, db_type="minidb", load_all=1)
    _run(other, "MapToKeyValue", ["m"], ["k", "v"])
    assert dict(zip(other.fetch("k").tolist(), other.fetch("v").tolist())) == {5: 1, 2: 1, 9: 0}


def test_load_all_names_the_blobs_its_outputs_leave_out(tmp_path):
    ws = an.Workspace()
    ws.feed("a", np.ones(2, np.float32))
    ws.feed("b", np.zeros(3, np.int32))
    db = str(tmp_path / "ab.minidb")
    _run(ws, "Save", ["a", "b"], [], db=db, db_type="minidb")
    with pytest.raises(OperatorError, match=r"also holds \['b'\]"):
        _run(an.Workspace(), "Load", [], ["a"], db=db, db_type="minidb", load_all=1)
    with pytest.raises(NetDefinitionError, match="source_blob_names"):
        _run(an.Workspace(), "Load", [], ["a"], db=db, db_type="minidb", load_all=1, source_blob_names=["a"])


def test_module_examples_run():
    import doctest

    from asyncnet.ops import caffe2_map

    result = doctest.testmod(caffe2_map, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
