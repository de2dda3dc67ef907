"""split_input_gradients with ``dx_first`` (the DLRM net's split): the same bits as one FC gradient op.

The default order (dX after dW, for the bucketed all-reduce) is tested in tests/sync/test_overlap.py.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.model.fc_split import split_input_gradients

pytestmark = pytest.mark.timeout(60)


@settings(max_examples=15, deadline=None)
@given(
    st.sampled_from(["FCGradient", "FCTransposedGradient"]),
    st.integers(1, 6),
    st.integers(1, 7),
    st.integers(1, 5),
    st.sampled_from(["simple", "async_scheduling"]),
    st.sampled_from([np.float32, np.float64]),
)
def test_dx_first_split_gives_the_fc_gradients_bits(op_type, m, k, n, net_type, dtype):
    rng = np.random.default_rng([m, k, n])
    x = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((n, k) if op_type == "FCGradient" else (k, n)).astype(dtype)
    dy = rng.standard_normal((m, n)).astype(dtype)
    outs = {}
    for split in (False, True):
        with an.Workspace() as ws:
            for name, v in (("x", x), ("w", w), ("dy", dy)):
                ws.feed(name, v)
            net = an.Net(f"g{split}", type=net_type, num_workers=1)
            net.add_op(op_type, ["x", "w", "dy"], ["dw", "db", "dx"])
            if split:
                assert split_input_gradients(net, ["dw"], dx_first=True) == 1
                assert [op.type for op in net.ops] == ["MatMul", "Shape", "Reshape", op_type]
                assert not net.ops[0].control_inputs  # dX waits for nothing but dY
            ws.run_net_once(net)
            outs[split] = [np.asarray(ws.fetch(b)) for b in ("dw", "db", "dx")]
    for a, b in zip(outs[False], outs[True]):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
