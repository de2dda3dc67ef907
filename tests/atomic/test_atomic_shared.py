"""Shared-memory atomics: naming, pickling, lifetime, crashes, and spawned processes hammering them."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import warnings
from contextlib import closing
from multiprocessing import shared_memory

import atomic_workers as workers
import numpy as np
import pytest
from atomic_workers import shm_entries

from asyncnet.atomic import OwnerDiedWarning, SharedAtomicBool, SharedAtomicInt, SharedMutex

SPAWN = mp.get_context("spawn")


def _join_all(procs, timeout=60):
    for p in procs:
        p.join(timeout)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
        p.join(5)
    assert not alive, f"processes did not finish: {alive}"
    return [p.exitcode for p in procs]


# -- naming, pickling, lifetime -------------------------------------------------------------


def test_create_by_name_and_attach(no_shm_leak):
    name = f"asyncnet_atomic_test_{np.random.default_rng().integers(1 << 40):x}"
    with SharedAtomicInt(7, bits=32, name=name) as owner:
        assert owner.name == name and owner.owner
        assert name in shm_entries()
        with SharedAtomicInt.attach(name) as other:
            assert not other.owner and other.bits == 32
            other.fetch_add(5)
            assert owner.load() == 12
        assert name in shm_entries()  # a non-owner's close does not unlink
        with pytest.raises(FileExistsError, match=name):
            SharedAtomicInt(name=name)
    assert name not in shm_entries()
    with pytest.raises(FileNotFoundError, match=name):
        SharedAtomicInt.attach(name)


def test_attach_checks_the_kind(no_shm_leak):
    with SharedAtomicBool() as flag:
        with pytest.raises(TypeError, match="SharedAtomicBool.*expected a SharedAtomicInt"):
            SharedAtomicInt.attach(flag.name)
        with pytest.raises(TypeError, match="expected a SharedMutex"):
            SharedMutex.attach(flag.name)


def test_pickle_round_trip_shares_state(no_shm_leak):
    for make in (lambda: SharedAtomicInt(3), SharedAtomicBool, SharedMutex):
        with closing(make()) as obj:
            copy = pickle.loads(pickle.dumps(obj))
            try:
                assert copy.name == obj.name and not copy.owner
                if isinstance(obj, SharedAtomicInt):
                    copy.fetch_add(4)
                    assert obj.load() == 7
                elif isinstance(obj, SharedAtomicBool):
                    copy.store(True)
                    assert obj.load()
                else:
                    with copy:
                        assert obj.locked()
                    assert not obj.locked()
            finally:
                copy.close()


def test_closed_handles_refuse_work(no_shm_leak):
    a = SharedAtomicInt(1)
    a.close()
    a.close()  # idempotent
    assert a.closed
    with pytest.raises(ValueError, match="closed"):
        a.fetch_add(1)
    with pytest.raises(ValueError, match="closed"):
        pickle.dumps(a)
    m = SharedMutex()
    m.close()
    with pytest.raises(ValueError, match="closed"):
        m.acquire()


def test_unlink_keeps_existing_handles_working(no_shm_leak):
    a = SharedAtomicInt(1)
    a.unlink()
    assert a.name not in shm_entries()
    assert a.add_fetch(1) == 2
    a.close()


def test_garbage_collected_owner_unlinks(no_shm_leak):
    a = SharedAtomicInt(1)
    name = a.name
    del a
    import gc

    gc.collect()
    assert name not in shm_entries()


def test_shared_mutex_release_from_other_thread_is_an_error(no_shm_leak):
    import threading

    with closing(SharedMutex()) as m:
        m.acquire()
        errors = []
        t = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, m.release)))
        t.start()
        t.join(5)
        assert errors and m.locked()
        m.release()


# -- processes ------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_processes_hammer_shared_int_and_guarded_array_and_stop(no_shm_leak):
    procs_n, n = 3, 1500
    shm = shared_memory.SharedMemory(create=True, size=4 * 8)
    try:
        arr = np.ndarray((4,), dtype=np.int64, buffer=shm.buf)
        arr[:] = 0
        with SharedAtomicInt(0) as counter, closing(SharedMutex()) as mutex, SharedAtomicBool() as stop:
            procs = [
                SPAWN.Process(target=workers.hammer, args=(counter, mutex, shm.name, stop, r, n, procs_n - 1))
                for r in range(procs_n)
            ]
            for p in procs:
                p.start()
            codes = _join_all(procs)
            assert codes == [0] * procs_n
            assert counter.load() == procs_n * n
            assert stop.load()
            assert arr.tolist() == [procs_n * n * (j + 1) for j in range(4)]
        del arr
    finally:
        shm.close()
        shm.unlink()
    assert not os.path.exists(f"/dev/shm/{shm.name}")


@pytest.mark.timeout(60)
def test_spawned_children_and_attach_by_name(no_shm_leak):
    with SharedAtomicInt(0, bits=32) as counter:
        procs = [SPAWN.Process(target=workers.add_then_exit, args=(counter, 500)) for _ in range(2)]
        procs.append(SPAWN.Process(target=workers.attach_by_name, args=(counter.name, 250)))
        for p in procs:
            p.start()
        assert _join_all(procs) == [0, 0, 0]
        assert counter.load() == 2 * 500 + 2 * 250


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_child_dies_holding_mutex(no_shm_leak, how):
    with closing(SharedMutex()) as m:
        p = SPAWN.Process(target=workers.die_holding, args=(m, how))
        p.start()
        code = _join_all([p])[0]
        assert code in (7, -9)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert m.acquire(timeout=5) is True
        assert any(issubclass(w.category, OwnerDiedWarning) for w in caught)
        m.release()
        assert not m.locked()
        assert m.acquire(timeout=1) is True  # fully recovered
        m.release()


@pytest.mark.timeout(60)
def test_child_dies_inside_an_int_operation(no_shm_leak):
    with SharedAtomicInt(10) as counter:
        p = SPAWN.Process(target=workers.die_inside_int_lock, args=(counter,))
        p.start()
        assert _join_all([p]) == [9]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an int is always consistent: no warning
            assert counter.fetch_add(1) == 10
        assert counter.load() == 11
