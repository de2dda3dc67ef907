"""``ProcessGradientSync``: an all-reduce between spawned processes, through shared memory.

Same protocol, semantics and errors as :class:`~asyncnet.sync.ThreadedGradientSync` (the round
logic is shared, :mod:`asyncnet.sync._rounds`), with the group state in a shared-memory control
segment guarded by a :class:`~asyncnet.sync._robustcond.RobustCondition`: a robust
process-shared mutex and a futex word, which no process can leave broken by dying.

Data path of one round, worker ``w``:

1. unless its gradients already live in its shared arena (:meth:`ProcessGradientSync.shared_empty`),
   copy them into its own staging segment (grown when a bigger bucket comes);
2. publish where each member lies (segment, offset) and arrive (layout check, timeout);
3. reduce its slice: sum every worker's slice in worker order, divide, write the mean back into
   every worker's buffer; in cache-sized blocks, all workers at once;
4. depart (everyone's slice is written), then copy the mean out of its staging segment.

What depends only on a bucket's layout (its fingerprint and text, offsets, the numpy views of
every worker's buffers) is computed once per layout and reused, so a round of small gradients
costs a few lock operations, a spin on a shared word and the reduction itself.

A worker's staging segment is only written by peers while that worker is inside the round, so a
fast worker can start the next round while a slow one still copies out. Peers that die are
noticed: a waiter that has waited a whole poll tick checks whether the missing workers'
processes still exist, and the process launcher
(:func:`~asyncnet.sync.launch.run_process_workers`, behind ``run_parallel_workers(...,
backend="processes")``) aborts the group as soon as a child exits early. The parent that
created the group unlinks every segment when it closes, crash or not; if the parent itself
dies, the workers the launcher started notice, unlink the group's segments and exit. Every
name starts with ``asyncnet_sync_<pid of the creator>_``, so ``asyncnet clean`` can remove
what a group whose every process was killed left behind.

A worker announces its pid when it first uses its handle; one that is killed before that is
unknown to its peers unless the launcher started it (the launcher knows every pid from the
start): give hand-started groups a timeout.

Handles pickle (by name), so they can be passed to processes however they are started::

    syncs = ProcessGradientSync.new_workers(2, timeout=10)
    procs = [ctx.Process(target=train, args=(s,)) for s in syncs]   # ctx = get_context("spawn")
    ...
    ProcessGradientSync.close_group(syncs)                           # after joining them
"""

from __future__ import annotations

import os
import secrets
import threading
import weakref
from typing import Any

import numpy as np

from asyncnet._shm import Segment, close_segment, open_segment, unlink_segment
from asyncnet.cleanup import pid_gone
from asyncnet.errors import SyncAbortedError, SyncError
from asyncnet.sync._bucket import Bucket, format_layout, open_bucket, slice_bounds
from asyncnet.sync._reduce import reduce_slice
from asyncnet.sync._robustcond import RobustCondition
from asyncnet.sync._rounds import W_ARENAS, W_PID, W_SEG_CAP, W_SEG_GEN, Control, RoundEngine

__all__ = ["ProcessGradientSync", "WorkerDiedError", "PREFIX"]

PREFIX = "asyncnet_sync_"  # + "<creator pid>_<random>": every segment of a group starts with it
_ALIGN = 64
_MIN_SEGMENT = 1 << 20
_POLL = 0.05
_CTL = RobustCondition.BYTES  # the control segment: the condition, then the Control buffer
# A bucket whose staged copy fits in _SMALL_BYTES (and has at most _SMALL_ROWS members) is
# *small*: it is staged in one of two halves by round parity, every worker reduces the whole of
# it into its own arrays, and a round is one barrier. Larger ones are reduced in place, a slice
# per worker, and take two. Staging segment: [small half 0 | small half 1 | large area].
_SMALL_BYTES = 256 * 1024
_SMALL_ROWS = 1024
_ROWS = 4096
# location table regions, per worker: (first row, rows): large buckets, small halves 0 and 1
_REGIONS = ((0, _ROWS), (_ROWS, _SMALL_ROWS), (_ROWS + _SMALL_ROWS, _SMALL_ROWS))


class WorkerDiedError(SyncError):
    """A worker process exited (killed, crashed, or ``os._exit``) without returning."""


def _address(seg: Segment) -> int:
    return np.frombuffer(seg.buf, np.uint8, 1).__array_interface__["data"][0]


