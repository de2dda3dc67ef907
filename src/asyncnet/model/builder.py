"""A brew-like model builder: parameters with their initializers, layer helpers, train/eval nets.

A model is written once with layer helpers; each helper registers its parameters (and their
fills, in ``init_net``) and records its ops in the training-mode forward definition. The eval
net is the same ops with Dropout and SpatialBN switched to ``is_test``; the train net adds the
backward ops (:func:`asyncnet.autodiff.add_gradient_ops`) and an optimizer's updates
(:mod:`asyncnet.model.optimizer`).

    >>> import numpy as np, asyncnet as an
    >>> from asyncnet.model import ModelHelper
    >>> m = ModelHelper("mlp", seed=0)
    >>> h = m.relu(m.fc("data", "fc1", 4, 8), "relu1")
    >>> m.softmax_with_loss(m.fc(h, "fc2", 8, 3), "label")
    ('softmax', 'loss')
    >>> train = m.train_net(lr=0.1)          # before running init_net: it adds the optimizer state
    >>> ws = an.Workspace(); ws.run_net_once(m.init_net)
    >>> ws.feed("data", np.ones((5, 4), np.float32)); ws.feed("label", np.zeros(5, np.int32))
    >>> ws.run_net_once(train)
    >>> m.params, int(ws.fetch("iter")[0])
    (['fc1_w', 'fc1_b', 'fc2_w', 'fc2_b'], 1)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from asyncnet.autodiff import Grad, add_gradient_ops
from asyncnet.core.net import BlobRef, Net
from asyncnet.errors import NetDefinitionError
from asyncnet.model.fc_split import split_input_gradients
from asyncnet.model.optimizer import build_optimizer

__all__ = ["ModelHelper", "INITIALIZERS"]

INITIALIZERS = ("xavier", "constant", "gaussian", "uniform")


class ModelHelper:
    """Parameters, buffers and one forward definition, from which the nets are derived.

    Args:
        name: prefix of the nets' names. seed: parameter fill k (in registration order) uses
            ``seed + k``, as :class:`asyncnet.train.model.MLP` does. dtype: float32 or float64.
        net_type / num_workers: the executor of every net built.

    Attributes: ``params`` (trained, in order), ``shapes``, ``sparse`` (embedding tables, updated
    by row), ``buffers`` (state such as running statistics: checkpointed, not trained),
    ``loss`` (the blob the train net minimises), ``optimizer`` and ``optimizer_state`` (after
    the first :meth:`train_net`), ``init_net``.
    """

    def __init__(
        self,
        name: str = "model",
        seed: int = 0,
        dtype: Any = np.float32,
        net_type: str = "simple",
        num_workers: int | None = None,
    ):
        self.name, self.seed, self.dtype = name, int(seed), np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise NetDefinitionError(
                f"expected dtype float32 or float64, got {self.dtype}", f"ModelHelper({name!r}).dtype"
            )
        self.net_type, self.num_workers = net_type, num_workers
        self.init_net = Net(f"{name}_init")
        self.params: list[str] = []
        self.buffers: list[str] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.sparse: set[str] = set()
        self.loss: str | None = None
        self.labels: list[str] = []  # the blobs the losses read as targets (not fed at inference)
        self.optimizer: str | None = None  # set by the first train_net (asyncnet.model.optimizer)
        self.optimizer_state: list[str] = []
        self._fwd = Net(f"{name}_forward")
        #: gradient nets split each FC gradient into dW, db and a dX that runs first
        #: (:func:`~asyncnet.model.fc_split.split_input_gradients`, ``dx_first``): the same bits,
        #: three more ops a layer, and work an async executor can run beside the layers below
        self.split_fc_gradients = False

    # -- parameters -----------------------------------------------------------------------
    def param(self, name: str, shape: Sequence[int], init: str = "xavier", **fill: Any) -> BlobRef:
        """Register a trained parameter and its fill: "xavier" (Caffe2's XavierFill), "constant"
        (``value``), "gaussian" (``mean``, ``std``) or "uniform" (``min``, ``max``)."""
        if init not in INITIALIZERS:
            raise NetDefinitionError(f"expected init in {list(INITIALIZERS)}, got {init!r}", f"param {name!r}")
        self._new_blob(name, shape)
        op = {"xavier": "XavierFill", "constant": "ConstantFill", "gaussian": "GaussianFill", "uniform": "UniformFill"}[
            init
        ]
        if init != "constant":
            fill.setdefault("seed", self.seed + len(self.params))
        self.init_net.add_op(op, [], name, shape=list(shape), dtype=self.dtype.name, **fill)
        self.params.append(name)
        return BlobRef(name)

    def buffer(self, name: str, shape: Sequence[int], value: float = 0.0) -> BlobRef:
        """Register untrained model state (e.g. batch norm's running mean), constant-filled."""
        self._new_blob(name, shape)
        self.init_net.ConstantFill([], name, shape=list(shape), value=float(value), dtype=self.dtype.name)
        self.buffers.append(name)
        return BlobRef(name)

    def _new_blob(self, name: str, shape: Sequence[int]) -> None:
        if name in self.shapes:
            raise NetDefinitionError(
                f"expected a new parameter name, {name!r} is already registered", f"model {self.name!r}"
            )
        if not shape or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in shape):
            raise NetDefinitionError(f"expected a shape of positive ints, got {list(shape)!r}", f"param {name!r}")
        self.shapes[name] = tuple(int(d) for d in shape)

    # -- layer helpers (each returns its output blob) ---------------------------------------
    def fc(
        self,
        x: str,
        name: str,
        dim_in: int,
        dim_out: int,
        weight_init: str = "xavier",
        bias_std: float = 0.0,
        output: str | None = None,
        **fill: Any,
    ) -> BlobRef:
        """y = x W^T + b into ``output`` (default ``name``): W [dim_out, dim_in] (``{name}_w``,
        ``weight_init`` with ``fill``'s arguments), b (``{name}_b``) zeros, or N(0, bias_std^2)
        when ``bias_std`` > 0."""
        w = self.param(f"{name}_w", (dim_out, dim_in), weight_init, **fill)
        b = (
            self.param(f"{name}_b", (dim_out,), "gaussian", mean=0.0, std=float(bias_std))
            if bias_std > 0
            else self.param(f"{name}_b", (dim_out,), "constant", value=0.0)
        )
        return self._fwd.FC([x, w, b], output or name)

    def conv(
        self,
        x: str,
        name: str,
        dim_in: int,
        dim_out: int,
        kernel: int,
        stride: int = 1,
        pad: int = 0,
        weight_init: str = "xavier",
        **fill: Any,
    ) -> BlobRef:
        """NCHW convolution; filter [dim_out, dim_in, kernel, kernel], bias zeros."""
        w = self.param(f"{name}_w", (dim_out, dim_in, kernel, kernel), weight_init, **fill)
        b = self.param(f"{name}_b", (dim_out,), "constant", value=0.0)
        return self._fwd.Conv([x, w, b], name, kernel=kernel, stride=stride, pad=pad)

    def max_pool(self, x: str, name: str, kernel: int, stride: int | None = None, pad: int = 0) -> BlobRef:
        return self._fwd.MaxPool(x, name, kernel=kernel, stride=stride or kernel, pad=pad)

    def avg_pool(self, x: str, name: str, kernel: int, stride: int | None = None, pad: int = 0) -> BlobRef:
        return self._fwd.AveragePool(x, name, kernel=kernel, stride=stride or kernel, pad=pad)

    def spatial_bn(self, x: str, name: str, channels: int, epsilon: float = 1e-5, momentum: float = 0.9) -> BlobRef:
        """Batch norm over N, H, W: scale ``{name}_s`` (ones), bias ``{name}_b``; running mean and
        variance are buffers ``{name}_rm``/``{name}_riv``, used by the eval net."""
        s = self.param(f"{name}_s", (channels,), "constant", value=1.0)
        b = self.param(f"{name}_b", (channels,), "constant", value=0.0)
        rm, rv = self.buffer(f"{name}_rm", (channels,), 0.0), self.buffer(f"{name}_riv", (channels,), 1.0)
        return self._fwd.SpatialBN(
            [x, s, b, rm, rv], [name, rm, rv, f"{name}_sm", f"{name}_siv"], epsilon=epsilon, momentum=momentum
        )[0]

    def dropout(self, x: str, name: str, ratio: float = 0.5, seed: int = -1) -> BlobRef:
        """Dropout in the train net, the identity (``is_test``) in the eval net."""
        kw = {"seed": seed} if seed >= 0 else {}
        return self._fwd.Dropout(x, [name, f"{name}_mask"], ratio=ratio, **kw)[0]

    def relu(self, x: str, name: str) -> BlobRef:
        return self._fwd.Relu(x, name)

    def sigmoid(self, x: str, name: str) -> BlobRef:
        return self._fwd.Sigmoid(x, name)

    def tanh(self, x: str, name: str) -> BlobRef:
        return self._fwd.Tanh(x, name)

    def embedding_bag(
        self, ids: str, lengths: str, name: str, num_rows: int, dim: int, weight_init: str = "uniform", **fill: Any
    ) -> BlobRef:
        """SparseLengthsSum over the table ``{name}_table`` [num_rows, dim] (sparse gradient);
        the default fill is U[-sqrt(1/num_rows), sqrt(1/num_rows)] as facebookresearch/dlrm."""
        if weight_init == "uniform" and not fill:
            fill = {"min": -float(np.sqrt(1.0 / num_rows)), "max": float(np.sqrt(1.0 / num_rows))}
        t = self.param(f"{name}_table", (num_rows, dim), weight_init, **fill)
        self.sparse.add(t)
        return self._fwd.SparseLengthsSum([t, ids, lengths], name)

    def lstm(
        self, x: str, name: str, dim_in: int, hidden: int, weight_init: str = "uniform", **fill: Any
    ) -> tuple[BlobRef, BlobRef]:
        """One LSTM layer over X [T, N, dim_in] from zero states; returns (Y [T, N, H], h_T [N, H]).
        Weights ``{name}_w_ih``/``_w_hh``/``_b_ih``/``_b_hh`` as torch.nn.LSTM, filled like it
        (U[-1/sqrt(H), 1/sqrt(H)]) by default."""
        if weight_init == "uniform" and not fill:
            fill = {"min": -1.0 / np.sqrt(hidden), "max": 1.0 / np.sqrt(hidden)}
        ws = [
            self.param(f"{name}_{p}", shape, weight_init, **fill)
            for p, shape in (
                ("w_ih", (4 * hidden, dim_in)),
                ("w_hh", (4 * hidden, hidden)),
                ("b_ih", (4 * hidden,)),
                ("b_hh", (4 * hidden,)),
            )
        ]
        f = self._fwd
        # zero states [N, H] for the run's batch size N = X.shape[1] (a fill cuts the gradient)
        batch = f.Shape(x, f"{name}_batch", axes=[1])
        h0 = c0 = f.ConstantFill(
            batch, f"{name}_state0", input_as_shape=True, extra_shape=[hidden], value=0.0, dtype=self.dtype.name
        )
        y, h_t, _, _ = f.LSTM([x, h0, c0, *ws], [name, f"{name}_hT", f"{name}_cT", f"{name}_cache"])
        return y, h_t

    def layer_norm(self, x: str, name: str, dim: int, axis: int = 1, epsilon: float = 1e-5) -> BlobRef:
        """LayerNorm over the dims from ``axis`` (of total size ``dim``) with gamma (ones), beta (zeros)."""
        g = self.param(f"{name}_gamma", (dim,), "constant", value=1.0)
        b = self.param(f"{name}_beta", (dim,), "constant", value=0.0)
        return self._fwd.LayerNorm(
            [x, g, b], [name, f"{name}_mean", f"{name}_std"], axis=axis, epsilon=epsilon, elementwise_affine=True
        )[0]

    def concat(self, xs: Sequence[str], name: str, axis: int = 1) -> BlobRef:
        return self._fwd.Concat(list(xs), [name, f"{name}_split_info"], axis=axis)[0]

    def flatten(self, x: str, name: str, axis: int = 1) -> BlobRef:
        return self._fwd.Flatten(x, name, axis=axis)

    def op(self, op_type: str, inputs: Any, outputs: Any, **args: Any) -> Any:
        """Any other op, recorded in the forward definition."""
        return self._fwd.add_op(op_type, inputs, outputs, **args)

    def hoist(self, blobs: Sequence[str]) -> None:
        """Move the ops writing ``blobs`` to the front of the forward definition, keeping their
        order. Only what an executor meets first changes (and, reversed, the order of their
        gradients): not the math, nor the parameters' fills. The ops must read no blob that
        another op writes.

            >>> m = ModelHelper("m"); _ = m.fc("x", "a", 2, 2); _ = m.fc("y", "b", 2, 2)
            >>> m.hoist(["b"]); [op.outputs[0] for op in m.forward_net().ops]
            ['b', 'a']
        """
        ops = self._fwd.ops
        wanted = {str(b) for b in blobs}
        written = {o for op in ops for o in op.outputs}
        moved = [op for op in ops if wanted.intersection(op.outputs)]
        for op in moved:
            if written.intersection(op.inputs):
                raise NetDefinitionError(
                    f"expected an op reading only inputs and parameters, {op.type} reads "
                    f"{sorted(written.intersection(op.inputs))}, written by the definition",
                    f"model {self.name!r} hoist",
                )
        ids = {id(op) for op in moved}
        ops[:] = moved + [op for op in ops if id(op) not in ids]

    # -- losses -----------------------------------------------------------------------------
    def softmax_with_loss(
        self, logits: str, label: str, softmax: str = "softmax", loss: str = "loss", accuracy: str | None = "accuracy"
    ) -> tuple[BlobRef, BlobRef]:
        """Softmax cross entropy of int labels (mean over the batch); also ``accuracy`` (0-d)."""
        p, l = self._fwd.SoftmaxWithLoss([logits, label], [softmax, loss])
        if accuracy:
            self._fwd.Accuracy([p, label], accuracy)
        self.loss = str(l)
        self._add_label(label)
        return p, l

    def sigmoid_xent_loss(
        self, logit: str, target: str, prob: str = "prob", loss: str = "loss"
    ) -> tuple[BlobRef, BlobRef]:
        """Mean binary cross entropy of logits [N, 1] and float targets [N, 1]; also ``prob``."""
        xent = self._fwd.SigmoidCrossEntropyWithLogits([logit, target], f"{loss}_xent")
        l = self._fwd.AveragedLoss(xent, loss)
        p = self._fwd.Sigmoid(logit, prob)
        self.loss = str(l)
        self._add_label(target)
        return p, l

    def _add_label(self, label: str) -> None:
        if str(label) not in self.labels:
            self.labels.append(str(label))

    # -- nets -------------------------------------------------------------------------------
    def _net(self, name: str) -> Net:
        return Net(name, type=self.net_type, num_workers=self.num_workers)

    def forward_net(self, name: str = "train_forward") -> Net:
        """The definition as recorded (training mode: dropout on, batch statistics)."""
        net = self._net(name)
        net.ops.extend(dataclasses.replace(op, args=dict(op.args)) for op in self._fwd.ops)
        return net

    def eval_net(self, name: str = "eval", prefix: str = "") -> Net:
        """The same ops in test mode: Dropout passes through, SpatialBN uses the running
        statistics and does not update them. Changes no parameter or buffer. With ``prefix``
        every blob the net writes is named ``prefix + name`` (``eval/loss``), so evaluating
        leaves the train net's blobs (``loss``, ``accuracy``) as they are."""
        net = self._net(name)
        for op in self._fwd.ops:
            net.ops.append(_test_mode(op))
        return _prefixed(net, prefix)

    def inference_net(self, name: str = "inference", prefix: str = "") -> Net:
        """The eval net without the label: the loss and accuracy ops are left out, and a
        ``SoftmaxWithLoss`` becomes a ``Softmax`` writing the same probabilities blob. Feed only
        the inputs; fetch ``softmax`` (or ``prob``).

            >>> m = ModelHelper("m"); _ = m.softmax_with_loss(m.fc("x", "fc", 4, 3), "y")
            >>> [op.type for op in m.inference_net().ops]
            ['FC', 'Softmax']
        """
        labels = set(self.labels) or {op.inputs[1] for op in self._fwd.ops if op.type in _LOSS_OPS}
        net, tainted = self._net(name), set(labels)
        for op in self._fwd.ops:
            if op.type == "SoftmaxWithLoss" and op.inputs[1] in tainted:
                net.ops.append(
                    dataclasses.replace(
                        op, type="Softmax", inputs=op.inputs[:1], outputs=op.outputs[:1], args={}, control_inputs=[]
                    )
                )
                tainted.update(op.outputs[1:])
            elif tainted.intersection(op.inputs):
                tainted.update(op.outputs)
            else:
                net.ops.append(_test_mode(op))
        return _prefixed(net, prefix)

    def gradient_net(self, name: str = "grad") -> tuple[Net, dict[str, Grad]]:
        """The forward net plus backward ops; returns it and {param: gradient} (a
        :class:`~asyncnet.autodiff.GradientSlice` for an embedding table)."""
        if self.loss is None:
            raise NetDefinitionError(
                "expected a loss: call softmax_with_loss or sigmoid_xent_loss first", f"model {self.name!r}"
            )
        net = self.forward_net(name)
        grads = add_gradient_ops(net, self.loss, wrt=self.params, dtype=self.dtype.name)
        if self.split_fc_gradients:
            split_input_gradients(net, [g for g in grads.values() if isinstance(g, str)], dx_first=True)
        return net, grads

    def train_net(
        self,
        name: str = "train",
        optimizer: str = "sgd",
        lr: float = 0.1,
        before_update: Callable[[Net, dict[str, Grad]], dict[str, Grad]] | None = None,
        **opts: Any,
    ) -> Net:
        """Gradient net, then ``before_update(net, grads)`` if given, then one step of
        ``optimizer`` (:data:`~asyncnet.model.optimizer.OPTIMIZERS`) on every parameter (sparse
        updates for embedding tables) by :func:`~asyncnet.model.optimizer.build_optimizer`, its
        settings ``opts``. The first call adds the optimizer's state, ``iter`` and ``one`` to
        ``init_net``: build the train net before running the init net.

        ``before_update`` appends a trainer's ops between the backward pass and the update (the
        gradient all-reduce, gradient accumulation) and returns the gradients the update reads.
        This is the one definition of a train net: :meth:`asyncnet.train.Program.train_net` is
        this method with a program's optimizer settings and its sync.

            >>> m = ModelHelper("m"); _ = m.softmax_with_loss(m.fc("x", "fc", 2, 3), "y")
            >>> def scaled(net, grads):
            ...     return {p: str(net.Scale(g, g + "_half", scale=0.5)) for p, g in grads.items()}
            >>> [op.type for op in m.train_net(before_update=scaled).ops][-5:]
            ['Scale', 'Iter', 'LearningRate', 'SGD', 'SGD']
        """
        net, grads = self.gradient_net(name)
        if before_update is not None:
            grads = before_update(net, grads)
        build_optimizer(self, net, grads, optimizer, lr, **opts)
        return net

    @property
    def checkpoint_blobs(self) -> list[str]:
        """Parameters, buffers, optimizer state and ``iter``: what a checkpoint holds."""
        return [*self.params, *self.buffers, *self.optimizer_state, *(["iter"] if self.optimizer else [])]

    def __repr__(self) -> str:
        return f"ModelHelper({self.name!r}, params={len(self.params)}, loss={self.loss!r})"


_LOSS_OPS = ("SoftmaxWithLoss", "SigmoidCrossEntropyWithLogits")


def _test_mode(op: Any) -> Any:
    """A copy of ``op`` as the eval net runs it (Dropout and SpatialBN with ``is_test``)."""
    if op.type in ("Dropout", "SpatialBN"):
        return dataclasses.replace(op, args={**op.args, "is_test": True}, outputs=op.outputs[:1])
    return dataclasses.replace(op, args=dict(op.args))


def _prefixed(net: Net, prefix: str) -> Net:
    """``net`` with every blob it writes renamed ``prefix + name`` (and read under that name)."""
    if not prefix:
        return net
    written = {o for op in net.ops for o in op.outputs}
    rename = {b: prefix + b for b in written}
    net.ops[:] = [
        dataclasses.replace(
            op,
            inputs=[rename.get(i, i) for i in op.inputs],
            outputs=[rename[o] for o in op.outputs],
            control_inputs=[rename.get(c, c) for c in op.control_inputs],
        )
        for op in net.ops
    ]
    return net
