"""ImageInput (Caffe2's image_input_op.h on the CPU) and brew.image_input, on databases of encoded
and raw images this test writes; every value is checked against Pillow's decoding and a numpy
reference of Caffe2's transforms (shorter side to `scale`, centre or random crop, mirror,
(pixel - mean) / std, BGR channel order as OpenCV decodes)."""

import io

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

import asyncnet as an  # noqa: E402
from asyncnet.errors import NetDefinitionError, OperatorError  # noqa: E402
from asyncnet.ops import _tensorproto as tp  # noqa: E402
from asyncnet.ops import dbio  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _encode(pixels_rgb: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels_rgb).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _images(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for shape in ((10, 14, 3), (12, 9, 3), (16, 16, 3))]


def _string_tensor(data: bytes) -> np.ndarray:
    out = np.empty(1, dtype=object)
    out[0] = data
    return out


def _write(path, db_type, records):
    dbio.write_db(str(path), db_type, [(f"{i:04d}".encode(), r) for i, r in enumerate(records)])


def _bgr(rgb: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rgb[:, :, ::-1])


def _ref_resized(bgr: np.ndarray, scale: int) -> np.ndarray:
    """Shorter side -> scale, the other int(long * scale / short); BOX when shrinking, else BILINEAR."""
    h, w = bgr.shape[:2]
    nh, nw = (int(h * scale / w), scale) if h > w else (scale, int(w * scale / h))
    if (nh, nw) == (h, w):
        return bgr
    method = Image.Resampling.BOX if nh <= h and nw <= w else Image.Resampling.BILINEAR
    return np.asarray(Image.fromarray(bgr).resize((nw, nh), method))


def _ref_test_crop(bgr, scale, crop, mean, std):
    img = _ref_resized(bgr, scale)
    y0, x0 = (img.shape[0] - crop) // 2, (img.shape[1] - crop) // 2
    patch = img[y0 : y0 + crop, x0 : x0 + crop].astype(np.float32)
    return (patch - np.float32(mean)) / np.float32(std)


def _run(net):
    ws = an.Workspace()
    ws.run_net_once(net)
    return ws


def _net(path, db_type, seed=None, **kwargs):
    dev = an.DeviceOption(random_seed=seed) if seed is not None else None
    net = an.Net("images", device_option=dev)
    net.CreateDB([], "reader", db=str(path), db_type=db_type)
    net.ImageInput("reader", ["data", "label"], **kwargs)
    return net


@pytest.mark.parametrize("db_type,fmt", [("minidb", "PNG"), ("lmdb", "PNG"), ("minidb", "JPEG")])
def test_encoded_images_centre_crop_match_reference(tmp_path, db_type, fmt):
    pytest.importorskip("lmdb") if db_type == "lmdb" else None
    imgs = _images()
    encoded = [_encode(im, fmt) for im in imgs]
    records = [tp.encode_tensor_protos([_string_tensor(e), np.array(i + 3, np.int32)]) for i, e in enumerate(encoded)]
    path = tmp_path / f"db.{db_type}"
    _write(path, db_type, records)
    ws = _run(_net(path, db_type, batch_size=3, scale=8, crop=6, is_test=1, mean=128.0, std=64.0))
    data, label = ws.fetch("data"), ws.fetch("label")
    assert data.shape == (3, 6, 6, 3) and data.dtype == np.float32
    assert label.dtype == np.int32 and label.tolist() == [3, 4, 5]
    for got, e in zip(data, encoded):
        decoded_rgb = np.asarray(Image.open(io.BytesIO(e)).convert("RGB"))
        np.testing.assert_allclose(got, _ref_test_crop(_bgr(decoded_rgb), 8, 6, 128.0, 64.0), rtol=0, atol=1e-6)


