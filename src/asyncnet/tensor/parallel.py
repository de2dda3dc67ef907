"""Intra-op parallelism on an idle executor thread: a big matrix product shared by two threads.

Policy
------
The thread budget (:mod:`asyncnet.tensor.threads`) holds every executor worker's BLAS to one
thread, so that workers x BLAS threads never exceed the cores. Where a net's graph leaves a
worker idle (the one runnable op is a big GEMM on the critical path), that core does nothing.
Here the op uses it: the product is cut into :data:`SPLIT_PIECES` blocks of whole output rows (or
columns), a share of them is *offered* to an idle thread of the executor running the op, and
both threads take the next block not yet taken until none is left. Each block is one
single-threaded BLAS call writing into its part of the output (``np.matmul(..., out=...)``;
numpy releases the GIL), so two run at once. Torch CPU tensors are cut the same way through
``torch.mm`` and ``torch.addmm`` with ``out=`` (FC's bias: by rows only).

* **No oversubscription.** A share is offered only when this thread was given a *spare* by its
  executor (:func:`spare_thread`; the async executor gives one to its pool workers and to the
  helping caller), that spare has an idle worker, the BLAS runs one thread per caller
  (:func:`asyncnet.tensor.threads.intra_op_threads` is 1) and a core is free: executor threads
  running ops plus offered shares stay within ``process_cores()``, checked and reserved under
  one lock (:func:`cores_in_use` reads the count), and the machine has an idle core at that
  moment (:func:`machine_has_room`: fewer runnable threads than cores, from /proc/loadavg):
  on a machine other jobs keep busy, a spare preempted in the middle of its share would make
  the op wait (measured at load 9.5: a 67 M product's median 3.8 ms split, 0.9 ms whole).
* **Never a wait on a thread that has not started.** The op's thread computes blocks until none
  is left; a spare that never started is withdrawn, and one that did is waited for only for
  the block it is computing (a BLAS call in progress). A late, busy or shut-down spare costs
  nothing but the offer.
* **The same bits.** A split is used for an operand layout only after one check that it gives
  exactly the bits of the unsplit product (BLAS kernels may pick a different code path for a
  smaller product); a layout that differs is never split. The first call of each layout
  computes both and returns the unsplit one.
* **Errors.** An exception in any block is raised by the op's call once no block is running;
  blocks not started by then are skipped, so nothing writes to an output after the op returned.

State (module globals, guarded by ``_lock``)::

    _busy      int                   executor threads running ops, plus offered halves in flight
    _checked   dict[key, bool]       operand layout -> the split gives the unsplit bits
    _local     threading.local       .spare: the calling thread's offer function, or None

Example::

    >>> import numpy as np
    >>> a, b = np.ones((64, 8)), np.ones((8, 4))
    >>> out = np.empty((64, 4))
    >>> matmul_into(a, b, out) is out   # no spare given to this thread: one plain call
    True
    >>> float(out[0, 0])
    8.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from asyncnet.tensor.threads import intra_op_threads, process_cores

__all__ = [
    "ENABLED",
    "SPLIT_MIN_MACS",
    "SPLIT_MIN_ROWS",
    "SPLIT_PIECES",
    "ROOM_TTL",
    "Offer",
    "Product",
    "spare_thread",
    "enter",
    "leave",
    "cores_in_use",
    "runnable_threads",
    "machine_has_room",
    "run_pieces",
    "run_halves",
    "product_into",
    "matmul_into",
    "matmul",
    "torch_mm",
    "torch_addmm",
    "stats",
]

#: off by default: measured on the large DLRM at 2 threads on a quiet 2-core VM, a step with
#: splits took 1.03-1.05x the time of one without (`python -m benchmarks dlrm --sizes large
#: --scaling`): the sparse updates beside the products hold the GIL, so no core is really idle.
#: Set True to split (the benchmark's "split on" does).
ENABLED = False
#: products of fewer multiply-adds than this run whole. Measured on a 2-core VM: an offered share
#: starts 18-27 us (p10-p90) after the offer, one core computes 85-95 G multiply-adds/s in
#: single-threaded sgemm; 16 M make halves of ~90 us, four times the wake-up
SPLIT_MIN_MACS = 16_000_000
#: each piece keeps at least this many rows (or columns): thinner products take other BLAS paths
SPLIT_MIN_ROWS = 16
#: pieces of a split product, shared between the op's thread and its spare as each gets free:
#: the op's thread waits at most for one piece (a spare preempted mid-piece costs a quarter)
SPLIT_PIECES = 4

#: ``offer(fn) -> bool``: run ``fn()`` on an idle thread soon; False when none is idle
Offer = Callable[[Callable[[], None]], bool]

_lock = threading.Lock()
_busy = 0
_checked: dict[tuple[Any, ...], bool] = {}
_local = threading.local()
_stats = {"split": 0, "whole": 0, "taken_back": 0}


@contextmanager
def spare_thread(offer: Offer | None) -> Iterator[None]:
    """While inside, ops on this thread may offer half their work to ``offer`` (see the module
    docstring), and this thread counts as a busy core.

    >>> with spare_thread(lambda fn: False):
    ...     cores_in_use()
    1
    """
    previous = enter(offer)
    try:
        yield
    finally:
        leave(previous)


def enter(offer: Offer | None) -> Offer | None:
    """:func:`spare_thread`'s entry without a context manager (the executor's hot path): returns
    what :func:`leave` restores."""
    global _busy
    previous = getattr(_local, "spare", None)
    _local.spare = offer
    with _lock:
        _busy += 1
    return previous


def leave(previous: Offer | None) -> None:
    """Undo one :func:`enter`."""
    global _busy
    with _lock:
        _busy -= 1
    _local.spare = previous


def cores_in_use() -> int:
    """Executor threads running ops now plus offered halves in flight: what a split keeps
    within ``process_cores()``."""
    return _busy


def stats() -> dict[str, int]:
    """Counts since start: products split, run whole (a split was possible but not granted), and
    offered halves the op's own thread took back."""
    return dict(_stats)


