"""Caffe2's ``ImageInput``: a batch of images and labels read from a database, decoded and
transformed on the CPU (``caffe2/image/image_input_op.h`` of the last PyTorch release with Caffe2).

Each record is a Caffe2 ``TensorProtos`` (image, label, [weights,] [extra outputs...,]
[bounding box]) or, with ``use_caffe_datum``, a Caffe ``Datum``. The image is an encoded file
(a STRING tensor holding JPEG/PNG/... bytes, decoded by Pillow) or raw pixels (a BYTE tensor of
shape H x W [x C]). Per image, in Caffe2's order:

1. decode to ``color`` (3 channels, **BGR** as OpenCV decodes) or grayscale; a raw 3-channel
   image is taken as BGR; colour <-> gray conversions use OpenCV's BT.601 integer formula. An
   image that does not decode becomes a black 224 x 224 image, as in Caffe2, and the op fails
   when more than ``max_decode_error_ratio`` of a batch did not decode (each failure is logged);
2. cut the bounding box (the record's last tensor, else the ``bounding_*`` arguments) when it
   fits in the image;
3. with ``scale_jitter_type=1`` in training, an Inception-style crop (8% to 100% of the area,
   aspect ratio 3/4 to 4/3, ten tries) resized to ``crop`` x ``crop``; otherwise resize so the
   shorter side is ``scale`` (or both sides with ``warp``), or with ``minsize`` (or a size drawn
   from ``random_scale`` [lo, hi]) only when the image is smaller; the new long side is
   ``int(long * size / short)``. Shrinking both sides averages areas (Pillow's BOX, what
   OpenCV's INTER_AREA does); otherwise bilinear;
4. crop ``crop`` x ``crop``: centred with ``is_test``, else at a uniformly random offset (column
   offset drawn first, then row); in training with ``mirror``, flipped left-right with
   probability 1/2;
5. in training on colour images: ``color_jitter`` (saturation, brightness and contrast, each by
   a factor ``1 + U(-r, r)`` with r = ``img_saturation``/``img_brightness``/``img_contrast``, in
   a random order) and ``color_lighting`` (AlexNet's PCA noise, ``color_lighting_std``);
6. ``(pixel - mean[c]) / std[c]`` per channel (``mean_per_channel``/``std_per_channel`` take
   precedence over ``mean``/``std``).

Output 0 is float32 NHWC ``(batch_size, crop, crop, C)`` (``brew.image_input`` adds the
``NHWC2NCHW``). Output 1 holds the labels, by ``label_type``: 0 (one label) and 4 (one label;
its weight, the record's third tensor, is skipped) give ``(batch_size,)``; 1 (label indices), 2
(a dense vector) and 5 (an embedding) give ``(batch_size, num_labels)`` in the label tensor's
dtype (INT32 or FLOAT); 3 (indices with the third tensor's weights) gives float32. Outputs 2...
stack the record's extra tensors, ``(batch_size, output_sizes[i])``. Random draws come from the
op's ``DeviceOption.random_seed`` when set (else fresh entropy): each batch draws one seed per
image from that stream, and each image is transformed with its own generator, so a seeded op gives
the same batches with any ``decode_threads`` (Caffe2 kept one generator per decode thread, so its
draws depended on which thread took which image). ``decode_threads`` threads (at most one per image
and per core) decode and transform a batch. ``use_gpu_transform`` is refused
(Caffe2 refused it on CPU too); ``output_type`` is accepted and, as on Caffe2's CPU path, the
images are float32.

    >>> import io, numpy as np, tempfile, os, asyncnet as an
    >>> from PIL import Image
    >>> from asyncnet.ops import _tensorproto as tp, dbio
    >>> png = io.BytesIO(); Image.fromarray(np.full((4, 6, 3), 200, np.uint8)).save(png, "PNG")
    >>> img = np.array([png.getvalue()], dtype=object)
    >>> path = os.path.join(tempfile.mkdtemp(), "images.minidb")
    >>> dbio.write_db(path, "minidb", [(b"0", tp.encode_tensor_protos([img, np.array(3, np.int32)]))])
    >>> ws = an.Workspace(); net = an.Net("read")
    >>> _ = net.CreateDB([], "reader", db=path, db_type="minidb")
    >>> _ = net.ImageInput("reader", ["data", "label"], batch_size=2, scale=4, crop=4, is_test=1, mean=100.0, std=50.0)
    >>> ws.run_net_once(net); ws.fetch("data").shape, ws.fetch("data")[0, 0, 0], ws.fetch("label")
    ((2, 4, 4, 3), array([2., 2., 2.], dtype=float32), array([3, 3], dtype=int32))
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops import _tensorproto as tp
from asyncnet.ops._check import array
from asyncnet.ops.dbio import DB_TYPES, DBReader
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.tensor.namespace import is_torch
from asyncnet.tensor.threads import claim_threads, process_cores

__all__ = ["ImageTransform", "decode_datum", "transform_image"]

logger = logging.getLogger("asyncnet.ops.caffe2_image")
_STREAM = "_random_seed_stream"
SINGLE_LABEL, MULTI_LABEL_SPARSE, MULTI_LABEL_DENSE, MULTI_LABEL_WEIGHTED_SPARSE, SINGLE_LABEL_WEIGHTED, EMBEDDING = (
    range(6)
)
_WEIGHTED = (MULTI_LABEL_WEIGHTED_SPARSE, SINGLE_LABEL_WEIGHTED)
_SINGLE = (SINGLE_LABEL, SINGLE_LABEL_WEIGHTED)
# AlexNet's PCA of ImageNet's RGB pixels (rows: R, G, B), as Caffe2 hard-coded them
_EIGVECS = np.array([[-144.7125, 183.396, 102.2295], [-148.104, -1.1475, -207.57], [-148.818, -177.174, 107.1765]])
_EIGVALS = np.array([0.2175, 0.0188, 0.0045])
_EXTRA_DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8))


# -- records -------------------------------------------------------------------------------------


def decode_datum(buf: bytes) -> dict[str, Any]:
    """The fields of a Caffe ``Datum`` (channels=1, height=2, width=3, data=4, label=5,
    float_data=6, encoded=7) as plain values.

        >>> decode_datum(b"\\x08\\x01\\x10\\x02\\x18\\x01\\x22\\x02\\x07\\x09\\x28\\x05")["label"]
        5
    """
    out: dict[str, Any] = {"channels": 0, "height": 0, "width": 0, "data": b"", "label": 0, "encoded": False}
    ints = {1: "channels", 2: "height", 3: "width", 5: "label"}
    for num, wt, value in tp._fields(bytes(buf)):
        if num in ints and wt == 0:
            v = value - (1 << 64) if value >= 1 << 63 else value
            out[ints[num]] = v - (1 << 32) if ints[num] == "label" and v >= 1 << 31 else v
        elif num == 4 and wt == 2:
            out["data"] = bytes(value)
        elif num == 7 and wt == 0:
            out["encoded"] = bool(value)
    return out


class _DecodeError(ValueError):
    """An encoded image Pillow cannot decode (Caffe2 replaced it with a black image)."""


def _decode_encoded(data: bytes, color: bool) -> np.ndarray:
    """An encoded image file -> HWC uint8 BGR (color) or HW uint8 gray, as cv::imdecode gives."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            rgb = np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise _DecodeError(f"cannot decode the image ({len(data)} bytes): {e}") from None
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    return bgr if color else _bgr_to_gray(bgr)


