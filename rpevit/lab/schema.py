"""The run record: one typed schema from which the record, the summary table's columns and the
analysis tables' metric columns all derive, so the field list exists once.

Each field's metadata: `label` (column name in analysis tables), `scale` (factor shown, e.g. 100
for accuracies in %), `summary` (a column of reports/<preset>/summary.*), `metric` (a number
averaged over seeds per variant in analysis tables), `result` (part of what a run computed, compared
when two runs must agree: resume, engines, data-parallel).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

FINISHED = "finished"  # a record's status once it was tested (the others: diverged; failed / skipped rows)
DIVERGED = "diverged"  # a record's status when training produced a non-finite loss (no test metrics)


def is_finished(record) -> bool:
    """True for a record (a dict as written, or a rpevit.lab.result.Result) of a run that finished
    (trained and tested); diverged runs have no metrics."""
    if record is None:
        return False
    return (record.get("status") if isinstance(record, dict) else record.status) == FINISHED


def finished(records) -> list[dict]:
    """The records of runs that finished, in their order: the one filter every report and rule uses."""
    return [r for r in records if is_finished(r)]


def _f(
    label: str | None = None,
    scale: float = 1,
    summary: bool = True,
    metric: bool = False,
    default=None,
    result: bool = False,
    **kwargs,
):
    metadata = {"label": label, "scale": scale, "summary": summary, "metric": metric, "result": result}
    if "default_factory" in kwargs:
        return field(default_factory=kwargs["default_factory"], metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class RunRecord:
    """Everything a finished run wrote: identity, test metrics, costs, where and how it ran."""

    preset: str = _f(summary=False)
    dataset: str = _f()
    variant: str = _f()
    backend: str = _f()
    positions: list = _f(default_factory=list)
    seed: int = _f(default=0)
    status: str = _f(default="finished", result=True)  # finished | diverged
    key: str = _f(summary=False, result=True)  # rpevit.lab.store.run.Run.key
    epochs: int = _f(result=True)
    best_epoch: int = _f(result=True)
    best_val_acc: float = _f("val top-1 %", 100, result=True)
    top1: float = _f("top-1 %", 100, metric=True, result=True)
    top5: float = _f("top-5 %", 100, metric=True, result=True)
    precision: float = _f("precision %", 100, metric=True, result=True)  # macro
    recall: float = _f("recall %", 100, metric=True, result=True)  # macro
    f1: float = _f("F1 %", 100, metric=True, result=True)  # macro
    log_likelihood: float = _f("log-lik", metric=True, result=True)  # Σ log p(y|x) over the test set
    aic: float = _f("AIC", metric=True, result=True)
    bic: float = _f("BIC", metric=True, result=True)
    n_test: int = _f(summary=False)
    num_params: int = _f("params", metric=True, result=True)
    flops_per_image: int = _f("MFLOPs/img", 1e-6, metric=True, result=True)  # forward matmul FLOPs
    train_seconds_per_epoch: float = _f("s/epoch", metric=True)
    # the process's CPU seconds per epoch (what a one-thread CPU budget counts); None in runs recorded before
    train_cpu_seconds_per_epoch: float = _f(summary=False)
    train_images_per_second: float = _f("train img/s", metric=True)
    ms_per_image_batched: float = _f("ms/img (batch, in-run timing)", metric=True)
    ms_single_image: float = _f("ms/img (single, in-run timing)", metric=True)
    peak_memory_mb: float = _f("peak MB", metric=True)  # training peak: CUDA allocated / CPU resident set
    load_average: float = _f()  # 1-minute load when the timings were taken
    cpu_count: int = _f(summary=False)
    threads: int = _f()  # torch CPU threads; bit-exact resume holds for the same count
    world_size: int = _f(summary=False, default=1)  # processes of a torchrun data-parallel run
    device: str = _f()
    device_name: str = _f(summary=False)
    amp: str = _f()
    compiled: bool = _f(summary=False, default=False)
    compile_seconds: float = _f(summary=False, default=0.0)  # torch.compile's time before epoch 1 (not in its seconds)
    torch: str = _f(summary=False)
    code_revision: str = _f(summary=False)  # rpevit.lab.revision: the git commit (+dirty), else a hash of the sources
    # every code revision the run was trained under, in order (a resumed run may pass through several; the last is
    # code_revision): "unrecorded" first where it resumed from a checkpoint older than these lists; [] in older records
    code_revisions: list = _f(summary=False, default_factory=list)
    # every CPU or GPU the run trained on, in order (the last is device_name), like code_revisions: a run resumed in
    # another sitting may pass through several machines; "unrecorded" first, or [], as there
    device_names: list = _f(summary=False, default_factory=list)
    data_source: str = _f(summary=False)
    augment: str = _f(summary=False)
    test_predictions: str = _f(summary=False, result=True)  # space-separated predicted classes, test-split order
    # per test image "1" (right) or "0", in test-split order: the paired statistics read it
    test_correct: str = _f(summary=False, result=True)
    config: dict = _f(summary=False, default_factory=dict)  # rpevit.lab.store.run.Run.config
    finished_at: str = _f(summary=False)
    message: str = _f(summary=False)  # why a run diverged
    resolution_eval: list = _f(summary=False, default_factory=list, result=True)  # rpevit.lab.training.evaluate
    # train.budgets: budget (epochs, as text) → best epoch, val and test top-1, test_correct and the
    # cool-down's history of the shorter budget branched from this run (rpevit.core.budgets)
    budgets: dict = _f(summary=False, default_factory=dict, result=True)
    # a run that went on from another preset's run (rpevit.lab.training.continuation): that preset, the run's key,
    # the epoch it started after and the budgets it inherited
    continued_from: dict | None = _f(summary=False, default=None)


FIELDS = dataclasses.fields(RunRecord)
SUMMARY_COLUMNS = [f.name for f in FIELDS if f.metadata["summary"]]
METRIC_COLUMNS = [(f.name, f.metadata["label"], f.metadata["scale"]) for f in FIELDS if f.metadata["metric"]]
RESULT_FIELDS = [f.name for f in FIELDS if f.metadata["result"]]


def result_view(record: dict) -> dict:
    """What a run's result is — no timings, hosts or dates: equal for runs that computed the same."""
    return {name: record.get(name) for name in RESULT_FIELDS}


def make_record(**values) -> dict:
    """A record as plain data; an unknown field is an error (the schema is the one list of fields)."""
    return dataclasses.asdict(RunRecord(**values))


def epoch_cost(row: dict) -> float:
    """The seconds an epoch (history row) counts against a one-thread CPU budget: the process's CPU
    seconds, or its wall seconds where the history predates them (a wall second under load is not a
    CPU second: two processes sharing a core each take twice the wall time)."""
    return float(row["cpu_seconds"] if "cpu_seconds" in row else row["seconds"])
