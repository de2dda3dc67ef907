"""``asyncnet simulate``: predicted step time and scaling efficiency of data-parallel training.

    asyncnet simulate --forward-ms 10 --backward-ms 20 --update-ms 2 --grad-mb 100 \\
        --bandwidth 100Gb/s --latency-us 5 --threads 4
    asyncnet simulate --profile --measure-network      # inputs measured here (wide MLP, gloo)
"""

from __future__ import annotations

import argparse
import json

from asyncnet.cli.common import CLIError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="predict data-parallel step time and efficiency up to 1,000 ranks",
        description="Alpha-beta cost model of data-parallel training (asyncnet.simulate): ring and "
        "tree all-reduce, with and without overlap, R ranks x W threads.",
    )
    p.add_argument("--forward-ms", type=float, help="forward time of one worker's step (ms)")
    p.add_argument("--backward-ms", type=float, help="backward time (ms)")
    p.add_argument("--update-ms", type=float, default=0.0, help="optimizer update time (ms)")
    p.add_argument("--grad-mb", type=float, help="gradient MiB all-reduced per step")
    p.add_argument("--batch", type=int, default=512, help="examples per worker and step (for samples/s)")
    p.add_argument(
        "--profile", action="store_true", help="measure compute here: the wide MLP 64-1024-1024-10 on one rank"
    )
    p.add_argument("--bandwidth", default=None, help="link bandwidth, e.g. 100Gb/s or 12.5GB/s")
    p.add_argument("--latency-us", type=float, default=None, help="per-message latency (us)")
    p.add_argument(
        "--wakeup-us",
        type=float,
        default=0.0,
        help="paid once per all-reduce issued after compute (us; --measure-network measures it)",
    )
    p.add_argument(
        "--measure-network",
        action="store_true",
        help="measure latency, bandwidth and the all-reduce's CPU cost: 2 gloo ranks on 127.0.0.1",
    )
    p.add_argument(
        "--cpu-ms-per-mb",
        type=float,
        default=0.0,
        help="CPU ms a rank spends per MiB it all-reduces (gloo over TCP ~1; 0: RDMA)",
    )
    p.add_argument("--cpu-us-per-message", type=float, default=0.0, help="CPU us a rank spends per message")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="bucket size when overlapped (MiB)")
    p.add_argument("--threads", type=int, default=1, help="worker threads per rank (reduce in shared memory first)")
    p.add_argument("--algorithm", choices=["ring", "tree", "both"], default="both")
    p.add_argument("--max-ranks", type=int, default=1000, help="largest rank count of the curve")
    p.add_argument("--cores-per-host", type=int, default=None, help="cores per host (compute slows when outnumbered)")
    p.add_argument("--ranks-per-host", type=int, default=None, help="ranks sharing one host's cores")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=run)


def _ranks(max_ranks: int) -> list[int]:
    out, r = [], 1
    while r < max_ranks:
        out.append(r)
        r *= 2
    return out + [max_ranks]


def _inputs(args: argparse.Namespace) -> tuple:
    from asyncnet.simulate import Network, Workload, parse_bandwidth

    if args.profile:
        from asyncnet.simulate.measure import profile_compute

        work = profile_compute(args.batch, args.bucket_mb)
    else:
        given = [args.forward_ms, args.backward_ms, args.grad_mb]
        if any(v is None for v in given):
            raise CLIError("give --forward-ms, --backward-ms and --grad-mb, or --profile to measure them here")
        if min(given + [args.update_ms]) < 0 or not args.bucket_mb > 0:
            raise CLIError("times and sizes must be non-negative, --bucket-mb positive")
        work = Workload(
            args.forward_ms / 1e3,
            args.backward_ms / 1e3,
            args.update_ms / 1e3,
            int(args.grad_mb * 2**20),
            max(1, int(args.bucket_mb * 2**20)),
            args.batch,
        )
    if args.measure_network:
        from asyncnet.simulate.measure import measure_network

        net = measure_network()
    else:
        if args.bandwidth is None or args.latency_us is None:
            raise CLIError("give --bandwidth and --latency-us (e.g. 100Gb/s and 5), or --measure-network")
        try:
            net = Network(
                parse_bandwidth(args.bandwidth),
                args.latency_us / 1e6,
                args.cpu_ms_per_mb / 1e3 / 2**20,
                args.cpu_us_per_message / 1e6,
                args.wakeup_us / 1e6,
            )
        except ValueError as e:
            raise CLIError(str(e)) from None
    return work, net


def run(args: argparse.Namespace) -> int:
    from asyncnet.simulate import scaling_curve

    if args.threads < 1 or args.max_ranks < 1 or args.batch < 1:
        raise CLIError("--threads, --max-ranks and --batch must be >= 1")
    work, net = _inputs(args)
    algorithms = ["ring", "tree"] if args.algorithm == "both" else [args.algorithm]
    ranks = _ranks(args.max_ranks)
    curves = {
        f"{a}{'+overlap' if o else ''}": scaling_curve(
            work, net, ranks, a, o, args.threads, args.cores_per_host, args.ranks_per_host
        )
        for a in algorithms
        for o in (False, True)
    }
    if args.json:
        print(json.dumps({"workload": work.__dict__, "network": net.__dict__, "curves": curves}, indent=2))
        return 0
    print(
        f"compute {work.compute * 1e3:.2f} ms (forward {work.forward * 1e3:.2f}, backward {work.backward * 1e3:.2f}, "
        f"update {work.update * 1e3:.2f}), {work.grad_bytes / 2**20:.2f} MiB of gradients, buckets of "
        f"{work.bucket_bytes / 2**20:g} MiB; network {net.bandwidth * 8 / 1e9:.2f} Gb/s, {net.latency * 1e6:.1f} us "
        f"(+ {net.wakeup * 1e6:.0f} us wake-up per all-reduce), "
        f"CPU {net.cpu_per_byte * 2**20 * 1e3:.2f} ms/MiB + {net.cpu_per_message * 1e6:.1f} us/message; "
        f"{args.threads} thread(s) per rank, {args.cores_per_host or 'enough'} cores per host"
    )
    names = list(curves)
    print(f"{'ranks':>6s} " + " ".join(f"{n + ' ms (eff)':>24s}" for n in names))
    for i, r in enumerate(ranks):
        cells = [f"{curves[n][i]['step_s'] * 1e3:12.2f} ({curves[n][i]['efficiency'] * 100:5.1f}%)" for n in names]
        print(f"{r:6d} " + " ".join(f"{c:>24s}" for c in cells))
    return 0