def _bgr_to_gray(bgr: np.ndarray) -> np.ndarray:
    """OpenCV's COLOR_BGR2GRAY: (R*4899 + G*9617 + B*1868 + 8192) >> 14."""
    b, g, r = (bgr[:, :, i].astype(np.int32) for i in range(3))
    return ((r * 4899 + g * 9617 + b * 1868 + (1 << 13)) >> 14).astype(np.uint8)


def _to_channels(img: np.ndarray, color: bool) -> np.ndarray:
    """HWC (3 channels, BGR) or HW (gray) as the op's ``color`` asks."""
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if color and img.ndim == 2:
        return np.repeat(img[:, :, None], 3, axis=2)
    if not color and img.ndim == 3:
        return _bgr_to_gray(img)
    return img


def _raw_image(a: np.ndarray) -> np.ndarray:
    channels = a.shape[2] if a.ndim == 3 else 1
    if a.ndim not in (2, 3) or channels not in (1, 3):
        raise ValueError(f"expected a raw image of shape H x W or H x W x {{1, 3}}, got {list(a.shape)}")
    return a.astype(np.uint8, copy=False)


@dataclass
class _Record:
    """One decoded record: the image (None if it did not decode), its label row, extras, box."""

    img: np.ndarray | None
    label: np.ndarray
    extras: list[np.ndarray]
    box: tuple[int, int, int, int] | None


