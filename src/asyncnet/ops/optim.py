"""Optimizers as operators: WeightedSum, SGD, MomentumSGD, MomentumSGDUpdate, Adam, and the LearningRate schedule.

MomentumSGD, MomentumSGDUpdate and Adam compute Caffe2's formulas under Caffe2's input and output
order; ``formula="torch"`` gives torch.optim's (what the asyncnet trainers use). Run in place (SGD
enforces it), update ops write INTO the existing numpy arrays or torch tensors
(``xp.subtract(w, lr * g, out=w)``) and return the same array objects. Hogwild
training relies on this: several workers (threads, or processes on shared memory) hold one
parameter array, and an update must reach all of them, not rebind one worker's blob.

One-element inputs (a learning rate, a weight, a counter) are read as Python numbers, so they may
live in either library or on any device (as Caffe2 keeps ``iter`` on the CPU); the arrays an op
updates must share one library and device.

The learning rate comes from a ``LearningRate`` op fed by the int64 step counter (``Iter`` or
``AtomicIter``, which run first, so the counter is 1 on the first update)::

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> w = np.ones(3, np.float32); ws.feed("w", w); ws.feed("g", np.full(3, 2, np.float32))
    >>> ws.feed("iter", np.array(1, np.int64))
    >>> net = an.Net("update")
    >>> _ = net.LearningRate("iter", "lr", base_lr=0.25)
    >>> _ = net.SGD(["w", "g", "lr"], "w")
    >>> ws.run_net_once(net)
    >>> w, ws.fetch("w") is w
    (array([0.5, 0.5, 0.5], dtype=float32), True)
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, get_schema, register_gradient, register_op
from asyncnet.errors import NetDefinitionError
from asyncnet.ops._check import FLOAT_DTYPES, array, as_array, float_array
from asyncnet.ops._half import to_half
from asyncnet.ops.math import CPU_CUDA
from asyncnet.tensor.namespace import cpu_tensors, namespace

_nd = np.ndarray
_LR_DTYPES = {"float32": np.float32, "float64": np.float64}
_WEIGHT_DECAY = Arg("weight_decay", float, 0.0, "L2 penalty: the gradient used is g + weight_decay * param")


def _scalar(ctx: Any, x: Any, i: int, kind: str = "f") -> Any:
    """Element 0 of a one-element array input (a learning rate, a weight or a counter) as a Python
    number: weakly typed, so it takes the dtype of the array it multiplies, on numpy and torch."""
    x = array(ctx, x, i)
    xp = namespace(ctx, x)
    if xp.size(x) != 1:
        raise ValueError(f"expected a one-element array in input {i} {ctx.op.inputs[i]!r}, got shape {tuple(x.shape)}")
    if kind == "i" and xp.kind(x) not in "iu":
        raise TypeError(f"expected an integer counter in input {i} {ctx.op.inputs[i]!r}, got dtype {x.dtype}")
    if xp.kind(x) not in "biuf":
        raise TypeError(f"expected a real number in input {i} {ctx.op.inputs[i]!r}, got dtype {x.dtype}")
    return xp.item(x)


def _like(ctx: Any, x: Any, i: int, ref: np.ndarray, what: str) -> np.ndarray:
    x = float_array(ctx, x, i)
    namespace(ctx, ref, x)
    if x.shape != ref.shape or x.dtype != ref.dtype:
        raise ValueError(
            f"expected {what} {ctx.op.inputs[i]!r} of shape {ref.shape} and dtype {ref.dtype}, got {x.shape} {x.dtype}"
        )
    return x


def _writable(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = float_array(ctx, x, i)
    if not namespace(ctx, x).writable(x):
        raise ValueError(f"input {i} {ctx.op.inputs[i]!r} is a read-only array; an update op writes it in place")
    return x


def _decayed(grad: np.ndarray, param: np.ndarray, wd: float) -> np.ndarray:
    return grad if wd == 0.0 else grad + wd * param


# -- WeightedSum: Y = sum_i w_i X_i; with Y == X0 it updates X0's array in place -------------
@register_op(
    "WeightedSum",
    inputs=(2, None),
    outputs=1,
    allow_inplace={0: 0},
    devices=CPU_CUDA,
    args=[Arg("grad_on_w", bool, False, "the gradient also gives the weights' gradients (Caffe2's grad_on_w)")],
    inputs_doc=("X0", "weight0 (1 element)", "X1", "weight1", "..."),
    outputs_doc=("Y (may be X0, updated in place)",),
    doc="Y = w0 X0 + w1 X1 + ... for same-shape float X's and one-element weights; with output == X0 it "
    "writes into X0's array and returns that same array.",
)
def weighted_sum(ctx: Any, *inputs: Any) -> np.ndarray:
    xs, ws = _weighted_terms(ctx, inputs, 0)
    if type(xs[0]) is np.ndarray and xs[0].dtype == np.float16:  # summed in float32, rounded once
        total = sum((x.astype(np.float32) * np.float32(w) for x, w in zip(xs[1:], ws[1:])), xs[0] * np.float32(ws[0]))
        total = to_half(total)
    else:
        total = xs[0] * ws[0]
        for x, w in zip(xs[1:], ws[1:]):
            total += x * w
    if ctx.op.outputs[0] == ctx.op.inputs[0]:
        out = _writable(ctx, inputs[0], 0)
        namespace(ctx, out).copyto(out, total)
        return out
    return as_array(total)  # 0-d inputs give a numpy scalar


def _weighted_terms(ctx: Any, inputs: tuple[Any, ...], first: int) -> tuple[list[np.ndarray], list[Any]]:
    """The (X, weight) pairs of WeightedSum starting at input ``first``: same-shape float X's, scalar weights."""
    n = len(inputs) - first
    if n % 2 or n == 0:
        raise ValueError(f"expected pairs of (X, weight) inputs, got {n} inputs")
    xs = [float_array(ctx, inputs[i], i) for i in range(first, len(inputs), 2)]
    namespace(ctx, *inputs[first::2])
    ws = [_scalar(ctx, inputs[i], i) for i in range(first + 1, len(inputs), 2)]
    for j, x in enumerate(xs[1:], 1):
        if x.shape != xs[0].shape or x.dtype != xs[0].dtype:
            i = first + 2 * j
            raise ValueError(
                f"expected X{j} {ctx.op.inputs[i]!r} of shape {xs[0].shape} and dtype {xs[0].dtype}, got {x.shape} {x.dtype}"
            )
    return xs, ws


