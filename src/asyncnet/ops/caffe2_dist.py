"""Caffe2's rendezvous operators on torch.distributed: ``FileStoreHandlerCreate``,
``CreateCommonWorld``, ``CloneCommonWorld`` and ``Broadcast``.

Caffe2 trained across hosts with Gloo: a key-value store (a shared folder) where the shards
meet, a *common world* made from it, and ``Allreduce``/``Broadcast`` ops taking that world as
input 0. Here the store is a ``torch.distributed.FileStore`` (prefixed with ``prefix``), the
common world is a :class:`~asyncnet.sync.TorchDistributedGradientSync` on the default process
group (created with gloo from the store, or the one ``torchrun`` already initialized), and the
collectives are asyncnet's ``Allreduce`` (a mean over the shards) and this ``Broadcast``.
Without a store input, ``CreateCommonWorld`` initializes from the environment ``torchrun`` sets
(``env://``).

    # on each of 2 hosts (rank 0 and 1), the folder shared between them
    net.FileStoreHandlerCreate([], "store", path="/shared/rendezvous", prefix="run1")
    net.CreateCommonWorld("store", "cw", size=2, rank=RANK)
    net.Broadcast(["cw", "w"], ["w"], root=0)
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__: list[str] = []


def _dist() -> Any:
    try:
        import torch.distributed as dist
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("Caffe2's rendezvous ops need torch: pip install 'asyncnet[torch]'") from exc
    return dist


@register_op(
    "FileStoreHandlerCreate",
    inputs=0,
    outputs=1,
    args=[
        Arg("path", str, Arg.REQUIRED, "a folder every shard can reach (created if missing)"),
        Arg("prefix", str, "", "keeps the keys of one run apart from another's"),
    ],
    outputs_doc=("store: a torch.distributed store",),
    doc="A key-value store in a shared folder where the shards meet (Caffe2's FileStoreHandlerCreate).",
)
def file_store_handler_create(ctx: Any) -> Any:
    dist = _dist()
    path = ctx.args["path"]
    os.makedirs(path, exist_ok=True)
    store = dist.FileStore(os.path.join(path, "rendezvous"), -1)
    prefix = ctx.args["prefix"]
    return dist.PrefixStore(prefix, store) if prefix else store


def _validate_world(op: OperatorDef) -> None:
    size, rank = op.args.get("size", 0), op.args.get("rank", 0)
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"expected size >= 1 and 0 <= rank < size, got size={size}, rank={rank}")
    if op.args.get("mpi_rendezvous", 0):
        raise ValueError("mpi_rendezvous is not supported: give a store (FileStoreHandlerCreate) or run under torchrun")
    engine = op.args.get("engine", "")
    if engine not in ("", "GLOO", "gloo"):
        raise ValueError(f"engine {engine!r} is not supported; the common world is torch.distributed with gloo")


@register_op(
    "CreateCommonWorld",
    inputs=(0, 1),
    outputs=1,
    validate=_validate_world,
    args=[
        Arg("size", int, 0, "the number of shards"),
        Arg("rank", int, 0, "this shard"),
        Arg("timeout_ms", int, 30000, "how long to wait for the others (and for each collective)"),
        Arg("engine", str, "", "GLOO (or empty): torch.distributed's gloo backend"),
        Arg("transport", str, "tcp", "accepted; gloo's transport is TCP"),
        Arg("interface", str, "", "the network interface (GLOO_SOCKET_IFNAME) when given"),
        Arg("mpi_rendezvous", int, 0, "refused"),
        Arg("name", str, "", "accepted (Caffe2's name of the world)"),
    ],
    inputs_doc=("store (from FileStoreHandlerCreate); none: torchrun's environment",),
    outputs_doc=("common world: a TorchDistributedGradientSync",),
    doc="Join the shards into one torch.distributed group (gloo) and give its gradient sync (Caffe2's "
    "CreateCommonWorld); an already initialized group (torchrun) is reused when its size and rank match.",
)
def create_common_world(ctx: Any, *store: Any) -> Any:
    from asyncnet.sync.torch_dist import TorchDistributedGradientSync

    dist, a = _dist(), ctx.args
    if dist.is_initialized():
        got = (dist.get_world_size(), dist.get_rank())
        if got != (a["size"], a["rank"]):
            raise ValueError(
                f"torch.distributed is already initialized with size {got[0]}, rank {got[1]}; "
                f"the op asks for size {a['size']}, rank {a['rank']}"
            )
        return TorchDistributedGradientSync()
    if a["interface"]:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", a["interface"])
    timeout = datetime.timedelta(milliseconds=a["timeout_ms"])
    if store:
        dist.init_process_group("gloo", store=store[0], rank=a["rank"], world_size=a["size"], timeout=timeout)
    else:
        dist.init_process_group("gloo", init_method="env://", rank=a["rank"], world_size=a["size"], timeout=timeout)
    return TorchDistributedGradientSync()


@register_op(
    "CloneCommonWorld",
    inputs=1,
    outputs=1,
    args=[Arg("timeout_ms", int, 30000, "accepted"), Arg("engine", str, "", "accepted")],
    doc="Another handle on an existing common world (the same torch.distributed group).",
)
def clone_common_world(ctx: Any, world: Any) -> Any:
    if not callable(getattr(world, "broadcast", None)):
        raise TypeError(f"expected a common world in input 0 {ctx.op.inputs[0]!r}, got {type(world).__name__}")
    return world


def _validate_broadcast(op: OperatorDef) -> None:
    if len(op.outputs) != len(op.inputs) - 1 or any(o != i for o, i in zip(op.outputs, op.inputs[1:])):
        raise ValueError(
            f"Broadcast takes (world, X_1..X_N) and writes X_1..X_N in place; got inputs {op.inputs}, outputs {op.outputs}"
        )


@register_op(
    "Broadcast",
    inputs=(2, None),
    outputs=(1, None),
    allow_inplace=lambda i, o: i == o + 1,
    enforce_inplace=lambda i, o: i == o + 1,
    devices=("cpu", "cuda"),
    validate=_validate_broadcast,
    args=[Arg("root", int, 0, "the shard whose values every shard gets")],
    inputs_doc=("common world", "X_1..X_N"),
    outputs_doc=("X_1..X_N, now the root's values",),
    doc="Overwrite the tensors on every shard with the root's (Caffe2's Broadcast), in place.",
)
def broadcast(ctx: Any, world: Any, *xs: Any) -> Any:
    if not callable(getattr(world, "broadcast", None)):
        raise TypeError(f"expected a common world in input 0 {ctx.op.inputs[0]!r}, got {type(world).__name__}")
    world.broadcast(list(xs), root=ctx.args["root"])
    return xs[0] if len(xs) == 1 else tuple(xs)


register_no_gradient("FileStoreHandlerCreate", "CreateCommonWorld", "CloneCommonWorld", "Broadcast")