def _image_of(tensor: np.ndarray, color: bool) -> np.ndarray | None:
    if tensor.dtype == object:
        if tensor.size != 1:
            raise ValueError(f"expected one encoded image in the STRING tensor, got {tensor.size}")
        try:
            return _decode_encoded(tensor.ravel()[0], color)
        except _DecodeError as e:
            logger.warning("ImageInput: %s; a black 224 x 224 image takes its place", e)
            return None
    if tensor.dtype == np.uint8:
        return _to_channels(_raw_image(tensor), color)
    raise ValueError(f"expected a STRING (encoded) or BYTE (raw) image tensor, got {tensor.dtype}")


def _label_row(label: np.ndarray, weights: np.ndarray | None, label_type: int, num_labels: int) -> np.ndarray:
    """A record's label as the op outputs it (a scalar, or a row of ``num_labels``)."""
    if label.dtype not in (np.int32, np.float32):
        raise ValueError(f"expected an INT32 or FLOAT label, got {label.dtype}")
    flat = label.ravel()
    if label_type in _SINGLE:
        if flat.size != 1:
            raise ValueError(f"expected one label (label_type {label_type}), got {flat.size}")
        return flat[0]
    if label_type in (MULTI_LABEL_DENSE, EMBEDDING):
        if flat.size != num_labels:
            raise ValueError(f"expected {num_labels} label values (label_type {label_type}), got {flat.size}")
        return flat.copy()
    idx = flat.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= num_labels):
        raise ValueError(f"expected label indices in [0, {num_labels}), got {idx.tolist()}")
    if label_type == MULTI_LABEL_SPARSE:
        row = np.zeros(num_labels, label.dtype)
        row[idx] = 1
        return row
    if weights is None or weights.size != idx.size:
        raise ValueError("expected a FLOAT weight per label index in the record's third tensor")
    row = np.zeros(num_labels, np.float32)
    row[idx] = weights.ravel().astype(np.float32)
    return row


def _from_tensor_protos(value: bytes, o: ImageTransform) -> _Record:
    tensors = tp.decode_tensor_protos(value)
    offset = 3 if o.label_type in _WEIGHTED else 2
    end = offset + len(o.output_sizes)
    if len(tensors) < end:
        raise ValueError(f"expected at least {end} TensorProtos (image, label, ...), got {len(tensors)}")
    weights = tensors[2] if o.label_type == MULTI_LABEL_WEIGHTED_SPARSE else None
    label = _label_row(tensors[1], weights, o.label_type, o.num_labels)
    extras = []
    for i, size in enumerate(o.output_sizes):
        t = tensors[offset + i]
        if t.dtype not in _EXTRA_DTYPES or t.size != size:
            raise ValueError(f"extra tensor {offset + i}: expected {size} float/int32/int64/uint8 values, got "
                             f"{t.size} of {t.dtype}")  # fmt: skip
        extras.append(t.ravel())
    box = None
    if len(tensors) == end + 1:
        b = tensors[end].ravel()
        if b.dtype != np.int32 or b.size != 4:
            raise ValueError(f"expected an INT32 bounding box (ymin, xmin, height, width), got {b.dtype} {b.size}")
        box = tuple(int(v) for v in b)
    return _Record(_image_of(tensors[0], o.color), label, extras, box)


