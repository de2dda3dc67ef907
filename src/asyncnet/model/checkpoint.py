"""npz checkpoints of any :class:`~asyncnet.model.ModelHelper`: params, buffers, optimizer state, ``iter``.

A checkpoint is an npz archive of the model's :attr:`~asyncnet.model.ModelHelper.checkpoint_blobs`
plus one metadata entry, ``__asyncnet_checkpoint__``: a JSON object naming the model (its
parameters and their shapes), the optimizer and the dtype, and whatever the caller adds
(``extra``: a training run puts its epochs, settings and data source there, so the checkpoint
alone says where a run stopped). A trainer also saves the state of its workers' random
generators (the Dropout ops' masks), so that a resumed run draws the masks an unbroken run
would have: the entry :data:`RANDOM`, a uint64 array [workers, ops, words] (absent for a model
without random ops), passed and returned under that key beside the blobs. Written through :func:`asyncnet._atomicio.atomic_write_npz`
(a crash leaves the old file or the new one); a load checks every array (present, shape,
dtype) and the metadata before any blob changes, and refuses a file without metadata.

    >>> import os, tempfile, asyncnet as an
    >>> from asyncnet.model import ModelHelper, save, load
    >>> m = ModelHelper(); _ = m.fc("x", "fc", 2, 3)
    >>> ws = an.Workspace(); ws.run_net_once(m.init_net)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save(m, ws, os.path.join(d, "m.npz")); ws2 = an.Workspace(); meta = load(m, ws2, os.path.join(d, "m.npz"))
    >>> bool((ws2.fetch("fc_w") == ws.fetch("fc_w")).all())
    True

A checkpoint may be sharded (a model-parallel run: each rank writes its own tables): the main
file then holds the entry :data:`SHARDS`, the names of the shard files beside it (npz archives
of the remaining blobs), and reading it reads them too, so a sharded checkpoint loads as one.

A checkpoint written before the metadata was recorded for every model (a zoo model's) is
refused with the command that converts it: ``python -m asyncnet.train.convert PATH --model NAME``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from asyncnet._atomicio import atomic_write_npz
from asyncnet.errors import CheckpointError

__all__ = ["save", "load", "read", "describe", "metadata", "convert", "META", "RANDOM", "SHARDS"]

#: the npz entry holding the checkpoint's metadata (a JSON object)
META = "__asyncnet_checkpoint__"
#: the npz entry (and key of the arrays saved and read) holding the trainers' random generators
RANDOM = "__asyncnet_random_states__"
#: the npz entry of a sharded checkpoint's main file: the shard files' names (JSON list), in its folder
SHARDS = "__asyncnet_shards__"
FORMAT = 2
_META_MAX_CHARS = 1 << 20  # a model description plus a run's epochs: kilobytes


def describe(model: Any) -> dict[str, Any]:
    """What a checkpoint must match to load into ``model``: its parameters' shapes (and
    buffers'), the optimizer and the dtype.

        >>> from asyncnet.model import ModelHelper
        >>> m = ModelHelper("m"); _ = m.fc("x", "fc", 2, 3)
        >>> describe(m)["params"]
        {'fc_w': [3, 2], 'fc_b': [3]}
    """
    return {
        "params": {p: list(model.shapes[p]) for p in (*model.params, *model.buffers)},
        "optimizer": model.optimizer,
        "dtype": model.dtype.name,
    }


def save(model: Any, ws: Any, path: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> None:
    """Write ``model.checkpoint_blobs`` from ``ws`` and the metadata (:func:`describe`, ``extra``)
    to the npz file ``path``. Raises CheckpointError when the folder cannot be written."""
    arrays = {n: np.asarray(ws.fetch(n, host=True)) for n in model.checkpoint_blobs}
    save_arrays(model, arrays, path, extra)


def save_arrays(
    model: Any,
    arrays: dict[str, np.ndarray],
    path: str | os.PathLike[str],
    extra: dict[str, Any] | None = None,
    shards: dict[str, list[str]] | None = None,
) -> None:
    """:func:`save` of arrays already fetched (``{blob: array}``, every checkpoint blob, and
    optionally the random generators' states under :data:`RANDOM`). With ``shards`` (``{file
    name in path's folder: the blobs it holds}``, files already written), those blobs are left
    out and the file names recorded under :data:`SHARDS`."""
    meta = {"format": FORMAT, "model": describe(model), **(extra or {})}
    elsewhere = {n for names in (shards or {}).values() for n in names}
    out = {n: np.asarray(arrays[n]) for n in model.checkpoint_blobs if n not in elsewhere}
    if shards:
        out[SHARDS] = np.array(json.dumps(sorted(shards)))
    if arrays.get(RANDOM) is not None:
        out[RANDOM] = _random_states(np.asarray(arrays[RANDOM]), os.fspath(path))
    out[META] = np.array(json.dumps(meta, allow_nan=False, default=_json_default))
    try:
        atomic_write_npz(path, out)
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {os.fspath(path)!r}: {e.strerror or e}") from e


def load(model: Any, ws: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint of ``model`` into ``ws``, in place where an array of that shape exists
    (shared Hogwild arrays stay shared); returns its metadata. Raises CheckpointError."""
    arrays, meta = read(model, path)
    for n, a in arrays.items():
        if n == RANDOM:
            continue
        cur = ws.fetch(n) if ws.has(n) else None
        if isinstance(cur, np.ndarray) and cur.shape == a.shape and cur.dtype == a.dtype and cur.flags.writeable:
            np.copyto(cur, a)
        else:
            ws.feed(n, a.copy())
    return meta


def read(model: Any, path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The checked arrays of ``model`` in the checkpoint ``path`` (with :data:`RANDOM` when it
    holds random generators' states) and its metadata."""
    path = os.fspath(path)
    data = _read_npz(path)
    meta = data.pop(META, None)
    found = None if meta is None else _parse_meta(path, meta)
    if found is not None:
        _check_model(model, found, path)
    arrays = _checked_arrays(model, data, path)
    if RANDOM in data:
        arrays[RANDOM] = _random_states(data[RANDOM], path)
    if found is None:
        raise CheckpointError(
            f"checkpoint {path!r} has no metadata entry {META!r} (deleted, or written before every "
            f"model recorded one): convert it with python -m asyncnet.train.convert {path} "
            "--model NAME"
        )
    return arrays, found


def metadata(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The metadata of the checkpoint ``path`` (None when it has none); CheckpointError when unreadable."""
    path = os.fspath(path)
    data = _read_npz(path)
    return None if META not in data else _parse_meta(path, data[META])


def convert(model: Any, path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> None:
    """Rewrite a checkpoint of ``model`` without metadata (or with a previous version's) with
    the current metadata, after checking every array; ``out`` defaults to ``path``."""
    path = os.fspath(path)
    data = _read_npz(path)
    data.pop(META, None)
    save_arrays(model, _checked_arrays(model, data, path), out if out is not None else path)


def _read_npz(path: str) -> dict[str, np.ndarray]:
    data = _read_one_npz(path)
    if SHARDS not in data:
        return data
    names = _shard_names(path, data.pop(SHARDS))
    for name in names:
        part = _map_npz(os.path.join(os.path.dirname(path), name))
        clash = sorted(set(part) & set(data))
        if clash:
            raise CheckpointError(f"checkpoint {path!r}: shard {name!r} holds {clash[:5]} again")
        data.update(part)
    return data


def _map_npz(path: str) -> dict[str, np.ndarray]:
    """A shard's arrays memory-mapped (read-only; an uncompressed npz stores each .npy whole
    at an offset): reading a sharded checkpoint loads no table until it is read, so a rank
    that keeps only its own tables never holds the others'."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z, open(path, "rb") as f:
            out = {}
            for info in z.infolist():
                at = _stored_npy(f, info) if info.compress_type == zipfile.ZIP_STORED else None
                key = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
                if at is None:
                    with z.open(info) as member:
                        out[key] = np.lib.format.read_array(member, allow_pickle=False)
                else:
                    out[key] = np.memmap(path, mode="r", **at)
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path!r} does not exist") from None
    except Exception as e:
        raise CheckpointError(f"checkpoint {path!r} is not a readable npz file: {type(e).__name__}: {e}") from e
    return out


def _stored_npy(f: Any, info: Any) -> dict[str, Any] | None:
    """np.memmap's arguments for the stored (uncompressed) .npy member ``info`` of the open
    zip file ``f``, or None when it is not a plain array (then it is read)."""
    import struct

    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    f.seek(info.header_offset + 30 + name_len + extra_len)
    version = np.lib.format.read_magic(f)
    read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in read_header:
        return None
    shape, fortran, dtype = read_header[version](f)
    if dtype.hasobject or not shape or 0 in shape:
        return None
    return {"dtype": dtype, "shape": shape, "order": "F" if fortran else "C", "offset": f.tell()}


def _shard_names(path: str, entry: np.ndarray) -> list[str]:
    try:
        names = json.loads(str(entry))
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(
        isinstance(n, str) and n and os.path.basename(n) == n and n not in (".", "..") for n in names
    ):
        raise CheckpointError(f"checkpoint {path!r}: its {SHARDS!r} entry is not a list of file names in its folder")
    return names


def _read_one_npz(path: str) -> dict[str, np.ndarray]:
    try:
        f = np.load(path, allow_pickle=False)
        if not isinstance(f, np.lib.npyio.NpzFile):
            raise CheckpointError(f"checkpoint {path!r} is a single .npy array, not an npz archive")
        with f:
            return {k: f[k] for k in f.files}
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path!r} does not exist") from None
    except Exception as e:
        raise CheckpointError(f"checkpoint {path!r} is not a readable npz file: {type(e).__name__}: {e}") from e


def _checked_arrays(model: Any, data: dict[str, np.ndarray], path: str) -> dict[str, np.ndarray]:
    missing = [n for n in model.checkpoint_blobs if n not in data]
    if missing:
        raise CheckpointError(f"checkpoint {path!r} lacks {missing}; it has {sorted(data)[:20]}")
    out = {}
    for n in model.checkpoint_blobs:
        a = data[n]
        if n == "iter":
            if a.dtype != np.int64 or a.size != 1:
                raise CheckpointError(
                    f"checkpoint {path!r}: 'iter' has shape {a.shape} dtype {a.dtype}, expected shape (1,) dtype int64"
                )
            a = a.reshape(1)
            if a[0] < 0:
                raise CheckpointError(f"checkpoint {path!r}: 'iter' is {int(a[0])}, expected a step count >= 0")
        else:
            want = (model.shapes.get(n) or model.shapes[_owner(model, n)], model.dtype)
            if (a.shape, a.dtype) != want:
                raise CheckpointError(
                    f"checkpoint {path!r}: {n!r} has shape {a.shape} dtype {a.dtype}, "
                    f"expected shape {want[0]} dtype {want[1]}"
                )
        out[n] = a
    return out


def _random_states(a: np.ndarray, path: str) -> np.ndarray:
    if a.dtype != np.uint64 or a.ndim != 3:
        raise CheckpointError(
            f"checkpoint {path!r}: {RANDOM!r} has shape {a.shape} dtype {a.dtype}, expected a "
            "uint64 array [workers, ops, words]"
        )
    return a


def _parse_meta(path: str, meta: np.ndarray) -> dict[str, Any]:
    """The metadata JSON object; anything else (bad type, bad JSON, too deep) is a CheckpointError."""
    if meta.shape != () or meta.dtype.kind != "U" or len(str(meta)) > _META_MAX_CHARS:
        raise CheckpointError(
            f"checkpoint {path!r}: metadata {META!r} must be a short JSON string, "
            f"found dtype {meta.dtype} shape {meta.shape}"
        )
    try:
        found = json.loads(str(meta))
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the stack
        raise CheckpointError(f"checkpoint {path!r}: metadata {META!r} is not valid JSON: {type(e).__name__}") from None
    if not isinstance(found, dict):
        raise CheckpointError(
            f"checkpoint {path!r}: metadata {META!r} must be a JSON object, found {type(found).__name__}"
        )
    return found


def _check_model(model: Any, found: dict[str, Any], path: str) -> None:
    """The checkpoint's model is ``model``: the current description, or the previous MLP's
    ``dims``/``optimizer``/``dtype``."""
    want = describe(model)
    if "format" in found:
        have = found.get("model")
        if have != want:
            raise CheckpointError(f"checkpoint {path!r} is for model {_short(have)}, not {_short(want)}")
        return
    legacy = {"dims": _mlp_dims(model), "optimizer": model.optimizer, "dtype": model.dtype.name}
    if {k: found.get(k) for k in legacy} != legacy:
        raise CheckpointError(f"checkpoint {path!r} is for model {_short(found)}, not {_short(legacy)}")


def _mlp_dims(model: Any) -> list[int] | None:
    """[input, hidden..., classes] of an mlp (``fc{i}_w`` layers only), else None."""
    ws = [p for p in model.params if p.endswith("_w")]
    if not ws or [f"fc{i}_w" for i in range(1, len(ws) + 1)] != ws or len(model.params) != 2 * len(ws):
        return None
    return [model.shapes[ws[0]][1], *(model.shapes[w][0] for w in ws)]


def _short(d: Any) -> str:
    text = json.dumps(d, default=str)
    return text if len(text) <= 300 else text[:297] + "..."


def _owner(model: Any, state: str) -> str:
    """The parameter an optimizer state blob (``{param}_{suffix}``) belongs to."""
    owners = [p for p in model.params if state.startswith(p + "_")]
    if not owners:
        raise CheckpointError(f"expected {state!r} to be a parameter or the state of one of {model.params}")
    return max(owners, key=len)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)
