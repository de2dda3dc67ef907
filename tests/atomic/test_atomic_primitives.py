"""Semantics of Mutex, AtomicInt and AtomicBool, in-process and shared-memory, against a model.

The reference for AtomicInt arithmetic is a plain Python model of C++ std::atomic (two's
complement wrap-around), checked with hypothesis over random operation sequences.
"""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncnet.atomic import (
    AtomicBool,
    AtomicInt,
    Mutex,
    SharedAtomicBool,
    SharedAtomicInt,
    SharedMutex,
)

KINDS = {
    "local": (Mutex, AtomicInt, AtomicBool),
    "shared": (SharedMutex, SharedAtomicInt, SharedAtomicBool),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request, no_shm_leak):
    """Constructors for one implementation; shared objects are closed after the test."""
    made = []
    mutex_cls, int_cls, bool_cls = KINDS[request.param]

    def track(cls):
        def make(*args, **kwargs):
            obj = cls(*args, **kwargs)
            made.append(obj)
            return obj

        return make

    yield type(
        "Kind",
        (),
        {
            "name": request.param,
            "mutex": staticmethod(track(mutex_cls)),
            "int": staticmethod(track(int_cls)),
            "bool": staticmethod(track(bool_cls)),
        },
    )
    for obj in made:
        close = getattr(obj, "close", None)
        if close:
            close()


def wrap(x: int, bits: int) -> int:
    """Reference: what C++ std::atomic<intN_t>::fetch_add leaves behind."""
    return int(
        np.array(x % (1 << bits), dtype=np.uint64)
        .astype(np.int64 if bits == 64 else np.uint32)
        .view(np.int64 if bits == 64 else np.int32)
    )


# -- Mutex ---------------------------------------------------------------------------------


def test_mutex_acquire_release_locked(kind):
    m = kind.mutex()
    assert not m.locked()
    assert m.acquire(timeout=1.0) is True
    assert m.locked()
    m.release()
    assert not m.locked()
    with m:
        assert m.locked()
    assert not m.locked()


def test_mutex_timeout_when_held_by_another_thread(kind):
    m = kind.mutex()
    held, done = threading.Event(), threading.Event()

    def holder():
        with m:
            held.set()
            done.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(5)
        assert m.acquire(timeout=0) is False
        assert m.acquire(timeout=0.05) is False
        assert m.locked()
    finally:
        done.set()
        t.join(5)
    assert m.acquire(timeout=5) is True
    m.release()


def test_mutex_rejects_negative_timeout(kind):
    with pytest.raises(ValueError, match="timeout"):
        kind.mutex().acquire(timeout=-1)


def test_mutex_release_unlocked_raises(kind):
    with pytest.raises(RuntimeError):
        kind.mutex().release()


def test_mutex_excludes_threads(kind, fast_switching):
    m = kind.mutex()
    box = {"n": 0}

    def work():
        for _ in range(2000):
            with m:
                n = box["n"]  # a deliberately non-atomic read-modify-write
                box["n"] = n + 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert box["n"] == 8000


# -- AtomicInt ------------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("fetch_add"), st.integers(-(2**70), 2**70)),
        st.tuples(st.just("add_fetch"), st.integers(-(2**40), 2**40)),
        st.tuples(st.just("store"), st.integers(-(2**31), 2**31 - 1)),
        st.tuples(st.just("exchange"), st.integers(-(2**31), 2**31 - 1)),
        st.tuples(st.just("cas_hit"), st.integers(-(2**31), 2**31 - 1)),
        st.tuples(st.just("cas_miss"), st.integers(-(2**31), 2**31 - 1)),
        st.tuples(st.just("load"), st.just(0)),
    ),
    max_size=30,
)


@pytest.mark.parametrize("bits", [32, 64])
@settings(max_examples=40, deadline=None)
@given(start=st.integers(-(2**31), 2**31 - 1), ops=OPS)
def test_atomic_int_matches_std_atomic_model(bits, start, ops):
    for cls in (AtomicInt, SharedAtomicInt):
        a = cls(start, bits=bits)
        model = start
        try:
            for op, x in ops:
                if op == "fetch_add":
                    assert a.fetch_add(x) == model
                    model = wrap(model + x, bits)
                elif op == "add_fetch":
                    model = wrap(model + x, bits)
                    assert a.add_fetch(x) == model
                elif op == "store":
                    a.store(x)
                    model = x
                elif op == "exchange":
                    assert a.exchange(x) == model
                    model = x
                elif op == "cas_hit":
                    assert a.compare_exchange(model, x) == (True, model)
                    model = x
                elif op == "cas_miss":
                    assert a.compare_exchange(model + 1, x) == (False, model)
                assert a.load() == model
        finally:
            if isinstance(a, SharedAtomicInt):
                a.close()