def _from_datum(value: bytes, o: ImageTransform) -> _Record:
    d = decode_datum(value)
    label = np.int32(d["label"])
    if d["encoded"]:
        return _Record(_image_of(np.array([d["data"]], dtype=object), o.color), label, [], None)
    c, h, w = d["channels"], d["height"], d["width"]
    if c not in (1, 3) or len(d["data"]) != c * h * w:
        raise ValueError(f"expected a raw Datum of 1 or 3 channels holding C*H*W bytes, got {c}x{h}x{w}")
    chw = np.frombuffer(d["data"], np.uint8).reshape(c, h, w)
    return _Record(_to_channels(np.ascontiguousarray(chw.transpose(1, 2, 0)), o.color), label, [], None)


# -- the transform ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageTransform:
    """The per-image settings of an ImageInput op (its arguments, checked; see the module doc)."""

    crop: int
    scale: int = -1
    minsize: int = -1
    warp: bool = False
    mirror: bool = False
    is_test: bool = False
    color: bool = True
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    random_scale: tuple[int, int] | None = None
    inception: bool = False
    color_jitter: bool = False
    saturation: float = 0.4
    brightness: float = 0.4
    contrast: float = 0.4
    color_lighting: bool = False
    lighting_std: float = 0.1
    label_type: int = SINGLE_LABEL
    num_labels: int = 0
    output_sizes: tuple[int, ...] = ()


def _resize(img: np.ndarray, width: int, height: int) -> np.ndarray:
    from PIL import Image

    shrink = width <= img.shape[1] and height <= img.shape[0]
    method = Image.Resampling.BOX if shrink else Image.Resampling.BILINEAR
    return np.asarray(Image.fromarray(np.ascontiguousarray(img)).resize((width, height), method))


def _scaled_size(rows: int, cols: int, scale: int, warp: bool) -> tuple[int, int]:
    if warp:
        return scale, scale
    if rows > cols:
        return int(np.float32(rows) * np.float32(scale) / np.float32(cols)), scale
    return scale, int(np.float32(cols) * np.float32(scale) / np.float32(rows))


def _inception_crop(img: np.ndarray, crop: int, rng: np.random.Generator) -> np.ndarray | None:
    """A random 8%-100% area, 3/4-4/3 aspect crop resized to crop x crop (None after ten misses)."""
    rows, cols = img.shape[:2]
    for _ in range(10):
        target = int(math.ceil(rng.uniform(0.08, 1.0) * rows * cols))
        aspect = rng.uniform(3.0 / 4.0, 4.0 / 3.0)
        nh, nw = int(math.floor(math.sqrt(target / aspect))), int(math.floor(math.sqrt(target * aspect)))
        if 1 <= nh <= rows and 1 <= nw <= cols:
            y0 = int(rng.integers(0, rows - nh + 1))
            x0 = int(rng.integers(0, cols - nw + 1))
            return _resize(img[y0 : y0 + nh, x0 : x0 + nw], crop, crop)
    return None


def _rescale(img: np.ndarray, o: ImageTransform, rng: np.random.Generator) -> np.ndarray:
    size = o.scale if o.scale > 0 else o.minsize
    if o.random_scale is not None:
        size = int(rng.integers(o.random_scale[0], o.random_scale[1] + 1))
    rows, cols = img.shape[:2]
    height, width = _scaled_size(rows, cols, size, o.warp)
    if (o.scale > 0 and (height, width) != (rows, cols)) or height > rows or width > cols:
        return _resize(img, width, height)
    return img


def _jitter(x: np.ndarray, o: ImageTransform, rng: np.random.Generator) -> np.ndarray:
    """Saturation, brightness and contrast in a random order (BGR float32 HWC)."""
    weights = np.array([0.114, 0.587, 0.299], np.float32)  # B, G, R
    for step in rng.permutation(3):
        if step == 0:
            alpha = np.float32(1.0 + rng.uniform(-o.saturation, o.saturation))
            x = x * alpha + (x @ weights)[:, :, None] * (np.float32(1.0) - alpha)
        elif step == 1:
            x = x * np.float32(1.0 + rng.uniform(-o.brightness, o.brightness))
        else:
            gray_mean = np.float32((x @ weights).mean())
            alpha = np.float32(1.0 + rng.uniform(-o.contrast, o.contrast))
            x = x * alpha + gray_mean * (np.float32(1.0) - alpha)
    return x


