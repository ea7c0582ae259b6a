"""Data-parallel training of one run over several processes (torchrun + DistributedDataParallel).

`torchrun --nproc-per-node K -m rpevit train …` starts K processes; torchrun tells each its place
through the environment (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR/PORT). Without WORLD_SIZE > 1
nothing here does anything and training runs exactly as in one process.

rpevit.lab.training.train sees all of this through one object, `replica()`: a `Replica` (the only process;
every method the identity) or a `DataParallel` rank. The contract: every rank draws the same
global batch from the same on-device generator and trains on its contiguous shard (`shard`),
with the loss weighted so that
the all-reduced gradient is the gradient of the global-batch mean loss, so a run has the global
batch and learning-rate schedule of one process. Rank 0 alone takes the run lock, validates,
tests and writes checkpoints, history and the record; every rank loads the checkpoint rank 0
chose on resume. FAVOR+ redraws need no communication: every rank draws ω from the same
seeded generator (rpevit.core.attention.linear.feature_seed).

Records and checkpoints are the source of truth, so every rank must see the runs directory at
the same path (on several nodes: a shared filesystem); `check_shared_runs_root` verifies that
before training and fails the run with one message otherwise.
"""

from __future__ import annotations

import datetime
import inspect
import os
import socket
import sys
import warnings
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist

from ...core.errors import UserError
from ...core.loop import Alone

# rank 0 validates, tests and times alone while the others wait in the next collective
TIMEOUT = datetime.timedelta(minutes=60)


class PeerFailed(Exception):
    """Raised on ranks > 0 when rank 0 reports the error (so the message is printed once)."""

    def __init__(self, message: str = "rank 0 reported the error", code: int = 1):
        super().__init__(message)
        self.code = code


