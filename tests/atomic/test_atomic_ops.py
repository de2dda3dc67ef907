"""The atomic operators against Caffe2's documented semantics (REFERENCE.md section 1)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import asyncnet as an
from asyncnet.atomic import AtomicBool, Mutex, SharedAtomicBool, SharedMutex
from asyncnet.core.registry import get_schema

ATOMIC_OPS = [
    "CreateMutex",
    "AtomicFetchAdd",
    "AtomicFetchAdd64",
    "CreateAtomicBool",
    "ConditionalSetAtomicBool",
    "CheckAtomicBool",
    "Iter",
    "AtomicIter",
]


def run(ws: an.Workspace, build) -> None:
    net = an.Net("t")
    build(net)
    ws.run_net_once(net)


@pytest.fixture
def ws():
    w = an.Workspace()
    yield w
    w.close()


# -- schemas ------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ATOMIC_OPS)
def test_no_op_has_a_gradient(op):
    schema = get_schema(op)
    assert schema.differentiable is False and schema.gradient is None
    assert schema.doc


def test_arity_and_inplace_rules():
    net = an.Net("n")
    with pytest.raises(an.NetDefinitionError):
        net.AtomicFetchAdd(["m", "v"], ["v", "f"])  # 3 inputs
    with pytest.raises(an.NetDefinitionError, match="in place"):
        net.AtomicFetchAdd(["m", "v", "i"], ["i", "f"])  # only input 1 -> output 0 may alias
    with pytest.raises(an.NetDefinitionError, match="in-place enforced"):
        net.AtomicIter(["m", "it"], ["other"])
    with pytest.raises(an.NetDefinitionError, match="in-place enforced"):
        net.Iter(["it"], ["other"])
    with pytest.raises(an.NetDefinitionError):
        net.CheckAtomicBool(["a", "b"], ["c"])
    net.ConditionalSetAtomicBool(["flag", "cond"], [])  # no outputs


# -- mutex and fetch-add ---------------------------------------------------------------------------


def test_create_mutex_makes_a_new_unlocked_mutex_each_run(ws):
    net = an.Net("mk")
    net.CreateMutex([], "m")
    ws.create_net(net)
    ws.run_net("mk")
    first = ws.fetch("m")
    assert isinstance(first, Mutex) and not first.locked()
    ws.run_net("mk")
    assert ws.fetch("m") is not first


@pytest.mark.parametrize("op,dtype", [("AtomicFetchAdd", np.int32), ("AtomicFetchAdd64", np.int64)])
@pytest.mark.parametrize("shape", [(), (1,), (3,)])
def test_fetch_add_in_place(ws, op, dtype, shape):
    ws.feed("m", Mutex())
    ws.feed("v", np.full(shape, 5, dtype))
    ws.feed("inc", np.array([3, 100], dtype))  # element 0 is read
    net = an.Net("fa")
    getattr(net, op)(["m", "v", "inc"], ["v", "fetched"])
    ws.create_net(net)
    ws.run_net("fa", num_iter=4)
    v, fetched = ws.fetch("v"), ws.fetch("fetched")
    assert v.shape == () and fetched.shape == ()  # both outputs are 0-d scalars
    assert v.dtype == dtype and fetched.dtype == dtype
    assert int(v) == 5 + 4 * 3 and int(fetched) == 5 + 3 * 3


@pytest.mark.parametrize("op,dtype", [("AtomicFetchAdd", np.int32), ("AtomicFetchAdd64", np.int64)])
def test_fetch_add_out_of_place_leaves_input(ws, op, dtype):
    ws.feed("m", Mutex())
    ws.feed("a", np.array([7], dtype))
    ws.feed("b", np.array(-2, dtype))
    run(ws, lambda n: getattr(n, op)(["m", "a", "b"], ["c", "d"]))
    assert ws.fetch("a").tolist() == [7]
    assert ws.fetch("c").shape == () and int(ws.fetch("c")) == 5 and int(ws.fetch("d")) == 7


@pytest.mark.parametrize("op,dtype,bits", [("AtomicFetchAdd", np.int32, 32), ("AtomicFetchAdd64", np.int64, 64)])
def test_fetch_add_wraps_like_int_arithmetic(ws, op, dtype, bits):
    top = np.iinfo(dtype).max
    ws.feed("m", Mutex())
    ws.feed("v", np.array(top, dtype))
    ws.feed("one", np.array(1, dtype))
    run(ws, lambda n: getattr(n, op)(["m", "v", "one"], ["v", "f"]))
    with np.errstate(over="ignore"):
        expected = (np.array([top], dtype) + np.array([1], dtype))[0]  # numpy's wrapping add
    assert int(ws.fetch("v")) == int(expected) == -(2 ** (bits - 1))


@pytest.mark.parametrize(
    "feeds,match",
    [
        (
            {"m": np.zeros(1), "v": np.array(1, np.int32), "i": np.array(1, np.int32)},
            r"expected a Mutex.*input 0 'm'.*ndarray",
        ),
        (
            {"m": Mutex(), "v": np.array(1, np.int64), "i": np.array(1, np.int32)},
            r"expected an int32 tensor in input 1 'v', got dtype int64",
        ),
        (
            {"m": Mutex(), "v": np.array(1, np.int32), "i": np.array(1.0)},
            r"int32 tensor in input 2 'i', got dtype float64",
        ),
        ({"m": Mutex(), "v": [1], "i": np.array(1, np.int32)}, r"int32 tensor in input 1 'v'"),
        ({"m": Mutex(), "v": np.zeros(0, np.int32), "i": np.array(1, np.int32)}, r"at least one element"),
    ],
)
def test_fetch_add_rejects_wrong_kinds(ws, feeds, match):
    for k, v in feeds.items():
        ws.feed(k, v)
    with pytest.raises(an.OperatorError, match=match) as info:
        run(ws, lambda n: n.AtomicFetchAdd(["m", "v", "i"], ["v", "f"]))
    assert info.value.op_type == "AtomicFetchAdd"
    assert isinstance(info.value.__cause__, (TypeError, ValueError))


def test_fetch_add_accepts_a_shared_mutex(ws):
    m = SharedMutex()
    try:
        ws.feed("m", m)
        ws.feed("v", np.array(1, np.int64))
        ws.feed("two", np.array(2, np.int64))
        run(ws, lambda n: n.AtomicFetchAdd64(["m", "v", "two"], ["v", "f"]))
        assert int(ws.fetch("v")) == 3 and not m.locked()
    finally:
        m.close()


def test_fetch_add_read_only_in_place_input_is_an_error(ws):
    v = np.array(1, np.int32)
    v.flags.writeable = False
    ws.feed("m", Mutex())
    ws.feed("v", v)
    ws.feed("i", np.array(1, np.int32))
    with pytest.raises(an.OperatorError, match="read-only"):
        run(ws, lambda n: n.AtomicFetchAdd(["m", "v", "i"], ["v", "f"]))


def test_concurrent_fetch_add_from_a_shape_1_blob_loses_nothing(ws):
    # the blob starts as shape [1]: the first updates must already be atomic
    ws.feed("m", Mutex())
    ws.feed("v", np.zeros(1, np.int32))
    ws.feed("one", np.array(1, np.int32))
    names = []
    for i in range(8):
        net = an.Net(f"w{i}")
        net.AtomicFetchAdd(["m", "v", "one"], ["v", f"f{i}"])
        ws.create_net(net)
        names.append(net.name)
    threads = [threading.Thread(target=ws.run_net, args=(n, 300)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert int(ws.fetch("v")) == 8 * 300


# -- atomic bool ------------------------------------------------------------------------------------


def test_atomic_bool_ops(ws):
    run(ws, lambda n: n.CreateAtomicBool([], "flag"))
    flag = ws.fetch("flag")
    assert isinstance(flag, AtomicBool) and flag.load() is False
    check = an.Net("check")
    check.CheckAtomicBool("flag", "value")
    ws.create_net(check)
    ws.run_net("check")
    value = ws.fetch("value")
    assert value.dtype == np.bool_ and value.shape == (1,) and value.tolist() == [False]
    setter = an.Net("set")
    setter.ConditionalSetAtomicBool(["flag", "cond"], [])
    ws.create_net(setter)
    ws.feed("cond", np.array([False, True]))  # element 0 decides
    ws.run_net("set")
    assert flag.load() is False
    ws.feed("cond", np.array([True]))
    ws.run_net("set")
    assert flag.load() is True
    ws.feed("cond", np.array([False]))
    ws.run_net("set")  # never resets
    ws.run_net("check")
    assert ws.fetch("value").tolist() == [True]


def test_atomic_bool_ops_accept_shared_bool(ws):
    with SharedAtomicBool() as flag:
        ws.feed("flag", flag)
        ws.feed("cond", np.array(True))
        run(ws, lambda n: (n.ConditionalSetAtomicBool(["flag", "cond"], []), n.CheckAtomicBool("flag", "v")))
        assert flag.load() and ws.fetch("v").tolist() == [True]


@pytest.mark.parametrize(
    "flag,cond,match",
    [
        (Mutex(), np.array([True]), r"expected an AtomicBool.*input 0 'flag', got Mutex"),
        (AtomicBool(), np.array([1]), r"expected a bool tensor in input 1 'cond', got dtype int64"),
        (AtomicBool(), np.array([], bool), r"at least one element"),
    ],
)
def test_atomic_bool_ops_reject_wrong_kinds(ws, flag, cond, match):
    ws.feed("flag", flag)
    ws.feed("cond", cond)
    with pytest.raises(an.OperatorError, match=match):
        run(ws, lambda n: n.ConditionalSetAtomicBool(["flag", "cond"], []))
    with pytest.raises(an.OperatorError, match="AtomicBool") if isinstance(flag, Mutex) else _no_error():
        run(ws, lambda n: n.CheckAtomicBool("flag", "v"))


class _no_error:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- Iter and AtomicIter -------------------------------------------------------------------------


def test_iter_creates_counter_then_increments(ws):
    net = an.Net("it")
    net.Iter([], "iter")
    ws.create_net(net)
    ws.run_net("it")
    it = ws.fetch("iter")
    assert it.dtype == np.int64 and it.shape == (1,) and it.tolist() == [1]
    ws.run_net("it", num_iter=4)
    assert ws.fetch("iter").tolist() == [5]


def test_iter_in_place_form(ws):
    counter = np.array([41], np.int64)
    ws.feed("iter", counter)
    run(ws, lambda n: n.Iter("iter", "iter"))
    assert ws.fetch("iter").tolist() == [42] and counter.tolist() == [42]  # updated in place


@pytest.mark.parametrize("op", ["Iter", "AtomicIter"])
@pytest.mark.parametrize(
    "value,match",
    [
        (np.zeros(2, np.int64), "not of the right size"),
        (np.zeros((), np.int64) - 1, "Previous iteration number is negative"),
        (np.array([-5], np.int64), "Previous iteration number is negative"),
        (np.array([np.iinfo(np.int64).max], np.int64), "Overflow will happen"),
        (np.array([1], np.int32), "expected an int64 iteration tensor .* got dtype int32"),
        (Mutex(), "expected an int64 iteration tensor .* got Mutex"),
    ],
)
def test_iter_checks(ws, op, value, match):
    ws.feed("m", Mutex())
    ws.feed("iter", value)
    inputs = ["iter"] if op == "Iter" else ["m", "iter"]
    with pytest.raises(an.OperatorError, match=match) as info:
        run(ws, lambda n: getattr(n, op)(inputs, "iter"))
    assert info.value.op_type == op


def test_atomic_iter_shared_by_concurrent_nets(ws):
    # Caffe2's BuildUniqueMutexIter: ConstantFill(int64) + CreateMutex in init, AtomicIter in training nets
    init = an.Net("init")
    init.ConstantFill([], "iter", shape=[1], value=0, dtype="int64")
    init.CreateMutex([], "iter_mutex")
    ws.run_net_once(init)
    names = []
    for i in range(6):
        net = an.Net(f"train{i}")
        net.AtomicIter(["iter_mutex", "iter"], "iter")
        ws.create_net(net)
        names.append(net.name)
    threads = [threading.Thread(target=ws.run_net, args=(n, 400)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert ws.fetch("iter").tolist() == [6 * 400]
    assert not ws.fetch("iter_mutex").locked()


def test_atomic_iter_wrong_mutex(ws):
    ws.feed("m", AtomicBool())
    ws.feed("iter", np.zeros(1, np.int64))
    with pytest.raises(an.OperatorError, match="expected a Mutex .*got AtomicBool"):
        run(ws, lambda n: n.AtomicIter(["m", "iter"], "iter"))


def test_iter_counter_may_be_a_numpy_subclass(ws):
    class Counter(np.ndarray):
        pass

    ws.feed("it", np.zeros(1, np.int64).view(Counter))
    net = an.Net("n")
    net.Iter("it", "it")
    ws.run_net_once(net)
    assert int(ws.fetch("it")[0]) == 1
