"""Hybrid-parallel DLRM under torchrun: the embedding tables sharded across the ranks
(model-parallel), the bottom and top MLPs replicated (data-parallel), as facebookresearch/dlrm's
``distributed_forward`` and TorchRec do.

One training step of a global batch of B examples on R ranks (B divisible by R; rank r owns
examples [r B/R, (r + 1) B/R) and the tables :func:`place_tables` gives it):

1. each rank pools its own tables over the whole global batch (the ``emb`` net:
   SparseLengthsSum, [B, d] per table);
2. all-to-all: each rank sends every other rank the rows of that rank's examples, and receives
   the pooled rows of its own examples for every table;
3. each rank runs the dense part (bottom MLP, interaction, top MLP, loss) on its B/R examples,
   with the gradients of its MLP parameters and of the pooled embeddings it received;
4. the MLP gradients and the loss are averaged over the ranks (one all-reduce of one buffer),
   then every replica takes the same SGD step;
5. all-to-all back: the pooled embeddings' gradients return to the tables' owners (scaled by
   1/R: the loss is the mean over the global batch), which update their tables' rows (the
   ``update`` net: SparseLengthsSumGradient, ScatterWeightedSum).

So the losses and the parameters are those of one process training on the same global batches
(within float32 rounding). Tables are placed by a simple cost rule: largest first, each to the
rank holding the fewest bytes so far; a rank fills and keeps only its own tables.

    torchrun --nproc-per-node 2 -m asyncnet.train.dlrm_hybrid --data random:tables=1000-1000-1000-1000 --steps 20
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from asyncnet.errors import TrainConfigError

__all__ = ["HybridDLRM", "LocalComm", "TorchComm", "main", "place_tables", "train_run"]


def place_tables(table_sizes: Sequence[int], dim: int, ranks: int) -> list[int]:
    """The owner rank of each table: largest first, each to the least-loaded rank (bytes).

    >>> place_tables([10, 1000, 500, 600], 8, 2)
    [0, 0, 1, 1]
    """
    load = [0] * ranks
    owner = [0] * len(table_sizes)
    for k in sorted(range(len(table_sizes)), key=lambda k: -table_sizes[k]):
        r = min(range(ranks), key=lambda r: (load[r], r))
        owner[k] = r
        load[r] += int(table_sizes[k]) * dim
    return owner


class HybridDLRM:
    """One rank of a hybrid-parallel dlrm; ``comm`` does the collectives (:class:`TorchComm`
    under torchrun). ``dlrm_kw`` as :func:`~asyncnet.model.zoo.dlrm.dlrm` (sum bags, the dot or
    cat interaction, any loss). ``optimizer``, ``lr`` and ``update`` (the other keyword
    arguments of :func:`~asyncnet.model.optimizer.build_optimizer`: momentum, betas, eps,
    weight_decay, the learning-rate schedule) as the other trainers: the MLPs take the update of
    their averaged gradients; each table's owner updates it from the gradient rows of the whole
    global batch (sgd, adagrad, rwsadagrad: sparse, as one process; momentum and adam: on the
    dense gradient, as sync mode)."""

    def __init__(
        self,
        comm: Any,
        lr: float = 0.01,
        seed: int = 0,
        optimizer: str = "sgd",
        update: dict[str, Any] | None = None,
        **dlrm_kw: Any,
    ):
        import asyncnet as an
        from asyncnet.autodiff import add_gradient_ops
        from asyncnet.model.zoo.dlrm import dlrm

        self.comm, self.rank, self.world = comm, comm.rank, comm.world
        m = dlrm(seed=seed, **dlrm_kw)
        self.num_tables = len(dlrm_kw.get("table_sizes", (100, 100, 100)))
        self.dim = int(dlrm_kw.get("dim", 8))
        tables = [f"emb{k}_table" for k in range(self.num_tables)]
        self.owner = place_tables([m.shapes[t][0] for t in tables], self.dim, self.world)
        self.local = [k for k in range(self.num_tables) if self.owner[k] == self.rank]
        lookups, fwd = _dense_part(m, "dense_part", self.num_tables)
        self.dense_params = [p for p in m.params if p not in tables]
        pooled = [f"emb{k}" for k in range(self.num_tables)]
        grads = add_gradient_ops(fwd, m.loss, wrt=[*self.dense_params, *pooled], dtype=m.dtype.name)
        self.dense_grads = [str(grads[p]) for p in self.dense_params]
        self.pooled_grads = [str(grads[p]) for p in pooled]
        sched, dense_ops, table_ops = _optimizer_ops(m, grads, tables, optimizer, lr, update or {})
        self.state = [
            n
            for n in m.optimizer_state
            if not _owned_by(n, [tables[k] for k in range(self.num_tables) if k not in self.local])
        ]
        fwd.ops.extend([*sched, *dense_ops])
        self.ws = an.Workspace()
        others = [tables[k] for k in range(self.num_tables) if k not in self.local]
        init = an.Net("hybrid_init")
        init.ops.extend(op for op in m.init_net.ops if not any(_owned_by(o, others) for o in op.outputs))
        self.ws.run_net_once(init)  # fills only this rank's tables (and their optimizer state)
        emb, upd = an.Net("emb"), an.Net("update")
        for k in self.local:
            emb.ops.append(lookups[f"emb{k}"])
            upd.SparseLengthsSumGradient([f"demb{k}", f"lengths{k}"], f"demb{k}_rows")
            if optimizer in ("momentum", "adam"):  # a dense table gradient, as sync mode's
                upd.SparseToDense([f"ids{k}", f"demb{k}_rows", tables[k]], f"{tables[k]}_grad_dense")
            upd.ops.extend(table_ops[tables[k]])
        _, self.eval_net = _dense_part(m, "dense_eval", self.num_tables)
        self.nets = {"emb": emb, "dense": fwd, "update": upd, "dense_eval": self.eval_net}
        self.n_update = len(sched) + len(dense_ops)  # the ops after the all-reduce
        self.created: set[str] = set()
        self.accuracy = 0.0
        self.times: dict[str, float] = {}  # the last step's seconds per phase (wall; ``<phase>_cpu``: process CPU)
        self._clock = (0.0, 0.0)

    def _tick(self, phase: str | None = None) -> None:
        """End ``phase`` (wall and process CPU seconds since the last tick) and restart the clock."""
        now = (time.perf_counter(), time.process_time())
        if phase is not None:
            self.times[phase] = self.times.get(phase, 0.0) + now[0] - self._clock[0]
            self.times[f"{phase}_cpu"] = self.times.get(f"{phase}_cpu", 0.0) + now[1] - self._clock[1]
        self._clock = now

    def _run(self, name: str) -> None:
        if name not in self.created:
            self.ws.create_net(self.nets[name])
            self.created.add(name)
        self.ws.run_net(self.nets[name].name)

    def step(self, feeds: dict[str, np.ndarray]) -> float:
        """One step on the global batch ``feeds`` (every rank gets the same); the mean loss (and
        :attr:`accuracy`, the share of the batch's clicks predicted)."""
        b = feeds["dense"].shape[0]
        if b % self.world:
            raise TrainConfigError(f"the global batch ({b}) must divide into the {self.world} ranks")
        per = b // self.world
        mine = slice(self.rank * per, (self.rank + 1) * per)
        self.times = {}
        self._tick()
        for k in self.local:
            self.ws.feed(f"ids{k}", feeds[f"ids{k}"])
            self.ws.feed(f"lengths{k}", feeds[f"lengths{k}"])
        self._run("emb")
        pooled = {k: np.asarray(self.ws.fetch(f"emb{k}")) for k in self.local}
        self._tick("lookup")
        received = self._exchange(
            {k: [pooled[k][r * per : (r + 1) * per] for r in range(self.world)] for k in self.local}, [per] * self.world
        )
        self._tick("alltoall")
        for k in range(self.num_tables):
            self.ws.feed(f"emb{k}", received[k])
        self.ws.feed("dense", feeds["dense"][mine])
        self.ws.feed("click", feeds["click"][mine])
        mean = self._run_dense()
        back = {k: np.asarray(self.ws.fetch(self.pooled_grads[k])) / self.world for k in range(self.num_tables)}
        self._tick("dense")
        full = self._return(back, per)
        self._tick("alltoall")
        for k in self.local:
            self.ws.feed(f"demb{k}", full[k])
        self._run("update")
        self._tick("update")
        return mean

    def _run_dense(self) -> float:
        """The dense part: forward, gradients, the MLP gradients and the loss averaged over the
        ranks in one all-reduce, SGD; the global batch's mean loss."""
        net = self.nets["dense"]
        if "dense" not in self.created:
            # split before the step counter and the updates: the all-reduce runs in between
            first = len(net.ops) - self.n_update
            import asyncnet as an

            grad_net, sgd_net = an.Net("dense_grad"), an.Net("dense_sgd")
            grad_net.ops.extend(net.ops[:first])
            sgd_net.ops.extend(net.ops[first:])
            self.nets["dense_grad"], self.nets["dense_sgd"] = grad_net, sgd_net
            self.ws.create_net(grad_net)
            self.ws.create_net(sgd_net)
            self.created.add("dense")
        self.ws.run_net("dense_grad")
        grads = [np.asarray(self.ws.fetch(g)) for g in self.dense_grads]
        flat = np.concatenate(
            [
                *(g.astype(np.float32, copy=False).ravel() for g in grads),
                np.asarray(self.ws.fetch("loss"), np.float32).reshape(1),
                np.array([self._accuracy()], np.float32),
            ]
        )
        self._tick("dense")
        flat = self.comm.average(flat)
        self._tick("allreduce")
        start = 0
        for name, g in zip(self.dense_grads, grads):
            self.ws.feed(name, flat[start : start + g.size].reshape(g.shape).astype(g.dtype, copy=False))
            start += g.size
        self.ws.run_net("dense_sgd")
        self.accuracy = float(flat[-1])
        return float(flat[-2])

    def _accuracy(self) -> float:
        """The share of this rank's examples whose click the model predicts (probability above one half)."""
        prob = np.asarray(self.ws.fetch("prob"))[:, 0]
        return float(np.mean((prob > 0.5) == (np.asarray(self.ws.fetch("click"))[:, 0] > 0.5))) if prob.size else 0.0

    def _exchange(self, outgoing: dict[int, list[np.ndarray]], sizes: list[int]) -> dict[int, np.ndarray]:
        """All-to-all of pooled rows: ``outgoing[k][r]`` (rank r's ``sizes[r]`` examples of
        local table k) goes to rank r; returns this rank's examples of every table."""
        send = [
            np.concatenate([outgoing[k][r] for k in self.local]) if self.local else np.zeros((0, self.dim), np.float32)
            for r in range(self.world)
        ]
        n = sizes[self.rank]
        got = self.comm.all_to_all(
            send, [n * sum(1 for o in self.owner if o == r) for r in range(self.world)], self.dim
        )
        out = {}
        for r in range(self.world):
            tables = [k for k in range(self.num_tables) if self.owner[k] == r]
            for j, k in enumerate(tables):
                out[k] = got[r][j * n : (j + 1) * n]
        return out

    def evaluate(self, log: Any, rows: np.ndarray, batch: int) -> tuple[float, np.ndarray]:
        """The model's mean loss over the examples ``rows`` of ``log`` and their click
        probabilities (every rank gets both), ``batch`` examples at a time, each batch's
        examples split over the ranks as evenly as they go."""
        probs = np.zeros(len(rows), np.float64)
        loss_sum = 0.0
        for start in range(0, len(rows), batch):
            feeds = log.batch(rows[start : start + batch])
            b = feeds["dense"].shape[0]
            sizes = [len(part) for part in np.array_split(np.arange(b), self.world)]
            bounds = np.concatenate([[0], np.cumsum(sizes)])
            for k in self.local:
                self.ws.feed(f"ids{k}", feeds[f"ids{k}"])
                self.ws.feed(f"lengths{k}", feeds[f"lengths{k}"])
            self._run("emb")
            pooled = {k: np.asarray(self.ws.fetch(f"emb{k}")) for k in self.local}
            parts = {k: [pooled[k][bounds[r] : bounds[r + 1]] for r in range(self.world)] for k in self.local}
            received = self._exchange(parts, sizes)
            mine = slice(int(bounds[self.rank]), int(bounds[self.rank + 1]))
            if sizes[self.rank] == 0:
                continue
            for k in range(self.num_tables):
                self.ws.feed(f"emb{k}", received[k])
            self.ws.feed("dense", feeds["dense"][mine])
            self.ws.feed("click", feeds["click"][mine])
            self._run("dense_eval")
            probs[start + mine.start : start + mine.stop] = np.asarray(self.ws.fetch("prob"), np.float64)[:, 0]
            loss_sum += float(np.asarray(self.ws.fetch("loss")).reshape(-1)[0]) * sizes[self.rank]
        total = self.comm.sum(np.concatenate([probs, [loss_sum]]))  # each example's prob from its rank, zeros elsewhere
        return float(total[-1]) / max(len(rows), 1), total[:-1]

    def _return(self, grads: dict[int, np.ndarray], per: int) -> dict[int, np.ndarray]:
        """All-to-all back: each table's gradient rows of this rank's examples to its owner;
        returns the owner's [B, d] gradients of its tables, examples in rank order."""
        send = [
            np.concatenate([grads[k] for k in range(self.num_tables) if self.owner[k] == r])
            if any(o == r for o in self.owner)
            else np.zeros((0, self.dim), np.float32)
            for r in range(self.world)
        ]
        got = self.comm.all_to_all(send, [per * len(self.local)] * self.world, self.dim)
        return {
            k: np.concatenate([got[r][j * per : (j + 1) * per] for r in range(self.world)])
            for j, k in enumerate(self.local)
        }

    def _names(self) -> list[str]:
        """This rank's checkpointed blobs: the MLPs, its own tables, their optimizer state, ``iter``."""
        return [*self.dense_params, *(f"emb{k}_table" for k in self.local), *self.state, "iter"]

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Take this rank's parameters and optimizer state from a full set, e.g. a checkpoint's."""
        for n in self._names():
            self.ws.feed(n, np.array(arrays[n], copy=True))

    def shard(self) -> dict[str, np.ndarray]:
        """This rank's tables and their optimizer state (what its checkpoint shard holds)."""
        own = [f"emb{k}_table" for k in self.local]
        return {n: a.copy() for n, a in self.params().items() if _owned_by(n, own)}

    def params(self) -> dict[str, np.ndarray]:
        """This rank's parameters and optimizer state: the MLPs, its own tables, ``iter``."""
        return {n: np.asarray(self.ws.fetch(n)) for n in self._names()}

    def lr(self) -> float:
        """The learning rate of the last step."""
        return float(np.asarray(self.ws.fetch("lr")).reshape(-1)[0])


def _owned_by(name: str, tables: Sequence[str]) -> bool:
    """``name`` is one of ``tables`` or a blob of one (its optimizer state, ``emb1_table_moment``)."""
    return any(name == t or name.startswith(t + "_") for t in tables)


def _dense_part(m: Any, name: str, num_tables: int) -> tuple[dict[str, Any], Any]:
    """The model's forward net without its lookups (the pooled ``emb{k}`` become inputs), and
    the lookup ops by output."""
    fwd = m.forward_net(name)
    lookups = {op.outputs[0]: op for op in fwd.ops if op.type == "SparseLengthsSum"}
    if sorted(lookups) != sorted(f"emb{k}" for k in range(num_tables)):
        raise TrainConfigError("hybrid parallel trains plain sum tables (no weighted pooling, QR or mixed dimensions)")
    fwd.ops[:] = [op for op in fwd.ops if op.type != "SparseLengthsSum"]
    return lookups, fwd


def _optimizer_ops(
    m: Any, grads: dict[str, Any], tables: list[str], optimizer: str, lr: float, update: dict[str, Any]
) -> tuple[list[Any], list[Any], dict[str, list[Any]]]:
    """build_optimizer's ops for the model, split: the step counter and learning-rate ops, the
    MLP updates, and each table's update (from the gradient rows ``demb{k}_rows`` of the
    lookups' ids, or their dense scatter for momentum and adam)."""
    import asyncnet as an
    from asyncnet.model.optimizer import build_optimizer
    from asyncnet.ops.sparse import GradientSlice

    dense_grads = optimizer in ("momentum", "adam")
    all_grads = {p: g for p, g in grads.items() if p in m.params}
    for k, t in enumerate(tables):
        all_grads[t] = f"{t}_grad_dense" if dense_grads else GradientSlice(f"ids{k}", f"demb{k}_rows")
    net = an.Net("hybrid_opt")
    build_optimizer(m, net, all_grads, optimizer, lr, **{**update, "iter_op": "Iter", "mutex_blob": None})
    sched, dense_ops, table_ops = [], [], {t: [] for t in tables}
    for op in net.ops:
        owner = next((t for t in tables if t in op.outputs), None)
        if owner is not None:
            table_ops[owner].append(op)
        elif any(o in m.params for o in op.outputs):
            dense_ops.append(op)
        else:
            sched.append(op)
    return sched, dense_ops, table_ops


class LocalComm:
    """The collectives of one process alone (world 1): :class:`HybridDLRM` as plain training.

    >>> LocalComm().all_to_all([np.ones((2, 3))], [2], 3)[0].shape
    (2, 3)
    """

    rank, world = 0, 1

    def average(self, a: np.ndarray) -> np.ndarray:
        return a

    def sum(self, a: np.ndarray) -> np.ndarray:
        return a

    def all_to_all(self, send: list[np.ndarray], recv_rows: list[int], dim: int) -> list[np.ndarray]:
        return [np.asarray(x).reshape(-1, dim) for x in send]

    def gather(self, part: dict[str, Any]) -> dict[str, Any]:
        return dict(part)


class TorchComm:
    """The collectives of :class:`HybridDLRM` on torch.distributed (gloo on CPU), among the
    ranks of ``group`` (default: all)."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)

    def average(self, a: np.ndarray) -> np.ndarray:
        import torch

        t = torch.from_numpy(a)
        self.dist.all_reduce(t, group=self.group)
        t /= self.world
        return a

    def sum(self, a: np.ndarray) -> np.ndarray:
        """The element-wise sum of every rank's ``a`` (float64 kept), on every rank."""
        import torch

        t = torch.from_numpy(np.ascontiguousarray(a))
        self.dist.all_reduce(t, group=self.group)
        return t.numpy()

    def gather(self, part: dict[str, Any]) -> dict[str, Any] | None:
        """Every rank's ``part`` merged on rank 0 (None on the others)."""
        parts: list[Any] = [None] * self.world if self.rank == 0 else []
        self.dist.gather_object(part, parts if self.rank == 0 else None, group=self.group, group_dst=0)
        if self.rank != 0:
            return None
        merged: dict[str, Any] = {}
        for p in parts:
            merged.update(p)
        return merged

    def all_to_all(self, send: list[np.ndarray], recv_rows: list[int], dim: int) -> list[np.ndarray]:
        """Rank r gets ``send[r]``; this rank receives ``recv_rows[r]`` rows of ``dim`` from rank r."""
        import torch

        flat = torch.from_numpy(np.ascontiguousarray(np.concatenate([s.reshape(-1, dim) for s in send]), np.float32))
        out = torch.empty((sum(recv_rows), dim), dtype=torch.float32)
        self.dist.all_to_all_single(
            out, flat, output_split_sizes=recv_rows, input_split_sizes=[len(s) for s in send], group=self.group
        )
        parts, start = [], 0
        for n in recv_rows:
            parts.append(out[start : start + n].numpy())
            start += n
        return parts


def train_run(cfg: Any, ds: Any, out: Any, resume: Any = None, quiet: bool = False) -> list[Any]:
    """``asyncnet train --model dlrm --backend torch --hybrid`` under torchrun: ``cfg.epochs``
    epochs over ``ds``'s training rows in order, global batches of ``cfg.batch_size`` (the last
    partial batch left out), with ``cfg``'s optimizer and learning-rate schedule; each epoch ends
    with the test set evaluated by every rank's share (loss, accuracy, AUC) and a checkpoint in
    ``out``: each rank's tables and their optimizer state in its shard file, the rest and the
    shards' names in ``checkpoint.npz`` (written by rank 0, with ``metrics.json``); ``resume`` (a :class:`~asyncnet.train.loop.Resume`) continues from its arrays and
    epochs. Returns the epochs' metrics."""
    import torch.distributed as dist

    from asyncnet.model.zoo.dlrm import split_model_args
    from asyncnet.train.program import build_program

    kw, _ = split_model_args(cfg.model_args)
    program = build_program(cfg, ds.input_dim, ds.num_classes)  # the schedule, the optimizer's settings
    dist.init_process_group("gloo")
    try:
        model = HybridDLRM(
            TorchComm(), lr=program.lr, seed=cfg.seed, optimizer=cfg.optimizer, update=program.update_settings(), **kw
        )
        data = _recorded_data(out) if model.rank == 0 else None
        epochs = list(resume.epochs) if resume is not None else []
        step = 0
        if resume is not None:
            model.load(resume.arrays)
            step = int(np.asarray(resume.arrays["iter"]).reshape(-1)[0])
        rows, b = ds.x_train[:, 0], cfg.batch_size
        for epoch in range(len(epochs) + 1, cfg.epochs + 1):
            t0, losses, hits = time.perf_counter(), [], []
            for start in range(0, len(rows) - b + 1, b):
                losses.append(model.step(ds.log.batch(rows[start : start + b])))
                hits.append(model.accuracy)
                step += 1
            seconds = time.perf_counter() - t0
            mean = float(np.mean(losses)) if losses else float("nan")
            train = (mean, float(np.mean(hits)) if hits else float("nan"))
            epochs.append(_epoch_metrics(model, ds, b, epoch, train, (len(losses) * b, seconds, step)))
            if model.rank == 0 and not quiet:
                m = epochs[-1]
                print(
                    f"epoch {epoch}: train loss {mean:.6f}, test loss {m.test_loss:.6f}, test AUC {m.test_auc:.4f}, "
                    f"{len(losses) * b / seconds:,.0f} samples/s",
                    flush=True,
                )
            _save_checkpoint(model, program, step, cfg, epochs, out, data)
        return epochs
    finally:
        dist.destroy_process_group()


def _epoch_metrics(
    model: HybridDLRM, ds: Any, batch: int, epoch: int, train: tuple[float, float], done: tuple[int, float, int]
) -> Any:
    """An epoch's figures: the train loss and accuracy (means over its steps), the test set's
    loss, accuracy (a click when its probability is above one half), AUC and the log's
    ground-truth AUC, as the other trainers; ``done``: (samples, seconds, step)."""
    from asyncnet.model.zoo.dlrm import auc
    from asyncnet.train.loop import click_figures
    from asyncnet.train.report import EpochMetrics

    test_loss, probs = model.evaluate(ds.log, ds.x_test[:, 0], batch)
    y = ds.y_test.reshape(-1)
    accuracy = float(np.mean((probs > 0.5) == (y > 0))) if len(y) else float("nan")
    figures = click_figures(ds, test_loss, auc(y, probs) if len(y) else float("nan"))
    samples, seconds, step = done
    return EpochMetrics(
        epoch, train[0], train[1], test_loss, accuracy, samples, seconds, lr=model.lr(), step=step, **figures
    )


def _recorded_data(out: Any) -> str | None:
    """The data source the run directory's metrics.json names (written when the run started)."""
    import json

    from asyncnet.train.api import METRICS

    try:
        return json.loads((out / METRICS).read_bytes()).get("data")
    except (OSError, ValueError, AttributeError):
        return None


def shard_file(rank: int, step: int) -> str:
    """The name of rank ``rank``'s checkpoint shard at step ``step`` (in the run directory)."""
    return f"checkpoint.shard{rank}.step{step}.npz"


def _save_checkpoint(
    model: HybridDLRM, program: Any, step: int, cfg: Any, epochs: list[Any], out: Any, data: str | None
) -> None:
    """Every rank writes its own tables and their optimizer state to its shard file; once all
    are written, rank 0 writes ``checkpoint.npz`` (the MLPs, their state, ``iter``, the names of
    the shards: one checkpoint to every reader) and ``metrics.json``, then removes the shard
    files it does not name (earlier steps', an earlier run's). No rank ever holds another
    rank's tables. A write that fails on
    any rank fails every rank with a CheckpointError (the previous checkpoint stays whole)."""
    from asyncnet._atomicio import atomic_write_npz
    from asyncnet.errors import CheckpointError

    name, problem = shard_file(model.rank, step), ""
    shard = model.shard()
    try:
        atomic_write_npz(out / name, shard)
    except OSError as e:
        problem = f"rank {model.rank} cannot write {str(out / name)!r}: {e.strerror or e}"
    written = model.comm.gather({name: None if problem else sorted(shard)})
    if model.rank == 0 and not problem:
        assert written is not None
        failed = [n for n, names in written.items() if names is None]
        if failed:
            problem = f"the checkpoint shards {failed} were not written"
        else:
            try:
                _save_run(program, model.params(), step, cfg, epochs, out, data, written)
            except CheckpointError as e:
                problem = str(e)
            else:  # the shards the checkpoint no longer names: earlier steps', an earlier run's
                for old in out.glob("checkpoint.shard*.npz"):
                    if old.name not in written:
                        old.unlink(missing_ok=True)
    flags = model.comm.sum(np.array([1.0 if problem else 0.0]))
    if problem or flags[0]:
        raise CheckpointError(problem or "the checkpoint was not written: another rank failed to write its part")


def _save_run(
    program: Any,
    params: dict[str, np.ndarray],
    step: int,
    cfg: Any,
    epochs: list[Any],
    out: Any,
    data: str | None,
    shards: dict[str, list[str]],
) -> None:
    """Rank 0: the run's checkpoint (its replicated parameters, the program's other checkpoint
    blobs but the tables at their initial values, the shard files' names) and metrics.json."""
    import asyncnet as an
    from asyncnet.model.checkpoint import save_arrays
    from asyncnet.train.api import CHECKPOINT, METRICS
    from asyncnet.train.report import History, write_metrics

    elsewhere = [n for names in shards.values() for n in names]
    tables = [n for n in program.model.params if n.startswith("emb") and n.endswith("_table")]
    init = an.Net("checkpoint_init")  # never fills a table: those are the shards'
    init.ops.extend(op for op in program.init_net.ops if not any(_owned_by(o, tables) for o in op.outputs))
    with an.Workspace() as ws:
        ws.run_net_once(init)
        arrays = {n: np.asarray(ws.fetch(n)) for n in program.model.checkpoint_blobs if n in ws}
    arrays.update({n: a for n, a in params.items() if n not in elsewhere})
    arrays["iter"] = np.full_like(arrays["iter"], step) if "iter" in arrays else np.array([step], np.int64)
    run = {"config": cfg.to_dict(), "epochs": [m.to_dict() for m in epochs], "partial": None, "data": data}
    save_arrays(program.model, arrays, str(out / CHECKPOINT), {"run": run}, shards=shards)
    write_metrics(
        History(config=cfg.to_dict(), epochs=list(epochs)),
        out / METRICS,
        extra={"status": "ok" if len(epochs) == cfg.epochs else "running", "steps": step, "hybrid": True, "data": data},
    )


def main(argv: list[str] | None = None) -> int:
    """Train under torchrun and print each step's global mean loss (rank 0) and the samples/s."""
    import torch.distributed as dist

    from asyncnet.train.criteo import load_click_data

    ap = argparse.ArgumentParser(description="hybrid-parallel dlrm under torchrun (gloo)")
    ap.add_argument("--data", default="random:tables=1000-1000-1000-1000,dense=4,batches=20,batch=128")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--bottom", default="16", help="hidden widths of the bottom MLP, comma-separated")
    ap.add_argument("--top", default="16", help="hidden widths of the top MLP, comma-separated")
    args = ap.parse_args(argv)
    dist.init_process_group("gloo")
    try:
        log = load_click_data(args.data)
        widths = {k: tuple(int(w) for w in getattr(args, k).split(",")) for k in ("bottom", "top")}
        model = HybridDLRM(TorchComm(), lr=args.lr, dim=args.dim, **widths, **log.model_args)
        t0 = time.perf_counter()
        for s in range(args.steps):
            rows = np.arange(s * args.batch_size, (s + 1) * args.batch_size) % len(log)
            loss = model.step(log.batch(rows))
            if model.rank == 0:
                print(f"step {s + 1} loss {loss:.8f}", flush=True)
        if model.rank == 0:
            print(
                f"hybrid {model.world} ranks: {args.steps * args.batch_size / (time.perf_counter() - t0):,.0f} samples/s; "
                f"tables per rank {[model.owner.count(r) for r in range(model.world)]}",
                flush=True,
            )
        print(f"rank {model.rank} done", flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
