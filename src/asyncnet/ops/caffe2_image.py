"""Caffe2's ``ImageInput``: a batch of images and labels read from a database, decoded and
transformed on the CPU (``caffe2/image/image_input_op.h``).

Each record is a Caffe2 ``TensorProtos`` (image, label[, bounding box]) or, with
``use_caffe_datum``, a Caffe ``Datum``. The image is an encoded file (a STRING tensor holding
JPEG/PNG/... bytes, decoded by Pillow) or raw pixels (a BYTE tensor of shape H x W [x C]); the
label an INT32 or FLOAT scalar (the first record of a batch decides the label dtype). Per image,
in Caffe2's order:

1. decode to ``color`` (3 channels, **BGR** as OpenCV decodes) or grayscale; a raw 3-channel
   image is taken as BGR; colour <-> gray conversions use OpenCV's BT.601 integer formula;
2. cut the bounding box (the record's third tensor, else the ``bounding_*`` arguments) when it
   fits in the image;
3. resize so the shorter side is ``scale`` (or both sides with ``warp``), or with ``minsize``
   only when the image is smaller; the new long side is ``int(long * scale / short)``. Shrinking
   both sides averages areas (Pillow's BOX, what OpenCV's INTER_AREA does); otherwise bilinear;
4. crop ``crop`` x ``crop``: centred with ``is_test``, else at a uniformly random offset
   (column offset drawn first, then row); with ``mirror`` the crop is flipped left-right with
   probability 1/2 (in test mode too, as in Caffe2);
5. ``(pixel - mean[c]) / std[c]`` per channel (``mean_per_channel``/``std_per_channel`` take
   precedence over ``mean``/``std``).

Output 0 is float32 NHWC ``(batch_size, crop, crop, C)`` (``brew.image_input`` adds the
``NHWC2NCHW``), output 1 the labels ``(batch_size,)``. Random draws come from the op's
``DeviceOption.random_seed`` when set (else fresh entropy). ``use_gpu_transform`` is refused
(Caffe2 refused it on CPU too); ``output_type`` is accepted and, as on Caffe2's CPU path,
the images are float32.

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
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops import _tensorproto as tp
from asyncnet.ops._check import array
from asyncnet.ops.dbio import DB_TYPES, DBReader
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.tensor.namespace import is_torch

__all__ = ["decode_datum", "transform_image"]

logger = logging.getLogger("asyncnet.ops.caffe2_image")
_STREAM = "_random_seed_stream"
_UNSUPPORTED = {  # later Caffe2 arguments this op does not implement: refused unless at their default
    "color_jitter": 0,
    "color_lighting": 0,
    "random_scale": [],
    "label_type": 0,
    "output_sizes": [],
}


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


def _decode_encoded(data: bytes, color: bool) -> np.ndarray:
    """An encoded image file -> HWC uint8 BGR (color) or HW uint8 gray, as cv::imdecode gives."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            rgb = np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ValueError(f"cannot decode the image ({len(data)} bytes): {e}") from None
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


def _from_tensor_protos(value: bytes, color: bool) -> tuple[np.ndarray, Any, tuple[int, ...] | None]:
    tensors = tp.decode_tensor_protos(value)
    if len(tensors) < 2:
        raise ValueError(f"expected a record of (image, label[, bounding box]) TensorProtos, got {len(tensors)}")
    image, label = tensors[0], tensors[1]
    if image.dtype == object:
        if image.size != 1:
            raise ValueError(f"expected one encoded image in the STRING tensor, got {image.size}")
        img = _decode_encoded(image.ravel()[0], color)
    elif image.dtype == np.uint8:
        img = _to_channels(_raw_image(image), color)
    else:
        raise ValueError(f"expected a STRING (encoded) or BYTE (raw) image tensor, got {image.dtype}")
    if label.dtype not in (np.int32, np.float32) or label.size != 1:
        raise ValueError(f"expected one INT32 or FLOAT label, got {label.dtype} of shape {list(label.shape)}")
    box = None
    if len(tensors) >= 3:
        b = tensors[2].ravel()
        if b.dtype != np.int32 or b.size != 4:
            raise ValueError(f"expected an INT32 bounding box (ymin, xmin, height, width), got {b.dtype} {b.size}")
        box = tuple(int(v) for v in b)
    return img, label.ravel()[0], box


