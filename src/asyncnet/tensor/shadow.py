"""A whole run of routed ops on numpy views: torch CPU tensors wrapped once per run, not once per op.

Policy
------
When every op of a net is routed or a sync op (:mod:`asyncnet.tensor.route`: its numpy kernel runs on views of
plain torch CPU tensors), each op pays for views of its inputs and a ``torch.from_numpy`` of its
results, as much as a small kernel. A :class:`Shadow` moves that cost from the op to the run:
before a run it maps the net's *external* inputs (the blobs it reads before writing them) to
numpy arrays (a torch tensor to its view, cached per blob while the same tensor stays there; a
numpy array as it is), the executor runs the ops on that dict of arrays (each routed op's numpy
kernel called directly: on arrays the routed kernel would only pass them on), and afterwards
:meth:`Shadow.write_back` stores each written blob in the workspace in the library the routed
op would have given it (after a parallel run cut short, :meth:`Shadow.write_back_changed`
stores those the ops that ran replaced):

* an op with a torch input (and no numpy input outside its host positions,
  :data:`~asyncnet.tensor.route.HOST_INPUTS`) gives torch tensors over its results' memory,
  and a result that is one of its inputs' arrays (an in-place update) gives that input's tensor;
* an op with numpy inputs only (the iteration counter's ops) gives its numpy results.

The sync ops (:data:`~asyncnet.tensor.route.SYNC_OPS`: Allreduce and its split form) keep their
own kernel, which hands the blobs to a gradient sync of any kind: the run arms them
(:func:`~asyncnet.tensor.route.on_tensors`) with its ``id(array) -> tensor`` map, so they get the
very tensors the write-back then stores, over the same memory, as the op-by-op run gives them.

That is :func:`~asyncnet.tensor.route.routed`'s rule, decided once per pattern of libraries of
the external inputs (:meth:`Shadow.plan`), so the kernels, their inputs' values and hence the
results' bits are those of the routed run. A pattern that mixes libraries where the routed
kernel would not (a numpy array beside a tensor outside host positions), a tensor that needs
grad or has no numpy view (GPU, bfloat16), or a missing input: no shadow (:meth:`Shadow.views`
returns None) and the run takes the op-by-op path, with its own checks and errors.

    >>> import numpy as np
    >>> class Op:
    ...     def __init__(self, t, i, o): self.type, self.inputs, self.outputs = t, i, o
    >>> s = Shadow([Op("Relu", ("x",), ("y",))], ["x"])
    >>> arrays = s.views({"x": np.ones(2)})[0]       # numpy blobs need no shadow, but may use one
    >>> sorted(arrays)
    ['x']
"""

from __future__ import annotations

import copy
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

import numpy as np

from asyncnet.tensor import route

__all__ = ["Shadow", "ENABLED"]

#: False: every run goes op by op through the routed kernels (for measuring and testing against them)
ENABLED = True

_ndarray = np.ndarray
TORCH, NUMPY, OTHER = 1, 2, 3  # a blob's library in a routed run
_MISSING = object()


