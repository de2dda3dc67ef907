"""The async executor runs a net of small ops in line on the caller's thread, and keeps
running nets with work to overlap in parallel (asyncnet.exec.inline)."""

import statistics
import threading

import exec_test_ops as tops
import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec import inline
from asyncnet.exec.inline import InlinePolicy, critical_path

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_threads")]


def _fan(name: str, sleep: float, leaves: int = 4) -> an.Net:
    net = an.Net(name, type="async_scheduling", num_workers=2, own_pool=True)
    net.ExecTestWork([], ["a"], name="head")
    for i in range(leaves):
        net.ExecTestWork(["a"], [f"b{i}"], name=f"leaf{i}", sleep=sleep)
    net.ExecTestWork([f"b{i}" for i in range(leaves)], ["z"], name="tail")
    return net


def _mlp(net_type: str) -> an.Net:
    net = an.Net("mlp", type=net_type, num_workers=2, own_pool=True)
    net.FC(["x", "w1", "b1"], "h")
    net.Relu("h", "h")
    net.FC(["h", "w2", "b2"], "y")
    net.FC(["x", "w3", "b3"], "side")  # a branch beside the main chain
    net.Sum(["y", "side"], "out")
    return net


def _feed(ws: an.Workspace, step: int) -> None:
    rng = np.random.default_rng(step)
    ws.feed("x", rng.standard_normal((8, 6)).astype(np.float32))
    for i, (o, k) in enumerate([(5, 6), (4, 5), (4, 6)], start=1):
        ws.feed(f"w{i}", rng.standard_normal((o, k)).astype(np.float32))
        ws.feed(f"b{i}", rng.standard_normal(o).astype(np.float32))


@pytest.mark.parametrize(
    ("costs", "children", "expected"),
    [
        ([1.0], [[]], 1.0),
        ([1.0, 2.0, 4.0], [[1, 2], [], []], 5.0),
        ([1.0, 2.0, 4.0, 1.0], [[1, 2], [3], [3], []], 6.0),
        ([3.0, 1.0], [[], []], 3.0),
    ],
)
def test_critical_path_is_the_longest_dependent_sum(costs, children, expected):
    assert critical_path(costs, children) == expected


def test_a_net_of_tiny_ops_goes_in_line_after_its_trial_and_gives_the_simple_bits():
    with an.Workspace() as wa, an.Workspace() as ws:
        fast = wa.create_net(_mlp("async_scheduling"))
        simple = ws.create_net(_mlp("simple"))
        for step in range(inline.WARMUP + 2 * (inline.TRIAL_RUNS + 1) + 3):
            _feed(wa, step)
            _feed(ws, step)
            fast.run()
            simple.run()
            np.testing.assert_array_equal(wa.fetch("out"), ws.fetch("out"))
        assert fast.policy.mode in ("inline", "parallel")  # decided by the trial's times
        fast.policy.mode = "inline"
        tops.LOG.clear()
        _feed(wa, 99)
        _feed(ws, 99)
        fast.run()
        simple.run()
        np.testing.assert_array_equal(wa.fetch("out"), ws.fetch("out"))


def test_a_net_with_slack_above_the_bar_stays_parallel():
    with an.Workspace() as ws:
        inst = ws.create_net(_fan("wide", sleep=2 * inline.TRIAL_BELOW))
        for _ in range(inline.WARMUP + 3):
            tops.LOG.clear()
            inst.run()
        assert inst.policy.mode == "parallel"
        assert len({tid for name, *_, tid in tops.LOG if name.startswith("leaf")}) >= 2  # the pool and the caller


def test_an_in_line_run_runs_every_op_in_order_on_the_caller():
    with an.Workspace() as ws:
        inst = ws.create_net(_fan("tiny", sleep=0.0))
        inst.policy.mode = "inline"
        tops.LOG.clear()
        inst.run()
        assert [name for name, *_ in tops.LOG] == ["head", "leaf0", "leaf1", "leaf2", "leaf3", "tail"]
        assert {tid for *_, tid in tops.LOG} == {threading.get_ident()}
        np.testing.assert_array_equal(ws.fetch("z"), np.full(2, 9.0))