@pytest.mark.parametrize("bits", [32, 64])
def test_atomic_int_wraps_like_cpp(kind, bits):
    top = 2 ** (bits - 1) - 1
    a = kind.int(top, bits=bits)
    assert a.fetch_add(1) == top
    assert a.load() == -top - 1
    assert a.add_fetch(-1) == top
    assert a.bits == bits


@pytest.mark.parametrize("bits", [32, 64])
def test_atomic_int_stored_values_must_fit(kind, bits):
    top = 2 ** (bits - 1) - 1
    a = kind.int(0, bits=bits)
    for bad in (top + 1, -top - 2):
        with pytest.raises(OverflowError, match=f"{bits}-bit"):
            a.store(bad)
        with pytest.raises(OverflowError):
            a.exchange(bad)
        with pytest.raises(OverflowError):
            a.compare_exchange(0, bad)
    with pytest.raises(OverflowError):
        kind.int(top + 1, bits=bits)
    assert a.load() == 0


def test_atomic_int_argument_checks(kind):
    with pytest.raises(ValueError, match="32 or 64"):
        kind.int(0, bits=16)
    a = kind.int(0)
    with pytest.raises(TypeError, match="integer"):
        a.fetch_add(1.5)
    with pytest.raises(TypeError, match="integer"):
        a.store("3")
    assert a.fetch_add(np.int64(3)) == 0
    assert a.add_fetch(np.int32(2)) == 5


def _run_threads(n, target):
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)


def test_atomic_int_stress_no_lost_update(kind, fast_switching, no_thread_leak):
    a = kind.int(0, bits=32)
    fetched = [[] for _ in range(4)]

    def work(i):
        for _ in range(5000):
            fetched[i].append(a.fetch_add(1))

    _run_threads(4, work)
    assert a.load() == 20000
    # every fetch saw a distinct old value: together they are exactly 0..19999
    assert sorted(v for f in fetched for v in f) == list(range(20000))


def test_atomic_int_cas_loop_stress(kind, fast_switching, no_thread_leak):
    a = kind.int(0)

    def work(i):
        for _ in range(2000):
            old = a.load()
            while True:
                ok, old = a.compare_exchange(old, old + 3)
                if ok:
                    break

    _run_threads(4, work)
    assert a.load() == 4 * 2000 * 3


def test_atomic_int_exchange_stress(kind, fast_switching):
    # each thread swaps in its own tokens; the multiset of values seen + final is conserved
    a = kind.int(-1)
    seen = [[] for _ in range(4)]

    def work(i):
        for k in range(2000):
            seen[i].append(a.exchange(i * 10000 + k))

    _run_threads(4, work)
    values = sorted([v for s in seen for v in s] + [a.load()])
    assert values == sorted([-1] + [i * 10000 + k for i in range(4) for k in range(2000)])


# -- AtomicBool -----------------------------------------------------------------------------


def test_atomic_bool_operations(kind):
    b = kind.bool()
    assert b.load() is False
    assert b.set_if(False) is False and b.load() is False
    assert b.set_if(np.bool_(True)) is True and b.load() is True
    assert b.set_if(False) is True  # never resets
    b.store(False)
    assert b.test_and_set() is False
    assert b.test_and_set() is True
    assert bool(b) is True
    assert kind.bool(True).load() is True


def test_atomic_bool_test_and_set_has_one_winner(kind, fast_switching):
    rounds = 200
    flags = [kind.bool() for _ in range(rounds)]
    wins = [0] * 4
    start = threading.Barrier(4, timeout=30)

    def work(i):
        start.wait()
        for f in flags:
            if not f.test_and_set():
                wins[i] += 1

    _run_threads(4, work)
    assert sum(wins) == rounds


def test_local_objects_refuse_pickle():
    for obj in (Mutex(), AtomicInt(1), AtomicBool()):
        with pytest.raises(TypeError, match="Shared"):
            pickle.dumps(obj)


def test_reprs(kind):
    assert "unlocked" in repr(Mutex())
    assert "5" in repr(kind.int(5))
    assert "True" in repr(kind.bool(True))