def requested() -> bool:
    """True when launched by torchrun (or similar) with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def active() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    """Rank 0 (or the only process): the one that writes checkpoints, history and records."""
    return rank() == 0


def init(device_setting: str = "auto") -> bool:
    """Join the process group torchrun set up (gloo on CPU, nccl on CUDA, where each rank uses GPU
    LOCAL_RANK); False, doing nothing, when not launched with WORLD_SIZE > 1."""
    if not requested() or active():
        return active()
    if not dist.is_available():
        raise UserError("torch.distributed is not available in this PyTorch build; run with one process.")
    from ...core.device import resolve_device

    device = resolve_device(device_setting)
    if device.type == "cuda":
        if local_rank() >= torch.cuda.device_count():
            raise UserError(
                f"LOCAL_RANK {local_rank()} has no GPU: this node shows {torch.cuda.device_count()}; "
                "start at most that many processes per node (torchrun --nproc-per-node)."
            )
        torch.cuda.set_device(local_rank())
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)
    return True


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def leave(code: int) -> NoReturn:
    """End this torchrun rank with `code` once its output is flushed, skipping interpreter finalisation.

    After the last collective returns, gloo's worker threads may still be releasing the finished
    work, whose tensors hold Python objects; a thread that reaches for the GIL while the interpreter
    finalises is killed and the process aborts ("terminate called without an active exception",
    about 1 exit in 15 here; pytorch/pytorch#179291 describes it). The group is already destroyed and
    rank 0 has written the record, so nothing is left for finalisation to do."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def device_for(device: torch.device) -> torch.device:
    """This rank's device: cuda → cuda:LOCAL_RANK; CPU unchanged."""
    if active() and device.type == "cuda":
        return torch.device("cuda", local_rank())
    return device


def barrier() -> None:
    if active():
        dist.barrier()


def broadcast_object(obj=None):
    """Rank 0's `obj` on every rank (pickled; keep it small)."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_object(obj) -> list:
    """[obj of rank 0, obj of rank 1, …] on every rank."""
    if not active():
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(*values: torch.Tensor) -> list[torch.Tensor]:
    """Element sums over ranks (float64, one collective for all values)."""
    stacked = torch.stack([v.detach().to(torch.float64).reshape(()) for v in values])
    dist.all_reduce(stacked)
    return list(stacked.unbind())


def any_rank(flag: torch.Tensor) -> torch.Tensor:
    """True on every rank if `flag` (a bool scalar) is true on any."""
    value = flag.to(torch.int32).reshape(())
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.bool()


def first_step(step: torch.Tensor) -> torch.Tensor:
    """The smallest non-negative value of a step index over ranks (−1 where all are −1)."""
    never = torch.iinfo(torch.int64).max
    value = torch.where(step < 0, never, step).to(torch.int64).reshape(())
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return torch.where(value == never, -1, value)


def shard(x: torch.Tensor, y: torch.Tensor):
    """This rank's contiguous part of a global batch: (x, y, rows, loss weight).

    The weight rows·world/global makes DDP's gradient average equal the gradient of the mean loss
    over the global batch, also for a last partial batch that does not divide evenly. A rank whose
    part is empty (a global batch smaller than the world) still runs a step — DDP needs every rank
    in every all-reduce — on one row of the batch with weight 0; `rows` = 0 keeps it out of the
    metrics."""
    total, world = len(y), world_size()
    xs, ys = torch.tensor_split(x, world)[rank()], torch.tensor_split(y, world)[rank()]
    if len(ys) == 0:
        return x[:1], y[:1], 0, 0.0
    return xs, ys, len(ys), len(ys) * world / total


def seed_other_ranks(seed: int) -> None:
    """Give ranks > 0 their own global RNG stream (dropout masks differ per shard, as one process's
    differ per image); rank 0 keeps the stream of a one-process run."""
    if active() and rank() > 0:
        torch.manual_seed(seed + 1_000_003 * rank())


def wrap(model: torch.nn.Module, device: torch.device, sample: torch.Tensor):
    """DistributedDataParallel around `model` (parameters and buffers broadcast from rank 0).

    Buffers are not re-broadcast every step (FAVOR+ redraws the same ω on every rank).
    Unused parameters are looked for only if one eval-mode forward/backward on `sample` leaves a
    trainable parameter without a gradient (it changes no state: eval mode neither redraws nor
    counts, and the gradients are cleared)."""
    from torch.nn.parallel import DistributedDataParallel

    model.eval()
    model(sample).float().sum().backward()
    unused = any(p.requires_grad and p.grad is None for p in model.parameters())
    model.zero_grad(set_to_none=True)
    model.train()
    # newer torch renames broadcast_buffers (still syncing at init, which is what we want)
    no_buffer_sync = (
        "forward_sync_buffers"
        if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
        else "broadcast_buffers"
    )
    # e.g. the CLS token's (1, 1, d) gradient arrives with another stride of its size-1 dims: harmless
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=unused,
        **{no_buffer_sync: False},
    )


def check_replicas(model: torch.nn.Module) -> None:
    """Raise unless every rank holds the same parameters and buffers (bit for bit: gradients are
    all-reduced and FAVOR+ ω drawn from one seed, so they can only differ through a bug)."""
    if not active():
        return
    names, sums = [], []
    for name, tensor in model.state_dict().items():
        if torch.is_tensor(tensor) and tensor.numel():
            names.append(name)
            sums.append(tensor.detach().to(torch.float64).sum())
    gathered = all_gather_object(torch.stack(sums).tolist())
    flags = [[n for n, a, b in zip(names, theirs, gathered[0]) if a != b] for theirs in gathered]
    bad = {r: d for r, d in enumerate(flags) if d}
    if bad:
        raise RuntimeError(
            "data-parallel replicas diverged from rank 0: "
            + "; ".join(f"rank {r}: {', '.join(d[:5])}" for r, d in bad.items())
        )


class Replica(Alone):
    """This process's part in training one run, when it is the only process: every method is the
    identity or does nothing (the batch questions of core.loop.Alone among them), so one training loop
    serves both cases (nanoGPT's `master_process`,
    `ddp_rank`, `ddp_world_size` are `is_main`, `rank`, `world_size` here)."""

    rank, world_size, is_main = 0, 1, True

    def device(self, device: torch.device) -> torch.device:
        """This process's device."""
        return device

    def seed(self, seed: int) -> None:
        """Seed this process's own global RNG stream after the model is built (the only process keeps
        the stream `torch.manual_seed(seed)` began)."""

    def broadcast(self, obj=None):
        """The main process's `obj`."""
        return obj

    def wrap(self, model: torch.nn.Module, device: torch.device, first_image) -> torch.nn.Module:
        """The module the training steps call."""
        return model

    def announce(self, label: str, batch_size: int) -> None:
        """Say how the global batch is split (nothing to say for one process)."""

    def check(self, model: torch.nn.Module) -> None:
        """Raise unless every process holds the same parameters and buffers."""

    def rng_fields(self, state: dict) -> dict:
        """Checkpoint fields beyond `rng` (this process's RNG state) that an exact resume needs."""
        return {}

    def resumed_rng(self, checkpoint: dict) -> dict | None:
        """The RNG state this process resumes with from a checkpoint (None: keep its own)."""
        return checkpoint["rng"]


class DataParallel(Replica):
    """One rank of a torchrun process group (the contract in this module's docstring): rank 0 is
    the main process; every rank trains on its shard of every global batch under DDP."""

    def __init__(self):
        self.rank, self.world_size, self.is_main = rank(), world_size(), is_main()

    def device(self, device):
        return device_for(device)

    def seed(self, seed):
        seed_other_ranks(seed)

    def broadcast(self, obj=None):
        return broadcast_object(obj)

    def wrap(self, model, device, first_image):
        return wrap(model, device, first_image())

    def announce(self, label, batch_size):
        if self.is_main:
            print(f"[{label}] data-parallel over {self.world_size} processes, global batch {batch_size}", flush=True)

    def shard(self, x, y):
        return shard(x, y)

    def any(self, flag):
        return any_rank(flag)

    def first(self, step):
        return first_step(step)

    def totals(self, loss_sum, correct, seen, cpu_seconds):
        counts = torch.tensor([seen, cpu_seconds], dtype=torch.float64, device=loss_sum.device)
        loss_sum, correct, seen, cpu = all_reduce_sum(loss_sum, correct, *counts)
        return loss_sum, correct, int(seen), cpu.item()

    def check(self, model):
        check_replicas(model)

    def rng_fields(self, state):
        """Every rank's RNG state (each rank draws its own dropout masks), gathered on every rank."""
        return {"rng_ranks": all_gather_object(state)}

    def resumed_rng(self, checkpoint):
        """This rank's saved stream; a rank the checkpoint has none for (more ranks now) keeps its own."""
        states = checkpoint.get("rng_ranks") or [checkpoint["rng"]]
        return states[self.rank] if self.rank < len(states) else None


def replica() -> Replica:
    """This process's replica: a DataParallel rank inside a torchrun process group, else the only process."""
    return DataParallel() if active() else Replica()


def check_shared_runs_root(root) -> Path:
    """Every rank can write the runs directory and sees the file rank 0 wrote there, else one error.

    Rank 0 raises a UserError naming the directory, the failing ranks and hosts and the
    shared-filesystem requirement; the other ranks raise PeerFailed (rank 0 prints the message)."""
    from . import runs

    root = Path(root)
    problem = None
    try:
        runs.check_runs_root(root)
    except UserError as exc:
        problem = str(exc)
    name = None
    if is_main() and problem is None:
        name = runs.write_check_file(root).name
    name = broadcast_object(name)
    if problem is None and name is None:
        problem = "rank 0 could not write its check file"
    elif problem is None and not runs.sees_check_file(root, name):
        problem = f"its {root} does not show the check file {name} rank 0 wrote (not the same directory)"
    reports = all_gather_object((rank(), socket.gethostname(), problem))
    barrier()
    if is_main() and name is not None:
        (root / name).unlink(missing_ok=True)
    failed = [(r, host, p) for r, host, p in reports if p]
    if not failed:
        return root
    if not is_main():
        raise PeerFailed(code=2)
    raise UserError(
        f"the runs directory {root} must be one directory every torchrun process can write, at the "
        "same path (on several nodes: a shared filesystem such as NFS or Lustre; set it with "
        "$RPEVIT_RUNS): " + "; ".join(f"rank {r} on {host}: {p}" for r, host, p in failed)
    )
