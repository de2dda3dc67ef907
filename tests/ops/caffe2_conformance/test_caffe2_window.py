"""LastNWindowCollector against a reference that appends every row to a list and keeps the
last N, laid out in the ring: the row seen k-th (from 0) sits at k mod N."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.atomic.local import Mutex

pytestmark = pytest.mark.timeout(120)


def _ring(all_rows, n):
    out = [None] * min(n, len(all_rows))
    for k, row in enumerate(all_rows):
        out[k % n] = row
    return out


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.integers(0, 9), min_size=1, max_size=6), n=st.integers(1, 6), seen=st.booleans())
def test_the_buffer_holds_the_last_n_rows_in_ring_order(batches, n, seen):
    ws = an.Workspace()
    ws.feed("buf", np.zeros(0, np.float32))
    ws.feed("next", np.array(0, np.int32))
    outs = ["buf", "next"] + (["seen"] if seen else [])
    net = an.Net("w")
    net.LastNWindowCollector(["buf", "next", "x"], outs, num_to_collect=n)
    ws.create_net(net)
    rows, counter = [], 0
    for size in batches:
        batch = np.arange(counter, counter + size, dtype=np.float32).repeat(2).reshape(size, 2)
        counter += size
        rows += list(batch)
        ws.feed("x", batch)
        ws.run_net("w")
    want = _ring(rows, n)
    got = ws.fetch("buf")
    if want:
        np.testing.assert_array_equal(got, np.stack(want))
        assert int(ws.fetch("next")) == len(rows) % n
    else:
        assert got.size == 0
    if seen:
        assert int(ws.fetch("seen")) == len(rows)


def test_the_mutex_is_held_while_the_rows_go_in():
    ws = an.Workspace()
    m = Mutex()
    ws.feed("buf", np.zeros(0, np.int64))
    ws.feed("next", np.array(0, np.int32))
    ws.feed("mutex", m)
    ws.feed("x", np.arange(3))
    op = an.OperatorDef("LastNWindowCollector", ["buf", "next", "x", "mutex"], ["buf", "next"], {"num_to_collect": 2})
    assert m.acquire(timeout=1)
    done = threading.Event()
    t = threading.Thread(target=lambda: (ws.run_operator_once(op), done.set()))
    t.start()
    try:
        assert not done.wait(0.2)  # waits for the mutex
    finally:
        m.release()
    t.join(10)
    assert done.is_set()
    np.testing.assert_array_equal(ws.fetch("buf"), [2, 1])


def test_rows_unlike_the_buffer_and_other_outputs_are_refused():
    ws = an.Workspace()
    ws.feed("buf", np.zeros((2, 3), np.float32))
    ws.feed("next", np.array(0, np.int32))
    ws.feed("x", np.zeros((1, 4), np.float32))
    op = an.OperatorDef("LastNWindowCollector", ["buf", "next", "x"], ["buf", "next"], {"num_to_collect": 2})
    with pytest.raises(an.OperatorError, match="expected rows like the buffer"):
        ws.run_operator_once(op)
    with pytest.raises(an.NetDefinitionError):
        an.Net("n").LastNWindowCollector(["buf", "next", "x"], ["other", "next"], num_to_collect=2)


def test_module_examples_run():
    import doctest

    from asyncnet.ops import caffe2_window

    result = doctest.testmod(caffe2_window, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