def _lighting(x: np.ndarray, o: ImageTransform, rng: np.random.Generator) -> np.ndarray:
    alphas = rng.normal(0.0, o.lighting_std, 3)
    delta_rgb = (_EIGVECS * _EIGVALS * alphas).sum(axis=1)
    return x + delta_rgb[::-1].astype(np.float32)


def transform_image(
    img: np.ndarray,
    o: ImageTransform,
    rng: np.random.Generator | None = None,
    box: tuple[int, int, int, int] | None = None,
) -> np.ndarray:
    """One decoded image (HWC or HW uint8) -> the float32 ``crop`` x ``crop`` x C image Caffe2's
    ImageInput makes of it (bounding box, resize, crop, mirror, colour, mean and std).

        >>> img = np.arange(16, dtype=np.uint8).reshape(4, 4)
        >>> transform_image(img, ImageTransform(crop=2, scale=4, is_test=True))[:, :, 0]
        array([[ 5.,  6.],
               [ 9., 10.]], dtype=float32)
    """
    rng = rng if rng is not None else np.random.default_rng()
    if box is not None:
        ymin, xmin, h, w = box
        if ymin + h <= img.shape[0] and xmin + w <= img.shape[1]:
            img = img[ymin : ymin + h, xmin : xmin + w]
    jittered = _inception_crop(img, o.crop, rng) if o.inception and not o.is_test else None
    img = jittered if jittered is not None else _rescale(img, o, rng)
    rows, cols = img.shape[:2]
    if rows < o.crop or cols < o.crop:
        raise ValueError(f"image of {rows} x {cols} after scaling is smaller than the crop {o.crop}")
    if o.is_test:
        x0, y0 = (cols - o.crop) // 2, (rows - o.crop) // 2
    else:
        x0 = int(rng.integers(0, cols - o.crop + 1))
        y0 = int(rng.integers(0, rows - o.crop + 1))
    out = img[y0 : y0 + o.crop, x0 : x0 + o.crop]
    out = out[:, :, None] if out.ndim == 2 else out
    if not o.is_test and o.mirror and rng.random() < 0.5:
        out = out[:, ::-1]
    x = out.astype(np.float32)
    channels = x.shape[2]
    if channels == 3 and not o.is_test:
        x = _jitter(x, o, rng) if o.color_jitter else x
        x = _lighting(x, o, rng) if o.color_lighting else x
    m = np.asarray(o.mean, np.float32)[:channels]
    inv_std = np.float32(1.0) / np.asarray(o.std, np.float32)[:channels]
    return ((x - m) * inv_std).astype(np.float32)


# -- the op --------------------------------------------------------------------------------------------


def _options(a: dict[str, Any], n_outputs: int) -> ImageTransform:
    mean = list(a.get("mean_per_channel", [])) or [a.get("mean", 0.0)]
    std = list(a.get("std_per_channel", [])) or [a.get("std", 1.0)]
    rs = list(a.get("random_scale", [-1, -1]))
    random_scale = None if -1 in rs else (int(rs[0]), int(rs[1]))
    sizes = list(a.get("output_sizes", [])) or [1] * (n_outputs - 2)
    return ImageTransform(
        crop=a.get("crop", -1),
        scale=a.get("scale", -1),
        minsize=random_scale[0] if random_scale else a.get("minsize", -1),
        warp=bool(a.get("warp", 0)),
        mirror=bool(a.get("mirror", 0)),
        is_test=bool(a.get("is_test", 0)),
        color=bool(a.get("color", 1)),
        mean=tuple(mean * 3 if len(mean) == 1 else mean),
        std=tuple(std * 3 if len(std) == 1 else std),
        random_scale=random_scale,
        inception=a.get("scale_jitter_type", 0) == 1,
        color_jitter=bool(a.get("color_jitter", 0)),
        saturation=a.get("img_saturation", 0.4),
        brightness=a.get("img_brightness", 0.4),
        contrast=a.get("img_contrast", 0.4),
        color_lighting=bool(a.get("color_lighting", 0)),
        lighting_std=a.get("color_lighting_std", 0.1),
        label_type=a.get("label_type", 0),
        num_labels=a.get("num_labels", 0),
        output_sizes=tuple(int(s) for s in sizes),
    )


