"""Helpers shared by subcommands: loading net files and feeds, writing outputs, with one-line errors."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from asyncnet._atomicio import atomic_write_npz
from asyncnet.core.defs import NetDef
from asyncnet.errors import AsyncNetError

MAX_JSON_FEED_BYTES = 64 * 1024 * 1024  # larger arrays belong in .npy files (read without parsing)
_NPY_MAGIC = b"\x93NUMPY"


class CLIError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


CAFFE2_NET_SUFFIXES = (".pb", ".pbtxt", ".prototxt")


def load_net(path: str) -> NetDef:
    """Read and validate a NetDef: asyncnet's JSON, or a Caffe2 protobuf file (``.pb`` binary,
    ``.pbtxt``/``.prototxt`` text), converted by the ``caffe2`` compatibility package."""
    if path.lower().endswith(CAFFE2_NET_SUFFIXES):
        return _load_caffe2_net(path)
    try:
        text = Path(path).read_bytes()
    except OSError as e:
        raise CLIError(f"cannot read net file {path}: {e.strerror or e}") from None
    try:
        return NetDef.from_json(text)
    except AsyncNetError as e:
        raise CLIError(f"{path}: {e}") from None


def _load_caffe2_net(path: str) -> NetDef:
    try:
        from caffe2.convert import load_net_file
    except ImportError as e:
        raise CLIError(f"cannot read Caffe2 net file {path}: the caffe2 package needs protobuf ({e})") from None
    try:
        return load_net_file(path)
    except OSError as e:
        raise CLIError(f"cannot read net file {path}: {e.strerror or e}") from None
    except AsyncNetError as e:
        raise CLIError(str(e) if str(e).startswith(path) else f"{path}: {e}") from None


def path_problem(path: str) -> str | None:
    """Why ``path`` can never name a file here (a NUL byte, a name or a whole path longer than
    the system allows), or None. Checked before a path is used, so the error is one line.

        >>> path_problem("runs/a") is None, path_problem("x" * 300)
        (True, 'a name in it is longer than 255 bytes (found 300)')
    """
    if "\0" in path:
        return "it contains a NUL byte"
    raw = os.fsencode(path)
    name_max, path_max = _limits()
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > name_max:
        return f"a name in it is longer than {name_max} bytes (found {longest})"
    if len(raw) >= path_max:
        return f"it is longer than {path_max - 1} bytes (found {len(raw)})"
    return None


def _limits() -> tuple[int, int]:
    """NAME_MAX and PATH_MAX of the file system at / (255 and 4096 on Linux)."""
    try:
        return os.pathconf("/", "PC_NAME_MAX"), os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # pragma: no cover - no pathconf
        return 255, 4096


def show_path(path: str, keep: int = 60) -> str:
    """``path`` shortened for a one-line message (its start, its end and its length)."""
    text = repr(path)[1:-1]
    return text if len(text) <= keep else f"{text[: keep // 2]}...{text[-keep // 2 :]} ({len(text)} characters)"


def parse_feeds(specs: list[str] | None) -> dict[str, Any]:
    """``["x=x.npy", ...]`` -> {"x": array}; the file may be .npy or a JSON (nested) list of numbers."""
    feeds: dict[str, Any] = {}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise CLIError(f"--feed expects NAME=FILE.npy, got {spec!r}")
        feeds[name] = load_array(path)
    return feeds


def load_array(path: str) -> np.ndarray:
    """A numpy array from a .npy file or, for names ending in .json, a JSON number or nested list.

    Never unpickles, never allocates more than the file holds; any bad file is a ``CLIError``.

        >>> load_array("/no/such.npy")
        Traceback (most recent call last):
        asyncnet.cli.common.CLIError: cannot load array from /no/such.npy: No such file or directory
    """
    try:
        return _load_json_array(path) if path.lower().endswith(".json") else _load_npy(path)
    except OSError as e:
        raise CLIError(f"cannot load array from {path}: {e.strerror or e}") from None
    except (ValueError, EOFError) as e:
        raise CLIError(f"cannot load array from {path}: {e}") from None


def _load_npy(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        magic = f.read(len(_NPY_MAGIC))
    if magic != _NPY_MAGIC:
        raise ValueError(
            "not a .npy file (it does not start with the NUMPY magic bytes; .npz archives and pickles are not accepted)"
        )
    # Memory-mapping checks the header's shape against the file size before anything is allocated.
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, MemoryError):
        raise
    except ValueError as e:
        if "mmap length" in str(e):
            raise ValueError("the file is shorter than the array its header describes (truncated?)") from None
        raise
    except Exception as e:  # noqa: BLE001 - numpy parses the header with ast/tokenize: a mangled one raises theirs
        raise ValueError(f"invalid .npy header ({type(e).__name__}: {e})") from None
    return np.array(mapped)


def _load_json_array(path: str) -> np.ndarray:
    size = os.stat(path).st_size
    if size > MAX_JSON_FEED_BYTES:
        raise ValueError(f"JSON feed of {size} bytes is over the {MAX_JSON_FEED_BYTES} byte limit; use a .npy file")
    with open(path, "rb") as f:
        raw = f.read(MAX_JSON_FEED_BYTES + 1)
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"expected UTF-8 JSON text: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON: {e}") from None
    array = np.asarray(data)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"expected a JSON number or rectangular nested lists of numbers, found {_describe(array)}")
    return array


_KIND_TEXT = {"U": "strings", "S": "strings", "O": "null, objects or integers beyond 64 bits"}


def _describe(array: np.ndarray) -> str:
    return f"{_KIND_TEXT.get(array.dtype.kind, 'values')} (dtype {array.dtype})"


def save_npz(path: str, arrays: Mapping[str, Any]) -> None:
    """Write ``arrays`` to exactly ``path`` (crash-safe), or raise a one-line ``CLIError``."""
    if not path.lower().endswith(".npz"):
        raise CLIError(f"--save expects a file name ending in .npz, got {path!r}")
    plain = {name: _saveable(name, value) for name, value in arrays.items()}
    try:
        atomic_write_npz(path, plain)
    except OSError as e:
        raise CLIError(f"cannot write {path}: {e.strerror or e}") from None


def _saveable(name: str, value: Any) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError):
        array = None
    if array is None or array.dtype.kind == "O":
        raise CLIError(f"--save writes arrays only; blob {name!r} holds a {type(value).__name__}")
    return array
