"""``asyncnet run NET.json``: run a net once (or N times) and print or save fetched blobs."""

from __future__ import annotations

import argparse

import numpy as np

from asyncnet.cli.common import CLIError, load_net, parse_feeds, save_npz
from asyncnet.cli.onnx_cmd import is_onnx, run_onnx
from asyncnet.core.workspace import Workspace


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a net from a JSON file", description="Run NET.json against fed blobs.")
    p.add_argument("net", metavar="NET.json")
    p.add_argument("--feed", action="append", metavar="NAME=FILE.npy", help="blob to feed (repeatable)")
    p.add_argument(
        "--input", action="append", dest="feed", metavar="NAME=FILE.npy", help="same as --feed (an ONNX model's input)"
    )
    p.add_argument("--fetch", action="append", metavar="NAME", help="blob to print after the run (repeatable)")
    p.add_argument("--save", metavar="OUT.npz", help="save the fetched blobs to an npz file")
    p.add_argument("--iters", type=int, default=1, help="number of runs (default 1)")
    p.add_argument("--init", metavar="INIT_NET", help="a net to run once first (a Caffe2 init_net.pb: the parameters)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.iters < 0:
        raise CLIError(f"--iters must be >= 0, got {args.iters}")
    if args.save and not args.save.lower().endswith(".npz"):
        raise CLIError(f"--save expects a file name ending in .npz, got {args.save!r}")
    if is_onnx(args.net):
        if getattr(args, "init", None):
            raise CLIError("--init applies to NetDef files; an ONNX model holds its own parameters")
        return run_onnx(args)
    net_def = load_net(args.net)
    ws = Workspace()
    for name, value in parse_feeds(args.feed).items():
        ws.feed(name, value)
    init_def = load_net(args.init) if args.init else None
    with ws:
        if init_def is not None:
            ws.run_net_once(init_def)
        ws.create_net(net_def)
        ws.run_net(net_def.name, num_iter=args.iters)
        fetched = {name: ws.fetch(name) for name in args.fetch or []}
    for name, value in fetched.items():
        print(
            f"{name} = {np.array2string(np.asarray(value), threshold=50)}"
            if isinstance(value, np.ndarray)
            else f"{name} = {value!r}"
        )
    if args.save:
        save_npz(args.save, fetched)
    return 0
