"""``python -m asyncnet.train.convert PATH --model NAME``: add the metadata to a checkpoint of a
zoo model written without it (before every model recorded one), after checking every array
against the model the flags describe (the run's ``--model``, ``--optimizer``, ``--hidden``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Convert the checkpoint the arguments name; 0 on success, 1 (one line) on failure."""
    p = argparse.ArgumentParser(
        prog="python -m asyncnet.train.convert", description="Add the metadata to a checkpoint written without it."
    )
    p.add_argument("path")
    p.add_argument("--model", required=True, help="zoo model name (mlp, cnn, lstm, dlrm)")
    p.add_argument("--optimizer", help="the run's optimizer (default: the model's default)")
    p.add_argument("--hidden", help="hidden layers of an mlp, e.g. 128")
    p.add_argument("--input-dim", type=int, default=64)
    p.add_argument("--num-classes", type=int, default=10)
    args = p.parse_args(argv)
    from asyncnet.model.checkpoint import convert
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.program import build_program

    kw: dict[str, Any] = {"model": args.model}
    if args.optimizer:
        kw["optimizer"] = args.optimizer
    if args.hidden:
        kw["hidden"] = tuple(int(h) for h in args.hidden.split(","))
    try:
        program = build_program(TrainConfig(**kw), args.input_dim, args.num_classes)
        convert(program.model, args.path)
    except Exception as e:  # noqa: BLE001 - one line for the command line
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 1
    print(f"converted {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
