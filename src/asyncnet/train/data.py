"""The embedded digits data set: loading, batching and sharding for the trainers.

The 8x8 UCI optical digits (1,797 images, 64 pixel counts in 0..16, labels 0..9) ship inside
the package as ``asyncnet/data/digits.csv.gz`` (license: ``asyncnet/data/LICENSE-digits.txt``).
Nothing is downloaded.

    >>> from asyncnet.train.data import load_digits, epoch_batches
    >>> ds = load_digits()
    >>> ds.x_train.shape, ds.x_test.shape, ds.num_classes
    ((1438, 64), (359, 64), 10)
    >>> xb, yb = next(epoch_batches(ds.x_train, ds.y_train, batch_size=64, epoch=0, seed=0))
    >>> xb.dtype, yb.dtype, xb.shape
    (dtype('float32'), dtype('int32'), (64, 64))

Everything is a pure function of its seed: the split, the standardization (train statistics
only) and the order of the batches of each epoch, so every worker and every backend sees the
same batches.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

__all__ = [
    "Dataset",
    "load_digits",
    "load_clicks",
    "dataset_for",
    "load_npz",
    "from_arrays",
    "epoch_batches",
    "shard",
    "num_batches",
    "worker_samples",
]

DIGITS_FILE = "digits.csv.gz"


@dataclass(frozen=True)
class Dataset:
    """A train/test split: float32 features [N, D] (standardized) and int32 labels [N].

    With ``log`` (a :class:`~asyncnet.model.zoo.dlrm.ClickLog`), ``x_*`` are int64 row numbers
    [N, 1] into it and ``y_*`` its clicks: batching, sharding and Hogwild's parts work on rows,
    and :meth:`feeds` turns rows into the model's inputs."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    name: str = "digits"
    log: Any = None

    @property
    def input_dim(self) -> int:
        return int(self.x_train.shape[1])

    def feeds(self, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        """The blobs to feed for examples ``x, y``: ``data`` and ``label``, or the click log's rows."""
        if self.log is None:
            return {"data": x, "label": y}
        return self.log.batch(x[:, 0])

    def optimal_auc(self) -> float | None:
        """The click log's ground truth's AUC on the test rows (None without a log)."""
        if self.log is None or getattr(self.log, "p", None) is None:
            return None
        from asyncnet.model.zoo.dlrm import auc

        rows = self.x_test[:, 0]
        return auc(self.log.clicks[rows], self.log.p[rows])


def load_clicks(n_train: int = 16000, n_test: int = 4000, seed: int = 0) -> Dataset:
    """A generated click log for ``dlrm`` (:func:`asyncnet.model.zoo.dlrm.click_log`): train
    rows drawn with ``seed``, test rows with ``seed + 1``, from the same ground truth.

        >>> ds = load_clicks(100, 50)
        >>> ds.x_train.shape, int(ds.x_test[0, 0]), sorted(ds.feeds(ds.x_train[:2], ds.y_train[:2]))[:2]
        ((100, 1), 100, ['click', 'dense'])
    """
    from asyncnet.model.zoo.dlrm import ClickLog, click_log

    tr, te = click_log(n_train, seed=seed), click_log(n_test, seed=seed + 1)
    log = ClickLog(
        np.concatenate([tr.dense, te.dense]),
        [np.concatenate(p) for p in zip(tr.ids, te.ids)],
        np.concatenate([tr.lengths, te.lengths]),
        np.concatenate([tr.clicks, te.clicks]),
        np.concatenate([tr.p, te.p]),
    )
    rows = np.arange(n_train + n_test, dtype=np.int64)[:, None]
    clicks = log.clicks.astype(np.int32)
    return Dataset(
        x_train=rows[:n_train],
        y_train=clicks[:n_train],
        x_test=rows[n_train:],
        y_test=clicks[n_train:],
        num_classes=2,
        name="clicks",
        log=log,
    )


def dataset_for(model: str) -> Dataset:
    """The embedded or generated data of a zoo model: the click log for dlrm, else the digits."""
    return load_clicks() if model == "dlrm" else load_digits()


@lru_cache(maxsize=1)
def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    with resources.files("asyncnet.data").joinpath(DIGITS_FILE).open("rb") as fh:
        text = gzip.decompress(fh.read()).decode("ascii")
    table = np.loadtxt(text.splitlines(), delimiter=",", dtype=np.int64)
    if table.shape != (1797, 65):
        raise ValueError(f"{DIGITS_FILE}: expected 1797 rows of 65 integers, found shape {table.shape}")
    images, labels = table[:, :64], table[:, 64]
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_digits(test_fraction: float = 0.2, seed: int = 0, standardize: bool = True) -> Dataset:
    """The digits data set, split into train and test by a seeded stratified shuffle.

    Features are float32; with ``standardize`` each pixel is centred and scaled by the train
    set's mean and standard deviation (pixels constant over the train set are only centred).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    images, labels = _raw_digits()
    rng = np.random.default_rng(seed)
    test_idx, train_idx = [], []
    for c in range(10):  # stratified: every class keeps the same train/test proportion
        idx = rng.permutation(np.flatnonzero(labels == c))
        k = int(round(len(idx) * test_fraction))
        test_idx.append(idx[:k])
        train_idx.append(idx[k:])
    tr = rng.permutation(np.concatenate(train_idx))
    te = rng.permutation(np.concatenate(test_idx))
    x = images.astype(np.float64)
    x_train, x_test = x[tr], x[te]
    if standardize:
        mean = x_train.mean(axis=0)
        std = x_train.std(axis=0)
        std[std < 1e-8] = 1.0
        x_train = (x_train - mean) / std
        x_test = (x_test - mean) / std
    return Dataset(
        x_train=np.ascontiguousarray(x_train, np.float32),
        y_train=labels[tr].astype(np.int32),
        x_test=np.ascontiguousarray(x_test, np.float32),
        y_test=labels[te].astype(np.int32),
        num_classes=10,
    )


def num_batches(num_samples: int, batch_size: int, multiple_of: int = 1) -> int:
    """How many batches :func:`epoch_batches` yields for these sizes."""
    per = (batch_size // multiple_of) * multiple_of
    full, rest = divmod(num_samples, per)
    return full + (1 if (rest // multiple_of) * multiple_of > 0 else 0)


def epoch_batches(
    x: np.ndarray, y: np.ndarray, batch_size: int, epoch: int, seed: int = 0, multiple_of: int = 1
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The batches of one epoch, in an order fixed by ``(seed, epoch)``.

    Every batch size is a multiple of ``multiple_of`` (the number of data-parallel workers, so
    each gets an equal shard and the mean of the shard means is the batch mean); the few
    samples left over are dropped for this epoch only (the next shuffle uses them).
    """
    if batch_size < multiple_of or multiple_of < 1:
        raise ValueError(f"batch_size ({batch_size}) must be at least the number of workers ({multiple_of})")
    per = (batch_size // multiple_of) * multiple_of
    order = np.random.default_rng([seed, epoch]).permutation(len(x))
    for start in range(0, len(order), per):
        idx = order[start : start + per]
        idx = idx[: (len(idx) // multiple_of) * multiple_of]
        if len(idx):
            yield x[idx], y[idx]


def shard(xb: np.ndarray, yb: np.ndarray, world_size: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker ``rank``'s contiguous share of a batch (equal shares when the size divides).

    >>> import numpy as np
    >>> shard(np.arange(6), np.arange(6), 2, 1)[0]
    array([3, 4, 5])
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    n = len(xb)
    lo, hi = n * rank // world_size, n * (rank + 1) // world_size
    return np.ascontiguousarray(xb[lo:hi]), np.ascontiguousarray(yb[lo:hi])


def worker_samples(
    x: np.ndarray, y: np.ndarray, epoch: int, seed: int, world_size: int, rank: int
) -> tuple[np.ndarray, np.ndarray]:
    """Worker ``rank``'s disjoint part of one epoch's shuffled samples (Hogwild workers)."""
    order = np.random.default_rng([seed, epoch, 1]).permutation(len(x))
    mine = order[rank::world_size]
    return x[mine], y[mine]


#: The example shape each zoo model reads (features per example, flattened): None takes any width.
MODEL_INPUTS = {"mlp": None, "cnn": (1, 8, 8), "lstm": (8, 8)}


def load_npz(path: str, model: str = "mlp", test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """A data set from the npz file ``path`` with arrays ``x`` [N, ...] (features) and ``y`` [N]
    (class ids 0..C-1), and optionally ``x_test``/``y_test``; without them a seeded
    ``test_fraction`` of the examples is held out. Checked before any training step: ``x`` must
    fit ``model`` (cnn: 64 or 1x8x8 per example, lstm: 64 or 8x8; mlp: any width) and be real
    numbers (converted to float32, finite), ``y`` integers (or integral floats, converted to
    int32) in 0..C-1 with C >= 2. Every problem raises one-line :class:`TrainConfigError`.
    Features are used as given (not standardized).
    """
    from asyncnet.errors import TrainConfigError

    named = isinstance(path, (str, os.PathLike))
    where = f"--data {path}" if named else "train() data"
    if model not in MODEL_INPUTS and ":" not in model:  # "module:function": a user's model reads x as given
        raise TrainConfigError(
            f"{where}: --data feeds mlp, cnn or lstm (x and y arrays), not {model} "
            "(dlrm trains on its generated click log)"
        )
    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):
                raise TrainConfigError(
                    f"{where}: expected an npz archive with arrays x and y, found a single .npy array"
                )
            arrays = {k: f[k] for k in f.files}
    except TrainConfigError:
        raise
    except FileNotFoundError:
        raise TrainConfigError(f"{where}: no such file") from None
    except Exception as e:  # noqa: BLE001 - any unreadable file is one kind of error here
        raise TrainConfigError(f"{where}: not a readable npz archive ({type(e).__name__}: {e})") from None
    missing = [k for k in ("x", "y") if k not in arrays]
    if missing or (("x_test" in arrays) != ("y_test" in arrays)):
        raise TrainConfigError(
            f"{where}: expected arrays x and y (and optionally both x_test and y_test), found {sorted(arrays)}"
        )
    x, y = _features(arrays["x"], model, f"{where}: x"), _labels(arrays["y"], f"{where}: y")
    _same_length(x, y, where, "x", "y")
    if "x_test" in arrays:
        xt, yt = _features(arrays["x_test"], model, f"{where}: x_test"), _labels(arrays["y_test"], f"{where}: y_test")
        _same_length(xt, yt, where, "x_test", "y_test")
        if xt.shape[1] != x.shape[1]:
            raise TrainConfigError(f"{where}: x_test has {xt.shape[1]} features per example, x has {x.shape[1]}")
    else:
        if len(x) < 2:
            raise TrainConfigError(f"{where}: expected at least 2 examples to hold out a test set, found {len(x)}")
        order = np.random.default_rng(seed).permutation(len(x))
        k = max(1, int(round(len(x) * test_fraction)))
        x, y, xt, yt = x[order[k:]], y[order[k:]], x[order[:k]], y[order[:k]]
    num_classes = int(max(y.max(), yt.max())) + 1
    if num_classes < 2:
        raise TrainConfigError(f"{where}: expected labels of at least 2 classes (0..C-1), found only class 0")
    return Dataset(
        x_train=x,
        y_train=y,
        x_test=xt,
        y_test=yt,
        num_classes=num_classes,
        name=os.path.basename(path) if named else "arrays",
    )


def _features(x: np.ndarray, model: str, where: str) -> np.ndarray:
    from asyncnet.errors import TrainConfigError

    if x.dtype.kind not in "biuf":
        raise TrainConfigError(f"{where}: expected real numbers (float or int), found dtype {x.dtype}")
    if x.ndim < 2 or x.size == 0:
        raise TrainConfigError(
            f"{where}: expected shape [N, features...] with N >= 1 and at least 1 feature, found {list(x.shape)}"
        )
    want = MODEL_INPUTS.get(model)
    per = x.shape[1:]
    if want is not None and per not in (want, (int(np.prod(want)),)):
        shapes = f"[N, {int(np.prod(want))}] or [N, {', '.join(map(str, want))}]"
        raise TrainConfigError(f"{where}: model {model} reads {shapes}, found {list(x.shape)}")
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32 becomes inf: refused just below
        out = np.ascontiguousarray(x.reshape(len(x), -1) if model in MODEL_INPUTS else x, np.float32)
    if not np.isfinite(out).all():
        raise TrainConfigError(f"{where}: expected finite values, found NaN or inf (or values beyond float32)")
    return out


def _labels(y: np.ndarray, where: str) -> np.ndarray:
    from asyncnet.errors import TrainConfigError

    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise TrainConfigError(f"{where}: expected class ids of shape [N], found {list(y.shape)}")
    if y.dtype.kind == "f":
        if not (np.isfinite(y).all() and (y == np.round(y)).all()):
            raise TrainConfigError(f"{where}: expected integral class ids, found non-integer floats")
    elif y.dtype.kind not in "iub":
        raise TrainConfigError(f"{where}: expected integer class ids, found dtype {y.dtype}")
    if len(y) and (y.min() < 0 or y.max() > 2**31 - 1):
        raise TrainConfigError(f"{where}: expected class ids 0..C-1, found values from {y.min()} to {y.max()}")
    return y.astype(np.int32)


def _same_length(x: np.ndarray, y: np.ndarray, where: str, xn: str, yn: str) -> None:
    from asyncnet.errors import TrainConfigError

    if len(x) != len(y):
        raise TrainConfigError(f"{where}: {xn} has {len(x)} examples, {yn} has {len(y)}")


def from_arrays(data: Any, model: str = "mlp", test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """A data set from numpy arrays: ``(x, y)``, ``(x, y, x_test, y_test)`` or a dict with
    ``x``, ``y`` (and optionally ``x_test``, ``y_test``), checked as :func:`load_npz` checks a
    file (a user's model reads ``x`` in the shape given).

        >>> ds = from_arrays((np.zeros((10, 3)), np.arange(10) % 2), model="my_models:tiny")
        >>> ds.x_train.shape, ds.x_test.shape, ds.num_classes
        ((8, 3), (2, 3), 2)
    """
    import io

    from asyncnet.errors import TrainConfigError

    if isinstance(data, (tuple, list)) and len(data) in (2, 4):
        data = dict(zip(("x", "y", "x_test", "y_test"), data))
    if not isinstance(data, dict):
        raise TrainConfigError(
            f"train() data: expected (x, y), (x, y, x_test, y_test) or a dict of arrays, got {type(data).__name__}"
        )
    buf = io.BytesIO()
    try:
        np.savez(buf, **{k: np.asarray(v) for k, v in data.items()})
    except (TypeError, ValueError) as e:
        raise TrainConfigError(f"train() data: expected numpy arrays ({e})") from None
    buf.seek(0)
    return load_npz(buf, model, test_fraction, seed)  # type: ignore[arg-type]
