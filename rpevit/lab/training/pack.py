"""Packed training: several runs of one variant trained in one process by one vectorised step.

The study's model is small enough that one run leaves a GPU idle between kernel launches. A pack
stacks the parameters of K runs (same variant, dataset and preset, hence the same shapes) along a
leading model axis and computes every run's forward and backward in one `torch.func.vmap` over
`functional_call` (Horace He et al., functorch; the model-ensembling recipe of torch.func), so each
kernel does K runs' work. Everything else stays each run's own, exactly as `train.train_run` keeps
it: its seed and initialisation, data order and augmentation (its own data generator), the draws of
stochastic depth (made outside vmap from the run's own random state, in the order one run makes
them), FAVOR+ redraws, optimizer, gradient clipping, schedule, validation, best weights, cool-down
branches, checkpoints (the same files as a single run: either engine resumes the other's) and record.
A run's record does not depend on the pack it trained in (tests/test_pack.py: alone vs in a pack of
4 on CPU, and a kill inside a pack). A run whose loss turns non-finite leaves the pack with a
`diverged` record; the others go on.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from ...core import capture, metrics
from ...core import data as data_lib
from ...core.device import autocast, deterministic, precision, resolve_device, true_fp32
from ...core.errors import UserError
from ..store import records
from ..store.run import Run
from . import distributed
from .run_record import record_finished_run, write_diverged
from .train import (
    Diverged,
    _branch,
    _end_epoch,
    _rng_state,
    _set_rng_state,
    _State,
    _validation,
    _write_checkpoint,
    set_up,
)


@dataclass
class _Member:
    """One run of a pack: its state and its own global random state (stochastic depth draws)."""

    run: Run
    state: _State
    rng: dict
    first_bad_step: int = -1
    sums: list = field(default_factory=list)


def check_packable(runs: list[Run]) -> None:
    """One UserError unless the runs can share one vectorised step."""
    kinds = {(r.params.name, r.dataset, r.variant, r.epochs) for r in runs}
    if len(kinds) > 1:
        raise UserError(f"a pack trains runs of one preset, dataset and variant; got {sorted(kinds)}.")
    if runs and runs[0].model_config.dropout > 0:
        raise UserError("model.dropout > 0 cannot be packed (its draws happen inside the vectorised step).")
    if distributed.replica().world_size > 1:
        raise UserError("a pack trains in one process, not under torchrun.")


def train_pack(runs: list[Run], dataset, *, resume: bool = True) -> list[dict]:
    """Train the runs together (each as `train_run` would, under its own lock); their records, in order.

    A run already finished with its settings is returned as it is; other settings' results are
    superseded, as `train_run` does. Runs resumed at different epochs train in separate packs."""
    check_packable(runs)
    replica = distributed.replica()
    results: dict[int, dict] = {}
    with contextlib.ExitStack() as locks:
        todo = []
        for i, run in enumerate(runs):
            locks.enter_context(run.lock())
            records.clean_temporary(run.dir)
            existing = records.read_record(run.dir)
            if run.matches(existing):
                print(f"[{run.label}] already {existing['status']}: {run.dir / records.RECORD}", flush=True)
                results[i] = existing
            else:
                if existing is not None:
                    records.supersede(run.dir, "other settings than the preset has now")
                todo.append(i)
        if todo:
            train_cfg = runs[todo[0]].train_config
            device = resolve_device(train_cfg.device)
            with deterministic(train_cfg.deterministic), true_fp32(device, precision(device, train_cfg.amp)):
                members = _members([runs[i] for i in todo], dataset, device, resume, replica)
                index = {id(m): i for m, i in zip(members, todo, strict=True)}
                for epoch in sorted({m.state.epoch for m in members}):
                    group = [m for m in members if m.state.epoch == epoch]
                    for m, record in zip(group, _train_group(group, dataset, device, replica), strict=True):
                        results[index[id(m)]] = record
    return [results[i] for i in range(len(runs))]


def _members(runs: list[Run], dataset, device, resume: bool, replica) -> list[_Member]:
    """Each run set up (or resumed) exactly as `train_run` sets it up."""
    dataset = data_lib.on_device(dataset, device)
    computed_in = precision(device, runs[0].train_config.amp)
    members = []
    for run in runs:
        state = set_up(run, dataset, device, run.dir / records.CHECKPOINT, resume, computed_in, replica)
        members.append(_Member(run, state, _rng_state(device)))
    return members


@contextlib.contextmanager
def _own_random_state(member: _Member, device):
    """Within the block torch's global generator is the member's; after it, the member keeps where it got."""
    _set_rng_state(member.rng, device)
    try:
        yield
    finally:
        member.rng = _rng_state(device)


def _train_group(members: list[_Member], dataset, device, replica) -> list[dict]:
    """The epochs of runs at the same epoch, then each one's test and record; in the members' order."""
    dataset = data_lib.on_device(dataset, device)
    train_cfg = members[0].run.train_config
    computed_in = precision(device, train_cfg.amp)
    records_out: dict[int, dict] = {}
    active = list(members)
    captured = capture.captures(train_cfg, members[0].run.parsed.backend)  # a pack is one variant
    step_fn, compile_seconds = None, 0.0
    for epoch in range(members[0].state.epoch, train_cfg.epochs):
        for m in active:
            with _own_random_state(m, device):
                if _branch(m.state, m.state.model, m.run, dataset, device, replica):
                    _write_checkpoint(m.state, m.run, m.run.dir / records.CHECKPOINT, device, computed_in, {})
        if step_fn is None or len(step_fn.models) != len(active):  # built again when a member diverged
            step_fn = _step_for(active, train_cfg, device, captured)
            if captured:
                last = len(dataset.train) % train_cfg.batch_size
                compile_seconds += step_fn.warm_up(dataset, [train_cfg.batch_size] + ([last] if last else []))
        times = _packed_epoch(active, dataset, device, epoch, step_fn)
        for m in list(active):
            loss_sum, correct, seen = m.sums
            if m.first_bad_step >= 0:
                error = Diverged(
                    f"{m.run.variant} on {m.run.dataset} (seed {m.run.seed}): non-finite loss at epoch {epoch + 1}, "
                    f"step {m.first_bad_step + 1} (in a pack); the last good checkpoint (epoch {epoch}) is kept."
                )
                write_diverged(m.run, m.run.dir, error)
                print(f"diverged: {error}", flush=True)
                records_out[id(m)] = records.read_record(m.run.dir)
                active.remove(m)
                continue
            row = {
                "epoch": epoch + 1,
                "train_loss": loss_sum.item() / seen,
                "train_acc": correct.item() / seen,
                **_validation(m.state.model, dataset, train_cfg, device),
                "lr": m.state.optimizer.param_groups[0]["lr"],
                **times,
            }
            with _own_random_state(m, device):
                _end_epoch(m.state, row, m.run, m.run.dir / records.CHECKPOINT, device, computed_in, {})
    for m in active:
        with _own_random_state(m, device):
            records_out[id(m)] = record_finished_run(
                m.run, dataset, m.state, m.run.dir, device, computed_in, captured, compile_seconds, replica
            )
    return [records_out[id(m)] for m in members]


def _stacked(models, kind: str) -> dict[str, torch.Tensor]:
    """Each named parameter (differentiable stack) or buffer of the models along a new leading axis."""
    named = [dict(getattr(model, f"named_{kind}")()) for model in models]
    return {name: torch.stack([n[name] for n in named]) for name in named[0]}


class PackedStep:
    """The vectorised training step of a pack: every member's forward and loss in one vmap over
    `functional_call` of the first model with the stacked parameters and buffers, one backward, then
    each member's own gradient clipping, optimizer and schedule steps (as `core.loop.train_epoch` does)."""

    def __init__(self, models, optimizers, schedulers, train_cfg, device, *, captured: bool = False):
        self.models, self.optimizers, self.schedulers = models, optimizers, schedulers
        self.train_cfg, self.device, template = train_cfg, device, models[0]

        def loss_of(params, buffers, images, labels, draws):
            logits = functional_call(template, (params, buffers), (images,), {"drop_draws": draws})
            return F.cross_entropy(logits.float(), labels, label_smoothing=train_cfg.label_smoothing), logits

        self.with_draws = vmap(loss_of, in_dims=(0, 0, 0, 0, 0))
        self.without_draws = vmap(loss_of, in_dims=(0, 0, 0, 0, None))
        if captured:  # one graph for the vectorised forward and backward (rpevit.core.capture); a break raises
            self.with_draws = capture.capture(self.with_draws, device, fullgraph=True)
            self.without_draws = capture.capture(self.without_draws, device, fullgraph=True)

    def warm_up(self, dataset, batch_sizes) -> float:
        """Compile (and on CUDA record) the captured step for every batch size the epochs will see,
        before the first timed epoch: example images, draws from a forked random state, gradients
        dropped, so training itself is unchanged. Returns the seconds spent (the records'
        compile_seconds)."""
        template, count = self.models[0], len(self.models)
        forked = [self.device] if self.device.type == "cuda" else []
        with metrics.Timer(self.device) as timer, torch.random.fork_rng(devices=forked):
            for size in batch_sizes:
                images = data_lib.example_images(dataset.train, dataset.info, size).to(self.device)
                labels = dataset.train.labels[:size].to(self.device)
                draws = template.drop_path_draws(size, self.device)
                losses, _ = self.forward(  # stacked copies: the strides of the real step's inputs
                    torch.stack([images] * count),
                    torch.stack([labels] * count),
                    None if draws is None else torch.stack([draws] * count),
                )
                losses.sum().backward()
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)
        return timer.seconds

    def forward(self, images, labels, draws):
        """(losses (K,), logits (K, B, classes)) of stacked images (K, B, C, H, W) and labels (K, B)."""
        step_fn = self.without_draws if draws is None else self.with_draws
        with autocast(self.device, self.train_cfg.amp):
            return step_fn(_stacked(self.models, "parameters"), _stacked(self.models, "buffers"), images, labels, draws)

    def update(self, losses, live: list[int]) -> None:
        """Backward through the live members' losses, then their clipping and optimizer steps."""
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        if not live:
            return
        torch.where(torch.isfinite(losses), losses, torch.zeros_like(losses))[live].sum().backward()
        for k in live:
            if self.train_cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.models[k].parameters(), self.train_cfg.grad_clip)
            self.optimizers[k].step()
            self.schedulers[k].step()
            self.models[k].count_training_step()


