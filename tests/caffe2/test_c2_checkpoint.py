"""caffe2.python.checkpoint: a job run epoch by epoch with checkpoints, resumed from each of
them; checked against the same sums computed in Python. Also the operators it uses and a cursor
saved and loaded in the middle of a dataset."""

from __future__ import annotations

import os

import numpy as np
import pytest

from caffe2.python import core, schema, workspace
from caffe2.python.checkpoint import CheckpointManager, Job, JobRunner, MultiNodeCheckpointManager, epoch_limiter
from caffe2.python.dataio import ReaderWithLimit
from caffe2.python.dataset import Dataset
from caffe2.python.net_builder import ops
from caffe2.python.pipeline import pipe
from caffe2.python.session import LocalSession
from caffe2.python.task import Cluster, Node, Task

pytestmark = pytest.mark.timeout(120)

VALUES = [4, 9, 1, 7, 3, 8, 2]
PER_EPOCH = 2
START = 50


def _expected_totals() -> list[int]:
    """The running total after each epoch (PER_EPOCH values an epoch, the last epoch shorter)."""
    totals, total = [], START
    for i in range(0, len(VALUES), PER_EPOCH):
        total += sum(VALUES[i : i + PER_EPOCH])
        totals.append(total)
    if len(VALUES) % PER_EPOCH == 0:
        totals.append(total)  # one more epoch finds the data exhausted
    return totals


def _job(node: str) -> tuple[Job, Task]:
    with Cluster(), Job() as job, Node(node):
        with job.init_group, Task():
            ds = Dataset(schema.ConstRecord(ops, schema.Struct(("v", np.array(VALUES, np.int64)))), name="ck_ds")
            reader = ds.reader(ops)
            total = ops.Const([START], blob_out="ck_total")

        def add(rec):
            ops.Add([total, rec.v()], [total])

        limited = ReaderWithLimit(reader, num_iter=PER_EPOCH)
        pipe(limited, processor=add)
        job.add_stop_signal(limited.data_finished())
    return job, Task(step=core.Net("ck_fetch"), outputs=[total])


def _total(session: LocalSession, fetch: Task) -> int:
    session.run(fetch)
    return int(fetch.outputs()[0].fetch()[0])


@pytest.mark.parametrize("multi_node", [False, True])
def test_epochs_checkpoints_and_resuming_give_the_python_totals(tmp_path, multi_node):
    expected = _expected_totals()
    job, fetch = _job("ck_node")
    compiled = job.compile(LocalSession)

    def manager():
        if multi_node:
            return MultiNodeCheckpointManager(str(tmp_path), "minidb")
        return CheckpointManager(str(tmp_path), "ck_node", "minidb")

    session = LocalSession(workspace.C.Workspace())
    assert JobRunner(compiled, manager())(session) == len(expected)
    assert _total(session, fetch) == expected[-1]
    assert sorted(os.listdir(tmp_path)) == [f"ck_node.{e}" for e in range(len(expected) + 1)]
    for epoch in range(1, len(expected) + 1):
        resumed = LocalSession(workspace.C.Workspace())
        JobRunner(compiled, manager(), resume_from_epoch=epoch)(resumed)
        assert _total(resumed, fetch) == expected[-1]
    checkpoints = manager()
    reader = LocalSession(workspace.C.Workspace())
    JobRunner(compiled, checkpoints, resume_from_epoch=len(expected))(reader)
    for epoch in range(1, len(expected) + 1):
        reader.run(checkpoints.load(epoch))
        assert _total(reader, fetch) == expected[epoch - 1]


def test_epoch_limiter_and_load_blobs_locally(tmp_path):
    with Job() as job, Node("lim"):
        with job.init_group, Task():
            ops.Const(np.array([1.0], np.float32), blob_out="lim_w")
        with job.epoch_group, Task():
            ops.Add(["lim_w", ops.Const(np.array([1.0], np.float32))], ["lim_w"])
        epoch_limiter(job, 3)
    ws = workspace.C.Workspace()
    checkpoints = MultiNodeCheckpointManager(str(tmp_path), "minidb")
    runner = JobRunner(job, checkpoints)
    assert runner(LocalSession(ws)) == 3
    np.testing.assert_array_equal(ws.blobs["lim_w"].fetch(), [4.0])
    fresh = workspace.C.Workspace()
    assert runner.load_blobs_from_checkpoints(["lim_w"], 2, LocalSession(fresh))
    np.testing.assert_array_equal(fresh.blobs["lim_w"].fetch(), [3.0])
    assert not runner.load_blobs_from_checkpoints(["lim_w"], 9, LocalSession(fresh))


def test_a_saved_cursor_resumes_where_it_was(tmp_path):
    workspace.FeedBlob("c_v", np.arange(6, dtype=np.int64))
    net = core.Net("cursor_save")
    net.CreateTreeCursor([], "cur", fields=["v"])
    net.ReadNextBatch(["cur", "c_v"], ["first"], batch_size=4)
    net.Save(["cur"], [], db=str(tmp_path / "cur.db"), db_type="minidb")
    workspace.RunNetOnce(net)
    workspace.ResetWorkspace()
    workspace.FeedBlob("c_v", np.arange(6, dtype=np.int64))
    load = core.Net("cursor_load")
    load.Load([], ["cur"], db=str(tmp_path / "cur.db"), db_type="minidb")
    load.ReadNextBatch(["cur", "c_v"], ["rest"], batch_size=4)
    workspace.RunNetOnce(load)
    np.testing.assert_array_equal(workspace.FetchBlob("rest"), [4, 5])


def test_blob_names_db_exists_and_timers(tmp_path):
    workspace.FeedBlob("n_a", np.zeros(1))
    open(tmp_path / "there", "w").close()
    net = core.Net("names")
    net.GetAllBlobNames([], "n_names")
    net.DBExists([], "n_yes", db_name=str(tmp_path / "there"), db_type="minidb")
    net.DBExists([], "n_no", db_name=str(tmp_path / "absent"), db_type="minidb")
    timer = net.TimerBegin([], counter_name="t")
    net.TimerGetAndEnd(timer, "n_ns")
    workspace.RunNetOnce(net)
    names = [n.decode() for n in workspace.FetchBlob("n_names")]
    assert names == sorted(names) and {"n_a", "n_names"} <= set(names)
    assert bool(workspace.FetchBlob("n_yes")) and not bool(workspace.FetchBlob("n_no"))
    assert int(workspace.FetchBlob("n_ns")) >= 0


def test_a_session_runs_each_new_task_even_when_an_old_ones_id_comes_back():
    session = LocalSession(workspace.C.Workspace())
    seen = []
    for value in range(5):
        with Task() as task:
            out = ops.Const(value)
        task.add_output(out)
        session.run(task)
        seen.append(int(task.outputs()[0].fetch()))
        del task  # a later Task may reuse its id
    assert seen == list(range(5))
