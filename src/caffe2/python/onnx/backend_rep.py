"""The prepared model of Caffe2's ONNX backend (``caffe2.python.onnx.backend_rep.Caffe2Rep``)."""

from __future__ import annotations

from typing import Any

from onnx.backend.base import BackendRep, namedtupledict

from caffe2.python import core

__all__ = ["Caffe2Rep"]


class Caffe2Rep(BackendRep):
    """An init/predict ``caffe2_pb2.NetDef`` pair bound to a private workspace; :meth:`run` feeds
    the graph inputs, runs the init net once and the predict net every time, and returns the
    graph outputs as a named tuple (see :mod:`caffe2.python.onnx.backend` for an example)."""

    def __init__(self, init_net: Any, predict_net: Any, workspace: Any, uninitialized: list[str]):
        super().__init__()
        self.init_net = init_net
        self.predict_net = predict_net
        self.workspace = workspace
        self.uninitialized = list(uninitialized)
        self.nets_created = False
        self.ran_init_net = False

    def _feed(self, inputs: Any) -> None:
        if isinstance(inputs, dict):
            for key, value in inputs.items():
                self.workspace.FeedBlob(key, value)
        elif isinstance(inputs, (list, tuple)):
            if len(self.uninitialized) != len(inputs):
                raise RuntimeError(
                    f"Expected {len(self.uninitialized)} values for uninitialized graph inputs "
                    f"({', '.join(self.uninitialized)}), but got {len(inputs)}."
                )
            for name, value in zip(self.uninitialized, inputs):
                self.workspace.FeedBlob(name, value)
        else:
            self.workspace.FeedBlob(self.uninitialized[0], inputs)

    def run(self, inputs: Any, **kwargs: Any) -> Any:
        """The graph outputs for ``inputs`` (a dict, a list in graph-input order, or one array)."""
        super().run(inputs, **kwargs)
        with core.DeviceScope(self.predict_net.device_option):
            self._feed(inputs)
            if not self.nets_created:
                self.workspace.CreateNet(self.init_net)
                self.workspace.CreateNet(self.predict_net)
                self.nets_created = True
            if not self.ran_init_net:
                self.workspace.RunNet(self.init_net.name)
                self.ran_init_net = True
            self.workspace.RunNet(self.predict_net.name)
        names = list(self.predict_net.external_output)
        return namedtupledict("Outputs", names)(*[self.workspace.FetchBlob(n) for n in names])