def _validate(op: OperatorDef) -> None:
    a = op.args
    if a.get("use_gpu_transform", 0):
        raise ValueError("use_gpu_transform only for GPUs (ImageInput runs on the CPU here)")
    if a.get("batch_size", 0) <= 0:
        raise ValueError(f"Batch size should be nonnegative: expected batch_size > 0, got {a.get('batch_size', 0)}")
    if a.get("decode_threads", 4) <= 0:
        raise ValueError(f"Must have a positive number of decode threads, got decode_threads={a['decode_threads']}")
    rs = list(a.get("random_scale", [-1, -1]))
    if len(rs) != 2 or rs[1] < rs[0]:
        raise ValueError(f"random scale must provide a range [min, max], got {rs}")
    o = _options(a, len(op.outputs))
    _validate_sizes(o)
    _validate_labels(o, bool(a.get("use_caffe_datum", 0)), len(op.outputs), "output_sizes" in a)
    if len(o.mean) != len(o.std) or len(o.mean) != 3:
        raise ValueError(
            f"The mean and std vectors must be of the same size, 1 or 3; got {len(o.mean)} and {len(o.std)}"
        )
    if any(s == 0 for s in o.std):
        raise ValueError(f"expected nonzero std values, got {list(o.std)}")
    if a.get("scale_jitter_type", 0) not in (0, 1):
        raise ValueError(f"expected scale_jitter_type 0 (none) or 1 (Inception style), got {a['scale_jitter_type']}")
    if not op.inputs and not a.get("db", ""):
        raise ValueError("Must specify a db name: give a DBReader input (from CreateDB) or the `db` argument")


def _validate_sizes(o: ImageTransform) -> None:
    if (o.scale > 0) == (o.minsize > 0):
        raise ValueError(f"Must provide one and only one of scaling or minsize (scale={o.scale}, minsize={o.minsize})")
    if o.crop <= 0:
        raise ValueError(f"Must provide the cropping value: expected crop > 0, got {o.crop}")
    if max(o.scale, o.minsize) < o.crop:
        raise ValueError(
            f"The scale/minsize value ({max(o.scale, o.minsize)}) must be no smaller than the crop ({o.crop})"
        )


def _validate_labels(o: ImageTransform, datum: bool, n_outputs: int, sizes_given: bool) -> None:
    if o.label_type not in range(6):
        raise ValueError(f"expected label_type 0 to 5, got {o.label_type}")
    if datum and (o.label_type not in _SINGLE or n_outputs != 2):
        raise ValueError("Caffe datum only supports single integer label, and 2 outputs")
    if o.label_type not in _SINGLE and o.num_labels <= 0:
        raise ValueError(f"Number of labels must be set (num_labels > 0) for label_type {o.label_type}")
    if sizes_given and len(o.output_sizes) != n_outputs - 2:
        raise ValueError(
            f"If the output sizes are specified, they must be specified for all additional outputs: "
            f"{n_outputs - 2} outputs, {len(o.output_sizes)} sizes"
        )


def _rng(ctx: Any) -> np.random.Generator:
    if ctx.device.random_seed is None:
        return np.random.default_rng()
    stream = ctx.args.get(_STREAM)
    if stream is None:
        stream = ctx.args[_STREAM] = np.random.default_rng(ctx.device.random_seed)
    return stream


def _reader(ctx: Any, inputs: tuple[Any, ...]) -> DBReader:
    if inputs:
        if not isinstance(inputs[0], DBReader):
            raise TypeError(f"input 0 must be a DBReader from CreateDB, got {type(inputs[0]).__name__}")
        return inputs[0]
    reader = ctx.args.get("_owned_reader")
    if reader is None:  # the old style: the op opens its own database
        reader = ctx.args["_owned_reader"] = DBReader(ctx.args["db"], ctx.args["db_type"])
    return reader


def decode_thread_count(asked: int, batch: int) -> int:
    """The decode threads ImageInput uses: ``asked`` (Caffe2's ``decode_threads``), at most one per
    image of the batch and per core of the process (:func:`asyncnet.tensor.threads.process_cores`).

        >>> decode_thread_count(4, 1)
        1
    """
    return max(1, min(asked, batch, process_cores()))


