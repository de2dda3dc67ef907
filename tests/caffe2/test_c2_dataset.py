"""Caffe2's dataset operators and caffe2.python.dataset, checked against the example of Caffe2's
CreateTreeCursor documentation, plain numpy slicing of the same records, and the C++ standard's
check value of ``std::minstd_rand0`` (SortAndShuffle's engine)."""

from __future__ import annotations

import numpy as np
import pytest

from asyncnet.ops.caffe2_dataset import RecordLayout, _MinStd0
from caffe2.python import core, schema, workspace
from caffe2.python.dataset import Const, Dataset

pytestmark = pytest.mark.timeout(120)

# The example of Caffe2's CreateTreeCursor documentation: one record.
DOC_FIELDS = [
    "a",
    "b:lengths",
    "b:values:lengths",
    "b:values:values",
    "c:lengths",
    "c:c1",
    "c:c2:lengths",
    "c:c2:values",
]
DOC_VALUES = [
    np.array([3], np.int32),
    np.array([4], np.int32),
    np.array([2, 3, 0, 1], np.int32),
    np.array([4, 5, 6, 7, 8, 9], np.int32),
    np.array([2], np.int32),
    np.array([b"alex", b"bob"], dtype=object),
    np.array([2, 1], np.int32),
    np.array([10, 11, 12], np.int32),
]


