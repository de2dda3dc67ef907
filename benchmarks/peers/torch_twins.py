"""The zoo models written in plain PyTorch (``torch.nn``), started from an asyncnet model's weights.

A twin has the architecture the asyncnet model's parameter shapes say (so ``mlp`` with any
hidden sizes, ``cnn`` with any channels, ``dlrm`` with any tables), copies of the given weights,
and takes the same feeds as the asyncnet net (``data``/``label``, or dlrm's ``dense``,
``ids{k}``, ``lengths{k}``, ``click``). It is the reference of the PyTorch equivalence tests and
the torch eager peer of ``python -m benchmarks models``. torch is imported when a twin is made, never
by ``import asyncnet``.

    >>> import numpy as np, asyncnet as an
    >>> from asyncnet.model.zoo import mlp
    >>> m = mlp(4, (8,), 3); ws = an.Workspace(); ws.run_net_once(m.init_net)
    >>> net = torch_twin("mlp", {p: ws.fetch(p) for p in m.params})
    >>> feeds = {"data": np.ones((2, 4), np.float32), "label": np.array([0, 2], np.int32)}
    >>> ws.feed("data", feeds["data"]); ws.feed("label", feeds["label"]); ws.run_net_once(m.forward_net())
    >>> bool(abs(net.loss(feeds).item() - float(ws.fetch("loss"))) < 1e-6)
    True

Layouts: ``fc{i}``/``logits``/``bot{i}``/``top{i}`` are ``nn.Linear`` (W [out, in]); ``conv{i}``
``nn.Conv2d`` (3x3, pad 1); ``rnn_*`` ``nn.LSTM`` (torch's layout is asyncnet's); ``emb{k}_table``
``nn.EmbeddingBag(mode="sum", sparse=True)``, as facebookresearch/dlrm.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from asyncnet.errors import NetDefinitionError

__all__ = ["torch_twin", "TWINS"]

TWINS = ("mlp", "cnn", "lstm", "dlrm")


def torch_twin(name: str, params: Mapping[str, Any]) -> Any:
    """A ``torch.nn.Module`` twin of zoo model ``name`` holding copies of ``params`` (float32 or
    float64 arrays by the asyncnet names). It has ``forward(feeds)`` (logits), ``loss(feeds)``
    (mean cross entropy, or dlrm's mean binary cross entropy with logits) and
    ``predict(feeds)`` (class scores or click probabilities, no gradient)."""
    builders = {"mlp": _MLP, "cnn": _CNN, "lstm": _LSTM, "dlrm": _DLRM}
    if name not in builders:
        raise NetDefinitionError(f"expected a zoo model in {list(TWINS)}, got {name!r}", "torch_twin")
    return builders[name](params)


def _tensor(a: Any) -> Any:
    import torch

    return a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))


def _numbered(params: Mapping[str, Any], prefix: str) -> list[str]:
    """``prefix1``, ``prefix2``, ... present as ``{name}_w`` in ``params``, in order."""
    n = sorted(int(m.group(1)) for p in params if (m := re.fullmatch(rf"{prefix}(\d+)_w", p)))
    return [f"{prefix}{i}" for i in n]


def _linear(params: Mapping[str, Any], name: str) -> Any:
    import torch

    w = _tensor(params[f"{name}_w"])
    layer = torch.nn.Linear(w.shape[1], w.shape[0], dtype=w.dtype)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(_tensor(params[f"{name}_b"]))
    return layer


def _module_base() -> Any:
    import torch

    class Twin(torch.nn.Module):
        binary = False

        def loss(self, feeds: Mapping[str, Any]) -> Any:
            y = _tensor(feeds["label"]).long()
            return torch.nn.functional.cross_entropy(self(feeds), y)

        def predict(self, feeds: Mapping[str, Any]) -> Any:
            with torch.no_grad():
                return torch.softmax(self(feeds), dim=1)

    return Twin


def _MLP(params: Mapping[str, Any]) -> Any:
    import torch

    class MLP(_module_base()):
        """Linear + ReLU layers (``fc1``, ``fc2``, ...), the last without ReLU."""

        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(_linear(params, n) for n in _numbered(params, "fc"))

        def forward(self, feeds: Mapping[str, Any]) -> Any:
            x = _tensor(feeds["data"])
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i < len(self.layers) - 1:
                    x = torch.relu(x)
            return x

    return MLP()


def _CNN(params: Mapping[str, Any]) -> Any:
    import torch
    from torch import nn

    class CNN(_module_base()):
        """(Conv 3x3 pad 1 + ReLU + MaxPool 2) per ``conv{i}``, Flatten, Linear ``logits``."""

        def __init__(self) -> None:
            super().__init__()
            layers: list[Any] = []
            stages = _numbered(params, "conv")
            for name in stages:
                w = _tensor(params[f"{name}_w"])
                conv = nn.Conv2d(w.shape[1], w.shape[0], w.shape[2], padding=w.shape[2] // 2, dtype=w.dtype)
                with torch.no_grad():
                    conv.weight.copy_(w)
                    conv.bias.copy_(_tensor(params[f"{name}_b"]))
                layers += [conv, nn.ReLU(), nn.MaxPool2d(2)]
            self.features = nn.Sequential(*layers)
            self.logits = _linear(params, "logits")
            # logits read c_last x (side / 2^stages)^2 features: the image side follows
            self.side = int(round(np.sqrt(self.logits.in_features / w.shape[0]))) * 2 ** len(stages)

        def forward(self, feeds: Mapping[str, Any]) -> Any:
            x = _tensor(feeds["data"]).view(-1, 1, self.side, self.side)
            return self.logits(torch.flatten(self.features(x), 1))

    return CNN()


def _LSTM(params: Mapping[str, Any]) -> Any:
    import torch

    class LSTM(_module_base()):
        """One ``nn.LSTM`` layer over the image's rows (sequence first), Linear ``logits`` on h_T."""

        def __init__(self) -> None:
            super().__init__()
            w_ih = _tensor(params["rnn_w_ih"])
            self.features, hidden = w_ih.shape[1], w_ih.shape[0] // 4
            self.rnn = torch.nn.LSTM(self.features, hidden, dtype=w_ih.dtype)
            with torch.no_grad():
                for p in ("w_ih", "w_hh", "b_ih", "b_hh"):
                    getattr(self.rnn, p.replace("w_", "weight_").replace("b_", "bias_") + "_l0").copy_(
                        _tensor(params[f"rnn_{p}"])
                    )
            self.logits = _linear(params, "logits")

        def forward(self, feeds: Mapping[str, Any]) -> Any:
            x = _tensor(feeds["data"])
            _, (h, _) = self.rnn(x.view(x.shape[0], -1, self.features).transpose(0, 1))
            return self.logits(h[0])

    return LSTM()


def _DLRM(params: Mapping[str, Any]) -> Any:
    import torch

    class DLRM(torch.nn.Module):
        """facebookresearch/dlrm's forward: bottom MLP (ReLU on every layer), sum EmbeddingBags,
        pairwise dots without self terms (``Z[:, i, j]``, j < i), top MLP (no ReLU on the logit)."""

        binary = True

        def __init__(self) -> None:
            super().__init__()
            self.bot = torch.nn.ModuleList(_linear(params, n) for n in _numbered(params, "bot"))
            self.top = torch.nn.ModuleList(_linear(params, n) for n in _numbered(params, "top"))
            k = 0
            tables = []
            while f"emb{k}_table" in params:
                tables.append(
                    torch.nn.EmbeddingBag.from_pretrained(
                        _tensor(params[f"emb{k}_table"]).clone(), freeze=False, mode="sum", sparse=True
                    )
                )
                k += 1
            self.emb = torch.nn.ModuleList(tables)
            f = k + 1
            self.li, self.lj = (torch.tensor(v) for v in zip(*[(i, j) for i in range(f) for j in range(i)]))

        def forward(self, feeds: Mapping[str, Any]) -> Any:
            x = _tensor(feeds["dense"])
            for layer in self.bot:
                x = torch.relu(layer(x))
            pooled = []
            for k, e in enumerate(self.emb):
                lengths = _tensor(feeds[f"lengths{k}"])
                offsets = torch.cumsum(lengths, 0) - lengths
                pooled.append(e(_tensor(feeds[f"ids{k}"]), offsets.long()))
            t = torch.stack([x, *pooled], dim=1)
            z = torch.bmm(t, t.transpose(1, 2))
            r = torch.cat([x, z[:, self.li, self.lj]], dim=1)
            for i, layer in enumerate(self.top):
                r = layer(r)
                if i < len(self.top) - 1:
                    r = torch.relu(r)
            return r

        def loss(self, feeds: Mapping[str, Any]) -> Any:
            return torch.nn.functional.binary_cross_entropy_with_logits(self(feeds), _tensor(feeds["click"]))

        def predict(self, feeds: Mapping[str, Any]) -> Any:
            with torch.no_grad():
                return torch.sigmoid(self(feeds))

    return DLRM()
