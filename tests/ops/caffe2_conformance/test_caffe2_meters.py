"""APMeter against a direct average-precision computation (sklearn's definition, written out),
and its buffer across runs of one net."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an

pytestmark = pytest.mark.timeout(60)


def _ap(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    out = []
    for k in range(scores.shape[1]):
        order = sorted(range(len(scores)), key=lambda i: -scores[i, k])
        hits, total = 0, 0.0
        for rank, i in enumerate(order, start=1):
            if labels[i, k]:
                hits += 1
                total += hits / rank
        out.append(total / max(1, hits))
    return np.array(out)


def test_ap_meter_keeps_the_newest_rows_across_runs():
    rng = np.random.default_rng(0)
    batches = [(rng.permutation(40)[:6].reshape(3, 2) / 40.0, rng.integers(0, 2, (3, 2))) for _ in range(3)]
    ws = an.Workspace()
    net = an.Net("ap")
    net.APMeter(["p", "l"], "ap", buffer_size=5)
    ws.create_net(net)
    seen_p, seen_l = [], []
    for p, lab in batches:
        ws.feed("p", p.astype(np.float32))
        ws.feed("l", lab.astype(np.int32))
        ws.run_net("ap")
        seen_p.append(p.astype(np.float32))
        seen_l.append(lab)
        want = _ap(np.concatenate(seen_p)[-5:], np.concatenate(seen_l)[-5:])
        np.testing.assert_allclose(ws.fetch("ap"), want, rtol=1e-6)


def test_ap_meter_refuses_mismatched_shapes():
    ws = an.Workspace()
    ws.feed("p", np.zeros((3, 2), np.float32))
    ws.feed("l", np.zeros((3, 1), np.int32))
    net = an.Net("bad")
    net.APMeter(["p", "l"], "ap")
    with pytest.raises(Exception, match="LABELS of its shape"):
        ws.run_net_once(net)


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_meters

    result = doctest.testmod(caffe2_meters, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