# -- WeightedSumGradient (Caffe2's): dX_i = w_i dY; with grad_on_w also dw_i = sum(dY * X_i) ---
@register_op(
    "WeightedSumGradient",
    inputs=(3, None),
    outputs=(1, None),
    args=[Arg("grad_on_w", bool, False)],
    devices=CPU_CUDA,
    inputs_doc=("dY", "X0", "weight0", "X1", "weight1", "..."),
    outputs_doc=("dX0", "dX1", "...", "dw0 ... (grad_on_w)"),
    doc="Gradient of WeightedSum: dX_i = w_i dY, and with grad_on_w the weights' gradients dw_i = sum(dY * X_i), shape [1].",
)
def weighted_sum_gradient(ctx: Any, dy: Any, *inputs: Any) -> tuple[np.ndarray, ...]:
    xs, ws = _weighted_terms(ctx, (dy,) + inputs, 1)
    dy = float_array(ctx, dy, 0)
    if dy.shape != xs[0].shape:
        raise ValueError(f"expected dY of shape {xs[0].shape}, got {dy.shape}")
    want = len(xs) * (2 if ctx.args["grad_on_w"] else 1)
    if len(ctx.op.outputs) != want:
        raise ValueError(
            f"expected {want} outputs for {len(xs)} (X, weight) pairs (grad_on_w={ctx.args['grad_on_w']}), "
            f"got {len(ctx.op.outputs)}"
        )
    outs = [as_array(dy * w) for w in ws]
    if ctx.args["grad_on_w"]:  # each dw_i has w_i's shape and dtype (Caffe2's: [1], the weight's float)
        xp = namespace(ctx, dy)
        for x, i in zip(xs, range(2, len(inputs) + 1, 2)):
            w = array(ctx, inputs[i - 1], i)
            outs.append(xp.astype(as_array((dy * x).sum()).reshape(tuple(w.shape)), w))
    return outs[0] if len(outs) == 1 else tuple(outs)


@register_gradient("WeightedSum")
def _weighted_sum_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    """Caffe2's GetWeightedSumGradient: one WeightedSumGradient op; weights get gradients only with grad_on_w."""
    if gout[0] is None:
        raise NetDefinitionError("WeightedSum gradient called without an output gradient")
    on_w = bool(op.args.get("grad_on_w", False))
    pairs = len(op.inputs) // 2
    dxs = [f"#dx{i}" for i in range(pairs)]
    dws = [f"#dw{i}" for i in range(pairs)] if on_w else []
    grad = OperatorDef("WeightedSumGradient", [gout[0], *op.inputs], dxs + dws, {"grad_on_w": on_w})
    per_input: list[str | None] = []
    for i in range(pairs):
        per_input += [dxs[i], dws[i] if on_w else None]
    return [grad], per_input


# -- SGD: param -= lr * (grad + wd * param) --------------------------------------------------
def _general_for_numpy(ctx: Any, *inputs: Any) -> Any:
    """A ``specialize`` giving the op's general kernel itself for numpy inputs (an update that
    checks everything before it writes), so nets of these and fast kernels are specialized."""
    return get_schema(ctx.op.type).fn if all(type(x) is _nd for x in inputs) else None


