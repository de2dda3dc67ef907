"""``asyncnet trace NET.json -o run.json``: run a net with per-op timing, write a Chrome trace."""

from __future__ import annotations

import argparse

from asyncnet.cli.common import CLIError, load_net, parse_feeds


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace",
        help="run a net and write its timeline as Chrome-trace JSON (opens in Perfetto)",
        description="Run NET.json with per-op timing and write a Chrome-trace JSON file: one track "
        "per worker thread, one slice per op. Open it at https://ui.perfetto.dev.",
    )
    p.add_argument("net", metavar="NET.json", help="a NetDef JSON file")
    p.add_argument("-o", "--output", required=True, help="trace file to write (JSON)")
    p.add_argument("--feed", action="append", metavar="NAME=FILE.npy", help="feed a blob before running (repeatable)")
    p.add_argument("--iters", type=int, default=1, help="how many runs to record (default 1)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds each run may take (default 600)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from asyncnet.core.workspace import Workspace
    from asyncnet.exec.trace import profile

    if args.iters < 1:
        raise CLIError(f"--iters must be >= 1, got {args.iters}")
    net_def = load_net(args.net)
    feeds = parse_feeds(args.feed)
    with Workspace() as ws:
        for name, value in feeds.items():
            ws.feed(name, value)
        net = ws.create_net(net_def)
        with profile(net) as tl:
            for _ in range(args.iters):
                net.run(args.timeout)
        try:
            tl.write(args.output)
        except OSError as e:
            raise CLIError(f"cannot write {args.output}: {e.strerror or e}") from None
    threads = len({e.thread_id for e in tl.events})
    total = sum(e.duration for e in tl.events)
    print(f"wrote {args.output}: {len(tl.events)} op runs on {threads} thread(s), {total * 1e3:.2f} ms of op time")
    for op_type, s in list(tl.op_stats().items())[:5]:
        print(f"  {op_type:20s} x{int(s['count']):<6d} {s['total'] * 1e3:9.3f} ms  ({s['mean'] * 1e6:.1f} us each)")
    return 0
