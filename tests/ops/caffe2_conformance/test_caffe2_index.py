"""Index ops (IntIndexCreate, LongIndexCreate, StringIndexCreate, IndexGet, IndexLoad,
IndexFreeze, IndexStore, IndexSize) against a dict reference, and Save/Load of an index and
of a counter (objects written through dbio's blob codecs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.errors import OperatorError

pytestmark = pytest.mark.timeout(120)


def _run(ws, op, inputs, outputs, **args):
    ws.run_operator_once(an.OperatorDef(op, list(inputs), list(outputs), args))


def _dict_ids(batches, frozen_after):
    """Each key's id: the next free one at its first sight (ids from 1); 0 once frozen."""
    ids, out = {}, []
    for b, keys in enumerate(batches):
        got = []
        for k in keys:
            if k not in ids and b < frozen_after:
                ids[k] = len(ids) + 1
            got.append(ids.get(k, 0))
        out.append(got)
    return out, list(ids)


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(-5, 5), max_size=6), min_size=1, max_size=4),
    frozen_after=st.integers(0, 4),
    dtype=st.sampled_from([np.int32, np.int64]),
)
def test_index_get_gives_ids_in_first_seen_order_until_frozen(batches, frozen_after, dtype):
    ws = an.Workspace()
    _run(ws, "IntIndexCreate" if dtype == np.int32 else "LongIndexCreate", [], ["ix"])
    got = []
    for b, keys in enumerate(batches):
        if b == frozen_after:
            _run(ws, "IndexFreeze", ["ix"], ["ix"])
        ws.feed("q", np.array(keys, dtype))
        _run(ws, "IndexGet", ["ix", "q"], ["ids"])
        assert ws.fetch("ids").dtype == np.int64
        got.append(ws.fetch("ids").tolist())
    want, keys = _dict_ids(batches, frozen_after)
    assert got == want
    _run(ws, "IndexStore", ["ix"], ["keys"])
    _run(ws, "IndexSize", ["ix"], ["n"])
    assert ws.fetch("keys").tolist() == keys and ws.fetch("keys").dtype == dtype
    assert int(ws.fetch("n")) == len(keys) + 1


def test_string_index_load_skip_first_store_and_save_load(tmp_path):
    ws = an.Workspace()
    _run(ws, "StringIndexCreate", [], ["ix"])
    ws.feed("k", np.array(["pad", "a", "b"], dtype=object))
    _run(ws, "IndexLoad", ["ix", "k"], ["ix"], skip_first_entry=1)
    ws.feed("q", np.array([b"b", "c", "a"], dtype=object))
    _run(ws, "IndexGet", ["ix", "q"], ["ids"])
    assert ws.fetch("ids").tolist() == [2, 3, 1]
    _run(ws, "IndexFreeze", ["ix"], ["ix"])
    db = str(tmp_path / "ix.minidb")
    _run(ws, "Save", ["ix"], [], db=db, db_type="minidb")
    other = an.Workspace()
    _run(other, "Load", [], ["ix"], db=db, db_type="minidb")
    other.feed("q", np.array(["a", "zz", "c"], dtype=object))
    _run(other, "IndexGet", ["ix", "q"], ["ids"])
    assert other.fetch("ids").tolist() == [1, 0, 3]  # still frozen: a new key gets 0
    _run(other, "IndexStore", ["ix"], ["keys"])
    assert other.fetch("keys").tolist() == [b"a", b"b", b"c"]


def test_index_errors_say_what_was_expected():
    ws = an.Workspace()
    _run(ws, "IntIndexCreate", [], ["ix"], max_elements=3)
    ws.feed("q", np.array([1, 2, 3], np.int32))
    with pytest.raises(OperatorError, match="index is full: max_elements=3"):
        _run(ws, "IndexGet", ["ix", "q"], ["ids"])
    ws.feed("dup", np.array([7, 7], np.int32))
    _run(ws, "IntIndexCreate", [], ["ix2"])
    with pytest.raises(OperatorError, match="already in the index"):
        _run(ws, "IndexLoad", ["ix2", "dup"], ["ix2"])
    ws.feed("wide", np.array([1], np.int64))
    with pytest.raises(OperatorError, match="expected int32 keys"):
        _run(ws, "IndexGet", ["ix2", "wide"], ["ids"])
    ws.feed("t", np.zeros(2, np.float32))
    with pytest.raises(OperatorError, match="expected an index"):
        _run(ws, "IndexSize", ["t"], ["n"])


@pytest.mark.parametrize("count", [22, -(2**40)])
def test_a_counter_survives_save_and_load(tmp_path, count):
    ws = an.Workspace()
    _run(ws, "CreateCounter", [], ["c"], init_count=count)
    db = str(tmp_path / "c.minidb")
    _run(ws, "Save", ["c"], [], db=db, db_type="minidb")
    for _ in range(3):
        _run(ws, "CountDown", ["c"], ["done"])
    _run(ws, "Load", [], ["c"], db=db, db_type="minidb")
    _run(ws, "RetrieveCount", ["c"], ["n"])
    assert int(ws.fetch("n")) == count


def test_a_blob_without_a_codec_is_still_refused(tmp_path):
    ws = an.Workspace()
    _run(ws, "CreateMutex", [], ["m"])
    with pytest.raises(OperatorError, match="holds a Mutex"):
        _run(ws, "Save", ["m"], [], db=str(tmp_path / "m.minidb"), db_type="minidb")


def test_module_examples_run():
    import doctest

    from asyncnet.ops import caffe2_index

    result = doctest.testmod(caffe2_index, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