def test_an_in_line_run_raises_the_first_failure_and_frees_the_net():
    net = an.Net("bad", type="async_scheduling", num_workers=2, own_pool=True)
    net.ExecTestWork([], ["a"], name="ok")
    net.ExecTestWork([], ["b"], name="boom", fail=True)
    net.ExecTestWork(["a", "b"], ["z"], name="after")
    with an.Workspace() as ws:
        inst = ws.create_net(net)
        inst.policy.mode = "inline"
        tops.LOG.clear()
        with pytest.raises(an.OperatorError, match="planned failure"):
            inst.run()
        assert [name for name, *_ in tops.LOG] == ["ok", "boom"]
        inst.policy.mode = "inline"
        with pytest.raises(an.OperatorError):
            inst.run()  # not busy: the failed run released the net


def test_cancel_stops_an_in_line_run_between_ops():
    net = an.Net("slow", type="async_scheduling", num_workers=2, own_pool=True)
    net.ExecTestWork([], ["a"], name="first", block=True)
    net.ExecTestWork([], ["b"], name="second")
    net.ExecTestWork(["a", "b"], ["z"], name="third")
    with an.Workspace() as ws:
        inst = ws.create_net(net)
        inst.policy.mode = "inline"
        errors: list[BaseException] = []

        def run() -> None:
            try:
                inst.run()
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        t = threading.Thread(target=run)
        t.start()
        assert tops.STARTED.wait(10)
        assert inst.cancel()
        tops.RELEASE.set()
        t.join(10)
        assert not t.is_alive()
        assert len(errors) == 1 and "cancelled" in str(errors[0])
        assert [name for name, *_ in tops.LOG] == ["first"]


def _to_trial(p: InlinePolicy) -> None:
    """Warm ``p`` up on parallel runs and read a slack below the bar: it enters its trial."""
    for _ in range(inline.WARMUP):
        assert p.pick(lambda: 1e-5) is False
        p.note(False, 1.0)
    assert p.pick(lambda: 1e-5) is True and p.mode == "trial"


def _trial(p: InlinePolicy, inline_times: list[float], parallel_times: list[float]) -> list[bool]:
    """Drive ``p``'s trial with these run times (taken in the order the trial asks for each
    mode); returns the modes it picked."""
    times = {True: iter(inline_times), False: iter(parallel_times)}
    picks = []
    while p.mode == "trial":
        mode = p.pick(lambda: 1e-5)
        picks.append(mode)
        p.note(mode, next(times[mode]))
    return picks


def test_typical_is_the_mean_of_the_faster_half():
    assert inline.typical([5.0]) == 5.0
    assert inline.typical([1.0, 100.0]) == 1.0
    assert inline.typical([4.0, 2.0, 50.0, 1.0, 3.0, 70.0]) == 2.0
    assert inline.typical([3.0, 1.0, 2.0, 90.0, 80.0]) == 2.0


def test_the_policy_trial_picks_the_faster_mode_and_revisits():
    p = InlinePolicy(num_chains=4)
    _to_trial(p)
    n = inline.TRIAL_RUNS + 1  # the first run of each mode is no sample
    picks = _trial(p, [1.0] * n, [3.0] * n)  # in line is three times faster
    assert picks == [True, False] * n
    assert p.mode == "inline"
    assert p.figures == {True: 1.0, False: 3.0}
    p.since = inline.REVISIT
    assert p.pick(lambda: 1e-5) is False and p.mode == "warmup"


def test_the_trial_keeps_parallel_when_it_is_clearly_faster():
    p = InlinePolicy(num_chains=4)
    p.mode = "trial"
    _trial(p, [3.0] * 10, [1.0] * 10)
    assert p.mode == "parallel"


