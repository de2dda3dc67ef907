"""When the async executor runs a whole net in line on the caller's thread.

Policy
------
Running chains on two threads pays only where the work off the critical path is large enough
to cover what parallelism costs: a wake-up per hand-off (tens of microseconds), the per-run
bookkeeping of the scheduler (events, a lock per chain), and two threads bouncing the GIL at
every kernel call that releases it. On a net of small ops (the zoo's MLP, DLRM, LSTM and CNN
at batch 32-128) that cost is larger than the gain, and the simple executor, which runs the ops
in order on the caller's thread, is up to twice as fast (measured: MLP 0.49x, DLRM 0.43x).
Caffe2's async_scheduling answered the same question per chain (short chains run in line on
the thread that finished their parent); here it is answered per net, by measurement:

1. The first :data:`WARMUP` runs are parallel and measure every chain's cost
   (:mod:`asyncnet.exec.scheduling`; a chain's cost is the smaller of its last two runs, so the
   first, cold run does not count). From the costs come the net's *work* ``W`` (their sum)
   and its *critical path* ``L`` (the longest chain of dependent chains); ``W - L`` is the
   most any number of threads could save in one run (the *slack*).
2. A net whose slack is :data:`TRIAL_BELOW` or more stays parallel: there is work to overlap.
3. Otherwise the net runs a *trial*: runs in line and parallel alternated (so a noisy spell
   hits both), each timed from start to end. The first run of each mode is not a sample (the
   first in-line run builds what in-line runs reuse); then :data:`TRIAL_RUNS` of each are. A
   mode's figure is its :func:`typical` time, the mean of the faster half of its samples: a run
   stretched by a preemption or a collection says nothing about the mode, while the median of
   four samples follows two such spikes (enough to keep a net parallel at 1.4x its in-line
   time). Parallel wins only when faster by more than :data:`TIE`.
4. The chosen mode is *checked*: every :data:`CHECK_RUNS` runs, the typical time of those runs
   is compared with the other mode's figure from the trial; more than :data:`CHECK_MARGIN`
   slower, and the trial runs again. A trial misled by noise costs at most that many runs.
5. After :data:`REVISIT` runs the warm-up and the trial are run again (the batch, the load or
   the machine may have changed).

Only ``net.run()`` without a timeout runs in line (the caller waits anyway); ``run_async``,
``run(timeout=...)``, nets with CUDA chains and profiled runs (a recorder set) are always
parallel. An in-line run executes the ops in op order, exactly as the simple executor does, so
its results are the simple executor's bits, which the parallel runs also give. It honours
``net.cancel()`` between ops and raises the first failing op's error, as a parallel run does.

State (on the :class:`InlinePolicy` of a net; plain attributes, written by the thread that
runs the net, which holds the net's busy lock)::

    mode      str           "warmup", "trial", "inline" or "parallel"
    since     int           runs in the current mode
    samples   dict          {True: [s, ...], False: [s, ...]}: trial run times (in line, parallel),
                            each mode's first one included (it is dropped when they are compared)
    figures   dict          {True: s, False: s}: each mode's typical time in the last trial
                            (empty when the slack alone decided)
    window    list[float]   times of the chosen mode's runs since the last check
    trials    int           trials entered so far (a figure for benchmarks and tests)

Example::

    >>> p = InlinePolicy(num_chains=3)
    >>> p.mode, p.pick(lambda: 0.0)
    ('warmup', False)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = [
    "InlinePolicy",
    "critical_path",
    "typical",
    "WARMUP",
    "TRIAL_BELOW",
    "TRIAL_RUNS",
    "TIE",
    "CHECK_RUNS",
    "CHECK_MARGIN",
    "REVISIT",
]

WARMUP = 3  # parallel runs that measure the chains' costs before the slack is known
TRIAL_BELOW = 0.8e-3  # seconds of slack from which a net always runs parallel
TRIAL_RUNS = 6  # timed runs of each mode in a trial (after one untimed run of each)
TIE = 0.03  # in line wins unless parallel is faster by more than this fraction
CHECK_RUNS = 50  # runs of the chosen mode between two checks against the other mode's figure
CHECK_MARGIN = 0.10  # the chosen mode this much slower than the other's figure: trial again
REVISIT = 2000  # runs a choice holds before the warm-up and the trial are run again


def typical(samples: Sequence[float]) -> float:
    """The mean of the faster half of ``samples`` (the odd one out counted in): a run's time
    without the spikes other processes add.

    >>> typical([1.0, 9.0, 2.0, 30.0])
    1.5
    >>> typical([3.0, 1.0, 2.0])
    1.5
    """
    fast = sorted(samples)[: (len(samples) + 1) // 2]
    return sum(fast) / len(fast)


def critical_path(costs: Sequence[float], children: Sequence[Sequence[int]]) -> float:
    """The longest sum of ``costs`` along a path of the chain graph ``children``.

    >>> critical_path([1.0, 2.0, 4.0], [[1, 2], [], []])
    5.0
    """
    waiting = [0] * len(costs)
    for ks in children:
        for k in ks:
            waiting[k] += 1
    start = [0.0] * len(costs)
    ready = [c for c, n in enumerate(waiting) if n == 0]
    longest = 0.0
    while ready:
        c = ready.pop()
        end = start[c] + costs[c]
        longest = max(longest, end)
        for k in children[c]:
            start[k] = max(start[k], end)
            waiting[k] -= 1
            if waiting[k] == 0:
                ready.append(k)
    return longest


class InlinePolicy:
    """Decides, run by run, whether ``net.run()`` runs the net in line (see the module docstring)."""

    __slots__ = ("mode", "since", "samples", "single", "figures", "window", "trials")

    def __init__(self, num_chains: int):
        self.single = num_chains <= 1  # one chain: nothing can ever overlap
        self.mode = "inline" if self.single else "warmup"
        self.since = 0
        self.samples: dict[bool, list[float]] = {True: [], False: []}
        self.figures: dict[bool, float] = {}
        self.window: list[float] = []
        self.trials = 0

    def pick(self, slack: Callable[[], float | None]) -> bool:
        """True when the next run goes in line. ``slack()`` gives ``W - L`` from the measured
        costs (None while a chain's cost is unknown); it is called only when a warm-up ends."""
        if self.single:
            return True
        mode = self.mode
        if mode == "inline" or mode == "parallel":
            if self.since >= REVISIT:
                self._enter("warmup")
                return False
            return mode == "inline"
        if mode == "warmup":
            if self.since < WARMUP:
                return False
            gain = slack()
            if gain is None:
                return False
            if gain >= TRIAL_BELOW:
                self.figures = {}
                self._enter("parallel")
                return False
            self._enter("trial")
        ins, par = self.samples[True], self.samples[False]
        return len(ins) <= len(par)  # alternate, in line first

    def note(self, inline: bool, seconds: float | None) -> None:
        """A run ended: ``seconds`` it took, or None when it failed or was cancelled (not a sample)."""
        self.since += 1
        if seconds is None:
            return
        mode = self.mode
        if mode == "trial":
            self._sample(inline, seconds)
        elif self.figures and (mode == "inline" if inline else mode == "parallel"):
            self._check(inline, seconds)  # a run of the chosen mode (not of a warm-up)

    def _sample(self, inline: bool, seconds: float) -> None:
        """A trial run: decide once both modes have their samples."""
        self.samples[inline].append(seconds)
        ins, par = self.samples[True], self.samples[False]
        if len(ins) > TRIAL_RUNS and len(par) > TRIAL_RUNS:
            self.figures = {True: typical(ins[1:]), False: typical(par[1:])}
            faster = self.figures[False] < self.figures[True] * (1.0 - TIE)
            self._enter("parallel" if faster else "inline")

    def _check(self, inline: bool, seconds: float) -> None:
        """A run of the chosen mode: every CHECK_RUNS runs, compare with the other mode's figure."""
        window = self.window
        window.append(seconds)
        if len(window) < CHECK_RUNS:
            return
        now = typical(window)
        window.clear()
        if now > self.figures[not inline] * (1.0 + CHECK_MARGIN):
            self._enter("trial")

    def _enter(self, mode: str) -> None:
        if mode == "trial":
            self.trials += 1
        self.mode, self.since = mode, 0
        self.samples = {True: [], False: []}
        self.window = []

    def __repr__(self) -> str:
        return f"InlinePolicy(mode={self.mode!r}, since={self.since}, trials={self.trials})"