def _records(n: int) -> tuple[schema.Struct, list[list]]:
    """``n`` records of (id, tags: list of int64, score pairs: map int32 -> float32), as Python lists."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(n):
        tags = rng.integers(0, 100, size=rng.integers(0, 4)).tolist()
        keys = rng.integers(0, 50, size=rng.integers(0, 3)).tolist()
        rows.append((i, tags, keys, [float(k) / 2 for k in keys]))
    rec = schema.Struct(("id", np.int64), ("tags", schema.List(np.int64)), ("pairs", schema.Map(np.int32, np.float32)))
    return rec, rows


def _columns(rows: list) -> list[np.ndarray]:
    return [
        np.array([r[0] for r in rows], np.int64),
        np.array([len(r[1]) for r in rows], np.int32),
        np.array([t for r in rows for t in r[1]], np.int64),
        np.array([len(r[2]) for r in rows], np.int32),
        np.array([k for r in rows for k in r[2]], np.int32),
        np.array([v for r in rows for v in r[3]], np.float32),
    ]


def _assert_columns(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_layout_domains_of_the_documented_fields():
    layout = RecordLayout(DOC_FIELDS)
    assert layout.domain == [0, 0, 1, 2, 0, 3, 3, 4]
    with pytest.raises(ValueError, match="before its lengths field"):
        RecordLayout(["x:values", "x:lengths"])


def test_read_next_batch_reads_the_documented_record_whole():
    for name, value in zip(DOC_FIELDS, DOC_VALUES):
        workspace.FeedBlob(name.replace(":", "_"), value)
    names = [f.replace(":", "_") for f in DOC_FIELDS]
    net = core.Net("doc_cursor")
    net.CreateTreeCursor([], "cursor", fields=DOC_FIELDS)
    net.ReadNextBatch(["cursor", *names], [f"out_{n}" for n in names], batch_size=5)
    workspace.RunNetOnce(net)
    _assert_columns([workspace.FetchBlob(f"out_{n}") for n in names], DOC_VALUES)


def _dataset_with(rows: list, name: str) -> tuple[Dataset, schema.Struct]:
    rec, _ = _records(0)
    ds = Dataset(rec, name=name)
    init = core.Net(f"{name}_init")
    ds.init_empty(init)
    batch = schema.NewRecord(init, rec)
    schema.FeedRecord(batch, _columns(rows))
    ds.writer(init_net=init).write_record(init, batch)
    workspace.RunNetOnce(init)
    return ds, rec


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_sequential_reader_batches_equal_numpy_slices(batch_size):
    _, rows = _records(7)
    ds, _ = _dataset_with(rows, f"seq{batch_size}")
    read_init, read = core.Net("seq_rinit"), core.Net("seq_read")
    stop, fields = ds.reader(read_init, batch_size=batch_size).read_record(read)
    workspace.RunNetOnce(read_init)
    workspace.CreateNet(read)
    for start in range(0, len(rows) + batch_size, batch_size):
        workspace.RunNet(str(read))
        _assert_columns(schema.FetchRecord(fields).field_blobs(), _columns(rows[start : start + batch_size]))
        assert bool(workspace.FetchBlob(stop)) == (start >= len(rows))


def test_random_reader_follows_the_given_order_then_stops():
    _, rows = _records(5)
    ds, _ = _dataset_with(rows, "rand")
    order = np.array([3, 0, 4, 1, 2])
    init, read = core.Net("rand_init"), core.Net("rand_read")
    reader = ds.random_reader(init, Const(init, order, name="order"), batch_size=2)
    reader.computeoffset(init)
    stop, fields = reader.read_record(read)
    workspace.RunNetOnce(init)
    workspace.CreateNet(read)
    for start in (0, 2, 4):
        workspace.RunNet(str(read))
        want = [rows[i] for i in order[start : start + 2]]
        _assert_columns(schema.FetchRecord(fields).field_blobs(), _columns(want))
    workspace.RunNet(str(read))
    assert bool(workspace.FetchBlob(stop))


def test_minstd_rand0_matches_the_standards_check_value():
    engine = _MinStd0()
    for _ in range(9999):
        engine.draw()
    assert engine.draw() == 1043618065


def test_sort_and_shuffle_keeps_batches_of_a_sorted_order():
    rng = np.random.default_rng(3)
    keys = rng.permutation(12).astype(np.int32)
    workspace.FeedBlob("key", keys)
    net = core.Net("sort_shuffle")
    net.CreateTreeCursor([], "cursor", fields=["key"])
    net.SortAndShuffle(["cursor", "key"], "order", sort_by_field_idx=0, batch_size=2, shuffle_size=3)
    workspace.RunNetOnce(net)
    order = workspace.FetchBlob("order")
    assert sorted(order.tolist()) == list(range(12))
    ranks = np.argsort(np.argsort(keys))[order]  # position of each record in the sorted order
    # each batch holds records of one chunk of batch_size * shuffle_size consecutive sorted records
    for i in range(0, 12, 2):
        assert len({int(r) // 6 for r in ranks[i : i + 2]}) == 1, order
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("order"), order)  # the same order every run


def test_trim_keeps_whole_records():
    _, rows = _records(7)
    ds, _ = _dataset_with(rows, "trim")
    net = core.Net("trim")
    ds.trim(net, multiple_of=3)
    workspace.RunNetOnce(net)
    _assert_columns(schema.FetchRecord(ds.content()).field_blobs(), _columns(rows[:6]))


def test_pack_unpack_is_the_identity_and_packs_one_record_per_row():
    rec, rows = _records(4)
    for name, col in zip(rec.field_names(), _columns(rows)):
        workspace.FeedBlob(name, col)
    names = rec.field_names()
    net = core.Net("pack")
    net.PackRecords(names, "packed", fields=names)
    net.UnPackRecords(["packed"], [f"u_{n}" for n in names], fields=names)
    workspace.RunNetOnce(net)
    packed = workspace.FetchBlob("packed")
    assert len(packed) == 4
    _assert_columns(packed[2], _columns(rows[2:3]))
    _assert_columns([workspace.FetchBlob(f"u_{n}") for n in names], _columns(rows))


def test_consistency_check_rejects_lengths_that_overrun():
    workspace.FeedBlob("l", np.array([2, 2], np.int32))
    workspace.FeedBlob("v", np.array([1, 2, 3], np.int64))
    net = core.Net("check")
    net.CheckDatasetConsistency(["l", "v"], [], fields=["x:lengths", "x:values"])
    with pytest.raises(Exception, match="inconsistent lengths"):
        workspace.RunNetOnce(net)


def test_append_grows_the_same_array():
    workspace.FeedBlob("a", np.array([[1, 2]], np.int64))
    workspace.FeedBlob("b", np.array([[3, 4], [5, 6]], np.int64))
    net = core.Net("append")
    net.Append(["a", "b"], ["a"])
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("a"), [[1, 2], [3, 4], [5, 6]])
    workspace.FeedBlob("c", np.array([[1, 2, 3]], np.int64))
    bad = core.Net("append_bad")
    bad.Append(["a", "c"], ["a"])
    with pytest.raises(Exception, match="shape"):
        workspace.RunNetOnce(bad)


def test_collect_tensor_is_a_uniform_reservoir():
    init = core.Net("collect_init")
    init.CreateTensorVector([], ["vec"])
    init.ConstantFill([], "x", shape=[1], value=0.0)
    step_net = core.Net("collect_step")
    step_net.Add(["x", "one"], ["x"])
    step_net.CollectTensor(["vec", "x"], ["vec"], num_to_collect=50)
    step_net.Proto().op[-1].device_option.random_seed = 11
    workspace.FeedBlob("one", np.array([1.0], np.float32))
    workspace.RunNetOnce(init)
    workspace.CreateNet(step_net)
    workspace.RunNet(str(step_net), 2000)
    size, out = core.Net("collect_read"), "all"
    size.TensorVectorSize(["vec"], ["n"])
    size.ConcatTensorVector(["vec"], [out])
    workspace.RunNetOnce(size)
    values = workspace.FetchBlob(out)
    assert int(workspace.FetchBlob("n")) == 50 and len(set(values.tolist())) == 50
    assert values.min() >= 1 and values.max() <= 2000
    # a reservoir holds each of the 2000 values with probability 1/40: its mean is near 1000.5
    # (standard deviation about 80 for 50 draws without replacement; 400 is 5 of them)
    assert abs(values.mean() - 1000.5) < 400


def test_last_n_window_is_a_ring_buffer():
    workspace.FeedBlob("win", np.zeros((0, 1), np.float32))
    workspace.FeedBlob("next", np.array(0, np.int32))
    net = core.Net("window")
    net.LastNWindowCollector(["win", "next", "rows"], ["win", "next"], num_to_collect=4)
    seen: list[float] = []
    for start in (0, 3, 6):
        rows = np.arange(start, start + 3, dtype=np.float32).reshape(3, 1)
        seen += rows[:, 0].tolist()
        workspace.FeedBlob("rows", rows)
        workspace.RunNetOnce(net)
    window = workspace.FetchBlob("win")[:, 0].tolist()
    nxt = int(workspace.FetchBlob("next"))
    assert sorted(window) == sorted(seen[-4:])
    assert window[nxt - 1] == seen[-1]


def test_a_column_with_a_view_elsewhere_is_copied_not_grown():
    from asyncnet.ops.caffe2_dataset import _append

    column = np.arange(4, dtype=np.int64)
    view = column[1:3]
    grown = _append(column, np.array([9], np.int64), "test", {"col": column, "view": view})
    assert grown is not column and grown.tolist() == [0, 1, 2, 3, 9]
    assert view.tolist() == [1, 2]
    alone = np.arange(2, dtype=np.int64)
    assert _append(alone, np.array([5], np.int64), "test", {"col": alone}) is alone
    assert alone.tolist() == [0, 1, 5]
