"""``asyncnet graph NET.json -o net.svg|png|dot``: draw a net's dependency graph, chains marked."""

from __future__ import annotations

import argparse

from asyncnet.cli.common import CLIError, load_net


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "graph",
        help="draw a net's dependency graph (chains marked) as .svg, .png or .dot",
        description="Draw the dependency graph the async executor builds for NET.json; each chain "
        "(ops run start to end on one thread) is framed and has a colour of its own.",
    )
    p.add_argument("net", metavar="NET.json", help="a NetDef JSON file")
    p.add_argument("-o", "--output", required=True, help="output file: .svg, .png or .dot")
    p.add_argument(
        "--engine",
        choices=["auto", "dot", "builtin"],
        default="auto",
        help="layout for .svg/.png: graphviz's dot (edges routed around boxes), the builtin "
        "matplotlib drawing, or auto (dot when installed; default)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from asyncnet.exec.draw import save_graph
    from asyncnet.exec.graph import graph_of_net

    if not args.output.lower().endswith((".svg", ".png", ".dot", ".gv")):
        raise CLIError(f"-o expects a file ending in .svg, .png or .dot, got {args.output!r}")
    from asyncnet.cli.onnx_cmd import is_onnx, onnx_net

    net_def = onnx_net(args.net) if is_onnx(args.net) else load_net(args.net)
    try:
        used = save_graph(net_def, args.output, engine=args.engine)
    except OSError as e:
        raise CLIError(f"cannot write {args.output}: {e.strerror or e}") from None
    g = graph_of_net(net_def)
    how = "" if used == "text" else f" (drawn by {'graphviz dot' if used == 'dot' else 'the builtin layout'})"
    print(f"wrote {args.output}: {g.num_ops} ops, {len(g.edges())} edges, {len(g.chains)} chains{how}")
    return 0