def _from_datum(value: bytes, color: bool) -> tuple[np.ndarray, Any, None]:
    d = decode_datum(value)
    if d["encoded"]:
        return _decode_encoded(d["data"], color), np.int32(d["label"]), None
    c, h, w = d["channels"], d["height"], d["width"]
    if c not in (1, 3) or len(d["data"]) != c * h * w:
        raise ValueError(f"expected a raw Datum of 1 or 3 channels holding C*H*W bytes, got {c}x{h}x{w}")
    chw = np.frombuffer(d["data"], np.uint8).reshape(c, h, w)
    return _to_channels(np.ascontiguousarray(chw.transpose(1, 2, 0)), color), np.int32(d["label"]), None


# -- the transform ----------------------------------------------------------------------------------


def _resize(img: np.ndarray, width: int, height: int) -> np.ndarray:
    from PIL import Image

    shrink = width <= img.shape[1] and height <= img.shape[0]
    method = Image.Resampling.BOX if shrink else Image.Resampling.BILINEAR
    return np.asarray(Image.fromarray(img).resize((width, height), method))


def _scaled_size(rows: int, cols: int, scale: int, warp: bool) -> tuple[int, int]:
    if warp:
        return scale, scale
    if rows > cols:
        return int(np.float32(rows) * np.float32(scale) / np.float32(cols)), scale
    return scale, int(np.float32(cols) * np.float32(scale) / np.float32(rows))