def test_a_tie_goes_in_line():
    p = InlinePolicy(num_chains=4)
    p.mode = "trial"
    _trial(p, [1.0] * 10, [1.0 - inline.TIE / 2] * 10)
    assert p.mode == "inline"


def test_a_cold_first_run_and_spikes_do_not_mislead_the_trial():
    # run times (us) of the zoo DLRM's train step on torch tensors, as a loaded machine gave them:
    # the first in-line run builds its shadow, and one in line and one parallel run were preempted
    p = InlinePolicy(num_chains=35)
    p.mode = "trial"
    us = 1e-6
    _trial(
        p,
        [18107 * us, 716 * us, 735 * us, 9755 * us, 742 * us, 728 * us, 5590 * us],
        [1018 * us, 1159 * us, 941 * us, 1159 * us, 5302 * us, 987 * us, 1011 * us],
    )
    assert p.mode == "inline"
    p = InlinePolicy(num_chains=35)
    p.mode = "trial"  # the same spikes, the other way round: parallel is faster
    _trial(
        p,
        [1018 * us, 1159 * us, 941 * us, 1159 * us, 5302 * us, 987 * us, 1011 * us],
        [18107 * us, 716 * us, 735 * us, 9755 * us, 742 * us, 728 * us, 5590 * us],
    )
    assert p.mode == "parallel"


def test_four_samples_of_each_mislead_a_median_but_not_typical():
    # the first four runs of each mode above: their medians make parallel look faster
    ins = [18107, 716, 735, 9755]
    par = [1018, 1159, 941, 1159]
    assert statistics.median(par) < statistics.median(ins)
    assert inline.typical(ins[1:]) < inline.typical(par[1:])


def test_a_chosen_mode_much_slower_than_the_others_figure_goes_back_to_trial():
    p = InlinePolicy(num_chains=4)
    _to_trial(p)
    _trial(p, [1.0] * 10, [1.2] * 10)
    assert p.mode == "inline"
    slow = 1.2 * (1 + inline.CHECK_MARGIN) * 1.05  # in line now slower than parallel was, beyond the margin
    for k in range(inline.CHECK_RUNS):
        assert p.pick(lambda: 1e-5) is True
        p.note(True, slow if k % 4 else 100.0)
    assert p.mode == "trial"
    picks = _trial(p, [slow] * 10, [1.2] * 10)
    assert picks[:2] == [True, False]
    assert p.mode == "parallel" and p.figures == {True: slow, False: 1.2}
    assert p.trials == 2


def test_a_chosen_mode_within_the_margin_stays_and_other_runs_do_not_count():
    p = InlinePolicy(num_chains=4)
    p.mode = "trial"
    _trial(p, [1.0] * 10, [1.2] * 10)
    within = 1.2 * (1 + inline.CHECK_MARGIN) * 0.95
    for _ in range(3 * inline.CHECK_RUNS):
        assert p.pick(lambda: 1e-5) is True
        p.note(True, within)
        p.note(False, 100.0)  # a parallel run forced by a profile or a timeout: not the chosen mode
    assert p.mode == "inline"
    assert len(p.window) < inline.CHECK_RUNS


def test_warm_up_runs_after_a_revisit_are_not_checked():
    p = InlinePolicy(num_chains=4)
    p.mode = "trial"
    _trial(p, [1.0] * 10, [0.5] * 10)
    assert p.mode == "parallel" and p.figures
    p.since = inline.REVISIT
    assert p.pick(lambda: 1e-5) is False and p.mode == "warmup"
    for _ in range(2 * inline.CHECK_RUNS):
        p.note(False, 100.0)  # parallel warm-up runs, far slower than the old in-line figure
    assert p.mode == "warmup" and p.window == []
    assert p.pick(lambda: 1e-5) is True and p.mode == "trial"  # the slack decides, then a trial


