"""caffe2.python.schema: records as column lists, checked against the column layout Caffe2's
documentation gives (``CreateTreeCursor``'s field list) and against plain numpy."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from caffe2.python import core, schema, workspace

pytestmark = pytest.mark.timeout(60)


def _documented_record() -> schema.Struct:
    """The struct of Caffe2's CreateTreeCursor documentation: a=Int, b=List(List(Int)),
    c=List(Struct(c1=String, c2=List(Int)))."""
    return schema.Struct(
        ("a", schema.Scalar(np.int32)),
        ("b", schema.List(schema.List(np.int32))),
        ("c", schema.List(schema.Struct(("c1", str), ("c2", schema.List(np.int32))))),
    )


def test_column_names_join_the_path_with_lists_values():
    assert _documented_record().field_names() == [
        "a",
        "b:lengths",
        "b:values:lengths",
        "b:values:values",
        "c:lengths",
        "c:values:c1",
        "c:values:c2:lengths",
        "c:values:c2:values",
    ]


def test_types_and_inner_shapes():
    rec = schema.Struct(("dense", schema.Scalar((np.float32, 3))), ("ids", schema.List(np.int64)))
    assert rec.field_types() == [np.dtype((np.float32, 3)), np.dtype(np.int32), np.dtype(np.int64)]
    filled = schema.from_blob_list(rec, [[[1, 2, 3], [4, 5, 6]], [1, 0], [9]])
    assert filled.dense.get().shape == (2, 3) and filled.dense.get().dtype == np.float32
    empty = schema.from_blob_list(rec, [[], [], []])
    assert empty.dense.get().shape == (0, 3)


def test_slices_index_the_root_columns():
    rec = _documented_record()
    names = rec.field_names()
    assert names[rec.c.slice()] == [n for n in names if n.startswith("c:")]
    assert names[rec.b.slice()] == ["b:lengths", "b:values:lengths", "b:values:values"]
    assert [s.id() for s in rec.all_scalars()] == list(range(len(names)))


def test_nested_names_merge_and_conflicts():
    rec = schema.Struct(("x:y", np.int32), ("x:z", np.float32), ("w", np.int64))
    assert rec.field_names() == ["x:y", "x:z", "w"]
    assert rec["x:z"] == schema.Scalar(np.float32)
    with pytest.raises(ValueError):
        schema.Struct(("w", np.int32), ("w", np.int32))
    with pytest.raises(TypeError):
        schema.Struct(("x", schema.Struct(("y", np.int32))), ("x:y:q", np.int32))


def test_addition_and_subtraction_are_inverse_on_disjoint_fields():
    left = schema.Struct(("a", np.int32), ("n", schema.Struct(("p", np.int32))))
    right = schema.Struct(("b", np.int32), ("n", schema.Struct(("q", np.int32))))
    both = left + right
    assert both.field_names() == ["a", "n:p", "n:q", "b"]
    assert (both - right).field_names() == left.field_names()
    assert (both - left).field_names() == ["n:q", "b"]
    with pytest.raises(TypeError):
        left - schema.Scalar()


def test_lists_and_maps_index_their_values():
    m = schema.Map(np.int32, schema.List(np.float32), keys_name="k", values_name="v")
    assert m.field_names() == ["lengths", "values:k", "values:v:lengths", "values:v:values"]
    assert m.k == schema.Scalar(np.int32)
    assert m["values:v:values"] == schema.Scalar(np.float32)
    with pytest.raises(KeyError):
        m["values:nope"]


def test_structs_are_frozen_and_picklable():
    rec = schema.Struct(("a", schema.Scalar(np.int32, metadata=schema.Metadata(categorical_limit=9))))
    with pytest.raises(TypeError):
        rec.a = schema.Scalar()
    back = pickle.loads(pickle.dumps(rec))
    assert back == rec and back.a.metadata.categorical_limit == 9
    with pytest.raises(AssertionError):
        schema.Scalar(np.float32, metadata=schema.Metadata(categorical_limit=3))


def test_from_column_list_rebuilds_lists_and_maps():
    rec = schema.Struct(("s", schema.List(np.int32)), ("m", schema.Map(np.int32, np.float32)), ("t", np.int64))
    names = rec.field_names()
    shuffled = names[::-1]
    rebuilt = schema.from_column_list(shuffled, col_blobs=[core.BlobReference(n) for n in shuffled])
    assert sorted(rebuilt.field_names()) == sorted(names)
    assert isinstance(rebuilt.s, schema.List) and isinstance(rebuilt.m, schema.List)
    assert [str(b) for b in rebuilt.field_blobs()] == rebuilt.field_names()


def test_feed_fetch_and_init_empty_round_trip():
    values = schema.Struct(("x", np.arange(4, dtype=np.int64)), ("y", np.array([0.5, 1.5], np.float32)))
    net = core.Net("schema_rt")
    blobs = schema.NewRecord(net, values)
    schema.FeedRecord(blobs, values)
    fetched = schema.FetchRecord(blobs)
    for got, want in zip(fetched.field_blobs(), values.field_blobs()):
        np.testing.assert_array_equal(got, want)
    typed = schema.Struct(("d", schema.Scalar((np.float32, 2))), ("s", str), ("i", np.int32))
    init = core.Net("schema_empty")
    empty = schema.InitEmptyRecord(init, typed)
    workspace.RunNetOnce(init)
    arrays = [workspace.FetchBlob(str(b)) for b in empty.field_blobs()]
    assert [a.shape for a in arrays] == [(0, 2), (0,), (0,)]
    assert arrays[0].dtype == np.float32 and arrays[2].dtype == np.int32


def test_equal_schemas_and_as_record():
    a = schema.as_record({"u": np.int32, "v": [np.float32, np.int64]})
    assert a.field_names() == ["u", "v:field_0", "v:field_1"]
    b = a.clone_schema()
    assert schema.equal_schemas(a, b)
    b.u.set_metadata(schema.Metadata(categorical_limit=4))
    assert schema.equal_schemas(a, b) and not schema.equal_schemas(a, b, check_field_metas=True)
    assert schema.data_type_for_dtype(np.dtype(np.int64)) == core.DataType.INT64
    with pytest.raises(TypeError):
        schema.data_type_for_dtype(np.dtype(np.void))
