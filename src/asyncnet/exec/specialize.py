"""Specialized runs of a straight net: each kernel's fast path chosen once, the inputs checked once per run.

Policy
------
A kernel's fast path sits behind checks of its inputs' types, dtypes and shapes (two numpy
float32 arrays whose inner dims match?). In a training loop these never change from one step
to the next, and most ops read what the ops before them wrote. So when every op of a straight
net has a fast kernel for the inputs of a run (its schema's ``specialize``, see
:func:`asyncnet.core.registry.register_op`), the net compiles a *variant*: the same
straight-line code calling the fast kernels, plus a check of the net's *external* inputs (the
blobs it reads before writing them: the batch, the parameters, the counter) against the type,
dtype and shape they had. A later run whose external inputs match takes the variant; the
outputs of its ops then match too (a fast kernel's outputs follow from its inputs' types,
dtypes and shapes), so no kernel checks anything but values. Any other run takes the general
code; a run with external inputs not seen before is a *specializing run* (op by op, as the
simple net, asking each op for its fast kernel before it runs). Variants are kept per input
signature (a smaller last batch is a second variant), at most :data:`MAX_VARIANTS`.

A fast kernel that raises has written nothing (the contract of ``specialize``), so the run
goes on from that op through the ops' general kernels (:meth:`Operator.run`): the error, if
there is one, is the simple net's, and a run that only a general kernel can finish finishes.
The exception is numpy's FloatingPointError under ``np.errstate(...="raise")``, raised after
the writes: the fast kernel ran the general kernel's own numpy calls, so it is that kernel's
error, raised as it is (running the op again would apply an update twice).

Nets with an op whose schema has no ``specialize``, or whose kernel was replaced on its
:class:`~asyncnet.core.operator.Operator`, or of more than :data:`MAX_OPS` ops, are never
specialized. Only numpy arrays are specialized inputs (a torch tensor's device and layout make
its check cost what it saves).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.ones((2, 3), np.float32)); ws.feed("w", np.ones((4, 3), np.float32))
    >>> ws.feed("b", np.zeros(4, np.float32))
    >>> net = an.Net("n", type="straight"); _ = net.FC(["x", "w", "b"], "y"); _ = net.Relu("y", "z")
    >>> for _ in range(2): ws.run_net_once(net)
    >>> ws.fetch("z").tolist()
    [[3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

import numpy as np

from asyncnet.core.operator import Operator
from asyncnet.tensor.route import is_routed

__all__ = ["Specializer", "Variant", "external_inputs", "specializable", "MAX_VARIANTS", "MAX_OPS"]

MAX_VARIANTS = 8  # input signatures kept per net (a training loop has one or two)
MAX_OPS = 10_000  # larger nets spend their time in kernels, not checks: no second copy of their code

Signature = tuple[tuple[np.dtype, tuple[int, ...]], ...]
Runner = Callable[[MutableMapping[str, Any]], None]


def external_inputs(operators: Sequence[Operator]) -> list[str]:
    """The blobs ``operators`` read before any of them writes them, in the order first read.

    >>> class Op:
    ...     def __init__(self, i, o): self.inputs, self.outputs = i, o
    >>> external_inputs([Op(("x", "w"), ("y",)), Op(("y", "w"), ("w",)), Op(("w",), ("z",))])
    ['x', 'w']
    """
    written: set[str] = set()
    seen: dict[str, None] = {}
    for op in operators:
        for name in op.inputs:
            if name not in written:
                seen.setdefault(name, None)
        written.update(op.outputs)
    return list(seen)


def specializable(operators: Sequence[Operator]) -> bool:
    """Whether every op has a ``specialize`` and runs its schema's own kernel, possibly routed
    (:mod:`asyncnet.tensor.route`: numpy inputs reach it unchanged) (nets of 1 to :data:`MAX_OPS` ops)."""
    return 0 < len(operators) <= MAX_OPS and all(
        op.schema.specialize is not None and _own_kernel(op) for op in operators
    )


def _own_kernel(op: Operator) -> bool:
    fn = op.fn
    return fn is op.schema.fn or (is_routed(fn) and fn.__wrapped__ is op.schema.fn)


class Variant:
    """A net's compiled fast code for one input signature, and the check that the blobs still have it."""

    __slots__ = ("matches", "code")

    def __init__(self, names: Sequence[str], signature: Signature, code: list[Runner]):
        self.matches = _checker(names, signature)
        self.code = code