def _layout_offsets(bucket: Bucket) -> tuple[list[int], int]:
    offsets, pos = [], 0
    for v in bucket.views:
        offsets.append(pos)
        pos += -(-v.nbytes // _ALIGN) * _ALIGN
    return offsets, pos


def _open_control(prefix: str, n: int, seg: Segment, init: bool) -> tuple[RobustCondition, Control]:
    cond = RobustCondition(seg.buf, 0, init=init)
    control = Control(n, seg.buf, offset=_CTL, ready=False)
    if init:
        control.init()
    return cond, control


def unlink_group(prefix: str, control: Control) -> None:
    """Unlink every segment of the group ``prefix`` (the names are derived from ``control``)."""
    n = control.n
    for i in range(n):
        gen = int(control.ints[control.w(i, W_SEG_GEN)])
        for g in range(max(1, gen - 1), gen + 1):
            unlink_segment(f"{prefix}_w{i}_g{g}")
        for k in range(1, int(control.ints[control.w(i, W_ARENAS)]) + 1):
            unlink_segment(f"{prefix}_w{i}_a{k}")
    unlink_segment(f"{prefix}_ctl")


class _Group:
    """The parent's ownership of a group: unlinks every segment on close (or at exit)."""

    def __init__(self, prefix: str, n: int):
        self.prefix = prefix
        self.n = n
        self.ctl_seg = open_segment(f"{prefix}_ctl", create=True, size=_CTL + Control.nbytes(n))
        self.cond, self.control = _open_control(prefix, n, self.ctl_seg, init=True)
        self._finalizer = weakref.finalize(self, _cleanup_group, prefix, self.ctl_seg, self.cond, self.control)

    def close(self) -> None:
        self._finalizer()

    def set_pid(self, worker: int, pid: int) -> None:
        self.control.ints[self.control.w(worker, W_PID)] = pid

    def abort(self, reason: str) -> None:
        """Abort the group from the parent (wakes every waiting worker)."""
        if self._finalizer.alive:
            RoundEngine(self.control, self.cond, -1, None).abort(reason)


def _cleanup_group(prefix: str, ctl_seg: Segment, cond: RobustCondition, control: Control) -> None:
    unlink_group(prefix, control)
    cond.detach()
    control.release()
    close_segment(ctl_seg)


def _nothing() -> None:
    pass


class _Plan:
    """What one bucket layout (with its operation) needs, computed once: fingerprint and text,
    member offsets, whether it is *small* (one barrier per round), and per staging generation
    the views of the staging areas (``areas``: slot -> (views, rows))."""

    __slots__ = ("digest", "text", "what", "offsets", "total", "small", "gen", "areas")

    def __init__(self, bucket: Bucket, op: str, root: int, n: int):
        tag = op if op == "mean" else f"{op}:{root}"
        self.digest = bucket.digest(tag)
        self.text = f"{format_layout(bucket.layout)} ({tag})"
        self.what = "sync round" if op == "mean" else "broadcast round"
        self.offsets, self.total = _layout_offsets(bucket)
        self.small = self.total <= _SMALL_BYTES and len(self.offsets) <= _SMALL_ROWS
        self.gen = 0
        self.areas: dict[int, tuple[list[np.ndarray], list]] = {}


class ProcessGradientSync:
    """One worker's handle on a group of processes; create the group with :meth:`new_workers`."""

    def __init__(self, prefix: str, n: int, worker_id: int, timeout: float | None, owner: _Group | None):
        self._prefix = prefix
        self._n = n
        self._id = worker_id
        self._timeout = timeout
        self._owner = owner
        self._ctl_seg: Segment | None = None
        self._cond: RobustCondition | None = None
        self._control: Control | None = None
        self._engine: RoundEngine | None = None
        self._segs: dict[tuple[int, int], Segment] = {}  # (worker, segment id) -> segment
        self._arena: tuple[int, Segment] | None = None
        self._arena_bases: list[tuple[int, int, int]] = []  # (segment id, address, size) of each arena
        self._arena_used = 0
        self._scratch: dict = {}
        # per-layout caches: (layout, op, root) -> plan; peers' views by (worker, layout, their
        # rows); the rows this worker last wrote, per table region; everyone's tables
        self._plans: dict[tuple, _Plan] = {}
        self._peer_views: dict[tuple[int, Any, bytes], list[np.ndarray]] = {}
        self._published: dict[int, list] = {}
        self._tables: list[np.ndarray] = []
        self._stage = (0, 0)  # this worker's staging (generation, capacity)
        # creating a segment and the orphan clean-up (the parent died: _unlink_group) exclude
        # each other, and nothing is created after it, so no segment outlives the clean-up
        self._create_lock = threading.Lock()
        self._orphaned = False

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def new_workers(cls, n: int, timeout: float | None = None) -> list[ProcessGradientSync]:
        """``n`` handles on a new group (ids ``0 .. n-1``), to pass to spawned processes.

        The caller owns the group: call :meth:`close_group` after the processes are joined (it
        also runs at interpreter exit). ``n < 1`` raises ``ValueError``.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {n!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        prefix = f"{PREFIX}{os.getpid()}_{secrets.token_hex(5)}"
        owner = _Group(prefix, n)
        return [cls(prefix, n, i, timeout, owner) for i in range(n)]

    @staticmethod
    def close_group(syncs: list[ProcessGradientSync]) -> None:
        """Unlink every shared-memory segment of the group (call it in the creating process)."""
        for s in syncs:
            s._detach()
        owners = {id(s._owner): s._owner for s in syncs if s._owner is not None}
        for owner in owners.values():
            owner.close()

    def __getstate__(self) -> dict:
        return {"prefix": self._prefix, "n": self._n, "id": self._id, "timeout": self._timeout}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["prefix"], state["n"], state["id"], state["timeout"], None)  # type: ignore[misc]

    # -- properties -----------------------------------------------------------------------------

    @property
    def is_distributed(self) -> bool:
        return self._n > 1

    @property
    def num_workers(self) -> int:
        return self._n

    @property
    def worker_id(self) -> int:
        return self._id

    @property
    def timeout(self) -> float | None:
        return self._timeout

    @property
    def aborted(self) -> bool:
        """True once the group was aborted (every later collective raises ``SyncAbortedError``)."""
        return self._bind().aborted

    # -- collectives ----------------------------------------------------------------------------

    def sync_gradients(self, grads: Any) -> None:
        """Replace ``grads`` (array, tensor or list of them) in place with the mean over workers."""
        self._collective(grads, "mean", 0)

    def broadcast(self, tensors: Any, root: int = 0) -> None:
        """Overwrite ``tensors`` in place on every worker with worker ``root``'s values."""
        if not 0 <= root < self._n:
            raise ValueError(f"root must be in [0, {self._n}), got {root}")
        self._collective(tensors, "broadcast", root)

    def barrier(self) -> None:
        """Return once every worker of the group called ``barrier`` (a one-number round)."""
        self._collective(np.zeros(1), "broadcast", 0)

    def all_reduce_mean(self, values: Any) -> None:
        """Replace the figures ``values`` in place with their mean over the workers."""
        self._collective(values, "mean", 0)

    def abort(self, reason: str = "aborted") -> None:
        """Abort the whole group: pending and future calls of every worker raise ``SyncAbortedError``."""
        self._bind().abort(reason)

    def shared_empty(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        """A new array in this worker's shared arena (contents undefined).

        Gradients that live in the arena are reduced in place, with no copy in or out: peers
        read and write them directly, as the threaded backend does. Allocate them once and reuse
        them for every round. The arena is freed when the group closes.
        """
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = -(-max(count * dt.itemsize, 1) // _ALIGN) * _ALIGN
        self._bind()
        if self._arena is None or self._arena_used + nbytes > self._arena[1].size:
            self._new_arena(nbytes)
        k, seg = self._arena  # type: ignore[misc]
        arr = np.frombuffer(seg.buf, dt, count, self._arena_used).reshape(shape)
        self._arena_used += nbytes
        return arr

    def _collective(self, grads: Any, op: str, root: int) -> None:
        engine = self._engine if self._engine is not None else self._bind()
        bucket = open_bucket(grads)
        plan = self._plans.get((bucket.layout, op, root))
        if plan is None:
            plan = self._plans[(bucket.layout, op, root)] = _Plan(bucket, op, root, self._n)
        if self._n == 1:  # the mean of one worker: only the round itself (abort, layout checks)
            engine.run(plan.digest, plan.text, _nothing, plan.what, single=True)
        elif plan.small:
            half = engine.round & 1
            staged, locs = self._staging(plan, bucket, half)
            for dst, src in zip(staged, bucket.views):
                np.copyto(dst, src)
            self._publish(1 + half, locs)
            engine.run(plan.digest, plan.text, lambda: self._reduce(bucket, op, root, 1 + half), plan.what, single=True)
        else:
            locs = self._arena_locations(bucket)
            staged = ()
            if locs is None:  # copy into this worker's staging segment
                staged, locs = self._staging(plan, bucket, 2)
                for dst, src in zip(staged, bucket.views):
                    np.copyto(dst, src)
            self._publish(0, locs)
            engine.run(plan.digest, plan.text, lambda: self._reduce(bucket, op, root, 0), plan.what)
            for dst, src in zip(bucket.views, staged):
                np.copyto(dst, src)
        bucket.close()

    def _staging(self, plan: _Plan, bucket: Bucket, slot: int) -> tuple[list[np.ndarray], list]:
        """Views of ``bucket``'s members in staging area ``slot`` (0, 1: the halves for small
        buckets; 2: the area of large ones), and their ``(segment id, offset)`` rows."""
        gen = self._ensure_staging(2 * _SMALL_BYTES + (plan.total if slot == 2 else 0))
        if plan.gen != gen:
            plan.gen, plan.areas = gen, {}
        got = plan.areas.get(slot)
        if got is None:
            base = slot * _SMALL_BYTES
            locs = [(gen, base + off) for off in plan.offsets]
            got = plan.areas[slot] = (self._views_at(self._id, bucket, locs), locs)
        return got

    def _publish(self, region: int, locs: list) -> None:
        """Write this worker's rows of table ``region`` (0: large buckets, 1 and 2: the halves
        of small ones), unless they are already there."""
        if self._published.get(region) != locs:
            base, limit = _REGIONS[region]
            if len(locs) > limit:
                raise ValueError(f"a bucket may hold at most {limit} arrays, got {len(locs)}")
            self._tables[self._id][base : base + len(locs)] = locs
            self._published[region] = locs

    def _reduce(self, bucket: Bucket, op: str, root: int, region: int) -> None:
        """Region 0 (large buckets): this worker's slice of every worker's buffer, in place.
        Regions 1, 2 (small): the whole bucket from everyone's staged copy into this worker's
        own arrays; nobody else writes them, so nobody has to wait for anybody afterwards."""
        base = _REGIONS[region][0]
        k = len(bucket.views)
        views = []
        for i in range(self._n):
            rows = self._tables[i][base : base + k]
            vkey = (i, bucket.layout, rows.tobytes())
            v = self._peer_views.get(vkey)
            if v is None:
                if len(self._peer_views) > 256:
                    self._peer_views.clear()
                v = self._peer_views[vkey] = self._views_at(i, bucket, rows.tolist())
            views.append(v)
        if region == 0:
            lo, hi = slice_bounds(bucket.size, self._n, self._id)
            reduce_slice(views, views, lo, hi, op, root, self._scratch)  # type: ignore[arg-type]
        else:
            reduce_slice(views, [bucket.views], 0, bucket.size, op, root, self._scratch)  # type: ignore[arg-type]

    # -- segments -------------------------------------------------------------------------------
    # A segment id > 0 is staging generation g of a worker ("_w{i}_g{g}"); an id < 0 is its
    # arena number -id ("_w{i}_a{k}"). The parent's close_group unlinks all of them.

    def _bind(self, ready: bool = True) -> RoundEngine:
        """Map the group's control segment (first use in this process); ``ready`` marks this
        worker as started (see :mod:`asyncnet.sync._rounds`: timeouts count from then)."""
        if self._engine is None:
            try:
                self._ctl_seg = open_segment(f"{self._prefix}_ctl")
            except FileNotFoundError:
                raise SyncError(
                    f"worker {self._id}: the group {self._prefix} was closed "
                    "(close_group ran); create a new one with new_workers"
                ) from None
            self._cond, self._control = _open_control(self._prefix, self._n, self._ctl_seg, init=False)
            self._control.ints[self._control.w(self._id, W_PID)] = os.getpid()
            self._tables = [self._control.locations(i) for i in range(self._n)]
            self._engine = RoundEngine(
                self._control,
                self._cond,
                self._id,
                self._timeout,
                poll=_POLL,
                peer_dead=self._peer_dead,
                can_die=True,
            )
        if ready:
            self._engine.mark_ready()
        return self._engine

    def _peer_dead(self, worker: int) -> bool:
        assert self._control is not None
        return pid_gone(int(self._control.ints[self._control.w(worker, W_PID)]))

    def _seg_name(self, worker: int, segid: int) -> str:
        kind = f"g{segid}" if segid > 0 else f"a{-segid}"
        return f"{self._prefix}_w{worker}_{kind}"

    def _ensure_staging(self, nbytes: int) -> int:
        gen, cap = self._stage
        if gen and cap >= nbytes:
            return gen
        c = self._control
        assert c is not None
        gen_idx, cap_idx = c.w(self._id, W_SEG_GEN), c.w(self._id, W_SEG_CAP)
        gen = int(c.ints[gen_idx])
        if gen and int(c.ints[cap_idx]) >= nbytes:
            self._stage = (gen, int(c.ints[cap_idx]))
            return gen
        cap = max(_MIN_SEGMENT, -(-int(nbytes * 1.25) // _MIN_SEGMENT) * _MIN_SEGMENT)
        with self._create_lock:
            self._check_orphaned()
            c.ints[gen_idx] = gen + 1  # published first, so a crash right after create is cleaned
            self._segs[(self._id, gen + 1)] = open_segment(self._seg_name(self._id, gen + 1), create=True, size=cap)
        c.ints[cap_idx] = cap
        self._stage = (gen + 1, cap)
        if gen:
            self._forget(self._id, gen)
            unlink_segment(self._seg_name(self._id, gen))
        return gen + 1

    def _new_arena(self, nbytes: int) -> None:
        c = self._control
        assert c is not None
        k = int(c.ints[c.w(self._id, W_ARENAS)]) + 1
        size = max(_MIN_SEGMENT * 16, -(-nbytes // _MIN_SEGMENT) * _MIN_SEGMENT)
        with self._create_lock:
            self._check_orphaned()
            c.ints[c.w(self._id, W_ARENAS)] = k  # published first, so a crash right after create is cleaned
            seg = open_segment(self._seg_name(self._id, -k), create=True, size=size)
        self._segs[(self._id, -k)] = seg
        self._arena = (k, seg)
        self._arena_bases.append((-k, _address(seg), seg.size))
        self._arena_used = 0

    def _arena_locations(self, bucket: Bucket) -> list[tuple[int, int]] | None:
        """``(segment id, offset)`` of each member when all of them live in this worker's arena."""
        if not self._arena_bases:
            return None
        locs = []
        for v in bucket.views:
            addr = v.__array_interface__["data"][0]
            for segid, base, size in self._arena_bases:
                if base <= addr and addr + v.nbytes <= base + size:
                    locs.append((segid, addr - base))
                    break
            else:
                return None
        return locs

    def _attach(self, worker: int, segid: int) -> Segment:
        seg = self._segs.get((worker, segid))
        if seg is None:
            if segid > 0:  # a newer staging generation replaces the older ones
                for key in [k for k in self._segs if k[0] == worker and 0 < k[1] < segid]:
                    self._forget(*key)
            seg = self._segs[(worker, segid)] = open_segment(self._seg_name(worker, segid))
        return seg

    def _forget(self, worker: int, segid: int) -> None:
        """Drop a replaced staging segment of ``worker`` and every cached view into it."""
        seg = self._segs.pop((worker, segid), None)
        self._peer_views = {k: v for k, v in self._peer_views.items() if k[0] != worker}
        if worker == self._id:
            for plan in self._plans.values():
                if plan.gen == segid:
                    plan.gen, plan.areas = 0, {}
            self._published.clear()
        close_segment(seg)

    def _views_at(self, worker: int, bucket: Bucket, locs: list) -> list[np.ndarray]:
        return [
            np.frombuffer(self._attach(worker, int(segid)).buf, v.dtype, v.size, int(off))
            for v, (segid, off) in zip(bucket.views, locs)
        ]

    def _detach(self) -> None:
        """Unmap this handle's segments (they stay until the group's owner unlinks them)."""
        self._plans.clear()
        self._peer_views.clear()
        self._published.clear()
        self._tables = []
        self._stage = (0, 0)
        for seg in self._segs.values():
            close_segment(seg)
        self._segs.clear()
        self._arena = None
        self._arena_bases = []
        self._scratch.clear()
        if self._control is not None:
            self._control.release()
            self._control = None
        if self._cond is not None:
            self._cond.detach()
            self._cond = None
        self._engine = None
        close_segment(self._ctl_seg)
        self._ctl_seg = None

    def _check_orphaned(self) -> None:
        if self._orphaned:
            raise SyncAbortedError(f"worker {self._id}: the parent process died (the group's segments are gone)")

    def _unlink_group_orphaned(self) -> None:
        """The parent died: unlink every segment of the group, and create none from now on (a
        segment this worker is creating meanwhile is finished and published first)."""
        with self._create_lock:
            self._orphaned = True
            self._unlink_group()

    def _unlink_group(self) -> None:
        """Unlink every segment of the group (a worker does it when the creator died)."""
        if self._control is not None:
            unlink_group(self._prefix, self._control)
            return
        try:
            seg = open_segment(f"{self._prefix}_ctl")
        except FileNotFoundError:  # somebody did it already
            return
        control = Control(self._n, seg.buf, offset=_CTL, ready=False)
        try:
            unlink_group(self._prefix, control)
        finally:
            control.release()
            close_segment(seg)

    def __repr__(self) -> str:
        return f"ProcessGradientSync(worker_id={self._id}, num_workers={self._n})"
