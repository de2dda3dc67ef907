"""Click logs for DLRM from files: the Criteo Kaggle text format, facebookresearch/dlrm's
preprocessed ``.npz``, and that project's random generator (``random:...``).

**Kaggle text** (``train.txt`` of the Criteo Display Advertising Challenge): one example per
line, 40 tab-separated fields: the label (0 or 1), 13 integer counts, 26 categorical values of
up to 16 hexadecimal digits; any field but the label may be empty. The reference's
preprocessing: an empty field is 0, a negative count is 0, each count becomes log(x + 1), each
category is int(value, 16) modulo ``max_ind_range`` (so each of the 26 tables has
``max_ind_range`` rows). The file is read once, line by line, into memory-mapped ``.npy``
arrays in a cache folder (``$ASYNCNET_CACHE`` or ``~/.cache/asyncnet``, one entry per file,
size, modification time and range), so a file bigger than memory trains without being loaded
whole. A bad row (a wrong number of fields, a label not 0/1, a count that is not an integer
within int64, a category that is not 1-16 hex digits, a truncated last line) raises one
:class:`~asyncnet.errors.TrainConfigError` naming the file and line, or, with
``bad_rows="skip"``, is left out and counted (:attr:`ExampleLog.skipped`).

**Preprocessed .npz** (the reference's ``kaggleAdDisplayChallenge_processed.npz``): arrays
``X_int`` [N, 13], ``X_cat`` [N, 26] (ids per column), ``y`` [N] and ``counts`` [26] (the
table sizes); counts become log(x + 1) (negative ones 0), ids are taken modulo
``max_ind_range`` when it is > 0 (tables then have min(count, range) rows).

**random:KEY=VALUE,...** the reference's uniform random generator (``--data-generation
random``): ``tables`` (dash-separated sizes), ``dense`` (features), ``batches``, ``batch``,
``indices`` (``--num-indices-per-lookup``), ``fixed`` (``--num-indices-per-lookup-fixed``),
``seed`` (``--numpy-rand-seed``), ``round`` (``--round-targets``): the same numbers in the
same order as the reference's RandomDataset (numpy's legacy generator from the seed).

The last ``test_fraction`` of the examples of a file is the test set (the reference's Kaggle
split puts its last day's examples aside); the random generator's test set is its training
set again, as the reference's (same seed).

    >>> log = random_log("tables=10-20,dense=3,batches=2,batch=4,indices=3")
    >>> len(log), log.table_sizes, sorted(log.batch([0, 1]))[:3]
    (8, [10, 20], ['click', 'dense', 'ids0'])
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asyncnet.errors import TrainConfigError

__all__ = [
    "DATA_OPTIONS",
    "NUM_DENSE",
    "NUM_SPARSE",
    "ExampleLog",
    "click_dataset",
    "is_criteo_file",
    "load_click_data",
    "load_kaggle",
    "load_processed_npz",
    "parse_kaggle_line",
    "random_log",
    "split_rows",
]

NUM_DENSE, NUM_SPARSE = 13, 26
NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE
#: the options of the Criteo readers (``asyncnet train --model-arg KEY=VALUE``)
DATA_OPTIONS = ("max_ind_range", "bad_rows", "test_fraction", "data_sub_sample_rate", "numpy_rand_seed")
DEFAULT_MAX_IND_RANGE = 100_000
#: the reference's --numpy-rand-seed, which its negative sub-sampling draws from
DEFAULT_SEED = 123
_INT64_MAX = 2**63 - 1


@dataclass
class ExampleLog:
    """Examples as arrays: ``dense`` [N, D] float32, per table k the ids of each example's bag
    (``offsets[k]`` [N + 1] into ``ids[k]``, or one id per example when ``offsets[k]`` is None),
    ``targets`` [N] float32 (clicks, or the random generator's probabilities), ``clicks`` [N]
    int (targets rounded); ``table_sizes``; ``p`` is None (no ground truth). The arrays may be
    memory-mapped: :meth:`batch` reads only the rows it is given."""

    dense: np.ndarray
    ids: list[np.ndarray]
    offsets: list[np.ndarray | None]
    targets: np.ndarray
    table_sizes: list[int]
    skipped: int = 0
    source: str = ""
    labeled: bool = True
    p: Any = None
    clicks: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.clicks = np.asarray(self.targets >= 0.5, np.int64)

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    @property
    def model_args(self) -> dict[str, Any]:
        """The :func:`~asyncnet.model.zoo.dlrm.dlrm` arguments this data fixes."""
        return {"num_dense": int(self.dense.shape[1]), "table_sizes": [int(n) for n in self.table_sizes]}

    def batch(self, rows: Iterable[int]) -> dict[str, np.ndarray]:
        """The feeds of examples ``rows`` for :func:`~asyncnet.model.zoo.dlrm.dlrm`."""
        rows = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows), np.int64)
        out = {
            "dense": np.asarray(self.dense[rows], np.float32),
            "click": np.asarray(self.targets[rows], np.float32)[:, None],
        }
        for k, (ids, off) in enumerate(zip(self.ids, self.offsets)):
            if off is None:
                out[f"ids{k}"] = np.asarray(ids[rows], np.int64)
                out[f"lengths{k}"] = np.ones(len(rows), np.int32)
                continue
            start, stop = off[rows], off[rows + 1]
            lengths = stop - start
            within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            out[f"ids{k}"] = np.asarray(ids[np.repeat(start, lengths) + within], np.int64)
            out[f"lengths{k}"] = lengths.astype(np.int32)
        return out


# -- the Kaggle text format ---------------------------------------------------------------------
def parse_kaggle_line(line: str, max_ind_range: int, labeled: bool = True) -> tuple[int, list[int], list[int]]:
    """(label, 13 counts (negative ones 0), 26 hashed categories) of one text line, or
    ValueError saying what is wrong.

        >>> parse_kaggle_line("1\\t5\\t\\t-3" + "\\t0" * 10 + "\\tff" + "\\t" * 25, 100)[1][:3], \\
        ...     parse_kaggle_line("1" + "\\t1" * 13 + "\\tff" + "\\t" * 25, 100)[2][:2]
        ([5, 0, 0], [55, 0])
    """
    parts = line.rstrip("\r\n").split("\t")
    if not labeled:  # the challenge's test.txt: no label column
        parts = ["0", *parts]
    if len(parts) != NUM_FIELDS:
        what = f"label, {NUM_DENSE} counts" if labeled else f"{NUM_DENSE} counts"
        raise ValueError(
            f"expected {NUM_FIELDS - (not labeled)} tab-separated fields ({what}, {NUM_SPARSE} "
            f"categories), found {len(parts) - (not labeled)}"
        )
    if parts[0] not in ("0", "1"):
        raise ValueError(f"expected the label 0 or 1 in field 1, found {parts[0][:20]!r}")
    counts = []
    for j, text in enumerate(parts[1 : 1 + NUM_DENSE], 2):
        counts.append(_count(text, j))
    cats = []
    for j, text in enumerate(parts[1 + NUM_DENSE :], 2 + NUM_DENSE):
        c = _category(text, j)
        cats.append(c % max_ind_range if max_ind_range > 0 else c)
    return int(parts[0]), counts, cats


def _count(text: str, j: int) -> int:
    if not text:
        return 0
    try:
        v = int(text, 10)
    except ValueError:
        raise ValueError(f"expected an integer count in field {j}, found {text[:20]!r}") from None
    if abs(v) > _INT64_MAX:
        raise ValueError(f"expected a count within int64 in field {j}, found {len(text)} digits")
    return max(v, 0)


def _category(text: str, j: int) -> int:
    if not text:
        return 0
    if len(text) > 16 or text.startswith(("-", "+", "0x", "0X")) or "_" in text or " " in text:
        raise ValueError(f"expected a category of 1-16 hexadecimal digits in field {j}, found {text[:20]!r}")
    try:
        return int(text, 16)
    except ValueError:
        raise ValueError(f"expected a category of 1-16 hexadecimal digits in field {j}, found {text[:20]!r}") from None


def is_criteo_file(path: str) -> bool:
    """True when ``path`` looks like Kaggle text: its first line has 40 tab-separated fields
    (39 without labels)."""
    return _first_line_fields(Path(path)) in (NUM_FIELDS, NUM_FIELDS - 1)


def _first_line_fields(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            head = f.readline(1 << 16)
    except OSError:
        return 0
    return head.count(b"\t") + 1 if head else 0


def _cache_dir(path: Path, max_ind_range: int, bad_rows: str, labeled: bool, sub_sample: tuple[float, int]) -> Path:
    st = path.stat()
    sampled = "" if not sub_sample[0] else f"|{sub_sample[0]!r}|{sub_sample[1]}"
    key = hashlib.sha256(
        f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{max_ind_range}|{bad_rows}|{labeled}{sampled}|"
        f"{'v2' if max_ind_range == 0 else 'v1'}".encode()
    ).hexdigest()[:20]
    root = Path(os.environ.get("ASYNCNET_CACHE") or Path.home() / ".cache" / "asyncnet")
    return root / "criteo" / f"{path.name}-{key}"


def _count_lines(path: Path) -> int:
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def load_kaggle(
    path: str,
    max_ind_range: int = DEFAULT_MAX_IND_RANGE,
    bad_rows: str = "error",
    chunk_rows: int = 65536,
    sub_sample: tuple[float, int] = (0.0, DEFAULT_SEED),
) -> ExampleLog:
    """The Kaggle text file ``path`` as an :class:`ExampleLog` over memory-mapped arrays,
    converted once (then reused from the cache): see the module's docstring. ``max_ind_range``
    <= 0 numbers each column's categories 0, 1, ... in order of first appearance;
    ``sub_sample`` = (rate, seed) leaves out each unclicked example with probability rate."""
    rate = float(sub_sample[0])
    if not 0.0 <= rate < 1.0:
        raise TrainConfigError(f"--data {path}: expected data_sub_sample_rate in [0, 1), got {sub_sample[0]}")
    if bad_rows not in ("error", "skip"):
        raise TrainConfigError(f"--data {path}: expected bad_rows 'error' or 'skip', got {bad_rows!r}")
    src = Path(path)
    if not src.is_file():
        raise TrainConfigError(f"--data {path}: no such file")
    labeled = _first_line_fields(src) != NUM_FIELDS - 1  # 39 fields: the challenge's unlabeled test.txt
    max_ind_range = max(int(max_ind_range), 0)  # the reference: -1 (any value <= 0) maps to dense ids
    sub_sample = (rate, int(sub_sample[1])) if rate and labeled else (0.0, 0)  # never drop unlabelled lines
    cache = _cache_dir(src, max_ind_range, bad_rows, labeled, sub_sample)
    meta_file = cache / "meta.json"
    if not meta_file.is_file():
        _convert(src, cache, _Convert(max_ind_range, bad_rows, chunk_rows, labeled, sub_sample))
    meta = json.loads(meta_file.read_text())
    n = int(meta["rows"])
    if n == 0:
        raise TrainConfigError(f"--data {path}: no example in the file")
    arrays = {name: np.load(cache / f"{name}.npy", mmap_mode="r")[:n] for name in ("dense", "cats", "y")}
    cats = arrays["cats"]
    return ExampleLog(
        arrays["dense"],
        [cats[:, k] for k in range(NUM_SPARSE)],
        [None] * NUM_SPARSE,
        arrays["y"],
        [int(c) for c in meta["counts"]] if max_ind_range == 0 else [int(max_ind_range)] * NUM_SPARSE,
        skipped=int(meta["skipped"]),
        source=str(path),
        labeled=labeled,
    )


_COUNT = r"(?:-?\d{1,18})?"
_HEX = r"[0-9a-fA-F]{0,16}"
#: lines the vectorized parser takes (anything else goes through parse_kaggle_line, which names the problem)
_FAST_LINE = {
    True: re.compile(rf"[01](?:\t{_COUNT}){{13}}(?:\t{_HEX}){{26}}\r?\n?\Z"),
    False: re.compile(rf"{_COUNT}(?:\t{_COUNT}){{12}}(?:\t{_HEX}){{26}}\r?\n?\Z"),
}


def _parse_fast(lines: list[str], labeled: bool, max_ind_range: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, counts, hashed categories) of lines that match :data:`_FAST_LINE`, parsed a
    column at a time (one split of the whole chunk, flat lists into numpy): the same numbers as
    :func:`parse_kaggle_line`."""
    n = len(lines)
    width = NUM_FIELDS - (not labeled)
    flat = "\t".join(line.rstrip("\r\n") for line in lines).split("\t")
    first = width - NUM_DENSE - NUM_SPARSE
    labels = np.array([int(x) for x in flat[0::width]], np.int64) if labeled else np.zeros(n, np.int64)
    counts = np.empty((n, NUM_DENSE), np.int64)
    for j in range(NUM_DENSE):
        counts[:, j] = [int(x) if x else 0 for x in flat[first + j :: width]]
    hashed = np.empty((n, NUM_SPARSE), np.int64 if max_ind_range > 0 else np.uint64)
    for j in range(NUM_SPARSE):
        column = flat[first + NUM_DENSE + j :: width]
        if max_ind_range > 0:
            hashed[:, j] = [int(x, 16) % max_ind_range if x else 0 for x in column]
        else:
            hashed[:, j] = [int(x, 16) if x else 0 for x in column]
    return labels, np.maximum(counts, 0), hashed


@dataclass(frozen=True)
class _Convert:
    """How :func:`_convert` reads a text file: ``max_ind_range`` 0 keeps raw categories (then
    numbered by first appearance); ``sub_sample`` = (rate, seed)."""

    max_ind_range: int
    bad_rows: str
    chunk_rows: int
    labeled: bool
    sub_sample: tuple[float, int]


class _SubSampler:
    """The reference's negative sub-sampling: one uniform draw per line of the file, in order
    (numpy's legacy generator from ``seed``, as the reference's ``np.random.uniform`` after
    ``np.random.seed``); an unclicked example whose draw is below ``rate`` is left out."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate, self.rng, self.drawn = rate, np.random.RandomState(seed), 0
        self.draws = np.zeros(0)

    def keep(self, labels: np.ndarray, linenos: np.ndarray, read: int) -> np.ndarray:
        """Which rows (labels, 1-based line numbers) stay, the first ``read`` lines now read."""
        if not self.rate:
            return np.ones(labels.shape[0], dtype=bool)
        fresh = self.rng.uniform(0.0, 1.0, read - self.drawn)  # lines (drawn, read], in order
        self.draws, first = fresh, self.drawn
        self.drawn = read
        return (labels != 0) | (self.draws[linenos - 1 - first] >= self.rate)


def _convert(src: Path, cache: Path, how: _Convert) -> None:
    """Parse ``src`` chunk by chunk into ``cache``'s .npy files (written under a temporary name,
    renamed when complete, so an interrupted conversion is never read). Well-formed lines are
    parsed by numpy a chunk at a time; any other line by :func:`parse_kaggle_line`, which
    raises (or, with ``bad_rows="skip"``, counts) a bad one. Without a range, the raw categories
    are numbered by first appearance afterwards (:func:`_dense_ids`)."""
    from numpy.lib.format import open_memmap

    total = _count_lines(src)
    tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    m = how.max_ind_range
    cat_type = np.uint64 if m == 0 else (np.int32 if m <= 2**31 else np.int64)
    out = {
        "dense": open_memmap(tmp / "dense.npy", mode="w+", dtype=np.float32, shape=(total, NUM_DENSE)),
        "cats": open_memmap(
            tmp / ("raw.npy" if m == 0 else "cats.npy"), mode="w+", dtype=cat_type, shape=(total, NUM_SPARSE)
        ),
        "y": open_memmap(tmp / "y.npy", mode="w+", dtype=np.float32, shape=(total,)),
    }
    n, skipped, dropped, read = 0, 0, 0, 0
    fast: list[str] = []
    fast_at: list[int] = []
    linenos: list[int] = []
    slow: list[tuple[int, int, list[int], list[int]]] = []
    pattern = _FAST_LINE[how.labeled]
    sampler = _SubSampler(*how.sub_sample)

    def flush() -> None:
        nonlocal n, dropped
        k = len(fast) + len(slow)
        if not k:
            return
        labels, counts, hashed = (
            np.zeros(k, np.int64),
            np.zeros((k, NUM_DENSE), np.int64),
            np.zeros((k, NUM_SPARSE), np.int64 if m else np.uint64),
        )
        if fast:
            labels[fast_at], counts[fast_at], hashed[fast_at] = _parse_fast(fast, how.labeled, m)
        for at, label, c, h in slow:
            labels[at], counts[at], hashed[at] = label, c, h
        keep = sampler.keep(labels, np.asarray(linenos, np.int64), read)
        dropped += int(k - keep.sum())
        k = int(keep.sum())
        out["y"][n : n + k] = labels[keep]
        out["dense"][n : n + k] = np.log(
            counts[keep].astype(np.float64) + 1.0
        )  # log(x + 1), in float64 then stored as float32
        out["cats"][n : n + k] = hashed[keep]
        n += k
        fast.clear(), fast_at.clear(), slow.clear(), linenos.clear()

    fields = NUM_FIELDS - (not how.labeled)
    with open(src, encoding="ascii", errors="replace", newline="\n") as f:
        for lineno, line in enumerate(f, 1):
            read = lineno
            if pattern.match(line):
                fast_at.append(len(fast) + len(slow))
                fast.append(line)
            else:
                try:
                    if not line.endswith("\n") and lineno == total and line.count("\t") != fields - 1:
                        raise ValueError(
                            f"the last line is truncated (no newline and {line.count(chr(9)) + 1} of {fields} fields)"
                        )
                    slow.append((len(fast) + len(slow), *parse_kaggle_line(line, m, how.labeled)))
                except ValueError as e:
                    if how.bad_rows == "skip":
                        skipped += 1
                        continue
                    _discard(tmp)
                    raise TrainConfigError(
                        f"--data {src}: line {lineno}: {e} (--model-arg bad_rows=skip leaves such "
                        "rows out and counts them)"
                    ) from None
            linenos.append(lineno)
            if len(fast) + len(slow) >= how.chunk_rows:
                flush()
    flush()
    meta: dict[str, Any] = {"rows": n, "skipped": skipped, "sub_sampled": dropped, "lines": total, "source": str(src)}
    if m == 0:
        meta["counts"] = _dense_ids(out.pop("cats"), n, tmp)
    for a in out.values():
        a.flush()
    out.clear()  # the memory maps close before the folder is renamed
    (tmp / "meta.json").write_text(json.dumps(meta))
    try:
        tmp.rename(cache)
    except OSError:  # another process converted it first: use theirs
        _discard(tmp)


def _dense_ids(raw: np.ndarray, n: int, folder: Path) -> list[int]:
    """Number each column's raw categories 0, 1, ... in order of first appearance (the
    reference's dictionaries when ``max_ind_range`` is not given) into ``folder/cats.npy``, one
    column at a time, and keep each column's raw values in that order (``uniques.npz``: id i
    is value ``col{j}[i]``, how days number their categories together); the number of
    distinct values of each column (its table's rows)."""
    from numpy.lib.format import open_memmap

    counts, uniques = [], {}
    cats = open_memmap(folder / "cats.npy", mode="w+", dtype=np.int64, shape=(raw.shape[0], NUM_SPARSE))
    for j in range(NUM_SPARSE):
        uniq, first, inverse = np.unique(raw[:n, j], return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(uniq.size, np.int64)
        rank[order] = np.arange(uniq.size)
        cats[:n, j] = rank[inverse.reshape(-1)]
        uniques[f"col{j}"] = uniq[order]
        counts.append(int(uniq.size))
    cats.flush()
    del cats, raw
    np.savez(folder / "uniques.npz", **uniques)
    (folder / "raw.npy").unlink()
    return counts


def _discard(folder: Path) -> None:
    for p in folder.glob("*"):
        p.unlink()
    folder.rmdir()


# -- the reference's preprocessed .npz ----------------------------------------------------------
def load_processed_npz(path: str, max_ind_range: int = -1) -> ExampleLog:
    """facebookresearch/dlrm's preprocessed Kaggle/Terabyte ``.npz``: see the module's docstring."""
    where = f"--data {path}"
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files if k in ("X_int", "X_cat", "y", "counts")}
            names = set(f.files)
    except FileNotFoundError:
        raise TrainConfigError(f"{where}: no such file") from None
    except Exception as e:  # noqa: BLE001 - any unreadable file is one kind of error here
        raise TrainConfigError(f"{where}: not a readable npz archive ({type(e).__name__}: {e})") from None
    missing = [k for k in ("X_int", "X_cat", "y", "counts") if k not in arrays]
    if missing and {"x", "y"} <= names:
        raise TrainConfigError(
            f"{where}: --data feeds mlp, cnn or lstm (x and y arrays), not dlrm, which reads the "
            "reference's .npz (X_int, X_cat, y, counts), Criteo text or random:..."
        )
    if missing:
        raise TrainConfigError(
            f"{where}: expected the reference's arrays X_int, X_cat, y and counts, missing {missing}"
        )
    x_int, x_cat, y, counts = arrays["X_int"], arrays["X_cat"], arrays["y"].reshape(-1), arrays["counts"].reshape(-1)
    n = len(y)
    if x_int.ndim != 2 or x_cat.ndim != 2 or len(x_int) != n or len(x_cat) != n or x_cat.shape[1] != len(counts):
        raise TrainConfigError(
            f"{where}: expected X_int [N, D], X_cat [N, T], y [N] and counts [T] of one N and T, found "
            f"{list(x_int.shape)}, {list(x_cat.shape)}, {list(y.shape)}, {list(counts.shape)}"
        )
    if x_int.dtype.kind not in "iuf" or x_cat.dtype.kind not in "iu" or n == 0:
        raise TrainConfigError(
            f"{where}: expected numeric X_int, integer X_cat and at least one example, found "
            f"{x_int.dtype}, {x_cat.dtype}, N={n}"
        )
    sizes = [int(c) for c in counts]
    if max_ind_range > 0:
        x_cat = x_cat % max_ind_range
        sizes = [min(c, max_ind_range) for c in sizes]
    if n and (x_cat.min() < 0 or (x_cat >= np.asarray(sizes)).any()):
        raise TrainConfigError(f"{where}: expected each X_cat column j in [0, counts[j]), found ids past their counts")
    if not np.isin(y, (0, 1)).all():
        raise TrainConfigError(f"{where}: expected labels y of 0 and 1")
    dense = np.log(np.maximum(x_int.astype(np.float64), 0.0) + 1.0).astype(np.float32)
    cats = np.ascontiguousarray(x_cat.astype(np.int64))
    return ExampleLog(
        dense,
        [cats[:, k] for k in range(cats.shape[1])],
        [None] * cats.shape[1],
        y.astype(np.float32),
        sizes,
        source=str(path),
    )


# -- the reference's random generator -----------------------------------------------------------
_RANDOM_KEYS = {
    "tables": str,
    "dense": int,
    "batches": int,
    "batch": int,
    "indices": int,
    "fixed": int,
    "seed": int,
    "round": int,
}


def _random_spec(spec: str) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "tables": "1000-1000-1000",
        "dense": 4,
        "batches": 100,
        "batch": 128,
        "indices": 10,
        "fixed": 0,
        "seed": 123,
        "round": 0,
    }
    for item in filter(None, spec.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in _RANDOM_KEYS:
            raise TrainConfigError(
                f"--data random:{spec}: expected KEY=VALUE items with KEY in {sorted(_RANDOM_KEYS)}, found {item!r}"
            )
        try:
            opts[key] = _RANDOM_KEYS[key](value)
        except ValueError:
            raise TrainConfigError(f"--data random:{spec}: expected an integer for {key}, found {value!r}") from None
    try:
        opts["tables"] = [int(t) for t in str(opts["tables"]).split("-")]
    except ValueError:
        raise TrainConfigError(
            f"--data random:{spec}: expected tables as dash-separated sizes, found {opts['tables']!r}"
        ) from None
    for key in ("dense", "batches", "batch", "indices"):
        if opts[key] < 1:
            raise TrainConfigError(f"--data random:{spec}: expected {key} >= 1, found {opts[key]}")
    if min(opts["tables"]) < 1:
        raise TrainConfigError(f"--data random:{spec}: expected table sizes >= 1, found {opts['tables']}")
    return opts


def random_log(spec: str) -> ExampleLog:
    """The reference's uniform random data (``dlrm_data_pytorch.generate_uniform_input_batch``):
    batch by batch from numpy's legacy generator seeded once, dense U[0, 1), per table and
    example a bag of round(max(1, r * min(size, indices))) draws (``indices`` when fixed),
    ids unique(round(u * (size - 1))), targets U[0, 1) (rounded with ``round=1``)."""
    o = _random_spec(spec)
    ra = np.random.RandomState(o["seed"])
    dense, targets = [], []
    ids: list[list[np.ndarray]] = [[] for _ in o["tables"]]
    lengths: list[list[int]] = [[] for _ in o["tables"]]
    for _ in range(o["batches"]):
        n = o["batch"]
        dense.append(ra.rand(n, o["dense"]).astype(np.float32))
        for k, size in enumerate(o["tables"]):
            for _ in range(n):
                if o["fixed"]:
                    group = np.int64(o["indices"])
                else:
                    r = ra.random_sample(1)
                    group = np.int64(np.round(max([1.0], r * min(size, o["indices"]))))
                picked = np.unique(np.round(ra.random_sample(group) * (size - 1)).astype(np.int64))
                ids[k].append(picked)
                lengths[k].append(int(picked.size))
        p = ra.rand(n, 1).astype(np.float32)
        targets.append(np.round(p) if o["round"] else p)
    offsets = [np.concatenate([[0], np.cumsum(ln)]).astype(np.int64) for ln in lengths]
    return ExampleLog(
        np.concatenate(dense),
        [np.concatenate(i) for i in ids],
        offsets,
        np.concatenate(targets).reshape(-1),
        list(o["tables"]),
        source=f"random:{spec}",
    )


# -- Terabyte: one text file per day ------------------------------------------------------------
class _Stacked:
    """Arrays (memory-mapped, one per day) read as one along axis 0: ``a[rows]`` gathers from
    the parts holding ``rows``, reading only those."""

    def __init__(self, parts: Sequence[np.ndarray], maps: Sequence[np.ndarray] | None = None):
        self.parts, self.maps = list(parts), None if maps is None else list(maps)
        self.starts = np.concatenate([[0], np.cumsum([len(p) for p in self.parts])]).astype(np.int64)
        self.shape = (int(self.starts[-1]), *self.parts[0].shape[1:])
        self.dtype = self.parts[0].dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:
        rows = np.asarray(rows, np.int64)
        out = np.empty((len(rows), *self.shape[1:]), self.dtype)
        part = np.searchsorted(self.starts, rows, side="right") - 1
        for d in np.unique(part):
            at = part == d
            got = self.parts[d][rows[at] - self.starts[d]]
            out[at] = got if self.maps is None else self.maps[d][got]
        return out


def terabyte_days(data: str) -> list[Path] | None:
    """The day files of the Criteo Terabyte log ``data`` names: a folder holding ``day_0``,
    ``day_1``, ... or the reference's ``--raw-data-file`` prefix (``.../day``: ``day_0``, ...),
    in day order up to the first missing one; None when ``data`` names neither."""
    base = Path(data)
    prefix = base / "day" if base.is_dir() else base
    days = []
    while (f := Path(f"{prefix}_{len(days)}")).is_file():
        days.append(f)
    return days or None


def load_terabyte(
    days: Sequence[Path],
    max_ind_range: int = DEFAULT_MAX_IND_RANGE,
    bad_rows: str = "error",
    sub_sample: tuple[float, int] = (0.0, DEFAULT_SEED),
) -> tuple[ExampleLog, list[int]]:
    """The days' text files (each as :func:`load_kaggle`: converted once, memory-mapped) as one
    :class:`ExampleLog`, days in order, and the examples of each day. Day i sub-samples with
    seed + i. With ``max_ind_range`` <= 0 each column's categories are numbered 0, 1, ... in
    order of first appearance over the days in order (the reference's dictionaries, built over
    every day it reads): each day's own numbering is mapped when a batch is read."""
    logs = [
        load_kaggle(str(d), max_ind_range, bad_rows, sub_sample=(sub_sample[0], sub_sample[1] + i))
        for i, d in enumerate(days)
    ]
    if any(not log.labeled for log in logs):
        raise TrainConfigError(f"--data {days[0].parent}: a Terabyte day file without labels (39 fields)")
    sizes, maps = logs[0].table_sizes, [None] * NUM_SPARSE
    if max_ind_range <= 0:
        sizes, maps = _days_dense_ids(days, bad_rows, sub_sample)
    log = ExampleLog(
        _Stacked([x.dense for x in logs]),  # type: ignore[arg-type]
        [_Stacked([x.ids[k] for x in logs], maps[k]) for k in range(NUM_SPARSE)],  # type: ignore[misc]
        [None] * NUM_SPARSE,
        np.concatenate([x.targets for x in logs]),
        sizes,
        skipped=sum(x.skipped for x in logs),
        source=str(days[0].parent),
    )
    return log, [len(x) for x in logs]


def _days_dense_ids(days: Sequence[Path], bad_rows: str, sub_sample: tuple[float, int]) -> tuple[list[int], list[Any]]:
    """(each column's distinct values over the days, and per column the map of each day's own
    ids to the ids numbered by first appearance over the days in order). A value's first
    appearance over the days is its first day's first appearance, so the days' values in their
    own orders, one day after another, give the order."""
    firsts = []
    for i, d in enumerate(days):
        rate = float(sub_sample[0])
        cache = _cache_dir(d, 0, bad_rows, True, (rate, int(sub_sample[1]) + i) if rate else (0.0, 0))
        with np.load(cache / "uniques.npz") as f:
            firsts.append([f[f"col{j}"] for j in range(NUM_SPARSE)])
    sizes, maps = [], []
    for j in range(NUM_SPARSE):
        values = np.concatenate([day[j] for day in firsts])
        uniq, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        rank = np.empty(uniq.size, np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
        ids = rank[inverse.reshape(-1)]
        starts = np.cumsum([0] + [len(day[j]) for day in firsts])
        maps.append([ids[starts[i] : starts[i + 1]] for i in range(len(days))])
        sizes.append(int(uniq.size))
    return sizes, maps


def day_split(day_rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row numbers [N, 1] of the reference's Terabyte split: every day but the last for
    training; the last day's first ceil(n / 2) examples for the test, the rest for validation.

        >>> [r[:, 0].tolist() for r in day_split([3, 2, 5])]
        [[0, 1, 2, 3, 4], [5, 6, 7], [8, 9]]
    """
    if len(day_rows) < 2:
        raise TrainConfigError(
            f"expected at least 2 days (training days and a last day to test on), found {len(day_rows)}"
        )
    n_train, last = int(sum(day_rows[:-1])), int(day_rows[-1])
    if last < 2:
        raise TrainConfigError(f"expected at least 2 examples on the last day (test and validation), found {last}")
    test = math.ceil(last / 2)
    rows = np.arange(n_train + last, dtype=np.int64)[:, None]
    return rows[:n_train], rows[n_train : n_train + test], rows[n_train + test :]


# -- one entry point ----------------------------------------------------------------------------
def load_click_data(data: str, options: dict[str, Any] | None = None) -> ExampleLog:
    """The click log ``data`` names: ``random:...``, a reference ``.npz`` or Kaggle text.
    ``options``: ``max_ind_range`` (text default 100,000; npz default none), ``bad_rows``
    ("error" or "skip")."""
    o = dict(options or {})
    unknown = sorted(set(o) - set(DATA_OPTIONS))
    if unknown:
        raise TrainConfigError(f"--data {data}: unknown data option(s) {unknown}; known: {list(DATA_OPTIONS)}")
    sub_sample = (float(o.get("data_sub_sample_rate", 0.0)), int(o.get("numpy_rand_seed", DEFAULT_SEED)))
    if sub_sample[0] and (data.startswith("random:") or data.endswith(".npz")):
        raise TrainConfigError(
            f"--data {data}: data_sub_sample_rate drops unclicked lines of Criteo text files (the "
            "reference does it while it preprocesses them), not of random: data or an .npz"
        )
    if data.startswith("random:"):
        return random_log(data[len("random:") :])
    if data.endswith(".npz"):
        return load_processed_npz(data, int(o.get("max_ind_range", -1)))
    rows, bad = int(o.get("max_ind_range", DEFAULT_MAX_IND_RANGE)), str(o.get("bad_rows", "error"))
    if (days := terabyte_days(data)) is not None:
        return load_terabyte(days, rows, bad, sub_sample)[0]
    return load_kaggle(data, rows, bad, sub_sample=sub_sample)


def split_rows(n: int, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Row numbers [N, 1] of the train examples (the first ones) and of the test examples (the
    last ``test_fraction``, at least one)."""
    if not 0.0 < test_fraction < 1.0:
        raise TrainConfigError(f"expected test_fraction in (0, 1), got {test_fraction}")
    if n < 2:
        raise TrainConfigError(f"expected at least 2 examples to hold out a test set, found {n}")
    k = max(1, math.floor(n * test_fraction))
    rows = np.arange(n, dtype=np.int64)[:, None]
    return rows[: n - k], rows[n - k :]


def click_dataset(data: str, options: dict[str, Any] | None = None) -> Any:
    """A :class:`~asyncnet.train.data.Dataset` over the click log ``data``
    (:func:`load_click_data`): row numbers into the log, its clicks as labels, the last
    ``test_fraction`` (option, default 0.1) of a file's examples for the test, the random
    generator's examples for both (as the reference); Terabyte days (:func:`terabyte_days`)
    split as the reference (:func:`day_split`: the last day's first half is the test)."""
    from asyncnet.train.data import Dataset

    o = dict(options or {})
    fraction = float(o.pop("test_fraction", 0.1))
    log = load_click_data(data, o)
    if data.startswith("random:"):
        train = test = np.arange(len(log), dtype=np.int64)[:, None]
    elif isinstance(log.dense, _Stacked):
        train, test, _ = day_split([len(p) for p in log.dense.parts])
    else:
        train, test = split_rows(len(log), fraction)
    labels = log.clicks.astype(np.int32)
    return Dataset(
        x_train=train,
        y_train=labels[train[:, 0]],
        x_test=test,
        y_test=labels[test[:, 0]],
        num_classes=2,
        name=os.path.basename(os.path.normpath(data)) if not data.startswith("random:") else "random",
        log=log,
    )
