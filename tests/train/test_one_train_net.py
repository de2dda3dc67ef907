"""One definition of a train net: Program.train_net is ModelHelper.train_net with the program's
optimizer settings (the update is model/optimizer.py's build_optimizer either way) and, between
the backward pass and the update, the program's sync and gradient accumulation."""

import itertools

import numpy as np
import pytest

import asyncnet as an
from asyncnet.model import ModelHelper
from asyncnet.model.optimizer import LR_POLICIES
from asyncnet.train.program import Program

pytestmark = pytest.mark.timeout(120)


def _model() -> ModelHelper:
    m = ModelHelper("m", seed=3)
    h = m.dropout(m.relu(m.fc("data", "fc1", 4, 6), "h"), "drop", ratio=0.2, seed=1)
    m.softmax_with_loss(m.fc(h, "fc2", 6, 3), "label")
    return m


def _ops(net: an.Net) -> list[tuple]:
    return [
        (op.type, list(op.inputs), list(op.outputs), sorted(op.args.items()), list(op.control_inputs)) for op in net.ops
    ]


SETTINGS = [
    {"optimizer": o, "lr_policy": p, "weight_decay": wd, "momentum": 0.8, "lr_step": 7, "lr_gamma": g}
    for o, p, wd, g in itertools.product(("sgd", "momentum", "adagrad", "adam"), LR_POLICIES, (0.0, 1e-3), (None, 0.5))
]


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_program_and_model_helper_build_the_same_train_net(s):
    program = Program(_model(), lr=0.05, **s)
    helper = _model()
    direct = helper.train_net(
        "t",
        s["optimizer"],
        0.05,
        momentum=s["momentum"],
        weight_decay=s["weight_decay"],
        lr_policy=s["lr_policy"],
        stepsize=s["lr_step"],
        gamma=s["lr_gamma"],
    )
    assert _ops(program.train_net("t")) == _ops(direct)
    assert _ops(program.init_net) == _ops(helper.init_net)
    assert program.checkpoint_blobs == helper.checkpoint_blobs


def test_the_two_train_nets_give_the_same_bits():
    program, helper = Program(_model(), optimizer="adam", lr=0.01), _model()
    nets = [program.train_net("t"), helper.train_net("t", "adam", 0.01)]
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32)
    out = []
    for init, net in zip((program.init_net, helper.init_net), nets):
        with an.Workspace() as ws:
            ws.run_net_once(init)
            ws.feed("data", x)
            ws.feed("label", y)
            for _ in range(3):
                ws.run_net_once(net)
            out.append({p: ws.fetch(p).copy() for p in helper.checkpoint_blobs})
    for k in out[0]:
        np.testing.assert_array_equal(out[0][k], out[1][k])


def test_the_program_puts_its_sync_between_the_backward_pass_and_the_update():
    program = Program(_model(), optimizer="momentum")
    plain, synced = _ops(program.train_net("t")), _ops(program.train_net("t", sync_blob="sync", bucket_mb=None))
    allreduce = [i for i, op in enumerate(synced) if op[0] == "Allreduce"]
    assert len(allreduce) == 1
    i = allreduce[0]
    assert synced[:i] + synced[i + 1 :] == plain  # the same net with the all-reduce inserted
    assert synced[i + 1][0] == "Iter" and any(op[0] == "DropoutGrad" for op in synced[:i])


def test_before_update_sees_the_gradients_and_feeds_the_update():
    m = _model()
    seen = {}

    def halve(net, grads):
        seen.update(grads)
        return {p: str(net.Scale(g, f"{g}_half", scale=0.5)) for p, g in grads.items()}

    net = m.train_net("t", "sgd", 0.1, before_update=halve)
    assert sorted(seen) == sorted(m.params)
    updates = [op for op in net.ops if op.type == "SGD"]
    assert [op.inputs[1] for op in updates] == [f"{seen[p]}_half" for p in m.params]
