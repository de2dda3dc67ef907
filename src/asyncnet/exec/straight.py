"""The straight-line executor (net type "straight"): the simple net's order and bits, prepared.

Policy
------
Ops run one after another on the calling thread, in net order, exactly as on the simple net
(:mod:`asyncnet.exec.simple`): same kernels, same blobs, same errors. What differs is the cost
per op. When the net is created, its ops are compiled into Python functions of straight-line
code (one per 256 ops) in which every op is a single statement with its input and output blob names bound as
constants::

    i = 3
    r = f3(c3, blobs['logits'], blobs['label'])
    if type(r) not in SEQUENCES or len(r) != 2: raise BadResult(3, r)
    blobs['softmax'], blobs['loss'] = r

so a run pays no per-op method call, list building or output dispatch (about 0.6 us an op on
the simple net; a small MLP's train step is 15 ops of a few microseconds each). When every op
can be specialized, runs whose inputs keep their types, dtypes and shapes take a second
compiled function calling each op's fast kernel with no checks of its own
(:mod:`asyncnet.exec.specialize`). Nets whose cost is in the kernels gain nothing; trainers with
one executor thread per net use this type.

State
-----
Static, computed once when the net is created::

    _code     the compiled functions run(blobs) -> None, one per CHUNK ops; op k's kernel and
              OpContext (as its Operator holds them) are the closure cells f{k} and c{k}

Per run there is no state besides the local ``i`` (the index of the running op), which turns a
failure into the same :class:`~asyncnet.OperatorError` the simple net raises: a missing input
blob names the blob, a kernel failure chains the original exception, a kernel result that does
not fit the op's outputs says so. With a recorder attached (:func:`asyncnet.exec.trace.profile`)
a run takes the simple net's path, which times every op.

Example::

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.ones(3))
    >>> net = an.Net("n", type="straight")
    >>> _ = net.Scale("x", "y", scale=2.0); _ = net.Add(["y", "x"], "z")
    >>> ws.run_net_once(net); ws.fetch("z")
    array([3., 3., 3.])
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from numpy import ndarray

from asyncnet.core.defs import NetDef
from asyncnet.core.netbase import register_net_type
from asyncnet.core.operator import Operator
from asyncnet.errors import BlobNotFoundError, OperatorError
from asyncnet.exec.simple import SimpleNet
from asyncnet.exec.specialize import Specializer, Variant, specializable

__all__ = ["StraightNet", "compile_ops"]


class BadResult(Exception):
    """A kernel result that does not fit its op's outputs (raised by the compiled code)."""

    def __init__(self, index: int, result: Any):
        super().__init__(index)
        self.result = result


SEQUENCES = (tuple, list)


CHUNK = 256  # ops per compiled function: compiling one function costs more than linear time in its size


def compile_ops(
    operators: Sequence[Operator], kernels: Sequence[Callable[..., Any]] | None = None
) -> list[Callable[[MutableMapping[str, Any]], None]]:
    """Functions ``run(blobs)`` that together run ``operators`` in order as straight-line code, one
    per :data:`CHUNK` ops (a net of 20,000 ops as one function took 18 s to compile); op k calls
    ``kernels[k]`` (default: its own kernel ``op.fn``).

    Blob names enter the source only through ``repr`` (a str literal), so any name is safe.

        >>> [f.__name__ for f in compile_ops([])]
        []
    """
    fns = [op.fn for op in operators] if kernels is None else list(kernels)
    return [
        _compile_chunk(operators, fns, lo, min(lo + CHUNK, len(operators))) for lo in range(0, len(operators), CHUNK)
    ]


def _compile_chunk(
    operators: Sequence[Operator], fns: Sequence[Callable[..., Any]], lo: int, hi: int
) -> Callable[[MutableMapping[str, Any]], None]:
    bind = "".join(f"    f{k}, c{k} = fns[{k - lo}], ctxs[{k - lo}]\n" for k in range(lo, hi))
    lines = ["def make(fns, ctxs):", bind, "    def run(blobs):", "        i = -1", "        try:"]
    for k in range(lo, hi):  # f{k}, c{k}: closure cells, cheaper to load than list items
        op = operators[k]
        call = f"f{k}(c{k}" + "".join(f", blobs[{b!r}]" for b in op.inputs) + ")"
        lines.append(f"            i = {k}")
        if not op.outputs:
            lines += [f"            r = {call}", f"            if r is not None: raise BadResult({k}, r)"]
        elif len(op.outputs) == 1:
            lines += [
                f"            r = {call}",
                f"            if r is None: raise BadResult({k}, r)",
                f"            blobs[{op.outputs[0]!r}] = r",
            ]
        else:
            lines += [
                f"            r = {call}",
                f"            if type(r) not in SEQUENCES or len(r) != {len(op.outputs)}: raise BadResult({k}, r)",
                "            " + ", ".join(f"blobs[{o!r}]" for o in op.outputs) + " = r",
            ]
    lines += ["        except Exception as exc:", "            raise Failed(i, exc) from exc", "    return run"]
    namespace: dict[str, Any] = {"BadResult": BadResult, "SEQUENCES": SEQUENCES, "Failed": Failed}
    exec(compile("\n".join(lines), f"<straight net ops {lo}..{hi - 1}>", "exec"), namespace)  # noqa: S102
    return namespace["make"](fns[lo:hi], [op.ctx for op in operators[lo:hi]])


