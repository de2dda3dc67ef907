"""Caffe2's ``LastNWindowCollector``: the last ``num_to_collect`` rows seen, in a ring buffer.

Inputs: the buffer, the cursor (an int32 scalar: where the next row goes once the buffer is
full), the new rows, optionally a mutex held while they go in; outputs the buffer and cursor (in
place) and optionally the number of rows seen (int64). The buffer grows to ``num_to_collect``
rows, then each new row overwrites the oldest. An empty buffer (a new blob) takes its row shape
and dtype from the first rows.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("buf", np.zeros(0, np.float32)); ws.feed("next", np.array(0, np.int32))
    >>> net = an.Net("window"); _ = net.LastNWindowCollector(["buf", "next", "x"], ["buf", "next"], num_to_collect=3)
    >>> for start in (0, 2):
    ...     ws.feed("x", np.arange(start, start + 2, dtype=np.float32)); ws.run_net_once(net)
    >>> ws.fetch("buf"), ws.fetch("next")
    (array([3., 1., 2.], dtype=float32), array(1, dtype=int32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__ = ["collect_last_n"]

_SEEN = "_window_rows_seen"  # the op instance's count of rows seen, in its own args dict


def collect_last_n(buffer: np.ndarray, cursor: int, rows: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """The buffer and cursor after ``rows`` arrive (see the module's docstring).

    >>> b, c = collect_last_n(np.zeros((0,)), 0, np.arange(5.0), 3); b.tolist(), c
    ([3.0, 4.0, 2.0], 2)
    """
    if len(buffer) < n:  # still growing: append what fits
        room = n - len(buffer)
        buffer = np.concatenate([buffer, rows[:room]]) if len(buffer) else np.array(rows[:room])
        rows = rows[room:]
        cursor = len(buffer) % n
    if len(rows) == 0:
        return buffer, cursor
    if len(rows) > n:  # only the last n survive; they land where they would have
        cursor = (cursor + len(rows) - n) % n
        rows = rows[-n:]
    at = (cursor + np.arange(len(rows))) % n
    buffer = buffer.copy()
    buffer[at] = rows
    return buffer, int((cursor + len(rows)) % n)


def _validate(op: Any) -> None:
    if op.args.get("num_to_collect", -1) <= 0:
        raise ValueError(f"expected num_to_collect > 0, got {op.args.get('num_to_collect')}")


@register_op(
    "LastNWindowCollector",
    inputs=(3, 4),
    outputs=(2, 3),
    validate=_validate,
    enforce_inplace={0: 0, 1: 1},
    args=[Arg("num_to_collect", int, -1, "the rows kept")],
    inputs_doc=("last-N buffer", "next cursor (int32 scalar)", "DATA (rows)", "mutex (optional)"),
    outputs_doc=("last-N buffer", "next cursor", "number of rows seen (int64, optional)"),
    doc="Keep the last num_to_collect rows seen in a ring buffer.",
)
def last_n_window_collector(ctx: Any, buffer: Any, cursor: Any, data: Any, *mutex: Any) -> Any:
    data = np.asarray(data)
    if data.ndim == 0:
        raise ValueError(f"expected DATA of at least 1 dimension (rows), got a scalar in {ctx.op.inputs[2]!r}")
    buffer = None if buffer is None else np.asarray(buffer)
    if buffer is None or buffer.size == 0:
        buffer = np.zeros((0, *data.shape[1:]), data.dtype)
    elif buffer.shape[1:] != data.shape[1:] or buffer.dtype != data.dtype:
        raise ValueError(
            f"expected rows like the buffer's {buffer.shape[1:]} {buffer.dtype}, got {data.shape[1:]} {data.dtype}"
        )
    n = ctx.args["num_to_collect"]
    if mutex:
        with mutex[0]:
            out, nxt = collect_last_n(buffer, int(np.asarray(cursor).reshape(-1)[0]), data, n)
    else:
        out, nxt = collect_last_n(buffer, int(np.asarray(cursor).reshape(-1)[0]), data, n)
    seen = ctx.args[_SEEN] = ctx.args.get(_SEEN, 0) + len(data)
    result = [out, np.array(nxt, np.int32)]
    if len(ctx.op.outputs) == 3:
        result.append(np.array(seen, np.int64))
    return tuple(result)


register_no_gradient("LastNWindowCollector")
