"""``asyncnet predict RUN_DIR --data FILE``: score a click-log file with a trained dlrm run
(facebookresearch/dlrm's ``--inference-only`` with ``--load-model``).

The run's ``metrics.json`` gives the model (its options and the table sizes) and the data
options (``max_ind_range``: the same hashing as in training); ``checkpoint.npz`` gives the
weights. The eval net scores every example of ``FILE`` (Criteo text, labelled or not, the
reference's ``.npz``, or ``random:...``) in batches; the click probabilities go to ``--out``
(one per line), or to standard output; a labelled file also gets its AUC and log loss.

    asyncnet predict runs/20261127-220000 --data day_23.txt --out scores.txt
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from asyncnet.cli.common import CLIError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="score a click-log file with a trained dlrm run",
        description="Load a trained dlrm run (metrics.json and checkpoint.npz of RUN_DIR) and write "
        "the click probability of every example of --data, one per line.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory of `asyncnet train --model dlrm`")
    p.add_argument(
        "--data",
        required=True,
        metavar="FILE",
        help="Criteo Kaggle text (40 fields, or 39 without labels), the reference's .npz, or random:...",
    )
    p.add_argument("--out", metavar="FILE", help="write the probabilities here (default: standard output)")
    p.add_argument("--batch-size", type=int, default=4096, help="examples per eval step (default 4096)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    cfg = _run_config(Path(args.run_dir))
    probs, labels = score(cfg, Path(args.run_dir) / "checkpoint.npz", args.data, args.batch_size)
    text = "".join(f"{p:.6f}\n" for p in probs)
    if args.out:
        from asyncnet._atomicio import atomic_write_text

        atomic_write_text(Path(args.out), text)
    else:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            return 0
    print(_summary(args, probs, labels), file=sys.stderr if not args.out else sys.stdout)
    return 0


def _run_config(run_dir: Path) -> Any:
    from asyncnet.errors import TrainConfigError
    from asyncnet.train.trainers import TrainConfig

    metrics = run_dir / "metrics.json"
    try:
        data = json.loads(metrics.read_bytes())
    except OSError as e:
        raise CLIError(f"{run_dir}: not a run directory ({metrics}: {e.strerror or e})") from None
    except ValueError:
        raise CLIError(f"{metrics}: not valid JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise CLIError(f'{metrics}: expected a run\'s metrics.json with a "config" block')
    try:
        cfg = TrainConfig.from_dict(data["config"], where=str(metrics))
    except TrainConfigError as e:
        raise CLIError(str(e)) from None
    if cfg.model != "dlrm":
        raise CLIError(f"{run_dir}: predict scores click logs with a dlrm run, this run trained {cfg.model}")
    if not (run_dir / "checkpoint.npz").is_file():
        raise CLIError(f"{run_dir}: no checkpoint.npz (the run saved no epoch)")
    return cfg


def score(cfg: Any, checkpoint: Path, data: str, batch_size: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The click probabilities of every example of ``data`` under the run ``cfg``'s model
    with the weights of ``checkpoint``, and the file's labels (None for an unlabelled file)."""
    import asyncnet as an
    from asyncnet.model.zoo.dlrm import DATA_KEYS
    from asyncnet.train.criteo import load_click_data
    from asyncnet.train.program import build_program as build_model

    if int(cfg.model_args.get("max_ind_range", 1)) <= 0 and not data.endswith(".npz"):
        raise CLIError(
            f"--data {data}: the run numbered its categories by first appearance in its own file "
            "(max_ind_range <= 0), which does not carry over to another file: train with max_ind_range >= 1"
        )
    scoring = ("max_ind_range", "bad_rows")  # every line is scored: no test split, no sub-sampling
    log = load_click_data(data, {k: v for k, v in cfg.model_args.items() if k in DATA_KEYS and k in scoring})
    want = {k: cfg.model_args.get(k) for k in ("num_dense", "table_sizes")}
    if log.model_args != want:
        raise CLIError(
            f"--data {data}: its {log.model_args['num_dense']} dense features and tables of "
            f"{log.model_args['table_sizes'][:4]}... rows do not fit the run's model ({want['num_dense']} and "
            f"{(want['table_sizes'] or [])[:4]}...)"
        )
    model = build_model(cfg, 0, 2)
    probs = np.empty(len(log), np.float64)
    with an.Workspace() as ws:
        ws.run_net_once(model.init_net)
        model.load(ws, checkpoint)
        net = model.forward_net("predict")
        created = False
        for start in range(0, len(log), batch_size):
            rows = np.arange(start, min(start + batch_size, len(log)))
            for name, value in log.batch(rows).items():
                ws.feed(name, value)
            if not created:
                ws.create_net(net)
                created = True
            ws.run_net("predict")
            probs[rows] = np.asarray(ws.fetch("prob"), np.float64).reshape(-1)
    return probs, (np.asarray(log.targets, np.float64) if log.labeled else None)


def _summary(args: argparse.Namespace, probs: np.ndarray, labels: np.ndarray | None) -> str:
    where = f"-> {args.out}" if args.out else "(standard output)"
    line = f"scored {len(probs)} example(s) of {args.data} {where}"
    if labels is None:
        return line
    from asyncnet.model.zoo.dlrm import auc, log_loss

    clicks = labels >= 0.5
    figures = f"log loss {log_loss(clicks, probs):.4f}"
    if clicks.any() and not clicks.all():
        figures = f"AUC {auc(clicks, probs):.4f}, " + figures
    return f"{line}: {figures}"