def test_a_net_parallel_by_its_slack_is_not_checked():
    p = InlinePolicy(num_chains=4)
    for _ in range(inline.WARMUP):
        p.pick(lambda: 1.0)
        p.note(False, 1.0)
    assert p.pick(lambda: inline.TRIAL_BELOW) is False and p.mode == "parallel"
    for _ in range(2 * inline.CHECK_RUNS):
        p.note(False, 50.0)
    assert p.mode == "parallel" and p.figures == {}


def test_a_failed_run_is_no_sample_and_unknown_costs_keep_warming_up():
    p = InlinePolicy(num_chains=2)
    for _ in range(inline.WARMUP + 2):
        assert p.pick(lambda: None) is False  # a chain never measured: no decision yet
        p.note(False, None)
    assert p.mode == "warmup"
    assert InlinePolicy(num_chains=1).pick(lambda: None) is True  # one chain: nothing to overlap


class _Recording(InlinePolicy):
    """An InlinePolicy that keeps what the net told it."""

    def __init__(self, num_chains: int, mode: str):
        super().__init__(num_chains)
        self.mode = mode
        self.picks = 0
        self.notes: list[tuple[bool, float | None]] = []

    def pick(self, slack):
        self.picks += 1
        return super().pick(slack)

    def note(self, inline: bool, seconds: float | None) -> None:
        self.notes.append((inline, seconds))
        super().note(inline, seconds)


def test_each_run_reports_its_mode_and_time_and_a_failure_is_no_time():
    from asyncnet.exec.trace import profile

    net = an.Net("told", type="async_scheduling", num_workers=2, own_pool=True)
    net.ExecTestWork([], ["a"], name="ok")
    net.ExecTestWork([], ["b"], name="maybe")
    net.ExecTestWork(["a", "b"], ["z"], name="after")
    with an.Workspace() as ws:
        inst = ws.create_net(net)
        inst.policy = policy = _Recording(inst.num_chains, "inline")
        inst.run()
        assert policy.notes[-1][0] is True and policy.notes[-1][1] > 0
        with profile(inst):
            inst.run()  # a profiled run is parallel, whatever the mode: the policy is not asked
        assert policy.picks == 1 and policy.notes[-1][0] is False and policy.notes[-1][1] > 0
        inst.run(timeout=10)  # a run with a timeout is neither asked nor told
        assert policy.picks == 1 and len(policy.notes) == 2
        inst.operators[1].ctx.args["fail"] = True
        with pytest.raises(an.OperatorError):
            inst.run()
        assert policy.notes[-1] == (True, None)


def test_cancel_stops_an_in_line_run_on_numpy_views_of_torch_tensors(monkeypatch):
    torch = pytest.importorskip("torch")
    from asyncnet.tensor.shadow import Shadow

    net = an.Net("views", type="async_scheduling", num_workers=2, own_pool=True)
    net.FC(["x", "w", "b"], "h")
    net.Relu("h", "r")
    net.FC(["x", "w", "b"], "side")
    with an.Workspace() as ws:
        ws.feed("x", torch.ones(2, 3))
        ws.feed("w", torch.ones(4, 3))
        ws.feed("b", torch.zeros(4))
        inst = ws.create_net(net)
        assert inst._shadow is not None
        inst.policy.mode = "inline"
        original = Shadow.run_ops

        def cancel_after_the_first_op(self, blobs, stop=None):
            checks = []

            def check() -> None:
                checks.append(1)
                if len(checks) == 2:
                    assert inst.cancel()  # from inside the run, between its first and second op
                stop()

            return original(self, blobs, check)

        monkeypatch.setattr(Shadow, "run_ops", cancel_after_the_first_op)
        with pytest.raises(an.ExecutionError, match="cancelled"):
            inst.run()
        assert torch.equal(ws.fetch("h"), torch.full((2, 4), 3.0))  # the first op's result is stored
        assert not ws.has("r") and not ws.has("side")
        monkeypatch.setattr(Shadow, "run_ops", original)
        inst.run()  # the next run is not cancelled
        assert torch.equal(ws.fetch("r"), torch.full((2, 4), 3.0))
