"""Split an FC gradient op in two: ``dW, db`` in one op, ``dX`` in another (the same bits).

An FCGradient computes dW = dY^T X, db and dX = dY W in one op, but dW and dX are independent
GEMMs: split, an executor can run one beside the other, or beside the layers below. Used by the
bucketed all-reduce (:mod:`asyncnet.train.buckets`: a bucket starts as soon as its dW is
written) and by models whose nets have work to overlap (:mod:`asyncnet.model.zoo.dlrm`).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["split_input_gradients"]

_SPLIT_TRANS_B = {"FCGradient": False, "FCTransposedGradient": True}


def split_input_gradients(net: object, grads: Sequence[str], dx_first: bool = False) -> int:
    """Split each FC gradient op writing one of ``grads`` and an input gradient ``dX`` in two:
    the op keeps ``dW, db``; ``MatMul(dY, W)`` (flattened as FC flattens them) writes ``dX``
    and an in-place ``Reshape`` to ``Shape(X)`` gives it X's shape without a copy (same
    values, bit for bit: the same product of the same 2-D views). Returns the number of ops split.

    By default dX waits for dW (a control input; a gradient sync wants dW as early as it can).
    ``dx_first`` puts the dX ops first and lets them run as soon as dY is there: in a backward
    pass dX is the critical path (the layer below needs it), so the thread that wrote dY goes on
    with it and dW runs beside it on another thread.

        >>> import asyncnet as an
        >>> net = an.Net("t")
        >>> _ = net.add_op("FCGradient", ["x", "w", "dy"], ["dw", "db", "dx"])
        >>> split_input_gradients(net, ["dw"]), [op.type for op in net.ops]
        (1, ['FCGradient', 'MatMul', 'Shape', 'Reshape'])
        >>> net = an.Net("t"); _ = net.add_op("FCGradient", ["x", "w", "dy"], ["dw", "db", "dx"])
        >>> split_input_gradients(net, ["dw"], dx_first=True), [op.type for op in net.ops]
        (1, ['MatMul', 'Shape', 'Reshape', 'FCGradient'])
    """
    wanted = set(grads)
    ops = net.ops  # type: ignore[attr-defined]
    split = 0
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if op.type not in _SPLIT_TRANS_B or len(op.outputs) != 3 or not wanted.intersection(op.outputs[:2]):
            continue
        (x, w, dy), dx = op.inputs, op.outputs[2]
        dev = op.device_option
        net.add_op(
            op.type,
            [x, w, dy],
            op.outputs[:2],
            name=op.name,
            device_option=dev,  # type: ignore[attr-defined]
            control_inputs=op.control_inputs or None,
            **op.args,
        )
        # after dW (a control input) unless dx_first: for a gradient sync dX would only delay the bucket's start
        net.add_op(
            "MatMul",
            [dy, w],
            [dx],
            device_option=dev,
            control_inputs=None if dx_first else [op.outputs[0]],
            axis_a=-1,  # type: ignore[attr-defined]
            axis_b=int(op.args.get("axis_w", 1)),
            trans_b=_SPLIT_TRANS_B[op.type],
        )
        # X's shape back by an in-place Reshape (a view), not a copy (ResizeLike copies 2 MiB a layer here)
        net.add_op("Shape", [x], [f"{dx}/shape"], device_option=dev)  # type: ignore[attr-defined]
        net.add_op("Reshape", [dx, f"{dx}/shape"], [dx, f"{dx}/old_shape"], device_option=dev)  # type: ignore[attr-defined]
        made = ops[-4:]
        del ops[-4:]
        if dx_first:
            made = made[1:] + made[:1]
        ops[i : i + 1] = made
        split += 1
    return split
