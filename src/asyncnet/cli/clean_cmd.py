"""``asyncnet clean``: remove the shared-memory segments and temporary folders of asyncnet
processes that no longer exist (see :mod:`asyncnet.cleanup`: only needed when every process of
a run was killed at once; anything of a living process is left alone).

    asyncnet clean            # remove, one line per item, then a summary
    asyncnet clean --dry-run  # only list
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "clean",
        help="remove shared memory and temp folders left by killed asyncnet processes",
        description="Remove /dev/shm segments and temporary folders whose creating asyncnet "
        "process is gone (left only when every process of a run was killed at once).",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from asyncnet.cleanup import find_stale, remove

    items = find_stale()
    removed = [it for it in items if args.dry_run or remove(it)]
    verb = "would remove" if args.dry_run else "removed"
    for it in removed:
        print(f"{verb} {it.kind} {it.path} ({it.nbytes / 2**20:.1f} MiB; its process {it.pid} is gone)")
    segs = [it for it in removed if it.kind == "segment"]
    print(
        f"{verb} {len(segs)} segment(s) ({sum(it.nbytes for it in segs) / 2**20:.1f} MiB) and "
        f"{len(removed) - len(segs)} folder(s) left by asyncnet processes that no longer exist"
    )
    return 0
