"""The round protocol that the threaded and the process backends share.

A *round* is one collective call by every worker (an all-reduce of the mean, or a broadcast).
All group state lives in one flat byte buffer, :class:`Control` (private memory for threads, a
shared-memory segment for processes), guarded by one condition variable
(``threading.Condition`` or ``multiprocessing.Condition``). Each worker keeps its own round
number; the buffer holds the group's.

A round, for worker ``w`` in round ``r``:

1. **Arrival.** Under the lock ``w`` publishes the fingerprint of its bucket (layout and
   operation) and its layout text, and counts itself in. The last to arrive compares the
   fingerprints: if they differ the round fails for everyone with a
   :class:`~asyncnet.errors.SyncMismatchError` naming every worker's layout, and no buffer has
   been touched. Otherwise the phase becomes REDUCE and everyone is woken. A worker that waits
   longer than the timeout fails the round with a :class:`~asyncnet.errors.SyncTimeoutError`
   naming the missing ids; a worker that arrives after its round failed (``r`` is behind the
   group's round) gets a ``SyncTimeoutError`` too and rejoins at the group's round.
2. **Reduce.** Outside the lock, every worker reduces its own slice of the flat bucket (the
   backend's ``reduce`` callable), so the work is spread over all workers.
3. **Departure.** Each worker counts itself done; the last one closes the round (the group's
   round number moves on) and wakes the rest. Nobody returns before every slice is written,
   and nobody can start round ``r + 1`` while a peer still reduces round ``r``.

A *single* round (``run(..., single=True)``) stops after the arrival: the last to arrive
closes it, and each worker then reduces on its own, into memory nobody else reads (the process
backend does this for small buckets, from double-buffered copies; see
:mod:`asyncnet.sync.process`). A waiter that finds the round closed without a recorded failure
knows it succeeded.

``abort(reason)`` marks the whole group dead: every pending and future call raises
:class:`~asyncnet.errors.SyncAbortedError`.

**Waiting.** Every wait ends on one of four things: everyone arrived (or departed), an abort,
a peer's death, or the deadline. The condition's ``wait`` always has a timeout (``poll``), so
a waiter looks again at least that often. A backend whose workers can die mid-round
(processes) passes ``peer_dead``; it is asked only by a waiter that has already waited a whole
``poll`` tick, so a round that completes in time pays nothing for it. The process backend's
condition (:class:`~asyncnet.sync._robustcond.RobustCondition`) is built so that a process
dying inside it breaks nothing; if one died holding its lock, the next locker aborts the
group (the state that lock guards may be half-written), naming the workers whose processes are
gone.

**Timeouts count from the start of the group.** A worker is *ready* once it has started and is
about to run its code (:meth:`RoundEngine.mark_ready`; the threaded backend's workers are ready
from the start). Until every worker is ready, a waiter's clock does not run (up to
``STARTUP_GRACE`` seconds more), so a peer that is only slow to start (spawning a process
under load takes seconds) is not blamed for a timeout; from the moment the last worker got
ready, the usual ``timeout`` applies.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from asyncnet.errors import SyncAbortedError, SyncError, SyncMismatchError, SyncTimeoutError

# Header fields (int64 slots).
ROUND, PHASE, ARRIVED, DONE, ABORTED, FAIL_ROUND, FAIL_KIND, REDUCE_FAILED, READY, READY_AT = range(10)
HEADER = 16
# Per-worker fields.
W_ARRIVED, W_DONE, W_DIGEST, W_PID, W_SEG_GEN, W_SEG_CAP, W_ARENAS, W_READY = range(8)
PER_WORKER = 8

STARTUP_GRACE = 60.0  # seconds a waiter gives peers that have not started yet, beyond its timeout
DEAD_HOLDER_WAIT = 1.0  # seconds to look for the dead process that held the lock, to name it

GATHER, REDUCE = 0, 1
KIND_MISMATCH, KIND_TIMEOUT, KIND_FAILED = 1, 2, 3

FAIL_CAP = 64 * 1024
ABORT_CAP = 16 * 1024
META_CAP = 64 * 1024
LOC_CAP = 96 * 1024  # per worker: (segment id, offset) int64 pairs, for the process backend


class Control:
    """Group state in one byte buffer: int64 fields, then text regions.

    >>> c = Control(2)
    >>> int(c.ints[ROUND]), c.read_text(c.abort_region)
    (0, '')
    """

    def __init__(self, n: int, buf: Any = None, offset: int = 0, ready: bool = True):
        self.n = n
        self._ready = ready  # whether init() counts every worker as started (threads) or none
        size = self.nbytes(n)
        self.raw = np.zeros(size, np.uint8) if buf is None else np.frombuffer(buf, np.uint8, size, offset)
        ints_end = (HEADER + PER_WORKER * n) * 8
        # int64 fields through a memoryview: indexing gives plain ints, several times faster
        # than numpy scalars on the per-round path
        self.ints = memoryview(self.raw[:ints_end]).cast("q")
        self.fail_region = (ints_end, FAIL_CAP)
        self.abort_region = (ints_end + FAIL_CAP, ABORT_CAP)
        self._meta_base = ints_end + FAIL_CAP + ABORT_CAP
        self._loc_base = self._meta_base + META_CAP * n
        if buf is None:
            self.init()

    @staticmethod
    def nbytes(n: int) -> int:
        return (HEADER + PER_WORKER * n) * 8 + FAIL_CAP + ABORT_CAP + (META_CAP + LOC_CAP) * n

    def init(self) -> None:
        self.raw[: len(self.ints) * 8] = 0
        self.ints[FAIL_ROUND] = -1
        for i in range(self.n):
            self.ints[self.w(i, W_ARRIVED)] = -1
            self.ints[self.w(i, W_DONE)] = -1
            self.ints[self.w(i, W_READY)] = int(self._ready)
        self.ints[READY] = self.n if self._ready else 0

    def release(self) -> None:
        """Drop the views into the buffer (needed before a shared segment can be closed)."""
        if self.ints is not None:
            self.ints.release()
        self.raw = self.ints = None  # type: ignore[assignment]

    @staticmethod
    def w(worker: int, field: int) -> int:
        return HEADER + worker * PER_WORKER + field

    def meta_region(self, worker: int) -> tuple[int, int]:
        return (self._meta_base + worker * META_CAP, META_CAP)

    def locations(self, worker: int) -> np.ndarray:
        """Worker's table of ``(segment id, byte offset)`` rows, one per bucket member."""
        off = self._loc_base + worker * LOC_CAP
        return self.raw[off : off + LOC_CAP].view(np.int64).reshape(-1, 2)

    def write_text(self, region: tuple[int, int], text: str) -> None:
        off, cap = region
        data = text.encode()
        if len(data) > cap - 8:
            data = data[: cap - 8 - 3] + b"..."
        self.raw[off : off + 8].view(np.int64)[0] = len(data)
        self.raw[off + 8 : off + 8 + len(data)] = np.frombuffer(data, np.uint8)

    def read_text(self, region: tuple[int, int]) -> str:
        off, _ = region
        n = int(self.raw[off : off + 8].view(np.int64)[0])
        return self.raw[off + 8 : off + 8 + n].tobytes().decode(errors="replace")


