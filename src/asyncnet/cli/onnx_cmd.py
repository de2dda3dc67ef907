"""ONNX files on the command line: ``asyncnet run model.onnx --input NAME=FILE.npy`` runs the
model once and prints (or saves) its outputs; ``asyncnet graph model.onnx -o g.svg`` draws its
predict net. A bad file or bad inputs print one line naming the node or input, exit status 2."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from asyncnet.cli.common import CLIError, parse_feeds, save_npz
from asyncnet.core.defs import NetDef

ONNX_SUFFIXES = (".onnx",)


class OnnxCLIError(CLIError):
    """A bad ONNX file or input: one line, exit status 2."""

    exit_status = 2


def is_onnx(path: str) -> bool:
    """Whether the file is dispatched to the ONNX importer (by its suffix)."""
    return str(path).lower().endswith(ONNX_SUFFIXES)


def load_predict_net(path: str, net_type: str = "simple") -> Any:
    """The imported model (:class:`asyncnet.interop.onnx.OnnxModel`), errors as :class:`OnnxCLIError`."""
    try:
        from asyncnet.interop.onnx import OnnxImportError, load
    except ImportError as e:
        raise CLIError(f"reading {path} needs the onnx package (pip install 'asyncnet[onnx]'): {e}") from None
    try:
        return load(path, net_type=net_type)
    except OnnxImportError as e:
        raise OnnxCLIError(str(e) if str(path) in str(e) else f"{path}: {e}") from None


def run_onnx(args: argparse.Namespace) -> int:
    """``asyncnet run model.onnx``: feed the inputs, run once (or --iters times), print the outputs."""
    from asyncnet.core.workspace import Workspace
    from asyncnet.errors import OperatorError
    from asyncnet.interop.onnx import OnnxInputError

    model = load_predict_net(args.net)
    feeds = parse_feeds(args.feed)
    try:
        model.check_feeds(feeds)
    except OnnxInputError as e:
        raise OnnxCLIError(f"{args.net}: {e}") from None
    names = args.fetch or [v.name for v in model.outputs]
    with Workspace() as ws:
        ws.run_net_once(model.init_net)
        for name, value in feeds.items():
            ws.feed(name, value)
        ws.create_net(model.predict_net)
        try:
            ws.run_net(model.predict_net.name, num_iter=args.iters)
        except OperatorError as e:
            raise OnnxCLIError(f"{args.net}: {e}") from None
        fetched = {name: np.asarray(ws.fetch(name, host=True)) for name in names}
    for name, value in fetched.items():
        print(f"{name} = {np.array2string(value, threshold=50)}")
    if args.save:
        save_npz(args.save, fetched)
    return 0


def onnx_net(path: str) -> NetDef:
    """The predict net of an ONNX file (for ``asyncnet graph``)."""
    return load_predict_net(path).predict_net