def draws_of(members, batch: int, device) -> torch.Tensor | None:
    """Each member's stochastic-depth draws for one step, from its own random state: (K, draws, B, 1, 1)."""
    draws = []
    for m in members:
        with _own_random_state(m, device):
            draws.append(m.state.model.drop_path_draws(batch, device))
    return torch.stack(draws) if draws[0] is not None else None


def _step_for(members: list[_Member], train_cfg, device, captured: bool) -> PackedStep:
    """The members' packed step (captured where rpevit.core.capture says so)."""
    optimizers, schedulers = [m.state.optimizer for m in members], [m.state.scheduler for m in members]
    return PackedStep([m.state.model for m in members], optimizers, schedulers, train_cfg, device, captured=captured)


def _packed_epoch(members: list[_Member], dataset, device, epoch: int, step_fn: PackedStep) -> dict:
    """One pass over the training set for every member at once; each member's (loss sum, correct,
    seen) lands in its `sums` and its first non-finite step in `first_bad_step`. Returns a member's times: the
    pack's wall seconds (each member waited all of them) and its share, 1/N, of the pack's CPU seconds (the
    members' histories sum to what the process spent, which a pilot's CPU budget counts)."""
    info, train_cfg = dataset.info, members[0].run.train_config
    for m in members:
        m.state.model.train()
    iterators = [
        data_lib.batches(
            dataset.train,
            info,
            train_cfg.batch_size,
            shuffle=True,
            generator=m.state.generator,
            recipe=m.state.recipe,
            canvas=data_lib.training_canvas(info),
        )
        for m in members
    ]
    for m in members:
        m.sums = [torch.zeros((), device=device), torch.zeros((), device=device), 0]
        m.first_bad_step = -1
    with metrics.Timer(device) as timer:
        for step, batch in enumerate(zip(*iterators, strict=True)):
            images = torch.stack([x for x, _ in batch])
            labels = torch.stack([y for _, y in batch])
            losses, logits = step_fn.forward(images, labels, draws_of(members, labels.shape[1], device))
            finite = torch.isfinite(losses).tolist() if device.type == "cpu" else [True] * len(members)
            for k, m in enumerate(members):
                if m.first_bad_step < 0 and not finite[k]:
                    m.first_bad_step = step
            live = [k for k, m in enumerate(members) if m.first_bad_step < 0]
            step_fn.update(losses, live)
            for k in live:
                m = members[k]
                m.sums[0] += losses[k].detach() * labels.shape[1]
                m.sums[1] += (logits[k].argmax(-1) == labels[k]).sum()
                m.sums[2] += labels.shape[1]
    if device.type == "cuda":  # non-finite losses are read once per epoch there (no host sync per step)
        for m in members:
            if not torch.isfinite(m.sums[0]):
                m.first_bad_step = max(m.first_bad_step, 0)
    return {"seconds": timer.seconds, "cpu_seconds": timer.cpu_seconds / len(members)}
