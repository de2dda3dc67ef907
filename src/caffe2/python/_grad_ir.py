"""The backward pass of a list of Caffe2 ops, with Caffe2's blob names and op order.

:func:`backward_pass` replays the forward ops to give every write of a blob a version, then
walks the ops in reverse and asks each one's gradient maker (``get_gradient(op, g_output)``)
for its gradient ops. A blob version read by several ops receives one gradient per reader;
when the first reader is reached they are added up:

* dense gradients by one ``Sum``: the first gradient written by a gradient op keeps its name,
  the other written ones are renamed ``_<name>_autosplit_<k>``, and gradients passed through
  unchanged (``Add``'s, ``Sum``'s) are read as they are;
* sparse gradients (``GradientSlice``) by two ``Concat`` ops on axis 0 into
  ``<name>_indices_concat`` and ``<name>_values_concat``;
* a mix of both by making the sparse ones dense first (``SparseToDense``), then one ``Sum``.

A gradient op must read forward blobs as the forward op saw them: reading a blob a later op
overwrote raises ``RuntimeError`` naming the versions, as Caffe2's IR did.

    >>> from caffe2.proto import caffe2_pb2
    >>> def op(t, i, o):
    ...     return caffe2_pb2.OperatorDef(type=t, input=i, output=o)
    >>> def maker(fwd, g_out):
    ...     return [op("ReluGradient", [fwd.output[0], g_out[0]], [fwd.input[0] + "_grad"])], [fwd.input[0] + "_grad"]
    >>> ops, grads = backward_pass([op("Relu", ["x"], ["y"]), op("Relu", ["x"], ["z"])], {"y": "gy", "z": "gz"}, maker)
    >>> [(o.type, list(o.input), list(o.output)) for o in ops]  # doctest: +NORMALIZE_WHITESPACE
    [('ReluGradient', ['z', 'gz'], ['x_grad']), ('ReluGradient', ['y', 'gy'], ['_x_grad_autosplit_0']),
     ('Sum', ['x_grad', '_x_grad_autosplit_0'], ['x_grad'])]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from caffe2.convert import device_id_of
from caffe2.proto import caffe2_pb2
from caffe2.python import scope

Maker = Callable[[Any, list[Any]], tuple[list[Any], list[Any]]]
Key = tuple[str, int]  # (blob name, version)


def _is_slice(g: Any) -> bool:
    return isinstance(g, tuple) and len(g) == 2 and hasattr(g, "indices")


def _slot_of(grads: list[Any], name: str) -> int | None:
    """The index of the gradient in ``grads`` that is ``name`` (or has it as indices/values)."""
    for k, g in enumerate(grads):
        if g is None:
            continue
        if _is_slice(g):
            if name in (str(g.indices), str(g.values)):
                return k
        elif str(g) == name:
            return k
    return None


def _placement(option: Any) -> tuple[int, int]:
    """(device type, device index) of a device option; every CPU option is the same CPU."""
    if not option.device_type:
        return (0, 0)
    return (option.device_type, device_id_of(option))


def _new_op(op_type: str, inputs: list[str], outputs: list[str], **floats: Any) -> Any:
    op = caffe2_pb2.OperatorDef(type=op_type, name="", input=inputs, output=outputs)
    for name, value in floats.items():
        arg = op.arg.add(name=name)
        if isinstance(value, float):
            arg.f = value
        else:
            arg.i = int(value)
    return op


@dataclass
class _Contribution:
    """One gradient reaching a blob version: ``writers`` maps "" (dense) or "indices"/"values"
    (sparse) to the (gradient op, output slot) writing that part; a part with no writer is an
    existing blob passed through unchanged."""

    grad: Any
    writers: dict[str, tuple[Any, int]] = field(default_factory=dict)

    @property
    def sparse(self) -> bool:
        return _is_slice(self.grad)


@dataclass
class _Step:
    op: Any
    in_ver: dict[str, int]
    out_ver: dict[str, int]


class _Replay:
    """The forward ops with the version of every blob each reads and writes."""

    def __init__(self, ops: list[Any]):
        self.current: dict[str, int] = {}
        self.steps: list[_Step] = []
        self.readers: dict[Key, list[int]] = defaultdict(list)
        self.history: dict[str, list[str]] = defaultdict(list)
        for op in ops:
            self._play(op)
        self._check_stop_gradients()

    def _play(self, op: Any) -> None:
        in_ver = {}
        for name in op.input:
            v = self.current.setdefault(name, 0)
            in_ver[name] = v
            self.readers[(name, v)].append(len(self.steps))
            self.history[name].append(f"read at version {v} by {op.type}{list(op.input)}->{list(op.output)}")
        out_ver = {}
        for name in op.output:
            v = self.current[name] + 1 if name in self.current else 0
            self.current[name] = out_ver[name] = v
            self.history[name].append(f"written as version {v} by {op.type}{list(op.input)}->{list(op.output)}")
        self.steps.append(_Step(op, in_ver, out_ver))

    def _check_stop_gradients(self) -> None:
        read = {name for name, _ in self.readers}
        for step in self.steps:
            if step.op.type == "StopGradient" and step.op.output[0] not in read:
                raise ValueError(
                    f"StopGradient's output {step.op.output[0]!r} is read by no op: give StopGradient the "
                    f"same input and output blob (StopGradient({step.op.input[0]!r}, {step.op.input[0]!r}))"
                )

    def stale(self, what: str, blob: str, wanted: int) -> RuntimeError:
        lines = "\n".join(f"  {h}" for h in self.history[blob])
        return RuntimeError(
            f"the gradient needs {what} {blob!r} at version {wanted}, but the current version is "
            f"{self.current.get(blob, 0)} (a later op overwrites it; write that result to a new blob).\n"
            f"History of {blob!r}:\n{lines}"
        )


class _BackwardPass:
    def __init__(self, ops: list[Any], get_gradient: Maker):
        self.ir = _Replay(ops)
        self.get_gradient = get_gradient
        self.grad_version: dict[str, int] = {}
        self.contribs: dict[Key, list[_Contribution]] = defaultdict(list)

    # -- seeds ------------------------------------------------------------------------------
    def seed(self, ys: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
        grads: dict[str, Any] = {}
        ops: list[Any] = []
        end = len(self.ir.steps)
        for y, g in ys.items():
            v = self.ir.current.setdefault(y, 0)
            self.grad_version[y] = v
            self.ir.readers[(y, v)].append(end)
            if g is None:
                fill = _new_op("ConstantFill", [y], [f"{y}_autogen_grad"], value=1.0)
                if scope.CurrentDeviceScope() is not None:
                    fill.device_option.CopyFrom(scope.CurrentDeviceScope())
                ops.append(fill)
                self.contribs[(y, v)].append(_Contribution(fill.output[0], {"": (fill, 0)}))
                grads[y] = fill.output[0]
            else:
                grads[y] = type(g)(str(g[0]), str(g[1])) if _is_slice(g) else str(g)
        return grads, ops

    # -- one forward op ---------------------------------------------------------------------
    def op_gradient(self, i: int, grads: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
        op = self.ir.steps[i].op
        g_out = [grads.get(name) for name in op.output]
        if all(g is None for g in g_out) and op.type != "ZeroGradient":
            return {}, []
        gops, g_in = self.get_gradient(op, g_out)
        self._record(i, gops, g_out, g_in)
        found: dict[str, Any] = {}
        for name, g in zip(op.input, g_in):
            if g is not None or name not in grads or name in op.output:
                found[name] = g
        return found, gops

    def _check_read(self, i: int, blob: str, g_out: list[Any], local: set[str]) -> None:
        step = self.ir.steps[i]
        k = _slot_of(g_out, blob)
        if k is not None:
            out = step.op.output[k]
            if step.out_ver[out] != self.grad_version.get(out):
                raise RuntimeError(
                    f"gradient blob {blob!r} should be the gradient of version {step.out_ver[out]} of "
                    f"{out!r}, but it is the gradient of version {self.grad_version.get(out)}"
                )
        elif blob in step.out_ver:
            if self.ir.current[blob] != step.out_ver[blob]:
                raise self.ir.stale("output", blob, step.out_ver[blob])
        elif blob in step.in_ver:
            if self.ir.current[blob] != step.in_ver[blob]:
                raise self.ir.stale("input", blob, step.in_ver[blob])
        elif blob not in local:
            raise RuntimeError(
                f"a gradient op of {step.op.type}{list(step.op.input)}->{list(step.op.output)} reads {blob!r}, "
                "which is neither a blob of that op, its output gradients, nor written by its gradient ops"
            )

    def _record(self, i: int, gops: list[Any], g_out: list[Any], g_in: list[Any]) -> None:
        step = self.ir.steps[i]
        local: set[str] = set()
        sparse: dict[Key, _Contribution] = {}
        for gop in gops:
            for blob in gop.input:
                self._check_read(i, blob, g_out, local)
            local.update(gop.output)
            for slot, out in enumerate(gop.output):
                k = _slot_of(g_in, out)
                if k is None:
                    continue
                name = step.op.input[k]
                key, g = (name, step.in_ver[name]), g_in[k]
                if _is_slice(g):
                    part = "indices" if str(g.indices) == out else "values"
                    sparse.setdefault(key, _Contribution(g)).writers[part] = (gop, slot)
                else:
                    self.contribs[key].append(_Contribution(g, {"": (gop, slot)}))
        for key, c in sparse.items():
            self.contribs[key].append(c)
        for name, g in zip(step.op.input, g_in):
            if g is None:
                continue
            parts = (str(g.indices), str(g.values)) if _is_slice(g) else (str(g),)
            if not any(p in local for p in parts):
                self.contribs[(name, step.in_ver[name])].append(_Contribution(g))
        for name, g in zip(step.op.input, g_in):
            if g is not None:
                self.grad_version[name] = step.in_ver[name]

    # -- accumulation -----------------------------------------------------------------------
    def accumulate(self, i: int) -> tuple[list[Any], dict[str, Any]]:
        step = self.ir.steps[i]
        ops: list[Any] = []
        found: dict[str, Any] = {}
        for name in dict.fromkeys(step.op.input):
            key = (name, step.in_ver[name])
            readers = self.ir.readers[key]
            if len(readers) < 2 or readers[0] != i:
                continue
            contribs = self.contribs.get(key, [])
            if len({c.sparse for c in contribs}) > 1:
                ops.extend(self._densify(name, contribs))
            if not self._needs_sum(name, contribs):
                continue
            sum_ops, g = self._sum_sparse(name, contribs) if contribs[0].sparse else self._sum_dense(name, contribs)
            self._copy_device(sum_ops, contribs)
            ops.extend(sum_ops)
            found[name] = g
        return ops, found

    @staticmethod
    def _densify(name: str, contribs: list[_Contribution]) -> list[Any]:
        """``SparseToDense`` ops turning the sparse gradients among ``contribs`` into dense
        ones shaped like ``name``, to be summed with the dense ones (Caffe2 refused the mix)."""
        ops = []
        for k, c in enumerate(contribs):
            if c.sparse:
                op = _new_op("SparseToDense", [str(c.grad.indices), str(c.grad.values), name], [f"{name}_grad"])
                for gop, _ in c.writers.values():
                    if gop.HasField("device_option"):
                        op.device_option.CopyFrom(gop.device_option)
                ops.append(op)
                contribs[k] = _Contribution(op.output[0], {"": (op, 0)})
        return ops

    @staticmethod
    def _needs_sum(name: str, contribs: list[_Contribution]) -> bool:
        if len(contribs) < 2:
            return False
        devices = [_placement(w[0].device_option) for c in contribs for w in c.writers.values()]
        if any(d != devices[0] for d in devices[1:]):
            raise RuntimeError(f"the gradient ops of {name!r} have different device options")
        return True

    @staticmethod
    def _base_name(name: str, contribs: list[_Contribution]) -> str:
        for c in contribs:
            for part, (gop, slot) in c.writers.items():
                out = gop.output[slot]
                suffix = f"_{part}" if part else ""
                return out[: -len(suffix)] if suffix and out.endswith(suffix) else out
        return f"{name}_grad"

    @staticmethod
    def _split(gop: Any, slot: int, count: int) -> str:
        gop.output[slot] = f"_{gop.output[slot]}_autosplit_{count}"
        return gop.output[slot]

    @staticmethod
    def _passed(base: str, blob: Any) -> str:
        if str(blob) == base:
            raise RuntimeError(
                f"a gradient passed through unchanged is named {base!r}, the name of the summed gradient"
            )
        return str(blob)

    def _sum_dense(self, name: str, contribs: list[_Contribution]) -> tuple[list[Any], str]:
        base = self._base_name(name, contribs)
        inputs: list[str] = []
        renamed, kept_first = 0, False
        for c in contribs:
            if "" not in c.writers:
                inputs.append(self._passed(base, c.grad))
            elif not kept_first:
                gop, slot = c.writers[""]
                inputs.append(gop.output[slot])
                kept_first = True
            else:
                inputs.append(self._split(*c.writers[""], renamed))
                renamed += 1
        if base in inputs:
            k = inputs.index(base)
            inputs[0], inputs[k] = inputs[k], inputs[0]
        return [_new_op("Sum", inputs, [base])], base

    def _sum_sparse(self, name: str, contribs: list[_Contribution]) -> tuple[list[Any], Any]:
        base = self._base_name(name, contribs)
        joined: dict[str, list[str]] = {"indices": [], "values": []}
        for part, blobs in joined.items():
            renamed = 0
            for c in contribs:
                if part in c.writers:
                    blobs.append(self._split(*c.writers[part], renamed))
                    renamed += 1
                else:
                    blobs.append(self._passed(base, getattr(c.grad, part)))
        ops = [
            _new_op("Concat", blobs, [f"{base}_{part}_concat", f"{base}_{part}_concat_split"], axis=0)
            for part, blobs in joined.items()
        ]
        return ops, type(contribs[0].grad)(f"{base}_indices_concat", f"{base}_values_concat")

    @staticmethod
    def _copy_device(ops: list[Any], contribs: list[_Contribution]) -> None:
        for c in contribs:
            for gop, _ in c.writers.values():
                if gop.HasField("device_option"):
                    for op in ops:
                        op.device_option.CopyFrom(gop.device_option)
                return


def backward_pass(ops: list[Any], ys: Any, get_gradient: Maker) -> tuple[list[Any], dict[str, Any]]:
    """``(gradient ops, {blob: gradient})`` of the forward ``ops`` (``caffe2_pb2.OperatorDef``)
    from ``ys``: a list of blobs (each seeded with ones by ``ConstantFill`` into
    ``<blob>_autogen_grad``) or a dict {blob: its gradient blob, or None for ones}.
    ``get_gradient(op, g_output) -> (gradient ops, input gradients)`` gives one op's gradient."""
    if isinstance(ys, (list, tuple)):
        ys = dict.fromkeys(ys)
    elif not isinstance(ys, dict):
        raise TypeError(f"ys should be a list or a dict of blobs, got {type(ys).__name__}")
    bp = _BackwardPass(list(ops), get_gradient)
    grads, out = bp.seed({str(y): g for y, g in ys.items()})
    for i in reversed(range(len(bp.ir.steps))):
        found, gops = bp.op_gradient(i, grads)
        grads.update(found)
        out.extend(gops)
        sums, summed = bp.accumulate(i)
        grads.update(summed)
        out.extend(sums)
    return out, {k: g for k, g in grads.items() if g is not None}