class RoundEngine:
    """One worker's side of the round protocol (see the module doc).

    ``cond`` is the group's condition variable; ``timeout`` (seconds or None) bounds the wait
    for peers; ``poll`` is how often a waiter wakes to check ``peer_dead`` and the abort flag;
    ``can_die`` tells whether peers may vanish mid-round (processes), in which case the
    departure wait gives up on an abort, a dead peer or its deadline instead of waiting for it.
    """

    def __init__(
        self,
        control: Control,
        cond: Any,
        worker_id: int,
        timeout: float | None,
        *,
        poll: float = 0.25,
        peer_dead: Callable[[int], bool] | None = None,
        can_die: bool = False,
    ):
        self.c = control
        self.cond = cond
        self.wid = worker_id
        self.n = control.n
        self.timeout = timeout
        self.poll = poll
        self.peer_dead = peer_dead
        self.can_die = can_die
        self.round = 0
        self._published_digest: int | None = None
        self._recovered = getattr(cond, "recovered", None)  # only a robust condition has it
        self._is_ready = False
        # this worker's field indices, and everyone's, computed once
        self._f_arrived = control.w(worker_id, W_ARRIVED)
        self._f_done = control.w(worker_id, W_DONE)
        self._f_digest = control.w(worker_id, W_DIGEST)
        self._all_digests = [control.w(i, W_DIGEST) for i in range(self.n)]

    # -- public ------------------------------------------------------------------------------

    def run(
        self, digest: int, meta_text: str, reduce: Callable[[], None], what: str = "round", single: bool = False
    ) -> None:
        """Run one round: arrive, call ``reduce`` when everyone is there, wait for the rest.

        ``single``: the round ends when everyone has arrived; ``reduce`` then runs on its own
        and nobody waits for it (see :mod:`asyncnet.sync.process`: each worker reduces into its
        own memory from double-buffered copies, so one barrier per round is enough). Every
        worker of a round must pass the same ``single``: make it depend on the layout only."""
        r = self.round
        start = time.monotonic()
        if self.cond.acquire(False):  # the common case: the lock is free
            self._check_recovered_or_release()
        else:
            self._acquire(None if self.timeout is None else start + self.timeout)
        try:
            self._arrive(r, digest, meta_text, start, what, single)
        finally:
            self.cond.release()
        if single:
            self.round = r + 1
            reduce()
            return
        err: BaseException | None = None
        try:
            reduce()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the departure
            err = exc
        if self.cond.acquire(False):
            self._check_recovered_or_release()
        else:
            self._acquire(None)
        try:
            self._depart(r, err)
        finally:
            self.cond.release()
        if err is not None:
            raise err

    def mark_ready(self) -> None:
        """This worker has started: once all have, waiters' timeouts start counting."""
        if self._is_ready:
            return
        c, ints = self.c, self.c.ints
        self._acquire(None)
        try:
            if not ints[c.w(self.wid, W_READY)]:
                ints[c.w(self.wid, W_READY)] = 1
                ints[READY] += 1
                if ints[READY] == self.n:
                    ints[READY_AT] = time.monotonic_ns()
                    self.cond.notify_all()
        finally:
            self.cond.release()
        self._is_ready = True

    def abort(self, reason: str) -> None:
        """Mark the group dead and wake every waiter; later calls raise ``SyncAbortedError``.

        Works even when the lock cannot be had within 2 s: the flag is one store, and the
        waiters look at it on every wake-up."""
        got = self.cond.acquire(True, 2.0)
        try:
            if not self.c.ints[ABORTED]:
                self.c.write_text(self.c.abort_region, reason)
                self.c.ints[ABORTED] = 1
            if got or self._recovered is not None:  # a robust condition can notify without the lock
                self.cond.notify_all()
        finally:
            if got:
                self.cond.release()

    @property
    def aborted(self) -> bool:
        return bool(self.c.ints[ABORTED])

    # -- arrival -----------------------------------------------------------------------------

    def _arrive(self, r: int, digest: int, meta_text: str, start: float, what: str, single: bool = False) -> None:
        c, ints = self.c, self.c.ints
        self._check_abort()
        group_round = int(ints[ROUND])
        if r < group_round:
            self.round = group_round
            raise self._late_error(r, group_round)
        if self._published_digest != digest or ints[self._f_digest] != digest:
            c.write_text(c.meta_region(self.wid), meta_text)
            ints[self._f_digest] = digest
            self._published_digest = digest
        ints[self._f_arrived] = r
        arrived = ints[ARRIVED] + 1
        ints[ARRIVED] = arrived
        if arrived == self.n:
            if any(ints[f] != digest for f in self._all_digests):
                lines = [f"worker {i}: {c.read_text(c.meta_region(i))}" for i in range(self.n)]
                msg = f"{what} {r}: workers passed different gradients; " + "; ".join(lines)
                self._fail_round(r, KIND_MISMATCH, msg, [])
                raise SyncMismatchError(msg + ". No gradient was changed.")
            if single:
                self._next_round(r)
                return
            ints[PHASE] = REDUCE
            ints[DONE] = 0
            self.cond.notify_all()
            return
        self._wait_arrival(r, start, what)

    def _deadline(self, start: float) -> float | None:
        """When a wait that began at ``start`` times out: ``timeout`` after the later of
        ``start`` and the moment every worker was ready (see the module doc)."""
        if self.timeout is None:
            return None
        ints = self.c.ints
        if ints[READY] >= self.n:
            return max(start, int(ints[READY_AT]) / 1e9) + self.timeout
        return start + self.timeout + STARTUP_GRACE

    def _wait_arrival(self, r: int, start: float, what: str) -> None:
        c, ints = self.c, self.c.ints
        next_check = start + self.poll
        while True:
            if ints[ROUND] != r:  # the round ended without us: it failed, or (single) it is done
                self.round = r + 1
                if ints[FAIL_ROUND] == r or ints[ABORTED]:
                    raise self._stored_error(r)
                return
            if ints[PHASE] == REDUCE:
                return
            self._check_abort()
            now = time.monotonic()
            if self.peer_dead is not None and now >= next_check:  # only after a whole tick
                next_check = now + self.poll
                dead = [i for i in range(self.n) if ints[c.w(i, W_ARRIVED)] != r and self.peer_dead(i)]
                if dead:
                    self._abort_locked(f"worker(s) {dead} died before {what} {r}")
                    self._check_abort()
            wait = self.poll
            deadline = self._deadline(start)
            if deadline is not None:
                remaining = deadline - now
                if remaining <= 0:
                    missing = [i for i in range(self.n) if ints[c.w(i, W_ARRIVED)] != r]
                    msg = (
                        f"{what} {r}: worker(s) {missing} did not arrive within {self.timeout:g} s "
                        f"(arrived: {[i for i in range(self.n) if i not in missing]}); the round "
                        "was aborted for every worker and no gradient was changed"
                    )
                    self._fail_round(r, KIND_TIMEOUT, msg, missing)
                    raise SyncTimeoutError(msg, missing)
                wait = min(wait, remaining)
            self.cond.wait(wait)
            self._check_recovered()

    # -- departure ---------------------------------------------------------------------------

    def _depart(self, r: int, err: BaseException | None) -> None:
        c, ints = self.c, self.c.ints
        ints[self._f_done] = r
        if err is not None:
            ints[REDUCE_FAILED] = 1
        done = ints[DONE] + 1
        ints[DONE] = done
        if done == self.n:
            failed = bool(ints[REDUCE_FAILED])
            ints[REDUCE_FAILED] = 0
            if failed:
                self._fail_round(r, KIND_FAILED, f"round {r}: a worker failed while reducing", [])
            else:
                self._next_round(r)
        else:
            start = time.monotonic()
            next_check = start + self.poll
            while ints[ROUND] == r:
                if self.can_die:
                    self._check_abort()
                    now = time.monotonic()
                    if now >= next_check:
                        next_check = now + self.poll
                        busy = [i for i in range(self.n) if ints[c.w(i, W_DONE)] != r]
                        dead = [i for i in busy if self.peer_dead is not None and self.peer_dead(i)]
                        if dead:
                            self._abort_locked(f"worker(s) {dead} died during round {r}")
                        elif self.timeout is not None and now - start > self.timeout:
                            self._abort_locked(
                                f"worker(s) {busy} did not finish reducing round {r} within "
                                f"{self.timeout:g} s; its gradients are undefined"
                            )
                        self._check_abort()
                self.cond.wait(self.poll)
                self._check_recovered()
        self.round = r + 1
        if err is None and ints[FAIL_ROUND] == r and ints[FAIL_KIND] == KIND_FAILED:
            raise SyncError(f"round {r}: a peer failed while reducing; gradients are undefined")

    # -- helpers (all called with the lock held) -----------------------------------------------

    def _next_round(self, r: int) -> None:
        ints = self.c.ints
        ints[PHASE] = GATHER
        ints[ARRIVED] = 0
        ints[DONE] = 0
        ints[ROUND] = r + 1
        self.cond.notify_all()

    def _fail_round(self, r: int, kind: int, msg: str, missing: list[int]) -> None:
        c = self.c
        c.write_text(c.fail_region, json.dumps({"msg": msg, "missing": missing}))
        c.ints[FAIL_KIND] = kind
        c.ints[FAIL_ROUND] = r
        self.round = r + 1
        self._next_round(r)

    def _stored_error(self, r: int) -> SyncError:
        c = self.c
        if c.ints[FAIL_ROUND] != r:  # the group was aborted: say why, as _check_abort does
            return SyncAbortedError(f"worker {self.wid}: round {r} was aborted: {c.read_text(c.abort_region)}")
        info = json.loads(c.read_text(c.fail_region))
        kind = int(c.ints[FAIL_KIND])
        if kind == KIND_MISMATCH:
            return SyncMismatchError(info["msg"] + ". No gradient was changed.")
        if kind == KIND_TIMEOUT:
            return SyncTimeoutError(info["msg"], info["missing"])
        return SyncError(info["msg"])

    def _late_error(self, r: int, group_round: int) -> SyncTimeoutError:
        c = self.c
        why = ""
        if c.ints[FAIL_ROUND] == r:
            why = ": " + json.loads(c.read_text(c.fail_region))["msg"]
        return SyncTimeoutError(
            f"worker {self.wid} arrived late for round {r}, which was aborted without it{why}. "
            f"Its gradients were not changed; its next call joins round {group_round}.",
            [self.wid],
        )

    def _check_abort(self) -> None:
        if self.c.ints[ABORTED]:
            raise SyncAbortedError(f"worker {self.wid}: the group was aborted: {self.c.read_text(self.c.abort_region)}")

    def _abort_locked(self, reason: str) -> None:
        if not self.c.ints[ABORTED]:
            self.c.write_text(self.c.abort_region, reason)
            self.c.ints[ABORTED] = 1
        self.cond.notify_all()

    def _check_recovered(self) -> None:
        """After taking the lock: if its holder had died, the state may be half-written."""
        if self._recovered is not None and self.cond.recovered != self._recovered:
            self._recovered = self.cond.recovered
            self._abort_locked(f"{self._dead_holder()} died while holding the group's lock")
            self._check_abort()

    def _dead_holder(self) -> str:
        """Who died holding the lock: the peers whose processes are gone (the parent also takes
        the lock, to abort). The kernel hands a robust lock on while its dying holder still
        exits, so look for up to ``DEAD_HOLDER_WAIT``."""
        dead: list[int] = []
        if self.peer_dead is not None:
            deadline = time.monotonic() + DEAD_HOLDER_WAIT
            while True:
                dead = [i for i in range(self.n) if i != self.wid and self.peer_dead(i)]
                if dead or time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
        return f"worker(s) {dead}" if dead else "a process (the parent, or a worker not found dead yet)"

    def _check_recovered_or_release(self) -> None:
        """Just after taking the lock: ``_check_recovered``, releasing the lock if it raises."""
        if self._recovered is not None and self.cond.recovered != self._recovered:
            try:
                self._check_recovered()
            except BaseException:
                self.cond.release()
                raise

    def _acquire(self, deadline: float | None) -> None:
        while True:
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            if self.cond.acquire(True, wait):
                self._check_recovered_or_release()
                return
            if self.can_die:
                self._check_abort()
            if deadline is not None and time.monotonic() >= deadline:
                raise SyncTimeoutError(
                    f"worker {self.wid}: could not take the group lock within {self.timeout:g} s "
                    "(a peer may have died while holding it)",
                    [],
                )
