"""Executors: they run a net's operators. Importing this package registers the net types.

"simple" (also Caffe2's "async_simple") runs ops in order on the caller's thread; "async_scheduling" (also "dag",
"async_dag", and Caffe2's other asynchronous types "async_polling" and "parallel") runs chains
of the dependency graph on per-device worker pools. Execution plans
(:class:`Plan`, :class:`ExecutionStep`) run nets in loops and concurrent substeps; :mod:`control`
builds Caffe2's loops and conditionals (For, While, If, Switch, ...) from them.
"""

from asyncnet.core.netbase import register_net_type
from asyncnet.exec import (
    scheduling,
    simple,
    straight,  # noqa: F401  (registers "straight")
)
from asyncnet.exec.plan import ExecutionStep, Plan, PlanHandle, execution_step, to_execution_step

# Caffe2's AsyncPollingNet and ParallelNet were other asynchronous executors of the same graph;
# NetDefs written for them run on ours (same results, our scheduling).
register_net_type(("async_polling", "parallel"), scheduling.AsyncSchedulingNet)
# Caffe2's AsyncSimpleNet ran ops in order on the caller's thread, waiting at the end for the
# device work they started: on the CPU, the simple net.
register_net_type(("async_simple",), simple.SimpleNet)

from asyncnet.exec import control  # noqa: E402  (Caffe2's control.py on these steps)

__all__ = ["ExecutionStep", "Plan", "PlanHandle", "execution_step", "to_execution_step", "control"]