class Failed(Exception):
    """Op ``index`` raised ``exc`` (translated into the simple net's error by :meth:`StraightNet.run`)."""

    def __init__(self, index: int, exc: BaseException):
        super().__init__(index)
        self.index, self.exc = index, exc


class StraightNet(SimpleNet):
    """Runs ops in order on the calling thread through one compiled function (same bits and
    errors as :class:`~asyncnet.exec.simple.SimpleNet`)."""

    def __init__(self, net_def: NetDef, operators: Sequence[Operator], blobs: MutableMapping[str, Any]):
        super().__init__(net_def, operators, blobs)
        self._code = compile_ops(self.operators)
        self._specializer = Specializer(self.operators, compile_ops) if specializable(self.operators) else None
        # a run whose first external input is a torch tensor has no variant on its blobs: it tries the shadow first
        self._first = self._shadow.names[0] if self._shadow is not None and self._shadow.names else None

    def run(self, timeout: float | None = None) -> None:
        if self.recorder is not None:
            return super().run(timeout)
        self._claim()
        try:
            blobs = self.blobs
            tried = False
            if self._shadow is not None and type(blobs.get(self._first)) is not ndarray:  # type: ignore[arg-type]
                if self._try_shadow(blobs):
                    return None
                tried = True
            variant = None if self._specializer is None else self._specializer.variant(blobs)
            if type(variant) is not Variant and self._shadow is not None and not tried and self._try_shadow(blobs):
                return None
            if type(variant) is Variant:
                self._run_variant(variant, blobs)
            elif variant is not None:  # external inputs not seen before
                self._specializer.specializing_run(blobs, variant)  # type: ignore[union-attr]
            else:
                for chunk in self._code:
                    chunk(blobs)
        except Failed as failed:
            err, cause = self._error(failed.index, failed.exc)
            raise err from cause
        finally:
            self._release()
        return None

    def _try_shadow(self, blobs: MutableMapping[str, Any]) -> bool:
        """Run on numpy views of torch CPU tensors when every input allows it; False when not."""
        shadow = self._shadow
        assert shadow is not None
        got = shadow.views(blobs)
        if got is None or shadow.plan(got[1]) is None:
            return False
        self._run_shadow(blobs, *got)
        return True

    def _run_shadow(
        self, blobs: MutableMapping[str, Any], arrays: dict[str, Any], kinds: tuple[int, ...], back: dict[int, Any]
    ) -> None:
        """The run on numpy arrays of torch CPU tensors (:mod:`asyncnet.tensor.shadow`): the same
        kernels and order as below on ``arrays``, then every written blob stored back in ``blobs``."""
        shadow = self._shadow
        assert shadow is not None
        armed = shadow.arm(kinds, back)
        try:
            variant = None if self._specializer is None else self._specializer.variant(arrays)
            if type(variant) is Variant:
                self._run_variant(variant, arrays)
            elif variant is not None:
                self._specializer.specializing_run(arrays, variant)  # type: ignore[union-attr]
            else:
                for chunk in self._code:
                    chunk(arrays)
        except Failed as failed:
            shadow.write_back(blobs, arrays, kinds, back, failed.index)
            err, cause = self._error(failed.index, failed.exc)
            raise err from cause
        except OperatorError as exc:  # from an op's general kernel (a specializing run, or one resumed)
            shadow.write_back(blobs, arrays, kinds, back, exc.op_index)
            raise
        finally:
            for cell in armed:
                cell[0] = None
        shadow.write_back(blobs, arrays, kinds, back)

    def _run_variant(self, variant: Variant, blobs: MutableMapping[str, Any]) -> None:
        try:
            for chunk in variant.code:
                chunk(blobs)
        except Failed as failed:
            if isinstance(failed.exc, FloatingPointError):  # np.errstate(raise): the general kernel's own error,
                raise  # raised after the same writes (numpy checks the flags once the loop is done)
            self._specializer.resume(blobs, failed.index)  # type: ignore[union-attr]  # raised before writing

    def _error(self, index: int, exc: Exception) -> tuple[OperatorError, BaseException | None]:
        """The error the simple net raises for op ``index`` failing with ``exc``, and its cause."""
        op = self.operators[index]
        if isinstance(exc, BadResult):
            return _result_error(op, exc.result), None
        missing = next((n for n in op.inputs if n not in self.blobs), None)
        if missing is not None:
            return op.error(f"input blob {missing!r} does not exist"), BlobNotFoundError(missing, list(self.blobs))
        return op.error(_reason(exc)), exc


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, OperatorError) else f"{type(exc).__name__}: {exc}"


def _result_error(op: Operator, result: Any) -> OperatorError:
    if not op.outputs:
        return op.error(f"the kernel returned {type(result).__name__} but the op has no outputs")
    if len(op.outputs) == 1:
        return op.error("the kernel returned None for its one output")
    got = len(result) if isinstance(result, (tuple, list)) else type(result).__name__
    return op.error(f"the kernel returned {got} values for {len(op.outputs)} outputs")


register_net_type(("straight",), StraightNet)