def transform_image(
    img: np.ndarray,
    *,
    scale: int = -1,
    minsize: int = -1,
    warp: bool = False,
    crop: int,
    mirror: bool = False,
    is_test: bool = False,
    mean: Any = (0.0, 0.0, 0.0),
    std: Any = (1.0, 1.0, 1.0),
    box: tuple[int, int, int, int] | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """One decoded image (HWC or HW uint8) -> the float32 ``crop`` x ``crop`` x C crop Caffe2's
    ImageInput makes of it (bounding box, resize, crop, mirror, mean and std; see the module doc).

        >>> img = np.arange(16, dtype=np.uint8).reshape(4, 4)
        >>> transform_image(img, scale=4, crop=2, is_test=True)[:, :, 0]
        array([[ 5.,  6.],
               [ 9., 10.]], dtype=float32)
    """
    rng = rng if rng is not None else np.random.default_rng()
    if box is not None:
        ymin, xmin, h, w = box
        if ymin + h <= img.shape[0] and xmin + w <= img.shape[1]:
            img = img[ymin : ymin + h, xmin : xmin + w]
    target = scale if scale > 0 else minsize
    rows, cols = img.shape[:2]
    height, width = _scaled_size(rows, cols, target, warp)
    if (scale > 0 and (height, width) != (rows, cols)) or height > rows or width > cols:
        img = _resize(np.ascontiguousarray(img), width, height)
    rows, cols = img.shape[:2]
    if rows < crop or cols < crop:
        raise ValueError(f"image of {rows} x {cols} after scaling is smaller than the crop {crop}")
    if is_test:
        x0, y0 = (cols - crop) // 2, (rows - crop) // 2
    else:
        x0 = int(rng.integers(0, cols - crop + 1))
        y0 = int(rng.integers(0, rows - crop + 1))
    out = img[y0 : y0 + crop, x0 : x0 + crop]
    if out.ndim == 2:
        out = out[:, :, None]
    if mirror and rng.random() < 0.5:
        out = out[:, ::-1]
    channels = out.shape[2]
    m = np.asarray(mean, np.float32)[:channels]
    inv_std = np.float32(1.0) / np.asarray(std, np.float32)[:channels]
    return ((out.astype(np.float32) - m) * inv_std).astype(np.float32)


# -- the op --------------------------------------------------------------------------------------------


def _mean_std(args: dict[str, Any]) -> tuple[list[float], list[float]]:
    mean = list(args["mean_per_channel"]) or [args["mean"]]
    std = list(args["std_per_channel"]) or [args["std"]]
    return mean * 3 if len(mean) == 1 else mean, std * 3 if len(std) == 1 else std


def _validate(op: OperatorDef) -> None:
    a = op.args
    get = lambda k, d: a.get(k, d)
    if get("use_gpu_transform", 0):
        raise ValueError("use_gpu_transform only for GPUs (ImageInput runs on the CPU here)")
    for name, default in _UNSUPPORTED.items():
        if name in a and a[name] not in (default, 0, [], "", None):
            raise ValueError(f"argument {name!r} is not supported by this ImageInput (got {a[name]!r})")
    if get("batch_size", 0) <= 0:
        raise ValueError(f"Batch size should be nonnegative: expected batch_size > 0, got {get('batch_size', 0)}")
    scale, minsize, crop = get("scale", -1), get("minsize", -1), get("crop", -1)
    if (scale > 0) == (minsize > 0):
        raise ValueError(f"Must provide one and only one of scaling or minsize (scale={scale}, minsize={minsize})")
    if crop <= 0:
        raise ValueError(f"Must provide the cropping value: expected crop > 0, got {crop}")
    if max(scale, minsize) < crop:
        raise ValueError(f"The scale/minsize value ({max(scale, minsize)}) must be no smaller than the crop ({crop})")
    mean = list(get("mean_per_channel", [])) or [get("mean", 0.0)]
    std = list(get("std_per_channel", [])) or [get("std", 1.0)]
    if len(mean) != len(std) or len(mean) not in (1, 3):
        raise ValueError(f"The mean and std vectors must be of the same size, 1 or 3; got {len(mean)} and {len(std)}")
    if any(s == 0 for s in std):
        raise ValueError(f"expected nonzero std values, got {std}")
    if not op.inputs and not get("db", ""):
        raise ValueError("Must specify a db name: give a DBReader input (from CreateDB) or the `db` argument")


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


@register_op(
    "ImageInput",
    inputs=(0, 1),
    outputs=2,
    validate=_validate,
    args=[
        Arg("batch_size", int, 0, "images per batch (> 0)"),
        Arg("color", int, 1, "1: three channels (BGR), 0: grayscale"),
        Arg("scale", int, -1, "resize so the shorter side is this"),
        Arg("minsize", int, -1, "resize (up only) so the shorter side is at least this"),
        Arg("warp", int, 0, "resize both sides to scale/minsize (ignore the aspect ratio)"),
        Arg("crop", int, -1, "the output's height and width"),
        Arg("mirror", int, 0, "flip left-right with probability 1/2"),
        Arg("is_test", int, 0, "centre crop (else a random crop)"),
        Arg("mean", float, 0.0, "subtracted from every channel"),
        Arg("std", float, 1.0, "every channel is divided by it"),
        Arg("mean_per_channel", list, [], "per-channel means (1 or 3; over mean)", item_type=float),
        Arg("std_per_channel", list, [], "per-channel stds (1 or 3; over std)", item_type=float),
        Arg("bounding_ymin", int, -1, "default bounding box (all four >= 0 to apply)"),
        Arg("bounding_xmin", int, -1, "default bounding box"),
        Arg("bounding_height", int, -1, "default bounding box"),
        Arg("bounding_width", int, -1, "default bounding box"),
        Arg("use_caffe_datum", int, 0, "records are Caffe Datum messages"),
        Arg("use_gpu_transform", int, 0, "refused: GPU only"),
        Arg("decode_threads", int, 4, "accepted; images are decoded on the op's thread"),
        Arg("output_type", (str, int), "float", "accepted; the CPU path gives float32 as Caffe2's did"),
        Arg("db", str, "", "old style without an input: the database to open"),
        Arg("db_type", str, "minidb", "old style: its type", choices=DB_TYPES),
        *(Arg(k, (int, float, list), v, "not supported (refused unless default)") for k, v in _UNSUPPORTED.items()),
    ],
    inputs_doc=("db_reader (from CreateDB; none with the old-style `db` argument)",),
    outputs_doc=("data: float32 (batch_size, crop, crop, C), NHWC", "label: int32 (or float32) (batch_size,)"),
    doc="Read, decode and transform a batch of images and their labels (Caffe2's ImageInput, CPU).",
)
def image_input(ctx: Any, *inputs: Any) -> tuple[np.ndarray, np.ndarray]:
    a = ctx.args
    reader, color, rng = _reader(ctx, inputs), bool(a["color"]), _rng(ctx)
    mean, std = _mean_std(a)
    default_box = (a["bounding_ymin"], a["bounding_xmin"], a["bounding_height"], a["bounding_width"])
    default_box = default_box if min(default_box) >= 0 else None
    parse = _from_datum if a["use_caffe_datum"] else _from_tensor_protos
    images, labels = [], []
    for key, value in reader.read_batch(a["batch_size"]):
        try:
            img, label, box = parse(value, color)
        except (ValueError, tp.TensorProtoError) as e:
            raise ValueError(f"record {key!r} of {reader.path}: {e}") from None
        images.append(
            transform_image(
                img,
                scale=a["scale"],
                minsize=a["minsize"],
                warp=bool(a["warp"]),
                crop=a["crop"],
                mirror=bool(a["mirror"]),
                is_test=bool(a["is_test"]),
                mean=mean,
                std=std,
                box=box if box is not None else default_box,
                rng=rng,
            )
        )
        labels.append(label)
    label_dtype = np.float32 if np.asarray(labels[0]).dtype == np.float32 else np.int32
    return np.stack(images), np.asarray(labels).astype(label_dtype)


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