def _parallel(fn: Callable[[Any], Any], items: list[Any], threads: int) -> list[Any]:
    """``[fn(i) for i in items]`` on ``threads`` threads (Pillow and numpy release the GIL while they
    decode and transform); the threads claim their share of the cores, so BLAS threads x decode
    threads stay within them while the pool runs. The first error is raised, as in a plain loop."""
    if threads <= 1:
        return [fn(i) for i in items]
    with claim_threads(workers=threads), ThreadPoolExecutor(threads, thread_name_prefix="image-decode") as pool:
        return list(pool.map(fn, items))


def _read_batch(ctx: Any, reader: DBReader, o: ImageTransform) -> list[_Record]:
    parse = _from_datum if ctx.args["use_caffe_datum"] else _from_tensor_protos
    where = reader.path

    def one(item: tuple[Any, bytes]) -> _Record:
        try:
            return parse(item[1], o)
        except (ValueError, tp.TensorProtoError) as e:
            raise ValueError(f"record {item[0]!r} of {where}: {e}") from None

    batch = list(reader.read_batch(ctx.args["batch_size"]))
    records = _parallel(one, batch, decode_thread_count(ctx.args["decode_threads"], len(batch)))
    failed = sum(r.img is None for r in records)
    if failed / len(records) > ctx.args["max_decode_error_ratio"]:
        raise ValueError(
            f"max_decode_error_ratio exceeded {ctx.args['max_decode_error_ratio']}: "
            f"{failed} of {len(records)} images of the batch from {reader.path} did not decode"
        )
    for r in records:
        if r.img is None:
            r.img = _to_channels(np.zeros((224, 224, 3), np.uint8), o.color)
    return records


def _default_box(a: dict[str, Any]) -> tuple[int, int, int, int] | None:
    box = (a["bounding_ymin"], a["bounding_xmin"], a["bounding_height"], a["bounding_width"])
    return box if min(box) >= 0 else None


_ARGS = [
    Arg("batch_size", int, 0, "images per batch (> 0)"),
    Arg("color", int, 1, "1: three channels (BGR), 0: grayscale"),
    Arg("scale", int, -1, "resize so the shorter side is this"),
    Arg("minsize", int, -1, "resize (up only) so the shorter side is at least this"),
    Arg("random_scale", list, [-1, -1], "[lo, hi]: a minsize drawn per image", item_type=int),
    Arg("warp", int, 0, "resize both sides to scale/minsize (ignore the aspect ratio)"),
    Arg("scale_jitter_type", int, 0, "1: Inception-style random crop in training"),
    Arg("crop", int, -1, "the output's height and width"),
    Arg("mirror", int, 0, "in training, flip left-right with probability 1/2"),
    Arg("is_test", int, 0, "centre crop, no mirror, no colour noise (else random)"),
    Arg("mean", float, 0.0, "subtracted from every channel"),
    Arg("std", float, 1.0, "every channel is divided by it"),
    Arg("mean_per_channel", list, [], "per-channel means (1 or 3; over mean)", item_type=float),
    Arg("std_per_channel", list, [], "per-channel stds (1 or 3; over std)", item_type=float),
    Arg("color_jitter", int, 0, "random saturation, brightness and contrast in training"),
    Arg("img_saturation", float, 0.4, "saturation factor range"),
    Arg("img_brightness", float, 0.4, "brightness factor range"),
    Arg("img_contrast", float, 0.4, "contrast factor range"),
    Arg("color_lighting", int, 0, "AlexNet's PCA lighting noise in training"),
    Arg("color_lighting_std", float, 0.1, "its standard deviation"),
    Arg("label_type", int, 0, "0 single, 1 sparse, 2 dense, 3 weighted sparse, 4 single weighted, 5 embedding"),
    Arg("num_labels", int, 0, "label row length (label types 1, 2, 3, 5)"),
    Arg("output_sizes", list, [], "values per record of each extra output (default 1 each)", item_type=int),
    Arg("bounding_ymin", int, -1, "default bounding box (all four >= 0 to apply)"),
    Arg("bounding_xmin", int, -1, "default bounding box"),
    Arg("bounding_height", int, -1, "default bounding box"),
    Arg("bounding_width", int, -1, "default bounding box"),
    Arg("use_caffe_datum", int, 0, "records are Caffe Datum messages"),
    Arg("use_gpu_transform", int, 0, "refused: GPU only"),
    Arg("decode_threads", int, 4, "threads decoding and transforming a batch (at most one per image and per core)"),
    Arg("max_decode_error_ratio", float, 1.0, "fail when more of a batch than this did not decode"),
    Arg("output_type", (str, int), "float", "accepted; the CPU path gives float32 as Caffe2's did"),
    Arg("db", str, "", "old style without an input: the database to open"),
    Arg("db_type", str, "minidb", "old style: its type", choices=DB_TYPES),
]