class _Pieces:
    """The pieces of one split product, shared by the op's thread and its spare: each takes the
    next piece not yet taken, so the op's thread waits at most for the piece the spare is
    computing. After a failure the pieces not started are skipped."""

    __slots__ = ("fns", "next", "left", "lock", "done", "error", "spare")

    def __init__(self, fns: list[Callable[[], None]]):
        self.fns = fns
        self.next = 0
        self.left = len(fns)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.spare = 0  # 0 offered, 1 started, 2 withdrawn (the op's thread finished first)

    def work(self) -> None:
        """Compute pieces until none is left to take."""
        fns = self.fns
        while True:
            with self.lock:
                i = self.next
                if i >= len(fns):
                    return
                self.next = i + 1
            try:
                if self.error is None:
                    fns[i]()
            except BaseException as exc:  # noqa: BLE001 - raised by the op's own thread
                with self.lock:
                    if self.error is None:
                        self.error = exc
            finally:
                with self.lock:
                    self.left -= 1
                    if self.left == 0:
                        self.done.set()

    def on_spare(self) -> None:
        """The spare thread's entry: take pieces unless the op's thread withdrew the offer; the
        core the offer reserved is given back by whichever of the two ends it."""
        with self.lock:
            if self.spare == 2:
                return
            self.spare = 1
        try:
            self.work()
        finally:
            _unreserve_core()

    def withdraw(self) -> bool:
        """The op's thread ran out of pieces: True when the spare never started (the offer is
        withdrawn; the caller gives the reserved core back)."""
        with self.lock:
            if self.spare == 0:
                self.spare = 2
                return True
            return False


def runnable_threads() -> int | None:
    """Threads runnable on the machine right now, this one included (Linux: the fourth field of
    /proc/loadavg); None where that is not known.

    >>> n = runnable_threads(); n is None or n >= 1
    True
    """
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


#: seconds a reading of the machine's runnable threads is reused (a read costs ~5-10 us)
ROOM_TTL = 0.002
_room: list[float | bool] = [0.0, True]  # [monotonic time of the last reading, its answer]


def machine_has_room(cores: int) -> bool:
    """Whether a core is idle on the machine now: other processes' threads take cores too, and a
    spare thread preempted in the middle of its share would keep the op waiting. The answer is
    reused for :data:`ROOM_TTL` seconds."""
    now = time.monotonic()
    if now - _room[0] < ROOM_TTL:  # type: ignore[operator]
        return bool(_room[1])
    running = runnable_threads()
    answer = running is None or running < cores
    _room[0], _room[1] = now, answer
    return answer


