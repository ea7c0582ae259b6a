"""Training loop (nanoGPT-style, one sitting): AdamW, linear warmup + cosine decay, label
smoothing, gradient clipping; bf16 autocast where `train.amp` asks for it (rpevit.device) and
optional torch.compile on CUDA.

Protocol of seed 001: validate every epoch, test the best-validation weights. Each epoch ends
with an atomic checkpoint holding everything needed for an exact resume (model, optimizer,
scheduler, data-order generator, RNG states, history, best weights). A non-finite loss stops
the run with a clear message and leaves the last good checkpoint in place.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from . import data as data_lib
from . import distributed, metrics, records, runs
from .device import autocast, deterministic, device_name, resolve_device, uses_bf16
from .errors import UserError
from .model import build_model
from .params import Params
from .runs import predict
from .schema import FIELDS, make_record
from .variants import parse_variant


class Diverged(RuntimeError):
    """Training produced a non-finite loss."""


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW groups: no decay for biases, norms and parameters tagged `no_weight_decay`."""
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        skip = param.ndim <= 1 or getattr(param, "no_weight_decay", False)
        (no_decay if skip else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine(warmup_steps: int, total_steps: int, lr: float, min_lr: float):
    """LR multiplier: linear warmup to 1, then cosine decay to min_lr/lr."""
    floor = min_lr / lr

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def _rng_state(device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


_RECORD_FIELDS = {f.name for f in FIELDS}


def _checkpoint_device(checkpoint: dict) -> str:
    """The device type a checkpoint was trained on (older ones: told by the generator state's size,
    5,056 bytes for the CPU's Mersenne twister, 16 for CUDA's Philox seed and offset)."""
    return checkpoint.get("device_type") or ("cpu" if checkpoint["generator"].numel() > 16 else "cuda")


def _checkpoint_precision(checkpoint: dict, amp: str) -> str:
    """The precision a checkpoint was trained in (older ones: earlier rpevit took bf16 on any CUDA
    device for amp auto / bf16, fp32 elsewhere)."""
    if "precision" in checkpoint:
        return checkpoint["precision"]
    return "bf16" if _checkpoint_device(checkpoint) == "cuda" and amp in ("auto", "bf16") else "fp32"


def _restore_generator(generator, checkpoint: dict, device, seed: int, label: str) -> None:
    """The data-order generator as the checkpoint left it; from a checkpoint of another device type
    (whose generator state this device cannot take), a fresh stream seeded by (seed, epoch)."""
    trained_on = _checkpoint_device(checkpoint)
    if trained_on == device.type:
        generator.set_state(checkpoint["generator"])
        return
    generator.manual_seed(seed * 1_000_003 + checkpoint["epoch"])
    print(
        f"[{label}] note: the checkpoint was trained on {trained_on}, this process trains on {device.type}: "
        "the data-order generator is reseeded from (seed, epoch), so the run goes on correctly but "
        "not bit for bit as one uninterrupted run would",
        flush=True,
    )


def compiles(train_cfg, device) -> bool:
    """torch.compile is used where asked for and on CUDA (on the CPU it costs more than it saves)."""
    return bool(train_cfg.compile) and device.type == "cuda"


def _compile_ahead(forward, model, dataset, batch_sizes, device, amp: str, ddp: bool) -> float:
    """Compile the training graphs before the first timed epoch: a forward and backward of every
    batch size the epochs will see, with the random state forked (dropout masks are drawn and
    forgotten) and the gradients dropped, so training itself is unchanged. Returns the seconds
    spent, reported as the record's compile_seconds instead of inside epoch 1's time."""
    info = dataset.info
    with metrics.Timer(device) as timer, torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for size in batch_sizes:
            x = data_lib.normalize(dataset.train.images[:size].float() / 255, info).to(device)
            y = dataset.train.labels[:size].to(device)
            if ddp:
                x, y, _, _ = distributed.shard(x, y)
            with autocast(device, amp):
                logits = forward(x)
            F.cross_entropy(logits.float(), y).backward()
        model.zero_grad(set_to_none=True)
    return timer.seconds


def _check_precision(checkpoint: dict, precision: str, amp: str, path: Path) -> None:
    """One clear error where resuming would switch a run's precision (its key does not change)."""
    trained = _checkpoint_precision(checkpoint, amp)
    if trained != precision:
        raise UserError(
            f"{path} was trained in {trained} (on {_checkpoint_device(checkpoint)}) but this process "
            f"would continue in {precision} (train.amp: {amp}): one run must not change precision "
            f"half-way. Resume it on a device where train.amp: {amp} means {trained}, or move {path} "
            "aside to train the run again from the start."
        )


def _checkpoint_state(path: Path, key_matches, label: str):
    """The newest good checkpoint of this run, or None (other settings' checkpoints are kept aside)."""
    checkpoint = records.load_checkpoint(path)
    if checkpoint is None:
        return None
    if not key_matches(checkpoint.get("key")):
        records.supersede(path.parent, f"other settings than this run ({label})")
        return None
    return checkpoint


def _distributed_checkpoint(path: Path, key_matches, label: str):
    """The checkpoint to resume from, on every rank: rank 0 chooses it (moving damaged or foreign
    files aside as in one process) and names the file; the other ranks read that file."""
    if distributed.is_main():
        checkpoint = _checkpoint_state(path, key_matches, label)
        # load_checkpoint reads checkpoint.pt unless it is missing or damaged (then moved aside)
        source = (
            None if checkpoint is None else str(path if path.is_file() else path.with_name(records.PREVIOUS_CHECKPOINT))
        )
        distributed.broadcast_object((source, None if checkpoint is None else checkpoint["epoch"]))
        return checkpoint
    source, epoch = distributed.broadcast_object()
    if source is None:
        return None
    checkpoint = torch.load(source, map_location="cpu", weights_only=False)
    if checkpoint.get("epoch") != epoch:
        raise RuntimeError(
            f"rank {distributed.rank()} read epoch {checkpoint.get('epoch')} from {source} where "
            f"rank 0 read epoch {epoch}: every rank must see the same runs directory."
        )
    return checkpoint


def train_run(
    params: Params,
    dataset,
    variant: str,
    seed: int,
    out_dir: Path | None = None,
    *,
    epochs: int | None = None,
    resume: bool = True,
    progress: bool = False,
    on_epoch_end=None,
    runs_root=None,
) -> dict:
    """Train one variant on a loaded dataset, test the best-validation weights, write the record.

    The run directory is locked while training (RunBusy if a live process holds it). A finished
    run with the same settings is returned as it is, never retrained or degraded; results made
    with other settings are moved to `superseded/`, not overwritten. `resume` continues from the
    newest good checkpoint made with the same settings. `on_epoch_end(row)` is called after each
    epoch's checkpoint is safely on disk. A non-finite loss writes a `diverged` record and raises.
    """
    info = dataset.info
    variant = parse_variant(variant).name
    out_dir = Path(out_dir or records.run_dir(params.name, info.name, variant, seed, runs_root, epochs))

    def key_matches(stored):
        return runs.matches(stored, params, info.name, variant, seed, epochs)

    if distributed.active():
        return _train_run_distributed(
            params, dataset, variant, seed, out_dir, epochs, resume, progress, on_epoch_end, key_matches
        )
    with records.RunLock(out_dir):
        records.clean_temporary(out_dir)
        existing = records.read_record(out_dir)
        if existing is not None and key_matches(existing.get("key")):
            print(f"[{variant} | {info.name} | seed {seed}] already {existing['status']}: {out_dir / records.RECORD}")
            return existing
        if existing is not None:
            records.supersede(out_dir, "other settings than the preset has now")
        try:
            return _train(params, dataset, variant, seed, out_dir, epochs, resume, progress, on_epoch_end, key_matches)
        except Diverged as exc:
            _write_diverged(params, info, variant, seed, out_dir, epochs, exc)
            raise


def _write_diverged(params, info, variant, seed, out_dir, epochs, exc) -> None:
    records.write_json(
        out_dir / records.RECORD,
        make_record(
            preset=params.name,
            dataset=info.name,
            variant=variant,
            seed=seed,
            backend=parse_variant(variant).backend,
            positions=list(parse_variant(variant).positions),
            status="diverged",
            message=str(exc),
            key=runs.run_key(params, info.name, variant, seed, epochs),
            config=runs.run_config(params, info.name, variant, epochs),
        ),
    )


def _train_run_distributed(
    params, dataset, variant, seed, out_dir, epochs, resume, progress, on_epoch_end, key_matches
) -> dict:
    """train_run under torchrun: rank 0 holds the lock and decides (already done / train); every rank
    trains; rank 0 writes. Ranks > 0 return {"status": "trained", "rank": r} (no record) and raise
    PeerFailed where rank 0 raises (rank 0 prints the error)."""
    info = dataset.info
    if not distributed.is_main():
        decision, payload = distributed.broadcast_object()
        if decision == "done":
            return payload
        if decision == "error":
            raise distributed.PeerFailed(code=payload)
        try:
            _train(params, dataset, variant, seed, out_dir, epochs, resume, progress, None, key_matches)
        except Diverged:
            raise distributed.PeerFailed(code=1) from None
        return {"status": "trained", "rank": distributed.rank()}
    decided = False
    try:
        with records.RunLock(out_dir):
            records.clean_temporary(out_dir)
            existing = records.read_record(out_dir)
            if existing is not None and key_matches(existing.get("key")):
                print(
                    f"[{variant} | {info.name} | seed {seed}] already {existing['status']}: {out_dir / records.RECORD}"
                )
                distributed.broadcast_object(("done", existing))
                decided = True
                return existing
            if existing is not None:
                records.supersede(out_dir, "other settings than the preset has now")
            distributed.broadcast_object(("train", None))
            decided = True
            try:
                return _train(
                    params, dataset, variant, seed, out_dir, epochs, resume, progress, on_epoch_end, key_matches
                )
            except Diverged as exc:
                _write_diverged(params, info, variant, seed, out_dir, epochs, exc)
                raise
    except BaseException as exc:
        if not decided:  # the others wait for the decision: tell them rank 0 failed
            distributed.broadcast_object(("error", 2 if isinstance(exc, UserError) else 1))
        raise


def _train(params, dataset, variant, seed, out_dir, epochs, resume, progress, on_epoch_end, key_matches) -> dict:
    with deterministic(runs.train_config_for(params, epochs).deterministic):
        return _train_here(params, dataset, variant, seed, out_dir, epochs, resume, progress, on_epoch_end, key_matches)


def _train_here(params, dataset, variant, seed, out_dir, epochs, resume, progress, on_epoch_end, key_matches) -> dict:
    info = dataset.info
    label = f"{variant} | {info.name} | seed {seed}"
    model_cfg, train_cfg = runs.model_config_for(params, info.name), runs.train_config_for(params, epochs)
    key = runs.run_key(params, info.name, variant, seed, epochs)
    device = resolve_device(train_cfg.device)
    recipe = data_lib.recipe_for(info, params.data.augment)
    ddp = distributed.active()  # torchrun: this rank trains on its shard of every global batch
    main = distributed.is_main()
    if ddp:
        device = distributed.device_for(device)

    torch.manual_seed(seed)
    model = build_model(variant, model_cfg, seed=seed).to(device)
    if ddp:
        distributed.seed_other_ranks(seed)
    optimizer = torch.optim.AdamW(param_groups(model, train_cfg.weight_decay), lr=train_cfg.lr)
    steps_per_epoch = data_lib.num_batches(len(dataset.train), train_cfg.batch_size)
    schedule = warmup_cosine(
        max(1, round(train_cfg.warmup_epochs * steps_per_epoch)),
        train_cfg.epochs * steps_per_epoch,
        train_cfg.lr,
        train_cfg.min_lr,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    generator = torch.Generator(device=device).manual_seed(seed)  # augmentation + order, on the device
    history: list[dict] = []
    best = {"val_acc": -1.0, "epoch": 0, "state": None}
    start_epoch = 0

    checkpoint_path = out_dir / records.CHECKPOINT
    if ddp:
        checkpoint = _distributed_checkpoint(checkpoint_path, key_matches, label) if resume else None
    else:
        checkpoint = _checkpoint_state(checkpoint_path, key_matches, label) if resume else None
    precision = "bf16" if uses_bf16(device, train_cfg.amp) else "fp32"
    if checkpoint is not None:
        _check_precision(checkpoint, precision, train_cfg.amp, checkpoint_path)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        _restore_generator(generator, checkpoint, device, seed, label)
        if not ddp:
            _set_rng_state(checkpoint["rng"], device)
        else:  # each rank its own stream; ranks a checkpoint has none for (more ranks now) keep theirs
            rank_states = checkpoint.get("rng_ranks") or [checkpoint["rng"]]
            if distributed.rank() < len(rank_states):
                _set_rng_state(rank_states[distributed.rank()], device)
        history, best, start_epoch = checkpoint["history"], checkpoint["best"], checkpoint["epoch"]
        if main:
            print(f"[{label}] resuming after epoch {start_epoch}", flush=True)

    compiled = compiles(train_cfg, device)
    if ddp:
        sample = data_lib.normalize(dataset.train.images[:1].float() / 255, info).to(device)
        trainer = distributed.wrap(model, device, sample)
        if main:
            print(
                f"[{label}] data-parallel over {distributed.world_size()} processes, global batch "
                f"{train_cfg.batch_size}",
                flush=True,
            )
    else:
        trainer = model
    forward = torch.compile(trainer) if compiled else trainer
    compile_seconds = 0.0
    if compiled and start_epoch < train_cfg.epochs:
        last = len(dataset.train) % train_cfg.batch_size
        sizes = [train_cfg.batch_size] + ([last] if last else [])
        compile_seconds = _compile_ahead(forward, model, dataset, sizes, device, train_cfg.amp, ddp)
    # CPU: reading the flag each step costs nothing; CUDA: once per epoch, so no step waits on the host
    check_every_step = device.type == "cpu"
    metrics.reset_peak_memory(device)
    for epoch in range(start_epoch, train_cfg.epochs):
        model.train()
        loss_sum, correct, seen = torch.zeros((), device=device), torch.zeros((), device=device), 0
        first_bad_step = torch.full((), -1, device=device)
        batch_iter = data_lib.batches(
            dataset.train, info, train_cfg.batch_size, shuffle=True, generator=generator, recipe=recipe
        )
        if progress and main:
            from tqdm.auto import tqdm

            batch_iter = tqdm(
                batch_iter,
                total=steps_per_epoch,
                leave=False,
                desc=f"{variant} {info.name} epoch {epoch + 1}/{train_cfg.epochs}",
            )
        with metrics.Timer(device) as timer:
            for step, (x, y) in enumerate(batch_iter):
                if ddp:  # this rank's shard; the weight makes DDP's mean the global-batch gradient
                    x, y, rows, weight = distributed.shard(x, y)
                with autocast(device, train_cfg.amp):
                    logits = forward(x)
                loss = F.cross_entropy(logits.float(), y, label_smoothing=train_cfg.label_smoothing)
                bad = ~torch.isfinite(loss)
                if ddp and check_every_step:  # every rank stops at the same step
                    bad = distributed.any_rank(bad)
                first_bad_step = torch.where(bad & (first_bad_step < 0), step, first_bad_step)
                if check_every_step and bad:
                    break
                optimizer.zero_grad(set_to_none=True)
                if ddp:
                    (loss if weight == 1.0 else loss * weight).backward()
                else:
                    loss.backward()
                if train_cfg.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
                optimizer.step()
                scheduler.step()
                model.count_training_step()  # outside the compiled forward: FAVOR+ redraws
                if ddp and rows == 0:
                    continue  # a stand-in row (empty shard): no data of this rank in this step
                loss_sum += loss.detach() * len(y)
                correct += (logits.argmax(-1) == y).sum()
                seen += len(y)
        if ddp:  # the global batch's numbers: sums over ranks, the earliest bad step of any rank
            first_bad_step = distributed.first_step(first_bad_step)
            loss_sum, correct, seen = distributed.all_reduce_sum(loss_sum, correct, torch.tensor(seen, device=device))
            seen = int(seen)
        if int(first_bad_step) >= 0:
            kept = (
                f"the last good checkpoint (epoch {epoch}) is kept at {checkpoint_path}"
                if epoch
                else "no epoch had finished, so no checkpoint was written"
            )
            raise Diverged(
                f"{variant} on {info.name} (seed {seed}): non-finite loss at epoch {epoch + 1}, "
                f"step {int(first_bad_step) + 1}; {kept}."
            )
        if ddp:
            distributed.check_replicas(model)
            rank_states = distributed.all_gather_object(_rng_state(device))
            if not main:
                continue  # rank 0 validates and writes; the others go on to the next epoch
        val_logits, val_labels = predict(model, dataset.val, info, train_cfg.eval_batch_size, device, train_cfg.amp)
        row = {
            "epoch": epoch + 1,
            "train_loss": loss_sum.item() / seen,
            "train_acc": correct.item() / seen,
            "val_loss": F.cross_entropy(val_logits, val_labels).item(),
            "val_acc": (val_logits.argmax(-1) == val_labels).float().mean().item(),
            "lr": optimizer.param_groups[0]["lr"],
            "seconds": timer.seconds,
        }
        history.append(row)
        if row["val_acc"] > best["val_acc"]:
            best = {
                "val_acc": row["val_acc"],
                "epoch": epoch + 1,
                "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
            }
        state = {
            "key": key,
            "epoch": epoch + 1,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "generator": generator.get_state(),
            "device_type": device.type,
            "precision": precision,
            "rng": _rng_state(device),
            "history": history,
            "best": best,
        }
        if ddp:
            state["rng_ranks"] = rank_states
        records.save_checkpoint(checkpoint_path, state)
        records.write_csv(out_dir / records.HISTORY, history)
        print(
            f"[{label}] epoch {epoch + 1}/{train_cfg.epochs} "
            f"train loss {row['train_loss']:.4f} acc {row['train_acc']:.4f} | "
            f"val loss {row['val_loss']:.4f} acc {row['val_acc']:.4f} | {row['seconds']:.1f}s",
            flush=True,
        )
        if on_epoch_end is not None:
            on_epoch_end(row)
    if not main:
        return {"status": "trained", "rank": distributed.rank()}
    train_peak_mb = metrics.peak_memory_mb(device)
    records.write_csv(out_dir / records.HISTORY, history)  # complete even if a kill came before its last write

    print(
        f"[{label}] testing the best-validation weights (epoch {best['epoch']}), counting FLOPs, timing inference",
        flush=True,
    )
    model.load_state_dict(best["state"])
    test_logits, test_labels = predict(model, dataset.test, info, train_cfg.eval_batch_size, device, train_cfg.amp)
    num_params = metrics.count_parameters(model)
    timing_images = runs.timing_images(dataset, train_cfg, device)
    epoch_seconds = [row["seconds"] for row in history]
    record = make_record(
        **{
            "preset": params.name,
            "dataset": info.name,
            "variant": variant,
            "backend": parse_variant(variant).backend,
            "positions": list(parse_variant(variant).positions),
            "seed": seed,
            "status": "finished",
            "key": key,
            "epochs": train_cfg.epochs,
            "best_epoch": best["epoch"],
            "best_val_acc": best["val_acc"],
            **metrics.classification_metrics(test_logits, test_labels, num_params),
            # per-image test predictions (space-separated class indices, in test-split order): paired statistics
            "test_predictions": " ".join(map(str, test_logits.argmax(-1).tolist())),
            "test_correct": metrics.correct_string(test_logits, test_labels),
            "num_params": num_params,
            "flops_per_image": metrics.matmul_flops(model, timing_images[:2]),
            "train_seconds_per_epoch": sum(epoch_seconds) / len(epoch_seconds),
            "train_images_per_second": len(dataset.train) * len(epoch_seconds) / sum(epoch_seconds),
            **metrics.inference_timing(
                model,
                timing_images,
                batch_size=train_cfg.eval_batch_size,
                amp="bf16" if precision == "bf16" else "off",
                compile_model=compiled,
            ),
            **metrics.machine_load(),
            "peak_memory_mb": train_peak_mb,
            "device": str(device),
            "device_name": device_name(device),
            "amp": precision,
            "compiled": compiled,
            "compile_seconds": compile_seconds,
            "torch": torch.__version__,
            "data_source": dataset.source,
            "augment": recipe,
            "config": runs.run_config(params, info.name, variant, epochs),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **({"world_size": distributed.world_size()} if ddp and "world_size" in _RECORD_FIELDS else {}),
        }
    )
    records.write_json(out_dir / records.RECORD, record)
    return record