class Specializer:
    """The variants of one straight net (see the module doc); ``compile_ops(ops, fns)`` makes their code."""

    def __init__(self, operators: Sequence[Operator], compile_ops: Callable[..., list[Runner]]):
        self.operators = operators
        self.names = external_inputs(operators)
        self._compile = compile_ops
        self._current: Variant | None = None
        self._variants: dict[Signature, Variant | None] = {}

    def variant(self, blobs: MutableMapping[str, Any]) -> Variant | Signature | None:
        """The variant for the blobs as they are; else their signature when no variant was tried
        for it yet (the caller then makes a specializing run); else None (run the general code)."""
        current = self._current
        if current is not None and current.matches(blobs):
            return current
        sig = _signature(blobs, self.names)
        if sig is None:
            return None
        if sig not in self._variants:
            return sig
        found = self._variants[sig]
        if found is not None:
            self._current = found
        return found

    def specializing_run(self, blobs: MutableMapping[str, Any], sig: Signature) -> None:
        """Run every op as the simple net does, asking each for its fast kernel first; keep the
        variant when every op gave one (an op failing ends the run with its error, nothing kept)."""
        fast: list[Callable[..., Any] | None] = []
        for op in self.operators:
            fast.append(_fast_kernel(op, blobs))
            op.run(blobs)
        if len(self._variants) >= MAX_VARIANTS:
            self._variants.pop(next(iter(self._variants)))
        if all(f is not None for f in fast):
            self._variants[sig] = self._current = Variant(self.names, sig, self._compile(self.operators, fast))
        else:
            self._variants[sig] = None

    def resume(self, blobs: MutableMapping[str, Any], index: int) -> None:
        """Run ops ``index..`` through their general kernels (after a fast kernel raised at ``index``)."""
        for op in self.operators[index:]:
            op.run(blobs)


def _fast_kernel(op: Operator, blobs: MutableMapping[str, Any]) -> Callable[..., Any] | None:
    try:
        inputs = [blobs[n] for n in op.inputs]
        return op.schema.specialize(op.ctx, *inputs)  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - an input a specializer cannot judge: the general kernel decides
        return None


def _signature(blobs: MutableMapping[str, Any], names: Sequence[str]) -> Signature | None:
    """(dtype, shape) of each external input, or None when one is missing or not a numpy array."""
    sig = []
    for name in names:
        v = blobs.get(name)
        if type(v) is not np.ndarray:
            return None
        sig.append((v.dtype, v.shape))
    return tuple(sig)


def _checker(names: Sequence[str], signature: Signature) -> Callable[[MutableMapping[str, Any]], bool]:
    """``matches(blobs)``: every external input still a numpy array of its dtype and shape, as
    straight-line code with the expected values bound as closure cells."""
    lines = [
        "def make(nd, sig):",
        "".join(f"    d{k}, s{k} = sig[{k}]\n" for k in range(len(names))),
        "    def matches(blobs):",
        "        try:",
    ]
    for k, name in enumerate(names):
        lines += [
            f"            v = blobs[{name!r}]",
            f"            if type(v) is not nd or v.shape != s{k} or (v.dtype is not d{k} and v.dtype != d{k}): return False",
        ]
    lines += ["        except KeyError:", "            return False", "        return True", "    return matches"]
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), "<straight net input check>", "exec"), namespace)  # noqa: S102
    return namespace["make"](np.ndarray, signature)