def _reserve_core() -> bool:
    global _busy
    cores = process_cores()
    with _lock:
        if _busy >= cores:
            return False
        _busy += 1
    if machine_has_room(cores):
        return True
    _unreserve_core()
    return False


def _unreserve_core() -> None:
    global _busy
    with _lock:
        _busy -= 1


def run_pieces(fns: list[Callable[[], None]], whole: Callable[[], None] | None = None) -> bool:
    """Run the pieces ``fns`` here, sharing them with this thread's spare when one is free (see
    the module docstring); when none is, ``whole()`` (the same work in one call) if given, else
    the pieces one after another. True when the spare was offered a share."""
    offer = getattr(_local, "spare", None)
    offered = False
    if offer is not None and intra_op_threads() == 1 and _reserve_core():
        pieces = _Pieces(fns)
        try:
            offered = offer(pieces.on_spare)
        finally:
            if not offered:
                _unreserve_core()
    if not offered:
        if whole is not None:
            whole()
        else:
            for fn in fns:
                fn()
        return False
    pieces.work()
    if pieces.withdraw():
        _unreserve_core()
        _stats["taken_back"] += 1
    pieces.done.wait()  # only a piece the spare is computing: a BLAS call that ends
    if pieces.error is not None:
        raise pieces.error
    return True


def run_halves(first: Callable[[], None], second: Callable[[], None]) -> bool:
    """:func:`run_pieces` of two pieces."""
    return run_pieces([first, second])


#: a product into a given output: ``product(a, b, out)`` (``np.matmul(a, b, out=out)``, ``torch.mm``, ...)
Product = Callable[[Any, Any, Any], Any]


def _may_share() -> bool:
    """Whether a share could be offered now (the checks of :func:`run_pieces`, without the
    reservation): products that cannot be shared take the plain call at once."""
    if not ENABLED or getattr(_local, "spare", None) is None:
        return False
    cores = process_cores()
    if intra_op_threads() == 1 and _busy < cores and machine_has_room(cores):
        return True
    _stats["whole"] += 1  # big enough, but no core to share it with
    return False


def _small(a: Any, b: Any) -> bool:
    """Too small to split (the common case, checked first)."""
    return a.shape[0] * a.shape[1] * b.shape[1] < SPLIT_MIN_MACS


def _np_product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.matmul(a, b, out=out)


def _layout(kind: str, a: Any, b: Any, axis: int, cuts: tuple[int, ...]) -> tuple[Any, ...]:
    return (
        kind,
        tuple(a.shape),
        tuple(b.shape),
        tuple(a.stride()) if kind != "np" else a.strides,
        tuple(b.stride()) if kind != "np" else b.strides,
        str(a.dtype),
        str(b.dtype),
        axis,
        cuts,
    )


