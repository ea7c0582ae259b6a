"""The training step and loop of the science core, on module instances and tensors only: AdamW with
decoupled weight decay (Loshchilov & Hutter 2019) on every matrix and none on biases, norms or
parameters tagged `no_weight_decay`; cross-entropy with label smoothing (Szegedy et al. 2016);
gradient-norm clipping; bf16 autocast where asked (rpevit.core.device). nanoGPT's loop, in pieces.

A newcomer trains a model with this module, rpevit.core.model and rpevit.core.data alone:

    model = build_model("favor+rope_mixed", image_size=28)
    optimizer = adamw(model, lr=2e-3, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(100, 1000, 1.0, 0.01))
    totals = train_epoch(model, optimizer, scheduler, batches(split, info, 128, shuffle=True), Step())
    logits, labels = predict(model, test_split, info, 256)

The lab (rpevit.lab.training.train) adds what a study needs around it: checkpoints, exact resume, records,
cool-downs of shorter budgets, data-parallel processes (a `replica` with the methods of `Alone`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .data import batches
from .device import autocast
from .metrics import Timer


@dataclass(frozen=True)
class Step:
    """How one optimizer step is taken: label smoothing of the loss, the gradient-norm clip (0: none),
    and the precision of the forward pass ("off": fp32; "bf16" / "auto": bf16 autocast where it runs)."""

    label_smoothing: float = 0.0
    grad_clip: float = 0.0
    amp: str = "off"


class Alone:
    """The one process that trains a model: it sees every row of a batch. A data-parallel replica
    (rpevit.lab.training.distributed) answers the same four questions over all of its processes."""

    def shard(self, x: torch.Tensor, y: torch.Tensor):
        """(x, y, rows, loss weight) of this process's part of a batch: all of it."""
        return x, y, len(y), 1.0

    def any(self, flag: torch.Tensor) -> torch.Tensor:
        """A bool scalar true if it is true in any process."""
        return flag

    def first(self, step: torch.Tensor) -> torch.Tensor:
        """The earliest non-negative step index over processes (−1 where none)."""
        return step

    def totals(self, loss_sum: torch.Tensor, correct: torch.Tensor, seen: int, cpu_seconds: float):
        """(loss sum, correct, images seen, CPU seconds) of an epoch over every process."""
        return loss_sum, correct, seen, cpu_seconds


@dataclass
class EpochTotals:
    """One pass over the training set: summed loss and correct predictions over the images seen, the
    first step whose loss was not finite (−1 when none), the wall seconds it took and the CPU seconds
    of every process that trained it (what a one-thread CPU budget counts)."""

    loss_sum: torch.Tensor
    correct: torch.Tensor
    seen: int
    first_bad_step: torch.Tensor
    seconds: float
    cpu_seconds: float

    @property
    def diverged(self) -> bool:
        return int(self.first_bad_step) >= 0

    def row(self) -> dict:
        """The epoch's mean training loss and accuracy."""
        return {"train_loss": self.loss_sum.item() / self.seen, "train_acc": self.correct.item() / self.seen}

    def times(self) -> dict:
        """The epoch's wall and CPU seconds, as a history row names them."""
        return {"seconds": self.seconds, "cpu_seconds": self.cpu_seconds}


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: no decay for biases, norms and parameters tagged `no_weight_decay`."""
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        skip = param.ndim <= 1 or getattr(param, "no_weight_decay", False)
        (no_decay if skip else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over `param_groups(model, weight_decay)`."""
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr)


def train_epoch(model, optimizer, scheduler, batches, step: Step, *, forward=None, replica=None) -> EpochTotals:
    """One pass of `batches` ((images, labels) on the model's device): a forward (`forward`, e.g. a
    compiled or DDP-wrapped model; default the model), the loss, and one optimizer and schedule step
    per batch. A non-finite loss stops the epoch (on the CPU at once; on a GPU the flag is read once
    per epoch, so no step waits on the host) and is reported as `first_bad_step`."""
    forward, replica = model if forward is None else forward, replica or Alone()  # a compiled module has no bool()
    device = next(model.parameters()).device
    check_every_step = device.type == "cpu"
    model.train()
    loss_sum, correct, seen = torch.zeros((), device=device), torch.zeros((), device=device), 0
    first_bad_step = torch.full((), -1, device=device)
    with Timer(device) as timer:
        for index, (x, y) in enumerate(batches):
            # this process's shard; the weight makes DDP's mean the global-batch gradient
            x, y, rows, weight = replica.shard(x, y)
            with autocast(device, step.amp):
                logits = forward(x)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=step.label_smoothing)
            bad = ~torch.isfinite(loss)
            if check_every_step:
                bad = replica.any(bad)  # every process stops at the same step
            first_bad_step = torch.where(bad & (first_bad_step < 0), index, first_bad_step)
            if check_every_step and bad:
                break
            optimizer.zero_grad(set_to_none=True)
            (loss if weight == 1.0 else loss * weight).backward()
            if step.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), step.grad_clip)
            optimizer.step()
            scheduler.step()
            if hasattr(model, "count_training_step"):
                model.count_training_step()  # outside the compiled forward: FAVOR+ redraws
            if rows == 0:
                continue  # a stand-in row (empty shard): no data of this process in this step
            loss_sum += loss.detach() * len(y)
            correct += (logits.argmax(-1) == y).sum()
            seen += len(y)
    # the global batch's numbers: sums over processes, the earliest bad step of any
    first_bad_step = replica.first(first_bad_step)
    loss_sum, correct, seen, cpu_seconds = replica.totals(loss_sum, correct, seen, timer.cpu_seconds)
    return EpochTotals(loss_sum, correct, seen, first_bad_step, timer.seconds, cpu_seconds)


@torch.no_grad()
def predict(model, split, info, batch_size: int, device=None, amp: str = "off", interpolate: bool = False):
    """Logits (float32, CPU) and labels of a whole split (rpevit.core.data.Split), in order."""
    device = device or next(model.parameters()).device
    model.eval()
    outputs, labels = [], []
    for x, y in batches(split, info, batch_size, shuffle=False):
        with autocast(device, amp):
            outputs.append(model(x.to(device), interpolate=interpolate).float().cpu())
        labels.append(y.cpu())
    return torch.cat(outputs), torch.cat(labels)