def test_raw_byte_images_per_channel_mean_std_and_float_labels(tmp_path):
    imgs = _images(1)
    records = [tp.encode_tensor_protos([im, np.array(0.5 * i, np.float32)]) for i, im in enumerate(imgs)]
    _write(tmp_path / "raw.minidb", "minidb", records)
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 8.0]
    net = _net(tmp_path / "raw.minidb", "minidb", batch_size=3, scale=9, crop=9, is_test=1,
               mean_per_channel=mean, std_per_channel=std, mean=128.0, std=128.0)  # fmt: skip
    ws = _run(net)
    assert ws.fetch("label").dtype == np.float32 and ws.fetch("label").tolist() == [0.0, 0.5, 1.0]
    for got, im in zip(ws.fetch("data"), imgs):  # raw bytes are taken as they are (already BGR)
        img = _ref_resized(im, 9)
        y0, x0 = (img.shape[0] - 9) // 2, (img.shape[1] - 9) // 2
        want = (img[y0 : y0 + 9, x0 : x0 + 9].astype(np.float32) - np.float32(mean)) / np.float32(std)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_random_crops_and_mirrors_are_crops_of_the_reference(tmp_path):
    im = _images(2)[2]  # 16 x 16
    rec = tp.encode_tensor_protos([_string_tensor(_encode(im, "PNG")), np.array(1, np.int32)])
    _write(tmp_path / "one.minidb", "minidb", [rec])
    ws = an.Workspace()
    net = _net(tmp_path / "one.minidb", "minidb", seed=11, batch_size=8, scale=16, crop=10, mirror=1, is_test=0)
    ws.create_net(net)
    ref = _bgr(im).astype(np.float32)
    seen_offsets, seen_mirror = set(), set()
    for _ in range(4):
        ws.run_net(net.name)
        for got in ws.fetch("data"):
            matches = [
                (y, x, m)
                for y in range(7)
                for x in range(7)
                for m in (False, True)
                if np.array_equal(got, (ref[y : y + 10, x : x + 10][:, ::-1] if m else ref[y : y + 10, x : x + 10]))
            ]
            assert matches, "an output is no crop of the image"
            seen_offsets.update((y, x) for y, x, _ in matches)
            seen_mirror.update(m for _, _, m in matches)
    assert len(seen_offsets) > 3 and seen_mirror == {False, True}
    again = an.Workspace()  # the same random_seed gives the same batches
    again.run_net_once(_net(tmp_path / "one.minidb", "minidb", seed=11, batch_size=8, scale=16, crop=10, mirror=1))
    first = an.Workspace()
    first.run_net_once(_net(tmp_path / "one.minidb", "minidb", seed=11, batch_size=8, scale=16, crop=10, mirror=1))
    np.testing.assert_array_equal(again.fetch("data"), first.fetch("data"))


