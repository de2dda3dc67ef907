"""Reverse-mode autodiff on nets: :func:`add_gradient_ops` appends the backward ops to a Net.

    >>> import numpy as np, asyncnet as an
    >>> from asyncnet.autodiff import add_gradient_ops
    >>> net = an.Net("train")
    >>> _ = net.FC(["x", "w", "b"], "y")
    >>> _ = net.AveragedLoss("y", "loss")
    >>> grads = add_gradient_ops(net, "loss", wrt=["w", "b"])
    >>> grads
    {'w': 'w_grad', 'b': 'b_grad'}

How it works, in one pass over the forward ops in reverse:

* **Versions.** Every write of a blob makes a new version ((name, 1), (name, 2), ...; never
  written blobs are version 0, the leaves). In-place ops (``Relu(h, h)``) are handled because
  gradients are keyed by version, not name.
* **Seed.** d loss / d loss = 1, a ``ConstantFill`` shaped like the loss.
* **Makers.** An op on the path to the loss whose outputs have gradients calls its schema's
  gradient maker: ``maker(op_def, output_grad_names) -> (grad_op_defs, input_grad_names)``, with
  ``None`` for an output without gradient or an input that is not differentiable (labels).
  The maker sees the op with placeholder blob names (``@in0``, ``@out0``...), so that for an
  in-place op we know whether its gradient reads the input or the output version. Makers pick
  any names for what they create; every such blob is renamed here to a fresh name (``x_grad``,
  ``x_grad_1``...). A returned name that no grad op creates is taken as an alias of an existing
  gradient blob.
* **Summation.** A blob version used by several ops receives one gradient per use; they are
  added with one ``Sum`` op (in place into the first when it is ours) when the version's
  producer is reached, or at the end for leaves.
* **Sparse gradients.** A maker may return a :class:`~asyncnet.ops.sparse.GradientSlice`
  (indices blob, values blob) for an input, as the lookups (Gather, SparseLengthsSum...) do for
  their table. A leaf whose every gradient is sparse gets one GradientSlice (several are joined
  with ``Concat`` on axis 0), never a dense table-sized array; where a dense gradient is needed
  (an intermediate blob, or a leaf also used densely) each slice becomes ``SparseToDense``.
* **Pruning.** Ops off the path to the loss (metrics, label processing) are skipped; backward
  ops whose results nobody needs (the gradient of the data, unless asked for) are removed, and
  trailing optional outputs nobody reads are dropped (FCGradient without dX).

A gradient op reads forward blobs as they are when the backward ops run, so a blob that a later
forward op overwrites in place cannot be read by an earlier op's gradient: that raises a
:class:`~asyncnet.NetDefinitionError` rather than computing a wrong gradient.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

import asyncnet.ops  # noqa: F401  (registers the operators)
from asyncnet.core.defs import OperatorDef
from asyncnet.core.net import Net
from asyncnet.core.registry import get_schema
from asyncnet.errors import NetDefinitionError
from asyncnet.ops import grad as _grad  # noqa: F401  (registers the gradient ops)
from asyncnet.ops.sparse import GradientSlice

__all__ = ["add_gradient_ops", "backward_ops", "GradientMaker", "GradientSlice"]

Key = tuple[str, int]  # (blob name, version)
Grad = str | GradientSlice  # a dense gradient blob, or a sparse (indices, values) pair


class GradientMaker:  # pragma: no cover - documentation of the protocol only
    """The protocol of a gradient maker (any callable with this signature)::

    @register_gradient("Relu")
    def relu_grad(op: OperatorDef, output_grads: list[str | None]):
        return [OperatorDef("ReluGradient", [op.outputs[0], output_grads[0]], ["dx"])], ["dx"]
    """

    def __call__(
        self, op: OperatorDef, output_grads: list[str | None]
    ) -> tuple[list[OperatorDef], list[Grad | None]]: ...


def add_gradient_ops(
    net: Net, loss: str, *, wrt: Iterable[str] | None = None, dtype: str = "float32"
) -> dict[str, Grad]:
    """Append to ``net`` the ops computing d ``loss`` / d every leaf blob; return {blob: grad blob},
    where a table read only by lookups maps to a ``GradientSlice(indices_blob, values_blob)``.

    ``loss`` must be an output of an op of ``net``. Leaves are blobs no op of the net writes
    (parameters, data). ``wrt`` restricts the result to these blobs (the others' backward ops are
    pruned); each must be a leaf the loss depends on. ``dtype`` is the loss's dtype, used by the
    seed ``ConstantFill``. Raises :class:`NetDefinitionError` for an op on the path without a
    registered gradient, or a blob overwritten in place that a gradient needs.
    """
    return _Backward(net, str(loss), None if wrt is None else [str(w) for w in wrt], dtype).run()


def backward_ops(ops: Iterable[OperatorDef], output_grads: dict[str, str]) -> tuple[list[OperatorDef], dict[str, Grad]]:
    """The gradient ops of ``ops`` given the gradient blob of some of their outputs (no loss:
    ``output_grads`` maps an output, as the last op writing it left it, to the blob holding its
    gradient), and {leaf blob: its gradient blob} for every leaf a gradient reaches (what
    Caffe2's ``GradientRegistry.GetBackwardPass`` gives for a step net).

        >>> from asyncnet.core.defs import OperatorDef
        >>> ops, grads = backward_ops([OperatorDef("Relu", ["x"], ["y"])], {"y": "y_grad"})
        >>> [op.type for op in ops], grads
        (['ReluGradient'], {'x': 'x_grad'})
    """
    net = Net("backward_ops")
    for op in ops:
        net.add_op(op.type, op.inputs, op.outputs, name=op.name, **op.args)
    b = _Backward(net, "", None, "float32")
    b.taken.update(output_grads.values())
    n_fwd = len(net.ops)
    b.run(seeds={str(k): str(v) for k, v in output_grads.items()})
    return list(net.ops)[n_fwd:], b.leaf_grads


class _Backward:
    def __init__(self, net: Net, loss: str, wrt: list[str] | None, dtype: str):
        self.net, self.loss, self.wrt, self.dtype = net, loss, wrt, dtype
        self.fwd: list[OperatorDef] = list(net.ops)
        self.taken: set[str] = {n for op in self.fwd for n in (*op.inputs, *op.outputs, *op.control_inputs)}
        self.leaf_grads: dict[str, Grad] = {}
        self.contribs: dict[Key, list[Grad]] = defaultdict(list)
        self.final: dict[Key, Grad | None] = {}
        self.owned: set[str] = set()  # input-gradient blobs a maker created (safe to sum into)
        self.bwd: list[OperatorDef] = []
        self.stale: dict[int, str] = {}  # index in bwd -> why that op would read an overwritten blob

    # -- naming ---------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    # -- the pass -------------------------------------------------------------------------
    def run(self, seeds: dict[str, str] | None = None) -> dict[str, Grad]:
        in_ver, out_ver, version = self._versions()
        if seeds is None:
            loss_key = (self.loss, version.get(self.loss, 0))
            if loss_key[1] == 0:
                raise NetDefinitionError(f"the loss {self.loss!r} is not an output of any op of net {self.net.name!r}")
            relevant = self._on_path([loss_key], in_ver, out_ver)
            seed = self.fresh(f"{self.loss}_grad")
            self.bwd.append(OperatorDef("ConstantFill", [self.loss], [seed], {"value": 1.0, "dtype": self.dtype}))
            self.contribs[loss_key].append(seed)
        else:
            keys = [(o, version.get(o, 0)) for o in seeds]
            relevant = self._on_path(keys, in_ver, out_ver)
            for key, g in zip(keys, seeds.values()):
                self.contribs[key].append(g)
        for i in reversed(range(len(self.fwd))):
            if relevant[i]:
                self._backprop(i, in_ver[i], out_ver[i], version)
        grads = self.leaf_grads = self._leaf_grads()
        self._prune(
            {n for g in grads.values() for n in ((g.indices, g.values) if isinstance(g, GradientSlice) else (g,))}
        )
        for op in self.bwd:
            self.net.add_op(op.type, op.inputs, op.outputs, name=op.name, **op.args)
        return grads

    def _versions(self) -> tuple[list[list[int]], list[list[int]], dict[str, int]]:
        version: dict[str, int] = {}
        in_ver, out_ver = [], []
        for op in self.fwd:
            in_ver.append([version.get(n, 0) for n in op.inputs])
            for n in op.outputs:
                version[n] = version.get(n, 0) + 1
            out_ver.append([version[n] for n in op.outputs])
        return in_ver, out_ver, version

    def _on_path(self, loss_keys: list[Key], in_ver: list[list[int]], out_ver: list[list[int]]) -> list[bool]:
        needed = set(loss_keys)
        relevant = [False] * len(self.fwd)
        for i in reversed(range(len(self.fwd))):
            op = self.fwd[i]
            if any((o, v) in needed for o, v in zip(op.outputs, out_ver[i])):
                relevant[i] = True
                needed.update(zip(op.inputs, in_ver[i]))
        return relevant

    def _finalize(self, key: Key) -> Grad | None:
        """The one blob holding the gradient of blob version ``key`` (summing contributions);
        a GradientSlice when ``key`` is a leaf and every contribution is sparse."""
        if key in self.final:
            return self.final[key]
        names = self.contribs.pop(key, [])
        n_sparse = sum(isinstance(n, GradientSlice) for n in names)
        if n_sparse and (key[1] != 0 or n_sparse != len(names)):
            names = [self._densify(n, key[0]) if isinstance(n, GradientSlice) else n for n in names]
        elif n_sparse:
            out = names[0] if len(names) == 1 else self._join_slices(key[0], names)  # type: ignore[arg-type]
            self.final[key] = out
            return out
        if not names:
            out = None
        elif len(names) == 1:
            out = names[0]
        else:
            first = names[0]
            out = first if first in self.owned and names.count(first) == 1 else self.fresh(f"{key[0]}_grad")
            self.bwd.append(OperatorDef("Sum", list(names), [out]))
        self.final[key] = out
        return out

    def _densify(self, grad: GradientSlice, blob: str) -> str:
        out = self.fresh(f"{blob}_grad_dense")
        self.owned.add(out)
        self.bwd.append(OperatorDef("SparseToDense", [grad.indices, grad.values, blob], [out]))
        return out

    def _join_slices(self, blob: str, slices: list[GradientSlice]) -> GradientSlice:
        idx, vals = self.fresh(f"{blob}_grad_indices"), self.fresh(f"{blob}_grad_values")
        self.bwd.append(
            OperatorDef("Concat", [s.indices for s in slices], [idx, self.fresh(f"{idx}_info")], {"axis": 0})
        )
        self.bwd.append(
            OperatorDef("Concat", [s.values for s in slices], [vals, self.fresh(f"{vals}_info")], {"axis": 0})
        )
        return GradientSlice(idx, vals)

    def _backprop(self, i: int, in_ver: list[int], out_ver: list[int], version: dict[str, int]) -> None:
        op = self.fwd[i]
        gout = [self._finalize((o, v)) for o, v in zip(op.outputs, out_ver)]
        if all(x is None for x in gout):
            return
        maker = get_schema(op.type).gradient
        where = f"ops[{i}] ({op.type}{' ' + repr(op.name) if op.name else ''})"
        if maker is None:
            with_grad = [o for o, x in zip(op.outputs, gout) if x is not None]
            raise NetDefinitionError(
                f"no gradient is registered for {op.type}, but its output(s) {with_grad} "
                f"lie on the path to the loss {self.loss!r}",
                where,
            )
        # The maker sees placeholders for the forward blobs, so that for an in-place op
        # (Mul(["h", "x"], "h")) we know whether its gradient reads the input or the output.
        probe = replace(
            op,
            inputs=[f"@in{k}" for k in range(len(op.inputs))],
            outputs=[f"@out{k}" for k in range(len(op.outputs))],
            args=dict(op.args),
        )
        gops, gin = maker(probe, list(gout))
        if len(gin) != len(op.inputs):
            raise NetDefinitionError(
                f"the {op.type} gradient maker returned {len(gin)} input gradients for {len(op.inputs)} inputs", where
            )
        forward = {f"@in{k}": (n, v) for k, (n, v) in enumerate(zip(op.inputs, in_ver))}
        forward.update({f"@out{k}": (n, v) for k, (n, v) in enumerate(zip(op.outputs, out_ver))})
        rename = self._rename_map(op, gops, gin, set(forward))
        rename.update({p: nv[0] for p, nv in forward.items()})
        for gop in gops:
            stale = self._stale_read(gop, forward, version, where)
            if stale:
                self.stale[len(self.bwd)] = stale
            self.bwd.append(
                replace(
                    gop,
                    inputs=[rename.get(n, n) for n in gop.inputs],
                    outputs=[rename.get(n, n) for n in gop.outputs],
                    args=dict(gop.args),
                )
            )
        for name, v, gi in zip(op.inputs, in_ver, gin):
            if isinstance(gi, GradientSlice):
                if gi.indices in forward and forward[gi.indices][1] != version.get(forward[gi.indices][0], 0):
                    raise NetDefinitionError(
                        f"the sparse gradient of {name!r} needs its indices blob "
                        f"{forward[gi.indices][0]!r} as this op saw it, but a later op overwrites it",
                        where,
                    )
                self.contribs[(name, v)].append(
                    GradientSlice(rename.get(gi.indices, gi.indices), rename.get(gi.values, gi.values))
                )
            elif gi is not None:
                self.contribs[(name, v)].append(rename.get(gi, gi))

    def _rename_map(
        self, op: OperatorDef, gops: list[OperatorDef], gin: list[Grad | None], placeholders: set[str]
    ) -> dict[str, str]:
        created = [n for gop in gops for n in gop.outputs]
        clash = set(created) & placeholders
        if clash:
            raise NetDefinitionError(f"the {op.type} gradient maker writes the forward blobs {sorted(clash)}")
        rename: dict[str, str] = {}
        for name, gi in zip(op.inputs, gin):
            if isinstance(gi, GradientSlice):
                for part, n in (("indices", gi.indices), ("values", gi.values)):
                    if n in created and n not in rename:
                        rename[n] = self.fresh(f"{name}_grad_{part}")
            elif gi is not None and gi in created and gi not in rename:
                rename[gi] = self.fresh(f"{name}_grad")
                self.owned.add(rename[gi])
        for n in created:
            if n not in rename:
                rename[n] = self.fresh(f"{op.outputs[0]}_grad_tmp")
        return rename

    @staticmethod
    def _stale_read(gop: OperatorDef, forward: dict[str, Key], version: dict[str, int], where: str) -> str | None:
        """The error message if ``gop`` reads a forward blob version that no longer exists."""
        for n in gop.inputs:
            if n in forward:
                blob, v = forward[n]
                if v != version.get(blob, 0):
                    return (
                        f"{where}: the gradient needs blob {blob!r} as this op saw it, but a later op "
                        "(or this op, in place) overwrites it; write that result to a new blob"
                    )
        return None

    def _leaf_grads(self) -> dict[str, Grad]:
        leaves = [k for k in list(self.contribs) if k[1] == 0]
        grads = {k[0]: g for k in leaves if (g := self._finalize(k)) is not None}
        if self.wrt is None:
            return grads
        missing = [w for w in self.wrt if w not in grads]
        if missing:
            raise NetDefinitionError(
                f"no gradient of {self.loss!r} reaches {missing}: each must be an input of the net "
                "that the loss depends on through differentiable ops and that no op overwrites"
            )
        return {w: grads[w] for w in self.wrt}

    def _prune(self, live: set[str]) -> None:
        kept: list[OperatorDef] = []
        for i in reversed(range(len(self.bwd))):
            op = self.bwd[i]
            if not any(o in live for o in op.outputs):
                continue
            if i in self.stale:  # only gradient ops that are really needed must read valid blobs
                raise NetDefinitionError(self.stale[i])
            lo = get_schema(op.type).min_outputs
            outs = list(op.outputs)
            while len(outs) > lo and outs[-1] not in live:
                outs.pop()
            op = replace(op, outputs=outs)
            live.difference_update(outs)
            live.update(op.inputs)
            kept.append(op)
        self.bwd = kept[::-1]
