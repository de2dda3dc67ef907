"""caffe2.python dataio, pipeline, queue_util, session and net_printer: records piped through
processors and queues by a LocalSession, checked against the same computation in numpy."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import core, net_printer, schema, workspace
from caffe2.python.checkpoint import Job
from caffe2.python.dataio import CountUntil, ReaderWithLimit
from caffe2.python.dataset import Dataset
from caffe2.python.net_builder import ops
from caffe2.python.pipeline import pipe
from caffe2.python.queue_util import Queue
from caffe2.python.session import LocalSession
from caffe2.python.task import Task, TaskGroup, WorkspaceType, final_output

pytestmark = pytest.mark.timeout(120)


def _source(ws, values: np.ndarray) -> Dataset:
    init = core.Net("src_init")
    with core.NameScope("src"):
        blobs = schema.NewRecord(init, schema.Struct(("v", values)))
    schema.FeedRecord(blobs, [values], ws)
    return Dataset(blobs)


def _sink(session, like: Dataset) -> Dataset:
    init = core.Net("dst_init")
    with core.NameScope("dst"):
        ds = Dataset(like.content().clone_schema())
        ds.init_empty(init)
    session.run(init)
    return ds


def _square(rec):
    out = schema.NewRecord(ops, rec)
    ops.Mul([rec.v(), rec.v()], [out.v()])
    return out


@pytest.mark.parametrize("threads", [1, 4])
def test_pipe_through_a_queue_applies_the_processor_to_every_record(threads):
    ws = workspace.C.Workspace()
    session = LocalSession(ws)
    values = np.arange(1, 31, dtype=np.int64)
    src = _source(ws, values)
    dst = _sink(session, src)
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as tg:
        squared = pipe(src.reader(), output=Queue(capacity=5), processor=_square, num_runtime_threads=threads)
        pipe(squared, dst.writer(), num_runtime_threads=threads)
    session.run(tg)
    got = ws.blobs[str(dst.content().v())].fetch()
    assert sorted(got.tolist()) == (values**2).tolist()


@pytest.mark.parametrize(
    ("limit", "read", "finished"), [(None, 20, True), (0, 0, False), (7, 7, False), (50, 20, True)]
)
def test_reader_with_limit_counts_batches_and_reports_the_end(limit, read, finished):
    ws = workspace.C.Workspace()
    session = LocalSession(ws)
    src = _source(ws, np.arange(20, dtype=np.int64))
    dst = _sink(session, src)
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as tg:
        reader = ReaderWithLimit(src.reader(), num_iter=limit)
        pipe(reader, dst.writer(), num_runtime_threads=3)
    session.run(tg)
    got = ws.blobs[str(dst.content().v())].fetch()
    assert sorted(got.tolist()) == list(range(read))
    assert bool(ws.blobs[str(reader.data_finished())].fetch()) is finished


def test_task_instances_run_their_setup_once_each():
    ws = workspace.C.Workspace()
    session = LocalSession(ws)
    totals = {}

    def count(rec):
        with ops.task_init():
            per_record = ops.CreateCounter([], ["per_record"])
            per_thread = ops.CreateCounter([], ["per_thread"])
        ops.CountUp(per_record)
        with ops.task_instance_exit():
            ops.CountUp(per_thread)
        with ops.task_exit():
            totals["records"] = final_output(ops.RetrieveCount(per_record))
            totals["threads"] = final_output(ops.RetrieveCount(per_thread))
        return rec

    with TaskGroup() as tg:
        pipe(CountUntil(12), processor=count, num_runtime_threads=5)
    session.run(tg)
    assert int(totals["records"].fetch()) == 12
    assert int(totals["threads"].fetch()) == 5


def _job_with(extra: list) -> Job:
    with Job() as job:
        with job.init_group, Task(workspace_type=WorkspaceType.GLOBAL):
            ops.Const(1.0, blob_out="weight")
        with Task():
            with ops.loop(3):
                ops.Add(["weight", ops.Const(1.0)], ["weight"])
        for build in extra:
            with Task(workspace_type=WorkspaceType.GLOBAL):
                build()
    return job


def test_analyze_accepts_blobs_defined_earlier_and_names_the_undefined_one():
    net_printer.analyze(_job_with([]))
    with pytest.raises(AssertionError, match="^Blob undefined: missing$"):
        net_printer.analyze(_job_with([lambda: ops.Add(["weight", "missing"])]))


def test_analyze_rejects_one_blob_created_by_two_concurrent_tasks():
    with pytest.raises(AssertionError, match="multiple parallel steps: twice"):
        net_printer.analyze(_job_with([lambda: ops.Copy("weight", "twice"), lambda: ops.Copy("weight", "twice")]))


def test_to_string_shows_groups_loops_and_operators():
    text = net_printer.to_string(_job_with([]))
    assert "with Job.current().init_group:" in text
    assert "with loop(" in text
    assert "weight" in text and ".Add(" in text
    plain = net_printer.to_string(_job_with([]), c2_syntax=False)
    assert "= Add(weight" in plain


@pytest.mark.timeout(60)
def test_a_failing_thread_fails_the_run_instead_of_leaving_the_others_waiting():
    ws = workspace.C.Workspace()
    session = LocalSession(ws)
    src = _source(ws, np.arange(40, dtype=np.int64))

    def fail(inputs, outputs):
        raise RuntimeError("processor failed")

    def failing(rec):
        ops.Python(fail)([], [])
        return rec

    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as tg:
        queue = pipe(src.reader(), output=Queue(capacity=2), num_runtime_threads=4)
        pipe(queue, processor=failing, num_runtime_threads=4)
    with pytest.raises(Exception, match="processor failed"):
        session.run(tg)


def test_record_queue_producers_and_consumers_move_every_record():
    from caffe2.python.record_queue import RecordQueue

    values = np.arange(1, 26, dtype=np.int64)
    rec = schema.Struct(("v", np.int64))
    src = Dataset(rec, name="rq_src")
    init = core.Net("rq_init")
    src.init_empty(init)
    batch = schema.NewRecord(init, schema.Struct(("v", values)))
    schema.FeedRecord(batch, [values])
    src.writer(init_net=init).write_record(init, batch)
    reader = src.reader(init_net=init)
    dst = Dataset(rec, name="rq_dst")
    dst.init_empty(init)
    dst_writer = dst.writer(init_net=init)
    workspace.RunNetOnce(init)

    def triple(net, record):
        return schema.from_blob_list(record, [net.Scale(record.v(), net.NextName("tripled"), scale=3.0)])

    queue = RecordQueue(rec, num_threads=3, capacity=4)
    q_reader, producers, close, _ = queue.build(reader, triple)
    consumers = []
    for i in range(2):
        take = core.Net(f"rq_take_{i}")
        stop, got = q_reader.read_record(take)
        put = core.Net(f"rq_put_{i}")
        dst_writer.write(put, got.field_blobs())
        consumers.append(core.execution_step(f"rq_consumer_{i}", [take, put], should_stop_blob=stop))
    work = core.execution_step(
        "rq_work",
        [
            core.execution_step("rq_produce", [producers, close]),
            core.execution_step("rq_consume", consumers, concurrent_substeps=True),
        ],
        concurrent_substeps=True,
    )
    plan = core.Plan("rq_plan")
    plan.AddStep(work)
    workspace.RunPlan(plan)
    assert sorted(workspace.FetchBlob(str(dst.get_blobs()[0])).tolist()) == (3 * values).tolist()


@pytest.mark.parametrize("batch_size", [1, 3, 10])
def test_text_file_reader_reads_every_row_of_every_pass(tmp_path, batch_size):
    from caffe2.python.text_file_reader import TextFileReader

    rows = [("ab", 1.5, 7), ("c", -2.25, 8), ("", 0.0, 9), ("d e", 4.0, 10)]
    path = tmp_path / "rows.tsv"
    path.write_text("".join(f"{a}\t{b}\t{c}\n" for a, b, c in rows))
    rec = schema.Struct(("s", schema.Scalar(str)), ("f", schema.Scalar(np.float64)), ("i", schema.Scalar(np.int64)))
    init, read = core.Net("tf_init"), core.Net("tf_read")
    reader = TextFileReader(init, str(path), rec, num_passes=2, batch_size=batch_size)
    stop, batch = reader.read_record(read)
    workspace.RunNetOnce(init)
    got: list[tuple] = []
    while True:
        workspace.RunNetOnce(read)
        cols = schema.FetchRecord(batch).field_blobs()
        got += list(zip(cols[0].tolist(), cols[1].tolist(), cols[2].tolist()))
        if workspace.FetchBlob(str(stop)):
            break
    assert got == rows * 2