def _datum_class():
    """Caffe's Datum message, built with protobuf from its field numbers (an encoder independent of the op)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="test_caffe_datum.proto", package="test_caffe")
    msg = fdp.message_type.add(name="Datum")
    F = descriptor_pb2.FieldDescriptorProto
    for name, num, typ, label in [
        ("channels", 1, F.TYPE_INT32, F.LABEL_OPTIONAL),
        ("height", 2, F.TYPE_INT32, F.LABEL_OPTIONAL),
        ("width", 3, F.TYPE_INT32, F.LABEL_OPTIONAL),
        ("data", 4, F.TYPE_BYTES, F.LABEL_OPTIONAL),
        ("label", 5, F.TYPE_INT32, F.LABEL_OPTIONAL),
        ("float_data", 6, F.TYPE_FLOAT, F.LABEL_REPEATED),
        ("encoded", 7, F.TYPE_BOOL, F.LABEL_OPTIONAL),
    ]:
        msg.field.add(name=name, number=num, type=typ, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("test_caffe.Datum"))


def test_caffe_datum_records_encoded_and_raw(tmp_path):
    Datum = _datum_class()
    imgs = _images(3)
    enc = Datum(data=_encode(imgs[0], "PNG"), label=7, encoded=True)
    raw_bgr = imgs[1]
    raw = Datum(channels=3, height=12, width=9, data=raw_bgr.transpose(2, 0, 1).tobytes(), label=-2)
    _write(tmp_path / "datum.minidb", "minidb", [enc.SerializeToString(), raw.SerializeToString()])
    ws = _run(_net(tmp_path / "datum.minidb", "minidb", batch_size=2, scale=9, crop=8, is_test=1, use_caffe_datum=1))
    assert ws.fetch("label").tolist() == [7, -2] and ws.fetch("label").dtype == np.int32
    np.testing.assert_allclose(ws.fetch("data")[0], _ref_test_crop(_bgr(imgs[0]), 9, 8, 0, 1), atol=1e-6)
    np.testing.assert_allclose(ws.fetch("data")[1], _ref_test_crop(raw_bgr, 9, 8, 0, 1), atol=1e-6)


def test_grayscale_and_bounding_box(tmp_path):
    im = _images(4)[0]  # 10 x 14
    box = np.array([1, 2, 8, 8], np.int32)  # ymin, xmin, height, width
    recs = [
        tp.encode_tensor_protos([_string_tensor(_encode(im, "PNG")), np.array(0, np.int32)]),
        tp.encode_tensor_protos([_string_tensor(_encode(im, "PNG")), np.array(1, np.int32), box]),
    ]
    _write(tmp_path / "g.minidb", "minidb", recs)
    ws = _run(_net(tmp_path / "g.minidb", "minidb", batch_size=2, scale=8, crop=8, is_test=1, color=0))
    data = ws.fetch("data")
    assert data.shape == (2, 8, 8, 1)
    gray = np.asarray(Image.fromarray(im).convert("L")).astype(np.float32)  # Pillow's BT.601 luma
    np.testing.assert_allclose(data[1, :, :, 0], gray[1:9, 2:10], rtol=0, atol=1.0)
    assert np.abs(data[0, :, :, 0] - _ref_test_crop(gray.astype(np.uint8), 8, 8, 0, 1)).max() <= 2


def test_minsize_upscales_only_small_images_and_old_style_db_argument(tmp_path):
    imgs = _images(5)
    recs = [tp.encode_tensor_protos([im, np.array(i, np.int32)]) for i, im in enumerate(imgs)]
    _write(tmp_path / "m.minidb", "minidb", recs)
    net = an.Net("old_style")
    net.ImageInput([], ["data", "label"], db=str(tmp_path / "m.minidb"), db_type="minidb", batch_size=3,
                   minsize=12, crop=8, is_test=1)  # fmt: skip
    ws = _run(net)
    for got, im in zip(ws.fetch("data"), imgs):
        img = _ref_resized(im, 12) if min(im.shape[:2]) < 12 else im
        y0, x0 = (img.shape[0] - 8) // 2, (img.shape[1] - 8) // 2
        np.testing.assert_allclose(got, img[y0 : y0 + 8, x0 : x0 + 8].astype(np.float32), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_size": 2, "scale": 8, "crop": 6, "use_gpu_transform": 1}, "use_gpu_transform only for GPUs"),
        ({"batch_size": 0, "scale": 8, "crop": 6}, "batch_size > 0"),
        ({"batch_size": 2, "crop": 6}, "one and only one of scaling or minsize"),
        ({"batch_size": 2, "scale": 4, "crop": 6}, "no smaller than the crop"),
        ({"batch_size": 2, "scale": 8, "crop": 6, "mean_per_channel": [1.0, 2.0]}, "1 or 3"),
        ({"batch_size": 2, "scale": 8, "crop": 6, "label_type": 1}, "Number of labels"),
        ({"batch_size": 2, "crop": 6, "random_scale": [9, 7]}, "range"),
        ({"batch_size": 2, "scale": 8, "crop": 6, "label_type": 1, "num_labels": 3, "use_caffe_datum": 1}, "datum"),
    ],
)
def test_bad_arguments_refused_at_creation(tmp_path, kwargs, match):
    with pytest.raises(NetDefinitionError, match=match):
        an.Workspace().create_net(_net(tmp_path / "none.minidb", "minidb", **kwargs))


def test_undecodable_image_is_black_unless_the_ratio_is_exceeded(tmp_path, caplog):
    good = _encode(_images(7)[2], "PNG")
    recs = [tp.encode_tensor_protos([_string_tensor(e), np.array(i, np.int32)])
            for i, e in enumerate([good, b"not an image"])]  # fmt: skip
    _write(tmp_path / "bad.minidb", "minidb", recs)
    ws = _run(_net(tmp_path / "bad.minidb", "minidb", batch_size=2, scale=16, crop=16, is_test=1, mean=10.0))
    np.testing.assert_array_equal(ws.fetch("data")[1], np.full((16, 16, 3), -10.0, np.float32))
    assert ws.fetch("label").tolist() == [0, 1] and "cannot decode" in caplog.text
    with pytest.raises(OperatorError) as err:
        _run(_net(tmp_path / "bad.minidb", "minidb", batch_size=2, scale=16, crop=16, max_decode_error_ratio=0.25))
    assert "max_decode_error_ratio exceeded" in str(err.value) and "1 of 2" in str(err.value)
    _write(tmp_path / "junk.minidb", "minidb", [b"\xff\xff not a TensorProtos"])
    with pytest.raises(OperatorError) as err:
        _run(_net(tmp_path / "junk.minidb", "minidb", batch_size=1, scale=16, crop=16))
    assert "b'0000'" in str(err.value)


def test_test_mode_never_mirrors(tmp_path):
    im = _images(8)[0]  # 10 x 14: not symmetric
    _write(tmp_path / "m.minidb", "minidb", [tp.encode_tensor_protos([im, np.array(0, np.int32)])])
    ws = an.Workspace()
    net = _net(tmp_path / "m.minidb", "minidb", seed=5, batch_size=16, scale=10, crop=8, mirror=1, is_test=1)
    ws.run_net_once(net)
    want = im[1:9, 3:11].astype(np.float32)
    for got in ws.fetch("data"):
        np.testing.assert_array_equal(got, want)


def test_label_types_and_extra_outputs(tmp_path):
    im = _images(9)[2]
    recs = [
        tp.encode_tensor_protos([im, np.array([0, 3], np.int32), np.array([0.5, 2.0], np.float32),
                                 np.array([1.5, 2.5], np.float32), np.array([7], np.int64)]),
        tp.encode_tensor_protos([im, np.array([2], np.int32), np.array([4.0], np.float32),
                                 np.array([3.5, 4.5], np.float32), np.array([8], np.int64)]),
    ]  # fmt: skip
    _write(tmp_path / "l.minidb", "minidb", recs)
    common = {"batch_size": 2, "scale": 16, "crop": 16, "is_test": 1, "num_labels": 4}
    net = an.Net("weighted")
    net.CreateDB([], "reader", db=str(tmp_path / "l.minidb"), db_type="minidb")
    net.ImageInput("reader", ["data", "label", "pair", "id"], label_type=3, output_sizes=[2, 1], **common)
    ws = _run(net)
    np.testing.assert_array_equal(ws.fetch("label"), np.array([[0.5, 0, 0, 2.0], [0, 0, 4.0, 0]], np.float32))
    np.testing.assert_array_equal(ws.fetch("pair"), np.array([[1.5, 2.5], [3.5, 4.5]], np.float32))
    assert ws.fetch("id").dtype == np.int64 and ws.fetch("id").tolist() == [[7], [8]]
    sparse = an.Net("sparse")
    sparse.CreateDB([], "reader", db=str(tmp_path / "l.minidb"), db_type="minidb")
    sparse.ImageInput("reader", ["data", "label"], label_type=1, **common)  # the other tensors are not read
    ws = _run(sparse)
    assert ws.fetch("label").dtype == np.int32
    np.testing.assert_array_equal(ws.fetch("label"), [[1, 0, 0, 1], [0, 0, 1, 0]])
    dense = tp.encode_tensor_protos([im, np.array([0.25, 0.5, 0.0, 1.0], np.float32)])
    _write(tmp_path / "d.minidb", "minidb", [dense])
    ws = _run(_net(tmp_path / "d.minidb", "minidb", label_type=2, **common))
    np.testing.assert_array_equal(ws.fetch("label"), [[0.25, 0.5, 0.0, 1.0]] * 2)


def test_random_scale_draws_the_short_side_per_image(tmp_path):
    im = _images(10)[0]  # 10 x 14
    _write(tmp_path / "r.minidb", "minidb", [tp.encode_tensor_protos([im, np.array(0, np.int32)])])
    ws = _run(_net(tmp_path / "r.minidb", "minidb", seed=3, batch_size=24, random_scale=[8, 12], crop=8, is_test=1))
    candidates = {s: _ref_test_crop(im, s, 8, 0, 1) for s in (11, 12)}  # minsize only enlarges:
    candidates[10] = im[1:9, 3:11].astype(np.float32)  # a short side of 8, 9 or 10 leaves the image as it is
    seen = set()
    for got in ws.fetch("data"):
        match = [s for s, c in candidates.items() if np.array_equal(got, c)]
        assert match, "no short side drawn in [8, 12] gives this crop"
        seen.update(match)
    assert seen == {10, 11, 12}


def test_colour_noise_and_inception_crop_in_training_only(tmp_path):
    flat = np.full((20, 24, 3), 100, np.uint8)  # gray: saturation and contrast keep it, brightness scales it
    _write(tmp_path / "c.minidb", "minidb", [tp.encode_tensor_protos([flat, np.array(0, np.int32)])])
    db = tmp_path / "c.minidb"
    ws = _run(_net(db, "minidb", seed=1, batch_size=8, scale=20, crop=16, color_jitter=1, img_brightness=0.2))
    for got in ws.fetch("data"):
        assert np.ptp(got) < 1e-3 and 80 - 1e-3 <= got[0, 0, 0] <= 120 + 1e-3
    assert len({round(float(g[0, 0, 0]), 4) for g in ws.fetch("data")}) > 1
    ws = _run(_net(db, "minidb", seed=2, batch_size=4, scale=20, crop=16, color_lighting=1, color_lighting_std=0.1))
    eigvecs = np.array([[-144.7125, 183.396, 102.2295], [-148.104, -1.1475, -207.57], [-148.818, -177.174, 107.1765]])
    for got in ws.fetch("data"):
        offsets = got[0, 0, ::-1] - 100.0  # R, G, B
        assert np.ptp(got - got[0, 0], axis=(0, 1)).max() < 1e-3  # one offset per channel
        alphas = np.linalg.solve(eigvecs, offsets) / np.array([0.2175, 0.0188, 0.0045])
        assert np.abs(alphas).max() < 0.1 * 6  # normal draws of std 0.1
    ws = _run(_net(db, "minidb", seed=4, batch_size=4, scale=20, crop=16, scale_jitter_type=1))
    np.testing.assert_array_equal(ws.fetch("data"), np.full((4, 16, 16, 3), 100.0, np.float32))
    ws = _run(_net(db, "minidb", batch_size=2, scale=20, crop=16, is_test=1, color_jitter=1, color_lighting=1))
    np.testing.assert_array_equal(ws.fetch("data"), np.full((2, 16, 16, 3), 100.0, np.float32))


def test_layout_switches_round_trip_and_gradient():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    ws = an.Workspace()
    ws.feed("x", x)
    net = an.Net("switch")
    net.NHWC2NCHW("x", "y")
    net.NCHW2NHWC("y", "z")
    ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch("y"), x.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(ws.fetch("z"), x)
    train = an.Net("switch_grad")
    train.NHWC2NCHW("x", "y")
    train.Mul(["y", "w"], "p")
    train.AveragedLoss("p", "loss")
    ws.feed("w", np.random.default_rng(0).standard_normal((2, 5, 3, 4)).astype(np.float32))
    from asyncnet.autodiff import add_gradient_ops

    grads = add_gradient_ops(train, "loss")
    ws.run_net_once(train)
    np.testing.assert_allclose(ws.fetch(grads["x"]), ws.fetch("w").transpose(0, 2, 3, 1) / x.size, atol=1e-8)


def test_brew_image_input_as_resnet50_trainer_calls_it(tmp_path):
    from caffe2.python import brew, model_helper, workspace

    imgs = _images(6)
    recs = [tp.encode_tensor_protos([_string_tensor(_encode(im, "PNG")), np.array(i, np.int32)]) for i, im in
            enumerate(imgs)]  # fmt: skip
    _write(tmp_path / "train.minidb", "minidb", recs)
    model = model_helper.ModelHelper(name="resnet50", arg_scope={"order": "NCHW", "use_cudnn": True})
    reader = model.CreateDB("reader", db=str(tmp_path / "train.minidb"), db_type="minidb", num_shards=1, shard_id=0)
    data, label = brew.image_input(
        model, reader, ["data", "label"], batch_size=3, output_type="float", use_gpu_transform=False,
        use_caffe_datum=False, mean_per_channel=None, std_per_channel=None, mean=128.0, std=128.0, scale=10,
        crop=8, is_test=True,
    )  # fmt: skip
    data = model.StopGradient(data, data)
    assert [op.type for op in model.net.Proto().op] == ["ImageInput", "NHWC2NCHW", "StopGradient"]
    workspace.SwitchWorkspace("image_input_brew", True)
    try:
        workspace.RunNetOnce(model.param_init_net)
        workspace.CreateNet(model.net)
        workspace.RunNet(model.net)
        got, labels = workspace.FetchBlob("data"), workspace.FetchBlob("label")
    finally:
        workspace.ResetWorkspace()
        workspace.SwitchWorkspace("default")
    assert got.shape == (3, 3, 8, 8) and labels.tolist() == [0, 1, 2]
    for g, im in zip(got, imgs):
        np.testing.assert_allclose(g, _ref_test_crop(_bgr(im), 10, 8, 128.0, 128.0).transpose(2, 0, 1), atol=1e-6)
    with pytest.raises(ValueError, match="is_test"):
        brew.image_input(model, reader, ["d2", "l2"], batch_size=1, scale=8, crop=8)
