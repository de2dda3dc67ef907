"""ImageInput's decode_threads: a batch decoded and transformed on a pool of threads gives the
same batch as one thread (per-image generators drawn from the op's seeded stream), errors still
name the record, and the pool never exceeds the images or the cores."""

import io
import threading

import numpy as np
import pytest

pytest.importorskip("PIL")
from PIL import Image

import asyncnet as an
from asyncnet.errors import NetDefinitionError, OperatorError
from asyncnet.ops import _tensorproto as tp
from asyncnet.ops import caffe2_image, dbio
from asyncnet.tensor.threads import process_cores

pytestmark = pytest.mark.timeout(120)


def _jpeg(rng, h, w):
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=90)
    out = np.empty(1, dtype=object)
    out[0] = buf.getvalue()
    return out


def _db(path, n, bad_at=None):
    rng = np.random.default_rng(0)
    records = []
    for i in range(n):
        img = _jpeg(rng, 20 + i % 5, 24 + i % 3)
        if i == bad_at:
            img[0] = b"not an image"
        records.append((f"{i:04d}".encode(), tp.encode_tensor_protos([img, np.array(i % 10, np.int32)])))
    dbio.write_db(str(path), "minidb", records)
    return path


def _batches(path, threads, runs=2, **extra):
    net = an.Net("imgs", device_option=an.DeviceOption(random_seed=7))
    net.CreateDB([], "reader", db=str(path), db_type="minidb")
    args = dict(batch_size=8, scale=20, crop=16, mirror=1, is_test=0, color_jitter=1, color_lighting=1)
    net.ImageInput("reader", ["data", "label"], decode_threads=threads, **{**args, **extra})
    ws = an.Workspace()
    ws.create_net(net)
    out = []
    for _ in range(runs):
        ws.run_net(net.name)
        out.append((ws.fetch("data").copy(), ws.fetch("label").copy()))
    return out


def test_any_thread_count_gives_the_same_batches(tmp_path):
    path = _db(tmp_path / "imgs.minidb", 16)
    one = _batches(path, 1)
    for threads in (2, 4):
        for (d1, l1), (d2, l2) in zip(one, _batches(path, threads)):
            np.testing.assert_array_equal(d1, d2)
            np.testing.assert_array_equal(l1, l2)
    assert not np.array_equal(one[0][0][0], one[0][0][1])  # the images (and their draws) differ
    np.testing.assert_array_equal(one[0][1], np.arange(8) % 10)  # labels in record order


def test_the_pool_runs_on_several_threads(tmp_path, monkeypatch):
    seen = set()
    real = caffe2_image.transform_image

    def spy(*a, **k):
        seen.add(threading.get_ident())
        return real(*a, **k)

    monkeypatch.setattr(caffe2_image, "transform_image", spy)
    monkeypatch.setattr(caffe2_image, "process_cores", lambda: 4)
    _batches(_db(tmp_path / "imgs.minidb", 8), 4, runs=3)
    assert len(seen) >= 2


def test_thread_count_is_bounded_by_images_and_cores():
    assert caffe2_image.decode_thread_count(4, 2) <= 2
    assert caffe2_image.decode_thread_count(64, 64) == min(64, process_cores())
    assert caffe2_image.decode_thread_count(1, 64) == 1


def test_a_bad_record_is_named_from_a_decode_thread(tmp_path):
    path = _db(tmp_path / "bad.minidb", 8, bad_at=5)
    out = _batches(path, 4, runs=1, max_decode_error_ratio=0.5)  # one black image tolerated
    assert np.isfinite(out[0][0]).all()
    with pytest.raises(OperatorError, match="max_decode_error_ratio"):
        _batches(path, 4, runs=1, max_decode_error_ratio=0.0)


def test_nonpositive_decode_threads_are_refused(tmp_path):
    with pytest.raises(NetDefinitionError, match="decode threads"):
        _batches(_db(tmp_path / "x.minidb", 2), 0, runs=1)
