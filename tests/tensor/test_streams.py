"""The async executor's CUDA stream and event bookkeeping, tested on the CPU through stand-in
streams: each chain on cuda:i runs inside a context making device i and its thread's stream
current; it waits on the event of every parent that ran on another stream (and on no other);
each run ends by synchronising exactly the streams it used."""

import contextlib
import itertools
import threading

import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec import pools
from asyncnet.tensor import streams

pytestmark = pytest.mark.timeout(60)
_tokens = itertools.count()
_current = threading.local()


class FakeStream:
    def __init__(self, device, log):
        self.device, self.log = device, log

    def wait_event(self, event):
        self.log.append(("wait", self, event))

    def record_event(self):
        event = ("event", next(_tokens))
        self.log.append(("record", self, event))
        return event

    def synchronize(self):
        self.log.append(("sync", self, None))


class FakeBackend:
    def __init__(self):
        self.log, self.lock = [], threading.Lock()

    def new_stream(self, device):
        return FakeStream(device, self.log)

    @contextlib.contextmanager
    def context(self, device, stream):
        assert stream.device == device
        _current.device = device
        try:
            yield
        finally:
            _current.device = None


@pytest.fixture()
def fake(monkeypatch):
    backend = FakeBackend()
    monkeypatch.setattr(streams, "BACKEND", backend)
    monkeypatch.setattr(pools, "check_device", lambda device: None)  # CUDA pools without CUDA
    original_end = streams.StreamBook.end

    def end(self, run, chain, stream):  # a spy: which chain recorded which event, on which stream
        original_end(self, run, chain, stream)
        backend.log.append(("chain", chain, run.events[chain]))

    monkeypatch.setattr(streams.StreamBook, "end", end)
    return backend


def cuda(i):
    return an.DeviceOption("cuda", i)


def test_events_order_chains_across_streams(fake):
    ws = an.Workspace()
    ws.feed("x", np.ones(4))
    net = an.Net("n", type="async_scheduling", num_workers=2)
    net.Scale("x", "a", scale=2.0, device_option=cuda(0))
    net.Scale("a", "b", scale=3.0, device_option=cuda(1))  # parent on another device: waits
    net.Scale("a", "c", scale=5.0, device_option=cuda(0))
    net.Add(["b", "c"], "d", device_option=cuda(0))
    net.Scale("d", "e", scale=1.0)  # a host op after them
    created = ws.create_net(net)
    assert created.chain_cuda.count(None) == 1 and sorted(d for d in created.chain_cuda if d is not None) == [
        0,
        0,
        0,
        1,
    ]
    for _ in range(30):
        fake.log.clear()
        ws.run_net("n")
        assert ws.fetch("e").tolist() == [16.0] * 4
        check_log(list(fake.log), created)
    ws.close()


def check_log(log, net):
    ran = {c: rec for kind, c, rec in log if kind == "chain"}  # chain -> (stream, event)
    assert sorted(ran) == [c for c, d in enumerate(net.chain_cuda) if d is not None]
    for c, (stream, event) in ran.items():
        assert stream.device == net.chain_cuda[c]
        recorded_at = next(i for i, e in enumerate(log) if e[0] == "record" and e[2] == event)
        for p in net.graph.chain_parents[c]:
            if p not in ran:
                continue
            p_stream, p_event = ran[p]
            waited = [i for i, e in enumerate(log) if e[0] == "wait" and e[1] is stream and e[2] == p_event]
            if p_stream is stream:
                assert waited == [], f"chain {c} waited on its own stream's event"
            else:
                assert len(waited) == 1 and waited[0] < recorded_at, f"chain {c} did not wait for parent {p}"
    waits = [e for e in log if e[0] == "wait"]
    assert len(waits) == sum(
        1 for c, (s, _) in ran.items() for p in net.graph.chain_parents[c] if p in ran and ran[p][0] is not s
    )  # no other waits
    used = {id(s): s for s, _ in ran.values()}
    syncs = [i for i, e in enumerate(log) if e[0] == "sync"]
    assert sorted(id(log[i][1]) for i in syncs) == sorted(used)  # each used stream synchronised once
    last_record = max(i for i, e in enumerate(log) if e[0] == "record")
    assert all(i > last_record for i in syncs)


def test_a_net_without_cuda_ops_keeps_no_stream_book(fake):
    ws = an.Workspace()
    ws.feed("x", np.ones(2))
    net = an.Net("cpu_only", type="async_scheduling")
    net.Scale("x", "y", scale=2.0)
    created = ws.create_net(net)
    assert created.streams is None and created.chain_cuda == [None]
    ws.run_net("cpu_only")
    assert fake.log == []
    ws.close()


def test_a_failing_sync_is_the_runs_error(fake):
    ws = an.Workspace()
    ws.feed("x", np.ones(2))
    net = an.Net("n", type="async_scheduling")
    net.Scale("x", "y", scale=2.0, device_option=cuda(0))
    ws.create_net(net)

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access")

    original = FakeBackend.new_stream

    def new_stream(self, device):
        s = original(self, device)
        s.synchronize = broken
        return s

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FakeBackend, "new_stream", new_stream)
        with pytest.raises(RuntimeError, match="illegal memory access"):
            ws.run_net("n")
    ws.close()


def test_cross_device_barrier_checks_input_i_is_on_device_i(fake, monkeypatch):
    from asyncnet.exec import scheduling

    monkeypatch.setattr(scheduling, "check_device", lambda device: None)
    ws = an.Workspace()
    ws.feed("a", np.ones(2))
    ws.feed("b", np.ones(2))
    net = an.Net("n", type="async_scheduling")
    net.AsyncNetBarrier(["a", "b"], ["a", "b"], cross_device=1, device_option=cuda(0))
    ws.create_net(net)
    with pytest.raises(
        an.OperatorError,
        match=r"expected input 0 'a' on 'cuda:0' \(cross_device=1 places input i on device i\), "
        r"got numpy on 'cpu'",
    ):
        ws.run_net("n")
    ws.close()