@register_op(
    "ImageInput",
    inputs=(0, 1),
    outputs=(2, None),
    validate=_validate,
    args=_ARGS,
    inputs_doc=("db_reader (from CreateDB; none with the old-style `db` argument)",),
    outputs_doc=(
        "data: float32 (batch_size, crop, crop, C), NHWC",
        "label: (batch_size,) or (batch_size, num_labels)",
        "extra outputs: (batch_size, output_sizes[i])",
    ),
    doc="Read, decode and transform a batch of images and their labels (Caffe2's ImageInput, CPU).",
)
def image_input(ctx: Any, *inputs: Any) -> tuple[np.ndarray, ...]:
    o = _options(ctx.args, len(ctx.op.outputs))
    rng = _rng(ctx)
    records = _read_batch(ctx, _reader(ctx, inputs), o)
    default_box = _default_box(ctx.args)
    seeds = rng.integers(0, 2**63, size=len(records))  # one generator per image: any thread count, same batch

    def one(i: int) -> np.ndarray:
        r = records[i]
        return transform_image(
            r.img, o, np.random.default_rng(int(seeds[i])), r.box if r.box is not None else default_box
        )

    images = _parallel(one, list(range(len(records))), decode_thread_count(ctx.args["decode_threads"], len(records)))
    first = np.asarray(records[0].label)
    label_dtype = np.float32 if (first.dtype == np.float32 or o.label_type == MULTI_LABEL_WEIGHTED_SPARSE) else np.int32
    labels = np.stack([np.asarray(r.label) for r in records]).astype(label_dtype)
    extras = [np.stack([r.extras[i] for r in records]) for i in range(len(o.output_sizes))]
    return (np.stack(images), labels, *extras)


register_no_gradient("ImageInput")


# -- NHWC2NCHW and NCHW2NHWC: the layout switches brew.image_input puts after ImageInput -------------


def _switch(ctx: Any, x: Any, to_channels_first: bool) -> Any:
    x = array(ctx, x, 0)
    if x.ndim < 3:
        raise ValueError(f"expected an input of at least 3 dims (N, spatial..., C or N, C, spatial...), got {x.ndim}")
    n = x.ndim
    axes = (0, n - 1, *range(1, n - 1)) if to_channels_first else (0, *range(2, n), 1)
    if is_torch(x):
        return x.permute(axes).contiguous()
    return np.ascontiguousarray(x.transpose(axes))


@register_op(
    "NHWC2NCHW",
    inputs=1,
    outputs=1,
    devices=("cpu", "cuda"),
    differentiable=True,
    doc="Y = X with its last (channel) axis moved to axis 1: N H W C -> N C H W (any number of spatial dims).",
)
def nhwc2nchw(ctx: Any, x: Any) -> Any:
    return _switch(ctx, x, True)


@register_op(
    "NCHW2NHWC",
    inputs=1,
    outputs=1,
    devices=("cpu", "cuda"),
    differentiable=True,
    doc="Y = X with its axis 1 (channels) moved last: N C H W -> N H W C (any number of spatial dims).",
)
def nchw2nhwc(ctx: Any, x: Any) -> Any:
    return _switch(ctx, x, False)


@register_gradient("NHWC2NCHW")
def _nhwc2nchw_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("NCHW2NHWC", [output_grad(op, gout)], ["#dx"])], ["#dx"]


@register_gradient("NCHW2NHWC")
def _nchw2nhwc_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("NHWC2NCHW", [output_grad(op, gout)], ["#dx"])], ["#dx"]