class Shadow:
    """The numpy side of one net's runs on torch CPU tensors (see the module doc).

    ``operators`` need ``type``, ``inputs`` and ``outputs``; ``names`` are their external inputs."""

    def __init__(self, operators: Sequence[Any], names: Sequence[str]):
        self.operators = operators
        self.names = tuple(names)
        self._seen: dict[
            str, tuple[Any, Any, int, int | None]
        ] = {}  # name -> (tensor, its view, its data pointer, version)
        self._plans: dict[tuple[int, ...], Callable[..., None] | None] = {}
        # the sync ops' cells (route.on_tensors), and per pattern those of ops the routed run gives tensors
        self._cells = [
            (k, c) for k, op in enumerate(operators) if (c := route.shadow_cell(getattr(op, "fn", None))) is not None
        ]
        self._armed: dict[tuple[int, ...], tuple[list[Any], ...]] = {}
        self._plain = [(op, getattr(op, "fn", None), _plain(op)) for op in operators]

    def views(self, blobs: MutableMapping[str, Any]) -> tuple[dict[str, Any], tuple[int, ...], dict[int, Any]] | None:
        """(the external inputs as arrays, their libraries, ``id(view) -> tensor`` of the tensor
        inputs), or None when this run cannot take the shadow (a tensor with no plain numpy view,
        a missing input, routing off)."""
        t = route._TENSOR
        if t is None or not route.ENABLED or not ENABLED:
            return None
        seen = self._seen
        arrays: dict[str, Any] = {}
        back: dict[int, Any] = {}
        kinds = []
        for name in self.names:
            x = blobs.get(name)
            tx = type(x)
            if tx is t:
                if x.requires_grad:
                    return None
                e = seen.get(name)
                try:
                    ver = x._version
                except RuntimeError:  # an inference tensor keeps no version: its view is made anew
                    ver = None
                if e is None or e[0] is not x or x.data_ptr() != e[2] or ver != e[3] or ver is None:
                    made = route._MADE.get(id(x))  # a tensor routing made from an array keeps the array
                    fits = made is not None and made[0]() is x and ver == made[2] is not None
                    v = made[1] if fits else route.numpy_view(x)  # so does a fed one
                    if v is None:
                        return None
                    e = seen[name] = (x, v, x.data_ptr(), ver)
                v = arrays[name] = e[1]
                back[id(v)] = x
                kinds.append(TORCH)
            elif tx is _ndarray:
                arrays[name] = x
                kinds.append(NUMPY)
            elif x is None and name not in blobs:
                return None
            else:
                arrays[name] = x
                kinds.append(OTHER)
        return arrays, tuple(kinds), back

    def run_ops(self, blobs: MutableMapping[str, Any], stop: Callable[[], None] | None = None) -> bool:
        """Run every op (``op.run``) on the shadow of ``blobs`` and store the results back; False
        (nothing run) when this run cannot take the shadow. ``stop()`` is called before each op
        (it raises to end the run there). An op's error is raised after the blobs written
        before it are stored."""
        got = self.views(blobs)
        if got is None or self.plan(got[1]) is None:
            return False
        arrays, kinds, back = got
        done = 0
        armed = self.arm(kinds, back)
        try:
            for op, fn, plain in self._plain:
                if stop is not None:
                    stop()
                (plain if op.fn is fn else op).run(arrays)  # an op whose kernel was replaced since: its own
                done += 1
        except BaseException:
            self.write_back(blobs, arrays, kinds, back, done)
            raise
        finally:
            for cell in armed:
                cell[0] = None
        self.write_back(blobs, arrays, kinds, back)
        return True

    def arm(self, kinds: tuple[int, ...], back: dict[int, Any]) -> tuple[list[Any], ...]:
        """Give this run's ``back`` to the sync ops (:func:`~asyncnet.tensor.route.on_tensors`)
        whose routed run has tensors, so their kernels get them; returns their cells, which the
        caller resets to None when the run ends."""
        armed = self._armed[kinds]  # made by plan()
        for cell in armed:
            cell[0] = back
        return armed

    def plan(self, kinds: tuple[int, ...]) -> Callable[..., None] | None:
        """``store(blobs, arrays, back)``: straight-line code storing every blob a whole run
        writes, as a tensor where the routed op gives one; None when no input is a tensor
        (nothing to shadow) or some op would mix libraries (then the run goes op by op)."""
        try:
            return self._plans[kinds]
        except KeyError:
            entries = self._entries(kinds, len(self.operators)) if TORCH in kinds else None
            p = self._plans[kinds] = None if entries is None else _compile_store(entries)
            torch_ops = self._torch_ops(kinds) if p is not None else ()
            self._armed[kinds] = tuple(c for k, c in self._cells if k in torch_ops)
            return p

    def _torch_ops(self, kinds: tuple[int, ...]) -> set[int]:
        """The indices of the ops that have a torch input in a run of this pattern."""
        lib = dict(zip(self.names, kinds))
        out = set()
        for k, op in enumerate(self.operators):
            has_torch = any(lib.get(name, OTHER) == TORCH for name in op.inputs)
            if has_torch:
                out.add(k)
            for name in op.outputs:
                lib[name] = TORCH if has_torch else NUMPY
        return out

    def _entries(self, kinds: tuple[int, ...], n_ops: int) -> tuple[tuple[str, bool], ...] | None:
        """The blobs the first ``n_ops`` ops write, each with whether it becomes a tensor."""
        lib = dict(zip(self.names, kinds))
        written: dict[str, bool] = {}
        for op in self.operators[:n_ops]:
            host = route.HOST_INPUTS.get(op.type, ())
            has_torch = has_numpy = False
            for i, name in enumerate(op.inputs):
                k = lib.get(name, OTHER)
                if k == TORCH:
                    has_torch = True
                elif k == NUMPY and i not in host:
                    has_numpy = True
            if has_torch and has_numpy:
                return None
            for name in op.outputs:
                lib[name] = TORCH if has_torch else NUMPY
                written.pop(name, None)
                written[name] = has_torch
        return tuple(written.items())

    def write_back(
        self,
        blobs: MutableMapping[str, Any],
        arrays: dict[str, Any],
        kinds: tuple[int, ...],
        back: dict[int, Any],
        done: int | None = None,
    ) -> None:
        """Store in ``blobs`` what the run wrote into ``arrays`` (all ops, or the first ``done``
        after a failure), tensors where the routed ops would have given tensors."""
        if done is None:
            store = self.plan(kinds)
        else:
            entries = self._entries(kinds, done)
            store = None if entries is None else _compile_store(entries)
        if store is not None:  # None only after a failure at an op that mixes libraries: nothing ran past it
            store(blobs, arrays, back)

    def write_back_changed(
        self,
        blobs: MutableMapping[str, Any],
        arrays: dict[str, Any],
        kinds: tuple[int, ...],
        back: dict[int, Any],
        before: dict[str, Any],
    ) -> None:
        """Store in ``blobs`` what a run cut short wrote into ``arrays`` when its ops did not run
        in op order (a parallel run): each blob whose array is no longer the one in ``before``
        (``arrays`` as the run began), a tensor where the routed op gives one. An op that updated
        its input in place leaves the blob as it was, as the routed op does."""
        plan = self.plan(kinds)
        if plan is None:
            return
        missing = _MISSING
        for name, to_torch in self._entries(kinds, len(self.operators)) or ():
            a = arrays.get(name, missing)
            if a is missing or a is before.get(name, missing):
                continue
            if to_torch:
                r = back.get(id(a))
                if r is None:
                    r = back[id(a)] = route.as_tensor(a)
                a = r
            blobs[name] = a