def _sgd_plain(ctx: Any, param: np.ndarray, grad: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """SGD on numpy arrays of one float dtype and shape, no weight decay: the general path's two
    roundings (g * lr, then p - that), the product in a new array; a read-only param raises
    before anything is written."""
    return np.subtract(param, np.multiply(grad, lr.item(0)), out=param)


def _specialize_sgd(ctx: Any, param: Any, grad: Any, lr: Any) -> Any:
    if not (type(param) is _nd and type(grad) is _nd and type(lr) is _nd):
        return None
    plain = (
        param.dtype is grad.dtype
        and param.shape == grad.shape
        and lr.size == 1
        and param.dtype.type in FLOAT_DTYPES
        and ctx.args["weight_decay"] == 0.0
    )
    return _sgd_plain if plain else sgd


@register_op(
    "SGD",
    inputs=3,
    outputs=1,
    enforce_inplace={0: 0},
    args=[_WEIGHT_DECAY],
    devices=CPU_CUDA,
    specialize=_specialize_sgd,
    inputs_doc=("param", "grad", "lr (1 element)"),
    outputs_doc=("param (same blob, updated in place)",),
    doc="Plain SGD step written into the parameter's array: param -= lr * (grad + weight_decay * param).",
)
def sgd(ctx: Any, param: Any, grad: Any, lr: Any) -> np.ndarray:
    if (
        type(param) is _nd
        and type(grad) is _nd
        and type(lr) is _nd
        and param.dtype is grad.dtype
        and param.shape == grad.shape
        and lr.size == 1
        and param.dtype.type in FLOAT_DTYPES
        and param.flags.writeable
        and ctx.args["weight_decay"] == 0.0
    ):
        return _sgd_plain(ctx, param, grad, lr)
    if (
        cpu_tensors(param, grad)
        and param.dtype is grad.dtype
        and param.shape == grad.shape
        and param.is_floating_point()
        and ctx.args["weight_decay"] == 0.0
        and type(lr) is _nd
        and lr.size == 1
    ):
        return param.add_(grad, alpha=-lr.item(0))  # one fused in-place call (torch.optim.SGD's)
    p = _writable(ctx, param, 0)
    g = _decayed(_like(ctx, grad, 1, p, "a gradient"), p, ctx.args["weight_decay"])
    step = g * _scalar(ctx, lr, 2)
    namespace(ctx, p).subtract(p, step, out=p)
    return p


def _target(ctx: Any, out: int, inp: int, x: np.ndarray) -> np.ndarray:
    """Where output ``out`` goes: input ``inp``'s own array when the op runs in place (so every
    holder of it sees the update: Hogwild), else a new array."""
    if ctx.op.outputs[out] == ctx.op.inputs[inp]:
        return _writable(ctx, x, inp)
    return namespace(ctx, x).empty_like(x)


_MOMENTUM_ARGS = [
    Arg("momentum", float, 0.0, "momentum coefficient mu (Caffe2's default 0)"),
    Arg("nesterov", bool, False, "Nesterov momentum"),
]
_FORMULA = Arg(
    "formula",
    str,
    "caffe2",
    "caffe2: Caffe2's update (the default); torch: torch.optim's, which the asyncnet trainers use",
    choices=("caffe2", "torch"),
)


def _momentum_step(
    m: np.ndarray, g: np.ndarray, rate: Any, mu: Any, nesterov: bool, formula: str
) -> tuple[np.ndarray, np.ndarray]:
    """(step subtracted from the param, new moment), computed before anything is written.

    caffe2: step = m' = lr g + mu m; nesterov: m' = mu m + lr g, step = (1 + mu) m' - mu m.
    torch:  m' = mu m + g; step = lr m' (nesterov: lr (g + mu m')).
    """
    if formula == "torch":
        m_new = m * mu + g
        return (g + mu * m_new if nesterov else m_new) * rate, m_new
    if not nesterov:
        step = rate * g + mu * m
        return step, step
    m_new = mu * m + rate * g
    return (1 + mu) * m_new - mu * m, m_new


# -- MomentumSGD (Caffe2's): the adjusted gradient and the moment, no param update ------------
@register_op(
    "MomentumSGD",
    inputs=3,
    outputs=2,
    allow_inplace={0: 0, 1: 1},
    args=_MOMENTUM_ARGS,
    devices=CPU_CUDA,
    inputs_doc=("grad", "moment", "lr (1 element)"),
    outputs_doc=("adjusted grad", "moment"),
    doc="Caffe2's MomentumSGD: adjusted = lr*grad + mu*moment, returned as (adjusted, adjusted); with "
    "nesterov m' = mu*m + lr*grad and the outputs are ((1+mu)*m' - mu*m, m'). In place writes the input arrays.",
)
def momentum_sgd(ctx: Any, grad: Any, moment: Any, lr: Any) -> tuple[np.ndarray, np.ndarray]:
    g = float_array(ctx, grad, 0)
    m = _like(ctx, moment, 1, g, "a moment")
    xp = namespace(ctx, g, m)
    step, m_new = _momentum_step(m, g, _scalar(ctx, lr, 2), ctx.args["momentum"], ctx.args["nesterov"], "caffe2")
    g_out, m_out = _target(ctx, 0, 0, g), _target(ctx, 1, 1, m)
    xp.copyto(m_out, m_new)
    xp.copyto(g_out, step)
    return g_out, m_out


# -- MomentumSGDUpdate: Caffe2's (default) or torch's momentum step, written into the param ---
@register_op(
    "MomentumSGDUpdate",
    inputs=4,
    outputs=3,
    allow_inplace={0: 0, 1: 1, 3: 2},
    devices=CPU_CUDA,
    specialize=_general_for_numpy,
    args=[*_MOMENTUM_ARGS, _WEIGHT_DECAY, _FORMULA],
    inputs_doc=("grad", "moment", "lr (1 element)", "param"),
    outputs_doc=("grad: the step taken", "moment", "param"),
    doc="Caffe2's MomentumSGDUpdate: step = lr*grad + mu*moment (nesterov: m' = mu*m + lr*grad, step = "
    "(1+mu)*m' - mu*m); param -= step; outputs (step, moment, param). formula='torch' gives "
    "torch.optim.SGD's (m' = mu*m + grad; step = lr*m', nesterov lr*(grad + mu*m')). In place "
    "(the usual use) writes the input arrays.",
)
def momentum_sgd_update(
    ctx: Any, grad: Any, moment: Any, lr: Any, param: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p = float_array(ctx, param, 3)
    m = _like(ctx, moment, 1, p, "a moment")
    g0 = _like(ctx, grad, 0, p, "a gradient")
    g = _decayed(g0, p, ctx.args["weight_decay"])
    xp = namespace(ctx, grad, moment, param)
    step, m_new = _momentum_step(
        m, g, _scalar(ctx, lr, 2), ctx.args["momentum"], ctx.args["nesterov"], ctx.args["formula"]
    )
    g_out, m_out, p_out = _target(ctx, 0, 0, g0), _target(ctx, 1, 1, m), _target(ctx, 2, 3, p)
    xp.copyto(m_out, m_new)
    xp.subtract(p, step, out=p_out)
    xp.copyto(g_out, step)
    return g_out, m_out, p_out


# -- Adam: Caffe2's (default, t = iter + 1) or torch.optim.Adam's (t = iter) -------------------
@register_op(
    "Adam",
    inputs=6,
    outputs=(3, 4),
    allow_inplace={0: 0, 1: 1, 2: 2},
    devices=CPU_CUDA,
    specialize=_general_for_numpy,
    args=[
        Arg("beta1", float, 0.9),
        Arg("beta2", float, 0.999),
        Arg("epsilon", float, None, "default: Caffe2's 1e-5 (formula caffe2) or torch's 1e-8 (formula torch)"),
        _WEIGHT_DECAY,
        _FORMULA,
    ],
    inputs_doc=("param", "moment1", "moment2", "grad", "lr (1 element)", "iter (int)"),
    outputs_doc=("param", "moment1", "moment2", "effective grad (optional)"),
    doc="Caffe2's Adam: t = iter + 1 (iter 0 is the first step); m1 = b1 m1 + (1-b1) g; m2 = b2 m2 + (1-b2) g^2; "
    "ng = sqrt(1-b2^t)/(1-b1^t) * m1/(sqrt(m2) + eps); param += lr * ng (Caffe2 feeds a negative lr); "
    "the optional output 3 is ng. formula='torch' gives torch.optim.Adam's: t = iter >= 1, "
    "param -= lr/(1-b1^t) * m1/(sqrt(m2/(1-b2^t)) + eps). In place writes the input arrays.",
)
def adam(ctx: Any, param: Any, m1: Any, m2: Any, grad: Any, lr: Any, it: Any) -> tuple[np.ndarray, ...]:
    p = float_array(ctx, param, 0)
    xp = namespace(ctx, param, m1, m2, grad)
    m1_in, m2_in = _like(ctx, m1, 1, p, "a moment"), _like(ctx, m2, 2, p, "a moment")
    g0 = _like(ctx, grad, 3, p, "a gradient")
    g = _decayed(g0, p, ctx.args["weight_decay"])
    a = ctx.args
    torch_formula = a["formula"] == "torch"
    it = int(_scalar(ctx, it, 5, "i"))
    t = it if torch_formula else it + 1
    if t < 1:
        raise ValueError(
            f"expected the iteration {ctx.op.inputs[5]!r} >= {1 if torch_formula else 0} "
            f"(formula {a['formula']}), got {it}"
        )
    eps = a["epsilon"] if a["epsilon"] is not None else (1e-8 if torch_formula else 1e-5)
    rate = float(_scalar(ctx, lr, 4))  # checked before any write
    # Python floats below are weakly typed: each is rounded once to the params' dtype
    m1_out, m2_out, p_out = _target(ctx, 1, 1, m1_in), _target(ctx, 2, 2, m2_in), _target(ctx, 0, 0, p)
    xp.multiply(m1_in, a["beta1"], out=m1_out)
    m1_out += (1 - a["beta1"]) * g
    xp.multiply(m2_in, a["beta2"], out=m2_out)
    m2_out += (1 - a["beta2"]) * g * g
    if torch_formula:
        bias1, bias2 = 1 - a["beta1"] ** t, 1 - a["beta2"] ** t
        denom = xp.sqrt(m2_out / bias2) + eps
        xp.subtract(p, (rate / bias1) * m1_out / denom, out=p_out)  # this order keeps the trainers' bits
        ng = (1 / bias1) * m1_out / denom
    else:
        correction = math.sqrt(1 - a["beta2"] ** t) / (1 - a["beta1"] ** t)
        ng = correction * m1_out / (xp.sqrt(m2_out) + eps)
        xp.add(p, rate * ng, out=p_out)
    if len(ctx.op.outputs) == 3:
        return p_out, m1_out, m2_out
    return p_out, m1_out, m2_out, as_array(ng)


# -- LearningRate: base_lr times the multiplier of Caffe2's policies (sgd/learning_rate_functors.h)
def _step(a: dict[str, Any], t: int) -> float:
    return a["gamma"] ** (t // a["stepsize"])


def _inv(a: dict[str, Any], t: int) -> float:
    return (1.0 + a["gamma"] * t) ** -a["power"]


def _poly(a: dict[str, Any], t: int) -> float:
    if t > a["max_iter"]:  # Caffe2 raises a negative base to the power (NaN): refused here
        raise ValueError(f"policy 'poly': iteration {t} is past max_iter {a['max_iter']}")
    return (1.0 - t / a["max_iter"]) ** a["power"]


def _linear_warmup(a: dict[str, Any], t: int) -> float:
    n, s0 = a["num_iter"], a["start_multiplier"]
    return 1.0 if t >= n else s0 + (1.0 - s0) * t / n


def _alter(a: dict[str, Any], t: int) -> float:
    first = a["active_period"] if a["active_first"] else a["inactive_period"]
    in_first = t % (a["active_period"] + a["inactive_period"]) < first
    return float(in_first == a["active_first"])


def _hill(a: dict[str, Any], t: int) -> float:
    if t < a["num_iter"]:
        return _linear_warmup(a, t)
    return max(a["end_multiplier"], _inv(a, t - a["num_iter"]))


def _slope(a: dict[str, Any], t: int) -> float:
    """Caffe2's SlopeLearningRate: multiplier_1 until num_iter_1, then a line down (or up) to num_iter_2,
    never below multiplier_2."""
    m1, m2, n1, n2 = a["multiplier_1"], a["multiplier_2"], a["num_iter_1"], a["num_iter_2"]
    return m1 if t < n1 else max(m2, m1 + (t - n1) * (m2 - m1) / (n2 - n1))


def _piece_warmup(a: dict[str, Any], t: int) -> float:
    return a["m1"] if t < a["n1"] else a["m2"] if t < a["n2"] else a["m3"]


def _cyclical(a: dict[str, Any], t: int, max_lr: float, stepsize: int, decay: float) -> float:
    """Caffe2's CyclicalLearningRate: a triangle of period 2 * stepsize from 1 to |max_lr / base_lr|."""
    cycle = t // (2 * stepsize) + 1
    x = abs(t / stepsize - 2 * cycle + 1)
    return 1 + (abs(max_lr) / abs(a["base_lr"]) - 1) * max(0.0, 1 - x) * decay ** (t // (2 * stepsize))


def _cosine(t: int, min_lr: float, max_lr: float, period: int, t_mult: float, lr_shrink: float) -> float:
    """Caffe2's CosineLearningRate (SGDR): restarts every period (times t_mult^i), bounds shrunk by lr_shrink^i."""
    if t_mult != 1.0:
        i = math.floor(math.log(1 - t / period * (1.0 - t_mult)) / math.log(t_mult))
        t_i = t_mult**i * period
        t_curr = t - (1.0 - t_mult**i) / (1.0 - t_mult) * period
    else:
        i = math.floor(t / period)
        t_i, t_curr = period, t - period * i
    shrink = lr_shrink**i
    lo, hi = min_lr * shrink, max_lr * shrink
    return lo + 0.5 * (hi - lo) * (1 + math.cos(math.pi * t_curr / t_i))


def _constant_then_linear(a: dict[str, Any], t: int) -> float:
    s0, c, n = a["start_warmup_multiplier"], a["constant_warmup_num_iter"], a["linear_warmup_num_iter"]
    if t < c:
        return s0
    return _linear_warmup({"num_iter": n, "start_multiplier": s0}, t - c) if t < c + n else 1.0


def _composite_cyclical(a: dict[str, Any], t: int) -> float:
    warm = a["constant_warmup_num_iter"] + a["linear_warmup_num_iter"]
    if t < warm:
        return _constant_then_linear(a, t)
    return _cyclical(a, t - warm, a["cyclical_max_lr"], a["cyclical_step_size"], a["cyclical_decay"])


def _composite_cosine(a: dict[str, Any], t: int) -> float:
    warm = a["constant_warmup_num_iter"] + a["linear_warmup_num_iter"]
    if t < warm:
        return _constant_then_linear(a, t)
    return _cosine(
        t - warm, a["cosine_min_lr"], a["cosine_max_lr"], a["cosine_period"], a["cosine_t_mult"], a["cosine_lr_shrink"]
    )


_SUB_POLICY = re.compile(r"sub_policy_(\d+)_(\w+)")


def _sub_args(a: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-policy ``i`` of a composite policy: its ``sub_policy_{i}_*`` args over the defaults."""
    prefix = f"sub_policy_{i}_"
    sub = {arg.name: arg.default for arg in _LR_ARGS}
    sub.update({"base_lr": a["base_lr"], "policy": "", "lr_scale": 1.0})
    sub.update({k[len(prefix) :]: v for k, v in a.items() if k.startswith(prefix)})
    return _resolve(sub, sub["policy"])


def _composite(a: dict[str, Any], t: int) -> float:
    """Caffe2's CompositeLearningRate: sub-policy i runs from iteration 1 + sum(num_iters[:i]) on (the
    last one for ever), evaluated at the global iteration and scaled by its lr_scale."""
    if t < 1:
        raise ValueError(f"policy 'composite': iteration {t} comes before the first sub-policy (iteration 1)")
    start, pick = 1, 0
    for i, n in enumerate(a["sub_policy_num_iters"]):
        if t >= start:
            pick = i
        start += n
    sub = _sub_args(a, pick)
    return LR_POLICIES[sub["policy"]](sub, t) * sub["lr_scale"]


def _warmup_poly_decay(a: dict[str, Any], t: int) -> float:
    """facebookresearch/dlrm's LRPolicyScheduler at its step count t (the first step is 1): t / num_iter
    during the warm-up, then ((N - (t - D)) / N)^2 (at least 1e-7 / base_lr) for the N = num_decay_iter
    iterations from D = decay_start_iter; with a decay, the last multiplier reached holds between the
    warm-up and the decay and after the decay; without one, 1."""
    warm, start, n = a["num_iter"], a["decay_start_iter"], a["num_decay_iter"]
    floor = 1e-7 / abs(a["base_lr"]) if a["base_lr"] else 0.0
    if t < warm:
        return 1.0 - (warm - t) / warm
    if n <= 0:
        return 1.0
    if start <= t < start + n:
        return max(floor, ((n - (t - start)) / n) ** 2)
    if t >= start + n:
        return max(floor, (1 / n) ** 2)
    return 1.0 - 1.0 / warm if warm > 1 else 1.0  # between the warm-up and the decay: the warm-up's last


LR_POLICIES: dict[str, Any] = {
    "warmupPolyDecay": _warmup_poly_decay,
    "fixed": lambda a, t: 1.0,
    "step": _step,
    "exp": lambda a, t: a["gamma"] ** t,
    "gate": lambda a, t: a["multiplier_2"] if t >= a["num_iter"] else a["multiplier_1"],
    "slope": _slope,
    "inv": _inv,
    "poly": _poly,
    "linearWarmup": _linear_warmup,
    "constantWarmup": lambda a, t: 1.0 if t >= a["num_iter"] else a["multiplier"],
    "pieceWarmup": _piece_warmup,
    "alter": _alter,
    "hill": _hill,
    "composite": _composite,
    "cyclical": lambda a, t: _cyclical(a, t, a["max_lr"], a["stepsize"], a["decay"]),
    "constantThenLinearWarmup": _constant_then_linear,
    "compositeCyclical": _composite_cyclical,
    "cosine": lambda a, t: _cosine(t, a["min_lr"], a["max_lr"], a["period"], a["t_mult"], a["lr_shrink"]),
    "compositeCosine": _composite_cosine,
}
_POSITIVE = (lambda v: v > 0, "> 0")
# what each policy needs, checked when the net is created: (arg, test, rule)
_LR_NEEDS: dict[str, list[tuple[str, Any, str]]] = {
    "step": [("stepsize", lambda v: v >= 1, ">= 1"), ("gamma", lambda v: v > 0, "> 0")],
    "exp": [("gamma", lambda v: v > 0, "> 0")],
    "inv": [("gamma", lambda v: v > 0, "> 0"), ("power", lambda v: v > 0, "> 0")],
    "poly": [("power", lambda v: v > 0, "> 0"), ("max_iter", lambda v: v > 0, "> 0")],
    "linearWarmup": [("start_multiplier", lambda v: v >= 0, ">= 0"), ("num_iter", lambda v: v >= 0, ">= 0")],
    "constantWarmup": [("multiplier", lambda v: v >= 0, ">= 0"), ("num_iter", lambda v: v >= 0, ">= 0")],
    "alter": [("active_period", lambda v: v >= 0, ">= 0"), ("inactive_period", lambda v: v >= 0, ">= 0")],
    "hill": [
        ("num_iter", lambda v: v >= 0, ">= 0"),
        ("start_multiplier", lambda v: v >= 0, ">= 0"),
        ("gamma", lambda v: v > 0, "> 0"),
        ("power", lambda v: v > 0, "> 0"),
    ],
    "cyclical": [("stepsize", *_POSITIVE), ("max_lr", lambda v: True, "")],
    "constantThenLinearWarmup": [
        ("constant_warmup_num_iter", lambda v: v >= 0, ">= 0"),
        ("linear_warmup_num_iter", *_POSITIVE),
    ],
    "compositeCyclical": [
        ("constant_warmup_num_iter", lambda v: v >= 0, ">= 0"),
        ("linear_warmup_num_iter", *_POSITIVE),
        ("cyclical_step_size", *_POSITIVE),
    ],
    "cosine": [("period", *_POSITIVE), ("t_mult", *_POSITIVE)],
    "slope": [("num_iter_1", *_POSITIVE), ("num_iter_2", *_POSITIVE)],
    "warmupPolyDecay": [("num_iter", lambda v: v >= 0, ">= 0"), ("num_decay_iter", lambda v: v >= 0, ">= 0")],
    "compositeCosine": [
        ("constant_warmup_num_iter", lambda v: v >= 0, ">= 0"),
        ("linear_warmup_num_iter", *_POSITIVE),
        ("cosine_period", *_POSITIVE),
        ("cosine_t_mult", *_POSITIVE),
    ],
}
_LR_ARGS = [
    Arg("base_lr", float, Arg.REQUIRED, "the learning rate the multiplier scales (Caffe2 feeds a negative one)"),
    Arg(
        "policy",
        str,
        "fixed",
        "Caffe2's: fixed 1; step gamma^floor(iter/stepsize); exp gamma^iter; gate multiplier_1 "
        "before num_iter, then multiplier_2; slope multiplier_1 before num_iter_1, then max(multiplier_2, the line "
        "to multiplier_2 at num_iter_2); inv (1 + gamma iter)^-power; poly (1 - iter/max_iter)^power; linearWarmup "
        "start_multiplier + (1 - start_multiplier) iter/num_iter until num_iter, then 1; constantWarmup multiplier until "
        "num_iter, then 1; pieceWarmup m1 before n1, m2 before n2, then m3; alter 1 for active_period iterations then 0 "
        "for inactive_period (the other way round with active_first=0); hill linearWarmup for num_iter, then "
        "max(end_multiplier, inv of iter - num_iter); composite: sub-policy i (its args prefixed sub_policy_{i}_, "
        "lr_scale a factor) for sub_policy_num_iters[i] iterations from iteration 1; cyclical a triangle of period "
        "2 stepsize up to max_lr/base_lr, times decay per period; constantThenLinearWarmup start_warmup_multiplier for "
        "constant_warmup_num_iter, then a linear warm-up over linear_warmup_num_iter; cosine SGDR from max_lr down to "
        "min_lr over period (t_mult, lr_shrink); compositeCyclical / compositeCosine: that warm-up, then cyclical / "
        "cosine with the cyclical_ / cosine_ args; warmupPolyDecay facebookresearch/dlrm's: iter/num_iter during "
        "num_iter warm-up iterations, then ((num_decay_iter - (iter - decay_start_iter)) / num_decay_iter)^2 (at "
        "least 1e-7/base_lr) from decay_start_iter, the last value holding between and after",
        choices=tuple(LR_POLICIES),
    ),
    Arg("stepsize", int, 1, "iterations per step (step), half a period (cyclical)"),
    Arg("gamma", float, 1.0, "decay factor (step, exp, inv, hill)"),
    Arg("power", float, 0.0, "exponent (inv, poly, hill)"),
    Arg("max_iter", int, -1, "the iteration where poly reaches 0"),
    Arg("start_multiplier", float, 0.0, "first multiplier of linearWarmup and hill"),
    Arg("num_iter", int, 0, "warm-up iterations (linearWarmup, constantWarmup, hill), gate's switch"),
    Arg("multiplier", float, 0.5, "constantWarmup's multiplier"),
    Arg("end_multiplier", float, 0.0, "hill's lower bound"),
    Arg("active_first", bool, True, "alter: the active period comes first"),
    Arg("active_period", int, -1, "alter: iterations with multiplier 1"),
    Arg("inactive_period", int, -1, "alter: iterations with multiplier 0"),
    Arg("multiplier_1", float, None, "gate: the multiplier before num_iter (default 1); slope: before num_iter_1 (0)"),
    Arg("multiplier_2", float, None, "gate: the multiplier from num_iter on (default 1); slope: the floor (0)"),
    Arg("num_iter_1", int, 0, "slope: the end of multiplier_1"),
    Arg("num_iter_2", int, 0, "slope: where the line from multiplier_1 reaches multiplier_2"),
    Arg("m1", float, 0.5, "pieceWarmup: the multiplier before n1"),
    Arg("n1", int, 0, "pieceWarmup: the end of m1"),
    Arg("m2", float, 0.5, "pieceWarmup: the multiplier from n1 to n2"),
    Arg("n2", int, 0, "pieceWarmup: the end of m2"),
    Arg("m3", float, 0.5, "pieceWarmup: the multiplier from n2 on"),
    Arg("sub_policy_num_iters", list, [], "composite: the iterations of each sub-policy", item_type=int),
    Arg("max_lr", float, None, "cyclical: the peak learning rate (default 0.005); cosine: the upper bound (0.5)"),
    Arg("decay", float, 1.0, "cyclical: the peak's factor per period"),
    Arg("min_lr", float, 0.1, "cosine: the lower bound"),
    Arg("period", int, 50, "cosine: iterations of the first period"),
    Arg("t_mult", float, 1.0, "cosine: each period's length factor"),
    Arg("lr_shrink", float, 0.99, "cosine: each period's bounds factor"),
    Arg("start_warmup_multiplier", float, 0.1, "constantThenLinearWarmup and the composite ones: the first multiplier"),
    Arg("constant_warmup_num_iter", int, 10000000, "iterations at start_warmup_multiplier"),
    Arg("linear_warmup_num_iter", int, 10000000, "iterations of the linear warm-up to 1"),
    Arg("cyclical_max_lr", float, 0.05, "compositeCyclical: cyclical's max_lr"),
    Arg("cyclical_step_size", int, 1000000, "compositeCyclical: cyclical's stepsize"),
    Arg("cyclical_decay", float, 1.0, "compositeCyclical: cyclical's decay"),
    Arg("cosine_max_lr", float, 0.5, "compositeCosine: cosine's max_lr"),
    Arg("cosine_min_lr", float, 0.1, "compositeCosine: cosine's min_lr"),
    Arg("cosine_period", int, 50, "compositeCosine: cosine's period"),
    Arg("cosine_t_mult", float, 1.0, "compositeCosine: cosine's t_mult"),
    Arg("cosine_lr_shrink", float, 0.99, "compositeCosine: cosine's lr_shrink"),
    Arg("decay_start_iter", int, 0, "warmupPolyDecay: the first iteration of the decay"),
    Arg("num_decay_iter", int, 0, "warmupPolyDecay: the iterations of the decay"),
    Arg("dtype", str, "float32", "output dtype", choices=("float32", "float64")),
]
_LR_ARG_SPECS = {arg.name: arg for arg in _LR_ARGS}
# args whose Caffe2 default depends on the policy (None in _LR_ARGS): policy -> value, else the fallback
_POLICY_DEFAULTS = {
    "max_lr": ({"cyclical": 0.005, "cosine": 0.5}, 0.0),
    "multiplier_1": ({"slope": 0.0}, 1.0),
    "multiplier_2": ({"slope": 0.0}, 1.0),
}


def _resolve(a: dict[str, Any], policy: str) -> dict[str, Any]:
    """``a`` with the policy-dependent defaults filled in where an arg is None."""
    missing = {k: by.get(policy, other) for k, (by, other) in _POLICY_DEFAULTS.items() if a.get(k) is None}
    return {**a, **missing} if missing else a


_SUB_ONLY = {
    "policy": Arg("policy", str, Arg.REQUIRED, "", choices=tuple(p for p in LR_POLICIES if p != "composite")),
    "lr_scale": Arg("lr_scale", float, 1.0, ""),
}


def _lr_extra_args(name: str) -> Arg | None:
    """The Arg of ``sub_policy_{i}_{arg}`` (a composite's sub-policy args), or None."""
    m = _SUB_POLICY.fullmatch(name)
    if m is None or m.group(2) in ("base_lr", "dtype", "sub_policy_num_iters"):
        return None
    spec = _SUB_ONLY.get(m.group(2)) or _LR_ARG_SPECS.get(m.group(2))
    return None if spec is None else dataclasses.replace(spec, name=name)


def _check_policy(policy: str, get: Any, where: str) -> None:
    """The needs of one policy, ``get(name)`` its arg values (defaults filled in)."""
    for name, ok, rule in _LR_NEEDS.get(policy, []):
        value = get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not ok(value):
            raise ValueError(f"policy {policy!r}{where} needs {name} {rule}, got {value!r}")
    if policy == "alter" and get("active_period") + get("inactive_period") <= 0:
        raise ValueError(f"policy 'alter'{where} needs active_period + inactive_period > 0")
    if policy == "warmupPolyDecay" and get("num_decay_iter") > 0 and get("decay_start_iter") < get("num_iter"):
        raise ValueError(
            f"policy 'warmupPolyDecay'{where} needs decay_start_iter >= num_iter (the warm-up ends before "
            f"the decay), got {get('decay_start_iter')} < {get('num_iter')}"
        )
    if policy == "slope" and get("num_iter_2") <= get("num_iter_1"):
        raise ValueError(
            f"policy 'slope'{where} needs num_iter_2 > num_iter_1, got {get('num_iter_2')} <= {get('num_iter_1')}"
        )


def _validate_lr(op: Any) -> None:
    policy = op.args.get("policy", "fixed")
    defaults = {arg.name: arg.default for arg in _LR_ARGS}
    defaults = _resolve(defaults, policy)
    _check_policy(policy, lambda name: op.args.get(name, defaults[name]), "")
    if policy != "composite":
        return
    num_iters = op.args.get("sub_policy_num_iters", [])
    if not num_iters or min(num_iters) <= 0:
        raise ValueError(f"policy 'composite' needs sub_policy_num_iters of positive counts, got {num_iters}")
    for i in range(len(num_iters)):
        prefix = f"sub_policy_{i}_"
        sub = op.args.get(prefix + "policy")
        if sub is None:
            raise ValueError(f"policy 'composite' needs {prefix}policy for its sub-policy {i}")
        sub_defaults = _resolve({**defaults, **{k: None for k in _POLICY_DEFAULTS}}, sub)
        _check_policy(sub, lambda name, p=prefix, d=sub_defaults: op.args.get(p + name, d[name]), f" (sub-policy {i})")
    past = [k for k in op.args if (m := _SUB_POLICY.fullmatch(k)) and int(m.group(1)) >= len(num_iters)]
    if past:
        raise ValueError(f"argument {past[0]!r} names a sub-policy past the {len(num_iters)} of sub_policy_num_iters")


def _specialize_learning_rate(ctx: Any, it: Any) -> Any:
    """The fixed policy on a numpy integer counter: base_lr in the op's dtype after the counter's check."""
    a = ctx.args
    if type(it) is not _nd:
        return None
    if not (a["policy"] == "fixed" and it.size == 1 and it.dtype.kind in "iu"):
        return learning_rate  # the other policies: the general kernel (it writes nothing)
    base_lr, dtype = a["base_lr"], _LR_DTYPES[a["dtype"]]

    def fixed_rate(ctx: Any, it: np.ndarray) -> np.ndarray:
        if it.item(0) < 0:
            raise ValueError(f"expected a non-negative iteration count in {ctx.op.inputs[0]!r}, got {it.item(0)}")
        return np.array(base_lr, dtype=dtype)

    return fixed_rate


@register_op(
    "LearningRate",
    inputs=1,
    outputs=1,
    devices=CPU_CUDA,
    args=_LR_ARGS,
    validate=_validate_lr,
    specialize=_specialize_learning_rate,
    extra_args=_lr_extra_args,
    inputs_doc=("iter (int64 counter, 1 element)",),
    outputs_doc=("lr (0-d)",),
    doc="The learning rate for the current iteration: base_lr times the multiplier of the policy "
    "(Caffe2's learning_rate_functors), as a 0-d array.",
)
def learning_rate(ctx: Any, it: Any) -> np.ndarray:
    a = ctx.args
    if a["policy"] == "fixed" and type(it) is _nd and it.size == 1 and it.dtype.kind in "iu":
        if it.item(0) < 0:
            raise ValueError(f"expected a non-negative iteration count in {ctx.op.inputs[0]!r}, got {it.item(0)}")
        return np.array(a["base_lr"], dtype=_LR_DTYPES[a["dtype"]])
    t = int(_scalar(ctx, it, 0, "i"))
    if t < 0:
        raise ValueError(f"expected a non-negative iteration count in {ctx.op.inputs[0]!r}, got {t}")
    a = _resolve(a, a["policy"])
    lr = a["base_lr"] * LR_POLICIES[a["policy"]](a, t)
    return namespace(ctx, it).scalar(lr, a["dtype"], like=it)


__all__ = [
    "weighted_sum",
    "weighted_sum_gradient",
    "sgd",
    "momentum_sgd",
    "momentum_sgd_update",
    "adam",
    "learning_rate",
]


# -- Adagrad (Caffe2's, dense): moment = decay * moment + g^2;  param += lr * g / (sqrt(moment) + eps)
@register_op(
    "Adagrad",
    inputs=4,
    outputs=(2, 4),
    allow_inplace={0: 0, 1: 1},
    args=[
        Arg(
            "epsilon",
            float,
            None,
            "added to sqrt(moment); default: Caffe2's 1e-5 (formula caffe2) or torch's 1e-10 (formula torch)",
        ),
        Arg("decay", float, 1.0, "factor on the old moment"),
        _WEIGHT_DECAY,
        _FORMULA,
    ],
    inputs_doc=("param", "moment", "grad", "lr (1 element)"),
    outputs_doc=("param", "moment", "effective_lr (optional)", "update (optional)"),
    doc="Caffe2's Adagrad: moment = decay * moment + g^2; param += lr * g / (sqrt(moment) + epsilon) (Caffe2 "
    "feeds a negative lr). formula='torch' gives torch.optim.Adagrad's: param -= lr * g / (sqrt(moment) + "
    "epsilon). In place (the usual use) writes the input arrays. Caffe2's optional outputs: effective_lr = "
    "lr / (sqrt(moment) + epsilon) and update = effective_lr * g, then param += update.",
)
def adagrad(ctx: Any, param: Any, moment: Any, grad: Any, lr: Any) -> tuple[np.ndarray, ...]:
    p = float_array(ctx, param, 0)
    xp = namespace(ctx, param, moment, grad)
    m = _like(ctx, moment, 1, p, "a moment")
    g = _decayed(_like(ctx, grad, 2, p, "a gradient"), p, ctx.args["weight_decay"])
    f, a = (p.dtype.type if xp.name == "numpy" else float), ctx.args  # numpy scalars keep numpy's bits
    eps = a["epsilon"] if a["epsilon"] is not None else (1e-10 if a["formula"] == "torch" else 1e-5)
    rate = f(_scalar(ctx, lr, 3)) * (f(-1) if a["formula"] == "torch" else f(1))  # checked before any write
    m_out, p_out = _target(ctx, 1, 1, m), _target(ctx, 0, 0, p)
    xp.multiply(m, f(a["decay"]), out=m_out)
    m_out += g * g
    if len(ctx.op.outputs) == 2:
        xp.add(p, rate * g / (xp.sqrt(m_out) + f(eps)), out=p_out)
        return p_out, m_out
    effective_lr = rate / (xp.sqrt(m_out) + f(eps))  # Caffe2's adagrad_update_output_effective_lr(_and_update)
    update = effective_lr * g
    xp.add(p, update, out=p_out)
    return (p_out, m_out, effective_lr) if len(ctx.op.outputs) == 3 else (p_out, m_out, effective_lr, update)


__all__ += ["adagrad"]
