"""BBoxTransform against a per-box scalar loop written from its documented formula (centre and
size moved by the deltas, the size change capped, clipped to the scaled image)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _c2run import run_op
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncnet.errors import OperatorError

pytestmark = pytest.mark.timeout(120)


def _one_box(box, delta, weights, correct, height, width):
    x1, y1, x2, y2 = box
    w, h = x2 - x1 + 1, y2 - y1 + 1
    cx, cy = x1 + w / 2, y1 + h / 2
    dx, dy, dw, dh = (d / wt for d, wt in zip(delta, weights))
    cap = math.log(1000 / 16)
    ncx, ncy = cx + dx * w, cy + dy * h
    nw, nh = math.exp(min(dw, cap)) * w, math.exp(min(dh, cap)) * h
    tail = 1 if correct else 0
    out = [ncx - nw / 2, ncy - nh / 2, ncx + nw / 2 - tail, ncy + nh / 2 - tail]
    return [min(max(v, 0), (width if i % 2 == 0 else height) - 1) for i, v in enumerate(out)]


def _reference(rois, deltas, im_info, weights, correct, apply_scale):
    out = np.zeros(deltas.shape)
    for r in range(len(rois)):
        image = int(rois[r, 0]) if rois.shape[1] == 5 else 0
        height, width, scale = im_info[image]
        box = [v / scale for v in rois[r, -4:]]
        for k in range(deltas.shape[1] // 4):
            moved = _one_box(box, deltas[r, 4 * k : 4 * k + 4], weights, correct, height / scale, width / scale)
            out[r, 4 * k : 4 * k + 4] = [v * scale if apply_scale else v for v in moved]
    return out


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    counts=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    classes=st.integers(1, 3),
    with_index=st.booleans(),
    correct=st.booleans(),
    apply_scale=st.booleans(),
    weights=st.sampled_from([[1.0, 1.0, 1.0, 1.0], [10.0, 10.0, 5.0, 5.0]]),
)
def test_bbox_transform_matches_a_per_box_loop(seed, counts, classes, with_index, correct, apply_scale, weights):
    if not with_index:
        counts = counts[:1]
    rng = np.random.default_rng(seed)
    im_info = np.stack([rng.uniform(50, 200, len(counts)), rng.uniform(50, 200, len(counts)),
                        rng.uniform(0.5, 2, len(counts))], axis=1)  # fmt: skip
    rows = []
    for i, n in enumerate(counts):
        corners = np.sort(rng.uniform(0, 100, (n, 2, 2)), axis=1).reshape(n, 4)[:, [0, 2, 1, 3]]
        rows.append(np.concatenate([np.full((n, 1), i), corners], axis=1))
    rois = np.concatenate(rows) if with_index else np.concatenate(rows)[:, 1:]
    deltas = rng.normal(0, 1.5, (len(rois), 4 * classes))  # some dw, dh beyond the cap
    feeds = {"rois": rois, "deltas": deltas, "im": im_info}
    args = {"weights": weights, "correct_transform_coords": correct, "apply_scale": apply_scale}
    boxes, splits = run_op("BBoxTransform", feeds, ["boxes", "splits"], **args)
    np.testing.assert_allclose(boxes, _reference(rois, deltas, im_info, weights, correct, apply_scale), rtol=1e-9)
    np.testing.assert_array_equal(splits, counts)
    assert splits.dtype == np.float32


def test_rois_of_an_image_im_info_does_not_have_are_refused():
    rois = np.array([[3, 0, 0, 5, 5]], np.float32)
    with pytest.raises(OperatorError, match=r"image indices in \[0, 1\)"):
        run_op("BBoxTransform", {"r": rois, "d": np.zeros((1, 4), np.float32), "i": np.ones((1, 3), np.float32)})


def test_module_example_runs():
    import doctest

    from asyncnet.ops import caffe2_detection

    result = doctest.testmod(caffe2_detection, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_rmac_regions_of_a_wide_map_worked_by_hand():
    """4 x 6, two scales: the best overlap puts one more region along the width; scale 1 has
    squares of 4 at x = 0, 2; scale 2 squares of 2 at x = 0, 2, 4 and y = 0, 2."""
    (got,) = run_op("RMACRegions", {"x": np.zeros((2, 3, 4, 6), np.float32)}, ["r"], scales=2, overlap=0.4)
    squares = [(0, 0, 4), (2, 0, 4)] + [(x, y, 2) for x in (0, 2, 4) for y in (0, 2)]
    want = [(n, x, y, x + s - 1, y + s - 1) for n in range(2) for x, y, s in squares]
    np.testing.assert_array_equal(got, np.array(want, np.float32))


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 12), w=st.integers(1, 12), scales=st.integers(1, 4))
def test_rmac_regions_are_squares_inside_the_map(h, w, scales):
    (got,) = run_op("RMACRegions", {"x": np.zeros((1, 1, h, w), np.float32)}, ["r"], scales=scales)
    assert got.shape[1] == 5 and (got[:, 0] == 0).all()
    x1, y1, x2, y2 = got[:, 1], got[:, 2], got[:, 3], got[:, 4]
    assert (x1 >= 0).all() and (y1 >= 0).all() and (x2 <= w - 1).all() and (y2 <= h - 1).all()
    np.testing.assert_array_equal(x2 - x1, y2 - y1)
    sides = {int(s) + 1 for s in x2 - x1}
    assert sides <= {int(2 * min(h, w) // (lv + 1)) for lv in range(1, scales + 1)}


def test_fpn_proposals_keep_the_best_and_split_them_by_size():
    """Square boxes of side 224 go to level 4, 112 to 3, 448 to 5, 10 to the finest (2)."""

    def box(side, image=0):
        return [image, 0, 0, side - 1, side - 1]

    level_a = np.array([box(224), box(10), box(448)], np.float32)
    level_b = np.array([box(112), box(224, image=1)], np.float32)
    scores_a, scores_b = np.array([0.9, 0.1, 0.5], np.float32), np.array([0.7, 0.3], np.float32)
    feeds = {"ra": level_a, "rb": level_b, "sa": scores_a, "sb": scores_b}
    outs = ["rois", "l2", "l3", "l4", "l5", "restore"]
    got = run_op("CollectAndDistributeFpnRpnProposals", feeds, outs, rpn_min_level=2, rpn_max_level=3,
                 post_nms_topN=4)  # fmt: skip
    rois, l2, l3, l4, l5, restore = got
    # the best 4 by score: 224 (0.9), 112 (0.7), 448 (0.5), 224 of image 1 (0.3)
    np.testing.assert_array_equal(rois, [box(224), box(112), box(448), box(224, 1)])
    assert l2.shape == (0, 5)
    np.testing.assert_array_equal(l3, [box(112)])
    np.testing.assert_array_equal(l4, [box(224), box(224, 1)])
    np.testing.assert_array_equal(l5, [box(448)])
    assert restore.dtype == np.int32
    np.testing.assert_array_equal(np.concatenate([l2, l3, l4, l5])[restore], rois)


def test_fpn_proposals_need_rois_and_scores_for_each_level():
    import asyncnet as an

    with pytest.raises(an.NetDefinitionError, match="expected 4 inputs"):
        an.Net("n").CollectAndDistributeFpnRpnProposals(["a", "b"], ["r", "x", "y"], rpn_min_level=2, rpn_max_level=3)