def _plain(op: Any) -> Any:
    """``op`` itself, or for a routed op a copy that calls the numpy kernel the routing wraps:
    on a run's arrays every input is already numpy, where the routed kernel only passes them on."""
    fn = getattr(op, "fn", None)
    if fn is None or not route.is_routed(fn):
        return op
    plain = copy.copy(op)
    plain.fn = fn.__wrapped__
    return plain


def _compile_store(entries: Sequence[tuple[str, bool]]) -> Callable[..., None]:
    """``store(blobs, arrays, back)`` for :meth:`Shadow.write_back`: each entry's array stored as
    it is, or as the tensor ``back`` has for it (an input's, or one made earlier in the call),
    else a new tensor over its memory (names enter the source through ``repr`` only)."""
    lines = ["def make(nd, from_numpy, as_tensor):", "    def store(blobs, arrays, back):", "        get = back.get"]
    for name, to_torch in entries:
        lines.append(f"        a = arrays[{name!r}]")
        if to_torch:
            lines += [
                "        r = get(id(a))",
                "        if r is None:",
                "            if type(a) is nd and a.flags.writeable:",
                "                try:",
                "                    r = from_numpy(a)",
                "                except ValueError:  # negative strides",
                "                    r = as_tensor(a)",
                "            else:",
                "                r = as_tensor(a)",
                "            back[id(a)] = r",
                "        a = r",
            ]
        lines.append(f"        blobs[{name!r}] = a")
    lines += ["    return store"]
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), "<shadow store>", "exec"), namespace)  # noqa: S102
    return namespace["make"](_ndarray, route._from_numpy, route.as_tensor)