def _plan(a: Any, b: Any, rows_only: bool) -> tuple[int, tuple[int, ...]] | None:
    """(axis, cuts) of a split of ``a @ b`` worth offering: :data:`SPLIT_PIECES` blocks (two
    when too thin for more) of whole rows of the output (axis 0) when it has enough, else of its
    columns (axis 1), at multiples of :data:`SPLIT_MIN_ROWS`; None when the product is too small."""
    m, k = a.shape
    n = b.shape[1]
    if not ENABLED or m * k * n < SPLIT_MIN_MACS:
        return None
    for axis, size in ((0, m), (1, n))[: 1 if rows_only else 2]:
        if size >= 2 * SPLIT_MIN_ROWS:
            pieces = max(2, min(SPLIT_PIECES, size // SPLIT_MIN_ROWS))
            cuts = tuple(round(size * j / pieces / SPLIT_MIN_ROWS) * SPLIT_MIN_ROWS for j in range(1, pieces))
            return axis, tuple(sorted(set(c for c in cuts if 0 < c < size)))
    return None


def _parts(a: Any, b: Any, out: Any, axis: int, cuts: tuple[int, ...]) -> list[tuple[Any, Any, Any]]:
    edges = (0, *cuts, out.shape[axis])
    if axis == 0:
        return [(a[s:e], b, out[s:e]) for s, e in zip(edges, edges[1:])]
    return [(a, b[:, s:e], out[:, s:e]) for s, e in zip(edges, edges[1:])]


def _same_bits(product: Product, a: Any, b: Any, out: Any, axis: int, cuts: tuple[int, ...], kind: str) -> bool:
    """Compute ``a @ b`` into ``out`` whole, and in pieces into a scratch array: equal bits?"""
    product(a, b, out)
    if kind == "np":
        trial = np.empty_like(out)
    else:
        trial = out.new_empty(out.shape)
    for x, y, o in _parts(a, b, trial, axis, cuts):
        product(x, y, o)
    if kind == "np":
        return bool(np.array_equal(trial, out, equal_nan=True))
    return bool((trial == out).logical_or(trial.isnan() & out.isnan()).all())


def product_into(a: Any, b: Any, out: Any, product: Product = _np_product, kind: str = "np") -> Any:
    """``product(a, b, out)``, the 2-D product ``a @ b`` written into ``out`` (rows of ``out``
    are rows of ``a``), in pieces shared with an idle thread when this thread has a spare, the
    product is big enough and the pieces give the same bits (see the module docstring). ``kind``
    names the product for the layout check ("np": numpy's matmul; a product whose output rows
    need more than ``a``'s rows, as addmm's bias, names itself "rows:..." and is split by rows
    only). Returns ``out``."""
    plan = _plan(a, b, kind.startswith("rows:"))
    if plan is None or getattr(_local, "spare", None) is None or intra_op_threads() != 1:
        product(a, b, out)  # (the layout check and the split assume one BLAS thread per call)
        return out
    axis, cuts = plan
    key = _layout(kind, a, b, axis, cuts)
    ok = _checked.get(key)
    if ok is None:
        _checked[key] = _same_bits(product, a, b, out, axis, cuts, kind)
        return out
    if not ok:
        product(a, b, out)
        return out
    parts = _parts(a, b, out, axis, cuts)
    if run_pieces([_bind(product, *part) for part in parts], _bind(product, a, b, out)):
        _stats["split"] += 1
    else:
        _stats["whole"] += 1
    return out


def _bind(product: Product, a: Any, b: Any, out: Any) -> Callable[[], None]:
    return lambda: product(a, b, out)


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b, out=out)`` for 2-D float arrays through :func:`product_into`.

    >>> out = np.empty((2, 2)); matmul_into(np.eye(2), np.full((2, 2), 3.0), out)[1, 1]
    np.float64(3.0)
    """
    if getattr(_local, "spare", None) is None or _small(a, b):
        return np.matmul(a, b, out=out)
    return product_into(a, b, out)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-D float numpy arrays of one dtype, through :func:`product_into`.

    >>> matmul(np.ones((2, 3)), np.ones((3, 2)))
    array([[3., 3.],
           [3., 3.]])
    """
    if a.shape[0] * a.shape[1] * b.shape[1] < SPLIT_MIN_MACS or not _may_share():
        return a @ b  # the common case
    return product_into(a, b, np.empty((a.shape[0], b.shape[1]), np.result_type(a, b)))


def torch_mm(a: Any, b: Any) -> Any:
    """``a.mm(b)`` for 2-D float CPU torch tensors, through :func:`product_into`."""
    if _small(a, b) or not _may_share():
        return a.mm(b)

    return product_into(a, b, a.new_empty((a.shape[0], b.shape[1])), _torch_mm_out, "mm")


def torch_addmm(bias: Any, a: Any, b: Any) -> Any:
    """``bias.addmm(a, b)`` (bias [N] on every row) for 2-D float CPU torch tensors, through
    :func:`product_into` (split by rows only: each row adds the whole bias)."""
    if _small(a, b) or not _may_share():
        return bias.addmm(a, b)
    import torch

    def addmm(x: Any, y: Any, o: Any) -> None:
        torch.addmm(bias, x, y, out=o)

    return product_into(a, b, a.new_empty((a.shape[0], b.shape[1])), addmm, "rows:addmm")


def _torch_mm_out(a: Any, b: Any, out: Any) -> None:
    import torch

    torch.mm(a, b, out=out)
