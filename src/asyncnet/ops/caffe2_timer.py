"""Caffe2's timer operators: a started clock held in a blob, read in nanoseconds.

>>> import asyncnet as an
>>> ws = an.Workspace()
>>> net = an.Net("timing")
>>> _ = net.TimerBegin([], "t", counter_name="doc")
>>> _ = net.TimerGet("t", "ns")
>>> ws.run_net_once(net); int(ws.fetch("ns")) >= 0
True
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__ = ["Timer"]


class Timer:
    """A started monotonic clock (Caffe2's ``TimerInstance``)."""

    def __init__(self, name: str):
        self.name = name
        self.start_ns = time.perf_counter_ns()
        self.running = True

    def elapsed_ns(self) -> int:
        return time.perf_counter_ns() - self.start_ns


def _timer(ctx: Any, x: Any) -> Timer:
    if not isinstance(x, Timer):
        raise TypeError(
            f"expected a timer (made by TimerBegin) in input 0 {ctx.op.inputs[0]!r}, got {type(x).__name__}"
        )
    return x


@register_op(
    "TimerBegin",
    inputs=0,
    outputs=1,
    args=[Arg("counter_name", str, "", "the timer's name (the output blob's name by default)")],
    outputs_doc=("a started timer",),
    doc="Caffe2's TimerBegin: start a timer.",
)
def timer_begin(ctx: Any) -> Timer:
    return Timer(ctx.args["counter_name"] or ctx.op.outputs[0])


@register_op(
    "TimerGet",
    inputs=1,
    outputs=1,
    inputs_doc=("a timer",),
    outputs_doc=("nanoseconds since it started (0-d int64)",),
    doc="Caffe2's TimerGet: the nanoseconds elapsed since the timer began.",
)
def timer_get(ctx: Any, t: Any) -> np.ndarray:
    return np.array(_timer(ctx, t).elapsed_ns(), np.int64)


@register_op("TimerEnd", inputs=1, outputs=0, inputs_doc=("a timer",), doc="Caffe2's TimerEnd: stop the timer.")
def timer_end(ctx: Any, t: Any) -> None:
    _timer(ctx, t).running = False


@register_op(
    "TimerGetAndEnd",
    inputs=1,
    outputs=1,
    inputs_doc=("a timer",),
    outputs_doc=("nanoseconds since it started (0-d int64)",),
    doc="Caffe2's TimerGetAndEnd: TimerGet, then stop the timer.",
)
def timer_get_and_end(ctx: Any, t: Any) -> np.ndarray:
    timer = _timer(ctx, t)
    timer.running = False
    return np.array(timer.elapsed_ns(), np.int64)


register_no_gradient("TimerBegin", "TimerGet", "TimerEnd", "TimerGetAndEnd")
