"""The gap pilot's report: gaps per budget from the records and their branches, the pre-registered
go/no-go rule and the factorial's seed count."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from campaign import budget, feature_draws, gap_arithmetic, gap_pilot
from campaign.orders import next_in_order
from rpevit.core.errors import UserError
from rpevit.lab.params import load_params
from rpevit.lab.result import results
from rpevit.lab.tables import signed


def _record(variant, seed, top1_by_budget):
    budgets = {str(b): {"top1": t / 100} for b, t in top1_by_budget.items() if b != 32}
    return {
        "variant": variant,
        "seed": seed,
        "dataset": "fashion_mnist_canvas40",
        "status": "finished",
        "epochs": 32,
        "top1": top1_by_budget[32] / 100,
        "budgets": budgets,
    }


def _found(favor_gap_32, relu_gap_32):
    found = []
    for seed, wobble in ((1, 0.0), (2, 0.4)):
        soft = {8: 80.0, 16: 84.0, 32: 86.0}
        found.append(_record("softmax+ape", seed, soft))
        found.append(_record("favor+ape", seed, {8: 79.0, 16: 83.0, 32: 86.0 + favor_gap_32 + wobble}))
        found.append(_record("relu+ape", seed, {8: 80.0, 16: 84.0, 32: 86.0 + relu_gap_32 - wobble}))
    return found


def test_gaps_per_budget_come_from_records_and_their_branches():
    top1 = gap_arithmetic.budget_top1(_found(-2.0, -0.5))
    rows = {(r["backend"], r["epochs"]): r for r in gap_arithmetic.gap_rows(top1, [8, 16, 32], [1, 2])}
    assert rows[("favor", 8)]["mean gap"] == pytest.approx(-1.0)
    assert rows[("favor", 32)]["mean gap"] == pytest.approx(-1.8) and rows[("favor", 32)]["seeds"] == 2
    assert rows[("favor", 32)]["SD"] == pytest.approx(0.4 / math.sqrt(2))
    assert rows[("relu", 32)]["gaps (per seed)"] == "−0.50, −0.90"


def test_go_no_go_is_the_pre_registered_rule():
    for favor, relu, go in ((-2.0, -0.5, True), (-1.0, -0.5, False), (0.5, -1.6, True)):
        rows = gap_arithmetic.gap_rows(gap_arithmetic.budget_top1(_found(favor, relu)), [8, 16, 32], [1, 2])
        line = gap_pilot.decision(rows, 32, complete=True)
        assert line.startswith("**GO**" if go else "**NO-GO**"), line
    assert gap_pilot.decision(gap_arithmetic.gap_rows({}, [32], [1, 2]), 32, True).startswith("**Go/no-go: not decided")
    # interim, the next pilot is conditional; once complete (or the budget ended it), it is the order's next
    rows = gap_arithmetic.gap_rows(gap_arithmetic.budget_top1(_found(-1.0, -0.5)), [32], [1, 2])
    assert ". If it ends NO-GO, next by the pre-registered order: " in gap_pilot.decision(rows, 32, complete=False)
    assert ". Next by the pre-registered order: " in gap_pilot.decision(rows, 32, complete=True)


def test_the_trend_of_the_gap_with_budget_has_an_interval_and_a_verdict():
    """From 16 to 32 epochs: each Performer's change of gap over seeds, 95 % t-interval, read as widened /
    narrowed / inconclusive; nothing is said without two seeds of a full pair."""
    top1 = {}
    for seed, (favor_change, relu_change) in enumerate([(-1.0, 0.5), (-1.1, -0.5), (-0.9, 0.3)], start=1):
        top1 |= {("softmax+ape", seed, 16): 84.0, ("softmax+ape", seed, 32): 87.0}
        top1 |= {("favor+ape", seed, 16): 84.0, ("favor+ape", seed, 32): 87.0 + favor_change}
        top1 |= {("relu+ape", seed, 16): 84.0, ("relu+ape", seed, 32): 87.0 + relu_change}
    variants = ["softmax+ape", "favor+ape", "relu+ape"]
    line = gap_arithmetic.trend_line(top1, variants, [1, 2, 3], 16, 32)
    half = scipy_stats.t.ppf(0.975, 2) * 0.1 / math.sqrt(3)
    assert f"favor −1.00 [{-1 - half:.2f}, {-1 + half:.2f}] (3 seeds, widened)".replace("-", "−") in line
    assert "relu +0.10" in line and "(3 seeds, inconclusive)" in line
    assert "negative in every seed" not in line and "gained +1.90 to +3.50 points" in line
    assert gap_arithmetic.trend_line(top1, variants, [1], 16, 32) == ""  # one seed: no interval, no sentence
    # a study whose primary contrasts test these changes: means only, no unadjusted verdict beside Holm's
    tested = gap_arithmetic.trend_line(top1, variants, [1, 2, 3], 16, 32, tested=True)
    assert "favor −1.00 (3 seeds)" in tested and "primary contrasts below" in tested
    assert "widened" not in tested and "inconclusive" not in tested and "[" not in tested


def test_seed_count_reaches_a_quarter_of_the_gap():
    n = gap_arithmetic.seeds_needed(2.0, 1.0)
    half_width = lambda k: scipy_stats.t.ppf(0.975, k - 1) / math.sqrt(k)  # noqa: E731
    assert half_width(n) <= 0.5 < half_width(n - 1)
    assert gap_arithmetic.seeds_needed(0.01, 1.0) is None
    rows = gap_arithmetic.gap_rows(gap_arithmetic.budget_top1(_found(-2.0, -0.5)), [32], [1, 2])
    text = gap_pilot.factorial_seeds(rows, 32)
    assert "G = 1.80 points" in text and "0.83" in text  # √2 × 0.28 < 0.83: the floor holds


def test_the_report_is_written_from_the_records(tmp_path, monkeypatch):
    from rpevit.lab.store import catalog

    monkeypatch.setattr(catalog, "study_records", lambda params, reports_root=None: results(_found(-2.0, -0.5)))
    lines = gap_pilot.write_report("canvas_gap_pilot", reports_root=tmp_path)
    text = (tmp_path / "canvas_gap_pilot" / "README.md").read_text()
    assert text == "\n".join(lines) + "\n" and "6 of 6 runs finished" in text
    assert "under fresh random features" not in text  # its feature draws not measured
    assert "**GO**: favor is behind softmax by 1.80 points at 32 epochs" in text
    assert "| favor+ape | 2 | 79.00 | 83.00 | 84.40 |" in text  # the per-run table, budgets from the branches
    assert (tmp_path / "canvas_gap_pilot" / "pilot_gaps.csv").is_file()
    found = {"as trained": 84.4, "fresh": [15.0, 17.0]}
    drawn = feature_draws.row("favor+ape", 1, {"epochs": 32, "top1": 0.844}, found)
    feature_draws.write(load_params("canvas_gap_pilot"), [drawn], reports_root=tmp_path)
    text = "\n".join(gap_pilot.write_report("canvas_gap_pilot", reports_root=tmp_path))
    assert "## FAVOR+ under fresh random features" in text and "16.00 % on average over 2 fresh draws" in text


def test_a_no_go_names_the_next_pilot_of_the_pre_registered_order():
    rows = gap_arithmetic.gap_rows(gap_arithmetic.budget_top1(_found(-1.0, -0.5)), [8, 16, 32], [1, 2])
    order = ("canvas_gap_pilot", "canvas56_gap_pilot", "canvas56_dial16")
    nexts = [gap_pilot.decision(rows, 32, True, preset) for preset in order]
    assert "params/canvas56_gap_pilot.yaml" in nexts[0] and "params/canvas56_dial16.yaml" in nexts[1]
    assert "params/canvas56_dial8.yaml" in nexts[2]
    assert "no pilot opened a gap" in gap_pilot.decision(rows, 32, True, "canvas56_dial8")
    from rpevit.lab.params import list_presets

    assert {p for p in gap_pilot.NEXT_AFTER_NO_GO} <= set(list_presets())


def test_a_finished_no_go_hands_the_sitting_the_next_pilot(monkeypatch):
    """`gap-pilot --next` (the GPU sitting's chain): the next preset only once every run finished and the
    rule says NO-GO; nothing on GO, while a run is missing, or at the end of the order."""
    from rpevit.lab.store import catalog

    def reads(found):
        monkeypatch.setattr(catalog, "study_records", lambda params, reports_root=None: results(found))

    monkeypatch.setattr(budget, "training_hours", lambda *args, **kwargs: (0.0, 0.0))  # the budget is not spent
    reads(_found(-1.0, -0.5))
    assert gap_pilot.next_pilot("canvas_gap_pilot") == "canvas56_gap_pilot"
    reads(_found(-1.0, -0.5)[:-1])
    assert gap_pilot.next_pilot("canvas_gap_pilot") is None
    reads(_found(-2.0, -0.5))
    assert gap_pilot.next_pilot("canvas_gap_pilot") is None
    for preset, text in gap_pilot.NEXT_AFTER_NO_GO.items():
        assert f"params/{next_in_order(preset)}.yaml" in text  # the prose and the chain agree


def test_the_56_pilot_is_the_40_pilot_on_the_larger_canvas():
    """Pre-registered to differ from the 40×40 pilot only in its task."""
    import dataclasses

    from rpevit.lab.params import load_params

    forty, fifty_six = load_params("canvas_gap_pilot"), load_params("canvas56_gap_pilot")
    assert fifty_six.datasets == ("fashion_mnist_canvas56",)
    same = ("variants", "seeds", "model", "train", "data", "order", "keep_records")
    assert {k: getattr(fifty_six, k) for k in same} == {k: getattr(forty, k) for k in same}
    renamed = dataclasses.replace(fifty_six, name=forty.name, description=forty.description, datasets=forty.datasets)
    assert renamed == forty


REFERENCE = """name: ref
keep_records: true
datasets: [mnist5k]
variants: [softmax+ape, favor+ape, relu+ape]
seeds: [1, 2]
model: {dim: 32, depth: 2, heads: 2, mlp_dim: 64}
train: {epochs: 32, schedule: wsd, budgets: [8, 16], amp: "off"}
"""


def _dial(tmp_path, reference=REFERENCE, dial_extra="", features=4):
    (tmp_path / "ref.yaml").write_text(reference)
    dial = tmp_path / "dial.yaml"
    dial.write_text(
        REFERENCE.replace("name: ref", f"name: dial\nreference: {tmp_path / 'ref.yaml'}")
        .replace("[softmax+ape, favor+ape, relu+ape]", "[favor+ape]")
        .replace("mlp_dim: 64}", f"mlp_dim: 64, favor: {{num_features: {features}}}}}")
        + dial_extra
    )
    return dial


def _keep(run, top1_by_budget):
    from rpevit.lab.store import records

    record = {
        **_record(run.variant, run.seed, top1_by_budget),
        **{"key": run.key, "dataset": run.dataset, "best_epoch": 32, "best_val_acc": 0.9, "top5": 0.99},
    }
    records.write_json(run.kept_dir / "record.json", record)


def test_a_feature_dial_reads_softmax_from_its_reference_and_decides_on_favor_alone(tmp_path, monkeypatch):
    """The dial trains favor+ape only; its gap is against the reference's softmax+ape runs (same keys),
    and the reference's own Performers (relu here, 3 points behind) never enter its go/no-go."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store.catalog import reference_records
    from rpevit.lab.store.run import Run

    dial = load_params(_dial(tmp_path))
    reference = load_params(tmp_path / "ref.yaml")
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    for seed, favor in ((1, -1.2), (2, -0.6)):
        _keep(Run(reference, "mnist5k", "softmax+ape", seed, **roots), {8: 80.0, 16: 84.0, 32: 86.0})
        _keep(Run(reference, "mnist5k", "relu+ape", seed, **roots), {8: 80.0, 16: 84.0, 32: 83.0})
        _keep(Run(dial, "mnist5k", "favor+ape", seed, **roots), {8: 80.0, 16: 84.0, 32: 86.0 + favor})
    assert {(r.variant, r.seed) for r in reference_records(dial, **roots)} == {
        (v, s) for v in ("softmax+ape", "relu+ape") for s in (1, 2)
    }
    monkeypatch.setenv("RPEVIT_RUNS", str(roots["runs_root"]))
    lines = gap_pilot.write_report(str(tmp_path / "dial.yaml"), reports_root=roots["reports_root"])
    text = "\n".join(lines)
    assert "**NO-GO**" in text and "favor −0.90 (2 seeds)" in text and "relu" not in text.split("## Gap")[1]
    assert "| softmax+ape (from ref) | 1 | 80.00 | 84.00 | 86.00 |" in text
    assert "| favor+ape (4 features) | 2 | 80.00 | 84.00 | 85.40 |" in text
    assert "read from `ref`'s kept records (2 finished" in text
    assert (roots["reports_root"] / "dial" / "README.md").is_file()


def test_a_reference_trained_otherwise_is_one_error_before_training(tmp_path, capsys):
    """softmax+ape does not read model.favor, so only that may differ; another lr makes other runs."""
    from rpevit.cli import main
    from rpevit.lab.params import load_params
    from rpevit.lab.store.catalog import reference_runs

    assert len(reference_runs(load_params(_dial(tmp_path)))) == 4  # softmax and relu, seeds 1 and 2
    dial = _dial(tmp_path, dial_extra="").read_text().replace('amp: "off"}', 'amp: "off", lr: 0.01}')
    (tmp_path / "dial.yaml").write_text(dial)
    with pytest.raises(UserError, match=r"reference \(ref\): its softmax\+ape runs use other data, training"):
        reference_runs(load_params(tmp_path / "dial.yaml"))
    code = main(["study", str(tmp_path / "dial.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "its softmax+ape runs" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("keep_records: true\n", ""), "keep its records"),
        (("seeds: [1, 2]", "seeds: [1]"), r"train the seeds \[1, 2\]"),
        (("datasets: [mnist5k]", "datasets: [fashion_mnist]"), "use the datasets"),
        (("[softmax+ape, favor+ape, relu+ape]", "[favor+ape]"), "train a variant this preset does not list"),
    ],
)
def test_a_reference_preset_is_checked_when_the_dial_loads(tmp_path, change, message):
    from rpevit.lab.params import load_params

    path = _dial(tmp_path, reference=REFERENCE.replace(*change))
    with pytest.raises(UserError, match=r"reference \(.*ref\.yaml\): a reference preset must .*" + message):
        load_params(path)
    selfish = path.read_text().replace(f"reference: {tmp_path / 'ref.yaml'}", "reference: dial")
    path.write_text(selfish)
    with pytest.raises(UserError, match="cannot read its own records"):
        load_params(path)


def test_training_time_is_read_against_the_budget_the_preset_states(tmp_path):
    """Epoch seconds of finished runs (with their cool-down branches) and of unfinished checkpoints count;
    the budget is the one the pre-registration's header states, and an overrun is said plainly."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run

    assert [budget.stated_budget(p) for p in [*gap_pilot.NEXT_AFTER_NO_GO, "canvas56_dial8"]] == [10, 20, 12, 12]
    assert budget.stated_budget("smoke") is None
    dial = load_params(_dial(tmp_path))
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    done, training = (Run(dial, "mnist5k", "favor+ape", seed, **roots) for seed in (1, 2))
    _keep(done, {8: 80.0, 16: 84.0, 32: 86.0})
    record = records.read_record(done.kept_dir)
    record["budgets"]["8"]["history"] = [{"epoch": 7, "seconds": 1800.0}, {"epoch": 8, "seconds": 1800.0}]
    records.write_json(done.kept_dir / "record.json", record)
    row = {"train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "val_acc": 0.5, "lr": 0.001, "seconds": 225.0}
    records.write_csv(done.kept_dir / "history.csv", [{"epoch": e, **row} for e in range(1, 33)])
    records.write_csv(training.dir / "history.csv", [{"epoch": 1, **row, "seconds": 1800.0}])
    # an unfinished run's cool-downs already branched live in its checkpoint
    branched = {"8": {"history": [{"seconds": 900.0}]}}
    records.save_checkpoint(training.dir / records.CHECKPOINT, {"epoch": 1, "branches": branched})
    hours, running = budget.training_hours(dial, **roots)
    assert (hours, running) == (pytest.approx(3.75), pytest.approx(0.75))
    assert budget.budget_line(3.5, 0.5, 12).endswith("of its pre-registered budget of 12 one-thread CPU hours.")
    assert "**over** its pre-registered budget of 3 one-thread CPU hours by 0.5" in budget.budget_line(3.5, 0, 3)
    assert budget.budget_line(1.0, 0, None).endswith("the preset states no CPU budget.")
    assert budget.budget_line(1.0, 0, 12).startswith("Training time so far: 1.0 hours")
    assert budget.budget_line(1.0, 0, 12, complete=True).startswith("Training time in all: 1.0 hours")


def test_a_fresh_clone_counts_the_epochs_of_runs_parked_by_another_checkout(tmp_path):
    """A run another checkout parked (reports/<preset>/parked/, parking.py) spends budget before it is restored
    here: its checkpoint's own history and cool-downs count, and a copy here that went further counts instead
    (once, never both)."""
    import io

    import torch

    from campaign import parking
    from rpevit.lab.params import load_params
    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run

    dial = load_params(_dial(tmp_path))
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    run = Run(dial, "mnist5k", "favor+ape", 1, **roots).rooted()
    row = {"train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "val_acc": 0.5, "lr": 0.001, "seconds": 9.0}
    history = [{"epoch": e, **row, "cpu_seconds": 360.0} for e in (1, 2)]
    buffer = io.BytesIO()
    torch.save({"epoch": 2, "history": history, "branches": {"8": {"history": [{"cpu_seconds": 180.0}]}}}, buffer)
    records.write_bytes(parking.parked_checkpoint(run), buffer.getvalue())
    assert not run.dir.exists()  # nothing in runs/: a fresh clone
    assert budget.training_hours(dial, **roots) == (pytest.approx(0.25), pytest.approx(0.25))
    assert budget.training_hours(dial, finished_only=True, **roots) == (0.0, 0.0)
    further = [*history, {"epoch": 3, **row, "cpu_seconds": 360.0}]
    records.write_csv(run.dir / "history.csv", further)
    records.save_checkpoint(run.dir / records.CHECKPOINT, {"epoch": 3})  # no cool-downs branched here
    assert budget.training_hours(dial, **roots) == (pytest.approx(0.3), pytest.approx(0.3))
    assert "0.3 of them in runs still training" in budget.budget_line(0.3, 0.3, 12)


def test_an_epoch_counts_its_cpu_seconds_where_its_history_has_them(tmp_path):
    """A budget counts CPU seconds (a busy machine's waits are wall time, not work), in the history and in
    the cool-downs; a history begun before they were recorded counts its wall seconds, and a run resumed
    from one goes on in its seven columns."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run

    dial = load_params(_dial(tmp_path))
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    new, old = (Run(dial, "mnist5k", "favor+ape", seed, **roots) for seed in (1, 2))
    row = {"train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "val_acc": 0.5, "lr": 0.001}
    records.write_csv(new.dir / "history.csv", [{"epoch": 1, **row, "seconds": 1800.0, "cpu_seconds": 900.0}])
    branched = {"8": {"history": [{"seconds": 900.0, "cpu_seconds": 450.0}]}}
    records.save_checkpoint(new.dir / records.CHECKPOINT, {"epoch": 1, "branches": branched})
    assert budget.training_hours(dial, **roots) == (pytest.approx(0.375), pytest.approx(0.375))
    wall_only = [{"epoch": 1, **row, "seconds": 1800.0}]
    records.write_csv(old.dir / "history.csv", wall_only)
    records.save_checkpoint(old.dir / records.CHECKPOINT, {"epoch": 1})
    assert budget.training_hours(dial, **roots) == (pytest.approx(0.875), pytest.approx(0.875))
    assert records.read_history(old.dir) == wall_only  # read as written, not moved aside
    going_on = records.in_history_columns({"epoch": 2, **row, "seconds": 2.0, "cpu_seconds": 1.0}, wall_only)
    assert tuple(going_on) == records.WALL_ONLY_HISTORY_COLUMNS
    fresh = {"epoch": 1, **row, "seconds": 2.0, "cpu_seconds": 1.0}
    assert records.in_history_columns(fresh, []) == fresh


@pytest.mark.parametrize(("preset", "features"), [("canvas56_dial16", 16), ("canvas56_dial8", 8)])
def test_the_feature_dials_are_the_56_pilot_with_fewer_favor_features(preset, features):
    """Pre-registered to change only FAVOR+'s feature count, and to read softmax from the 56×56 pilot."""
    import dataclasses

    from rpevit.lab.params import load_params
    from rpevit.lab.store.catalog import reference_runs

    dial, pilot = load_params(preset), load_params("canvas56_gap_pilot")
    assert (dial.variants, dial.reference, dial.seeds) == (("favor+ape",), pilot.name, pilot.seeds)
    assert (dial.data, dial.train, dial.datasets, dial.order) == (pilot.data, pilot.train, pilot.datasets, pilot.order)
    assert dial.model.options_for("favor").num_features == features
    assert dataclasses.replace(dial.model, options={}) == pilot.model
    assert {run.variant for run in reference_runs(dial)} == {"softmax+ape", "relu+ape"}


def test_a_collapsed_run_is_reported_apart_and_left_out_of_the_gaps(tmp_path, monkeypatch):
    """One policy for collapsed runs in every report: FAVOR+ seed 2's validation fell from 80 % to 20 %
    (toward chance), so its gap is not read at its early best epoch; seed 1's gap alone remains."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run

    dial = load_params(_dial(tmp_path))
    reference = load_params(tmp_path / "ref.yaml")
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    for seed in (1, 2):
        _keep(Run(reference, "mnist5k", "softmax+ape", seed, **roots), {8: 80.0, 16: 84.0, 32: 86.0})
        _keep(Run(dial, "mnist5k", "favor+ape", seed, **roots), {8: 80.0, 16: 84.0, 32: 84.0})
    fell = Run(dial, "mnist5k", "favor+ape", 2, **roots)
    row = {"train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "lr": 0.001, "seconds": 1.0, "cpu_seconds": 1.0}
    falling = [{"epoch": e, **row, "val_acc": 0.8 if e < 20 else 0.2} for e in range(1, 33)]
    records.write_csv(fell.kept_dir / "history.csv", falling, list(records.HISTORY_COLUMNS))
    monkeypatch.setenv("RPEVIT_RUNS", str(roots["runs_root"]))
    text = "\n".join(gap_pilot.write_report(str(tmp_path / "dial.yaml"), reports_root=roots["reports_root"]))
    assert "Collapsed (validation top-1 fell toward chance; reported apart, not in any gap): favor+ape seed 2." in text
    assert "favor −2.00 (1 seed)" in text and "| favor | 32 | 1 | −2.00 |" in text
    # the curves of the runs with a history: the collapsed one drawn apart, in a panel of its own
    assert "![Training loss, validation loss and validation top-1 per epoch](pilot_curves.png)" in text
    assert (roots["reports_root"] / "dial" / "pilot_curves.png").stat().st_size > 10_000


def test_a_spent_budget_starts_no_run_and_a_finished_study_still_writes_its_summary(tmp_path, monkeypatch, capsys):
    """The pre-registered rule "≤ N one-thread CPU hours": once the epoch time of the preset's runs
    reaches it, `study` starts nothing more (one line saying so) but finishes a run it had started;
    within it, or with nothing left, it goes on."""
    from campaign import hooks
    from rpevit.cli import main
    from rpevit.lab.params import load_params
    from rpevit.lab.schedule import status as study_status
    from rpevit.lab.schedule.cell import State
    from rpevit.lab.schedule.study import plain_order, started_runs
    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run

    path = _dial(tmp_path)
    path.write_text("# Budget: ≤ 0.5 one-thread CPU hours (a test)\n" + path.read_text())
    dial = load_params(path)
    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("RPEVIT_REPORTS", str(tmp_path / "reports"))
    assert budget.stated_budget(path) == 0.5 and budget.budget_spent(dial, path) is None  # nothing spent yet
    row = {"train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "val_acc": 0.5, "lr": 0.001, "seconds": 1900.0}
    started = Run(dial, "mnist5k", "favor+ape", 1).rooted().dir
    records.write_csv(started / "history.csv", [{"epoch": 1, **row}])
    records.save_checkpoint(started / records.CHECKPOINT, {"epoch": 1, "branches": {}})
    spent = budget.budget_spent(dial, path)
    assert spent.startswith("dial: its pre-registered budget of 0.5 one-thread CPU hours is spent (0.5 hours")
    unstarted = Run(dial, "mnist5k", "favor+ape", 2).rooted()
    assert [run.seed for run in started_runs(dial)] == [1]
    monkeypatch.setattr(budget, "stated_budget", lambda preset: 0.5)  # the campaign's gate finds it by name
    todo = [(Run(dial, "mnist5k", "favor+ape", s).rooted(), State(train=True)) for s in (1, 2)]
    gates = [lambda run: hooks.refusal(dial, run.runs_root, run.reports_root)]
    assert [run.seed for run, _ in plain_order(dial, todo, gates=gates)] == [1]  # the started run goes on
    # the time in a run still training here does not end the pilot: only finished runs' time counts there,
    # so every machine with the kept records reads the same
    assert gap_pilot.budget_ended(dial, gap_pilot.pilot_records(dial)) == ""
    assert capsys.readouterr().out.strip() == f"not started: favor+ape on mnist5k, seed 2 ({spent})"
    from rpevit.lab.schedule import study

    calls = []
    monkeypatch.setattr(study, "run_study", lambda params, **kw: calls.append(params.name) or [])
    assert main(["study", str(path), "--no-progress"]) == 0 and calls == ["dial"]  # the study goes on for it
    monkeypatch.undo()
    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("RPEVIT_REPORTS", str(tmp_path / "reports"))
    capsys.readouterr()
    # the started run finished (its kept record and history): the spent budget starts nothing more
    shutil.rmtree(started)
    finished_run = Run(dial, "mnist5k", "favor+ape", 1).rooted()
    _keep(finished_run, {8: 80.0, 16: 84.0, 32: 86.0})
    records.write_csv(
        finished_run.kept_dir / "history.csv", [{"epoch": e, **row, "seconds": 60.0} for e in range(1, 33)]
    )
    spent = budget.budget_spent(dial, path)
    assert spent is not None
    assert main(["study", str(path), "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == spent
    assert not unstarted.dir.exists()  # nothing started
    # so the budget ended the pilot: its go/no-go is final, not interim
    monkeypatch.setattr(budget, "stated_budget", lambda preset: 0.5)
    assert gap_pilot.budget_ended(dial, gap_pilot.pilot_records(dial)) == "1 of 2"
    status = study_status.status_lines(dial)  # the campaign's hooks: its budget line, its gate
    assert status[1].startswith("Training time in all: ") and "over its pre-registered budget of 0.5" in status[1]
    assert f"left: 1 run, which a start gate refuses: {spent}" in status[2:]
    rows = gap_arithmetic.gap_rows(gap_arithmetic.budget_top1(_found(-1.0, -0.5)), [8, 16, 32], [1, 2])
    line = gap_pilot.decision(rows, 32, False, "canvas56_gap_pilot", budget_ended="5 of 6")
    assert "(its budget is spent with 5 of 6 runs finished: no new run starts; the rule reads" in line
    assert "interim" in gap_pilot.decision(rows, 32, False, "canvas56_gap_pilot")


def test_a_spent_budget_ends_the_pilot_only_after_its_started_runs_finish(tmp_path, monkeypatch):
    """A run started before the budget was spent is finished (study resumes it), so the pilot's verdict
    waits for it, whether its checkpoint is here or parked by another checkout; then the pilot ends, and
    the order moves on."""
    from campaign import parking, pilot_overview
    from rpevit.lab.params import load_params
    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("RPEVIT_REPORTS", str(tmp_path / "reports"))
    monkeypatch.setattr(budget, "stated_budget", lambda preset: 0.5)
    path = _dial(tmp_path)
    dial = load_params(path)
    done, flying = (Run(dial, "mnist5k", "favor+ape", seed).rooted() for seed in (1, 2))
    _keep(done, {8: 80.0, 16: 84.0, 32: 86.0})
    row = {"train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "val_acc": 0.5, "lr": 0.001, "seconds": 60.0}
    records.write_csv(done.kept_dir / "history.csv", [{"epoch": e, **row} for e in range(1, 33)])  # 0.53 h
    reference = Run(load_params(tmp_path / "ref.yaml"), "mnist5k", "softmax+ape", 1).rooted()
    _keep(reference, {8: 82.0, 16: 86.0, 32: 90.0})  # FAVOR+ 4 points behind: a GO once the pilot ends

    def reading():
        found = gap_pilot.pilot_records(dial)
        return gap_pilot.budget_ended(dial, found), gap_pilot.verdict_of(dial, found)

    records.save_checkpoint(flying.dir / records.CHECKPOINT, {"epoch": 3})
    records.write_csv(flying.dir / records.HISTORY, [{"epoch": e, **row} for e in range(1, 4)])
    assert [run.seed for run in budget.runs_in_flight(dial)] == [2] and reading() == ("", "")  # training here
    assert [(v, s, len(rows)) for v, s, rows in gap_pilot.pilot_records(dial)["in_flight"]] == [("favor+ape", 2, 3)]
    assert gap_pilot.budget_reading(dial, gap_pilot.pilot_records(dial)) == ("", 1)
    waits = "GO (interim: budget spent, 1 started run(s) finish first)"  # the overview says why it is open
    row = pilot_overview.overview_row(str(path))[0]
    assert row["go/no-go"] == waits and row["runs"] == "1 of 2, 1 in flight"
    parked = tmp_path / "reports" / "dial" / parking.PARKED / "mnist5k" / "favor+ape" / "seed2"
    assert parking.parked_checkpoint(flying) == parked / records.CHECKPOINT
    parked.mkdir(parents=True)
    (flying.dir / records.CHECKPOINT).rename(parked / records.CHECKPOINT)
    assert [run.seed for run in budget.runs_in_flight(dial)] == [2] and reading() == ("", "")  # parked elsewhere
    shutil.rmtree(parked)
    assert budget.runs_in_flight(dial) == [] and reading() == ("1 of 2", "GO")  # nothing in flight: it ended
    assert pilot_overview.overview_row(str(path))[0]["go/no-go"] == "GO (budget spent at 1 of 2)"


def test_the_overview_gives_each_pilot_its_gap_with_an_interval(tmp_path, monkeypatch):
    """Every pilot of the order, a line each: the 40×40 pilot's gaps from its records with the t-interval
    of the per-seed gaps, a dial without ReLU, pilots without records as not yet decided; the file is
    what the command prints."""
    from campaign import pilot_overview
    from rpevit.lab.store import catalog

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))  # no run in flight, whatever trains here
    order = ["canvas_gap_pilot", "canvas56_gap_pilot", "canvas56_dial16", "canvas56_dial8"]
    assert pilot_overview.pilot_order() == order

    def records_of(params, reports_root=None):
        return results(_found(-2.0, -0.5) if params.name == "canvas_gap_pilot" else [])

    monkeypatch.setattr(catalog, "study_records", records_of)
    lines = pilot_overview.write_overview(reports_root=tmp_path)
    assert (tmp_path / pilot_overview.OVERVIEW).read_text() == "\n".join(lines) + "\n"
    assert (tmp_path / pilot_overview.FIGURE).stat().st_size > 0 and lines[-1].endswith("(gap_pilots.png)")
    assert not any(line.startswith("![") for line in pilot_overview.readme_block(lines))  # the README links it
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ") for line in lines if line.startswith("| `")}
    # the seed SD pooled over the two cells (favor −2.0, −1.6; relu −0.5, −0.9): df 2
    half = scipy_stats.t.ppf(0.975, 2) * math.sqrt(0.08) / math.sqrt(2)
    favor = f"{signed(-1.8)} [{signed(-1.8 - half)}, {signed(-1.8 + half)}] (2 seeds, softmax ahead)"
    assert "**GO on `canvas_gap_pilot`**" in lines[4] and "the factorial is pre-registered on its task" in lines[4]
    assert rows["canvas_gap_pilot"][1:4] == ["40×40, 101 tokens, FAVOR+ m = 48", "6 of 6", "GO"]
    assert rows["canvas_gap_pilot"][4] == favor
    # the 40×40 pilot said GO, so the order stops there: the later pilots wait for a NO-GO that has not come
    waiting = "waits for `canvas_gap_pilot`'s NO-GO"
    assert rows["canvas56_dial8"][1:4] == ["56×56, 197 tokens, FAVOR+ m = 8", "0 of 2", waiting]
    assert rows["canvas56_gap_pilot"][3] == waiting
    assert rows["canvas56_dial8"][5].startswith("not in this pilot")
    found = _found(-1.0, -0.5)  # now NO-GO: the order goes on to the 56×56 pilot, which has no runs
    monkeypatch.setattr(
        catalog, "study_records", lambda p, reports_root=None: results(found if "56" not in p.name else [])
    )
    rows, standing, *_ = pilot_overview.overview_rows(reports_root=tmp_path)
    assert standing.startswith("**The order stands at `canvas56_gap_pilot`** (runs finished: 0 of 6)")
    assert [r["go/no-go"] for r in rows[:2]] == ["NO-GO", "no pair finished yet"]
    three = {"seeds": 3, "mean gap": -2.0, "SD": 0.1}
    assert pilot_overview.gap_interval(three).endswith("(3 seeds, softmax ahead)")
    assert pilot_overview.gap_interval({**three, "mean gap": 2.0}).endswith("(3 seeds, Performer ahead)")
    assert pilot_overview.gap_interval({"seeds": 1, "mean gap": -1.0, "SD": math.nan}) == "−1.00 (1 seed, no interval)"


def test_when_every_pilot_ends_no_go_the_overview_says_so_with_the_largest_deficit(monkeypatch):
    """The order's end without a gap is the answer on these tasks: the standing sentence says so, with the
    furthest a Performer fell behind (its mean gap at the pilot's longest budget, backend and pilot)."""
    from campaign import pilot_overview

    deficits = {
        "canvas_gap_pilot": [(-0.73, -4.85, "favor"), (-0.52, -1.28, "relu")],
        "canvas56_gap_pilot": [(-0.02, -4.72, "favor"), (0.5, None, "relu")],
        "canvas56_dial8": [],
    }

    def row(preset, reports_root=None, before=None):
        gaps = deficits.get(preset, [(0.4, -0.3, "favor")])
        read = {"gaps": gaps, "early": {}, "moved": {}, "gains": [], "budgets": (), "by_budget": {}}
        return {"pilot": f"`{preset}`"}, "NO-GO", read

    monkeypatch.setattr(pilot_overview, "overview_row", row)
    _, standing, *_ = pilot_overview.overview_rows()
    assert standing.startswith("**No Performer was ≥ 1.5 points behind softmax at a pilot's longest budget")
    assert "every pilot of the pre-registered order ended NO-GO" in standing
    assert "the furthest behind on average was −0.73 points (favor on `canvas_gap_pilot`)" in standing
    assert "no gap of the size the rule asks at these budgets, not no gap" in standing
    # the honest limit: the lowest lower bound of any interval, the gap two seeds cannot exclude
    assert "a gap of 1.5 points is not excluded (the lowest interval bound reaches −4.85, favor on" in standing
    # with bounds above −1.5 (a pooled SD) every interval excludes it
    pooled = {"sd": 0.3, "df": 5, "cells": 5, "bartlett_p": 0.5}
    narrow = pilot_overview.no_gap_anywhere([(-0.73, -1.33, "favor", "canvas_gap_pilot")], pooled)
    assert "(seed SD 0.30 pooled over 5 cells, df 5, Bartlett p 0.50) excludes a gap of 1.5" in narrow
    deficits.update(canvas_gap_pilot=[(0.2, None, "relu")], canvas56_gap_pilot=[(0.1, None, "favor")])
    deficits.update(canvas56_dial16=[], canvas56_dial8=[])  # Performers ahead, one seed each: no interval
    standing = pilot_overview.overview_rows()[1]
    assert "no Performer was behind softmax on average" in standing
    assert "not excluded" not in standing


def test_the_overview_says_how_the_gaps_moved_with_training_across_the_pilots():
    """What a go/no-go at the longest budget cannot see, counted over every pilot's seed pairs: who was ahead
    at the shortest budget, whose gap moved toward softmax between the two longest, and the runs' gains."""
    from campaign.pilot_overview import readings, training_trend
    from rpevit.lab.params import load_params

    params = load_params("canvas56_dial8")  # favor only, seeds 1 and 2, budgets 8/16/32
    top1 = {}
    for seed, (soft, favor) in {
        1: ((80.0, 85.0, 88.0), (81.0, 85.5, 87.5)),
        2: ((79.0, 85.0, 88.5), (80.0, 84.5, 88.6)),
    }.items():
        for epochs, s, f in zip((8, 16, 32), soft, favor):
            top1[("softmax+ape", seed, epochs)], top1[("favor+ape", seed, epochs)] = s, f
    decided = [{"backend": "favor", "mean gap": -0.2, "seeds": 2, "SD": 0.4}]
    read = readings(params, top1, decided)
    assert read["early"] == {"favor": [1.0, 1.0]} and read["budgets"] == (8, 16, 32)
    assert read["moved"]["favor"] == pytest.approx([-1.0, 0.6])  # (−0.5 − 0.5) and (+0.1 − (−0.5)), paired by seed
    assert sorted(read["gains"]) == pytest.approx([2.0, 3.0, 3.5, 4.1])
    relu = {"early": {"relu": [-0.5]}, "moved": {"relu": [-0.2]}, "gains": [2.5], "budgets": (8, 16, 32)}
    trend = training_trend([read, relu])
    assert "the Performer was ahead of softmax at 8 epochs: favor 2 of 2, relu 0 of 1;" in trend
    assert "its gap moved toward softmax from 16 to 32 epochs: favor 1 of 2, relu 1 of 1." in trend
    assert "Every run still gained +2.00 to +4.10 points" in trend
    assert training_trend([{**read, "moved": {}, "gains": []}]) == ""  # nothing to read before two budgets


def test_the_committed_overview_is_the_one_its_kept_records_give(tmp_path, monkeypatch):
    """reports/gap_pilots.md is regenerated (`python -m campaign gap-pilot --overview`) whenever a pilot's
    kept records or parked runs change: a finished run committed without it fails here. Read as a fresh
    clone reads it (runs/ empty: only what is tracked), so it checks the same here, beside runs still
    training, as in CI."""
    from campaign import pilot_overview
    from rpevit.lab.params import PROJECT_ROOT

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    committed = (PROJECT_ROOT / "reports" / pilot_overview.OVERVIEW).read_text()
    assert committed == "\n".join(pilot_overview.overview_lines()) + "\n"


@pytest.mark.parametrize("preset", ["fmnist_converged", "smoke", "params/smoke.yaml"])
def test_gap_pilot_refuses_a_study_that_is_not_a_pilot_and_writes_nothing(preset, capsys):
    """`gap-pilot fmnist_converged` once overwrote that study's report with a bogus pilot page."""
    from campaign.cli import main
    from rpevit.lab.params import PROJECT_ROOT

    folder = PROJECT_ROOT / "reports" / Path(preset).stem
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    assert main(["gap-pilot", preset]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: gap-pilot reports a gap pilot")
    assert "canvas_gap_pilot" in err[0] and "notebooks" in err[0]
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before


def test_the_longer_study_needs_the_interval_below_minus_half_a_point_too():
    """canvas40_long's pre-registered GO: mean gap ≤ −1.5 and the upper end of its 95 % interval < −0.5."""
    tight = {"backend": "favor", "epochs": 64, "seeds": 4, "mean gap": -1.6, "SD": 0.3}
    wide = {**tight, "SD": 2.0}  # upper end −1.6 + t(3)·2/2 ≈ +1.58
    assert gap_pilot.is_go([tight], "canvas40_long") and gap_pilot.is_go([wide])  # the order's rule: mean only
    assert not gap_pilot.is_go([wide], "canvas40_long")
    assert not gap_pilot.is_go([{**tight, "seeds": 1, "SD": math.nan}], "canvas40_long")
    # one word for every reader of the rule (the report's decision, its one line, the overview's row)
    assert gap_pilot.rule_verdict([wide], "canvas40_long") == "NO-GO" and gap_pilot.rule_verdict([wide]) == "GO"
    assert gap_pilot.rule_verdict([], "canvas40_long") == ""
    line = gap_pilot.decision([wide], 64, complete=True, preset="canvas40_long")
    assert line.startswith("**NO-GO**") and "upper end of its 95 % interval below −0.5" in line
    assert gap_pilot.decision([tight], 64, complete=True, preset="canvas40_long").startswith("**GO**")


def test_the_report_lists_the_code_revisions_its_runs_came_from():
    a, b, c = "a" * 40, "b" * 40 + "+dirty", "c" * 40
    found = [
        {"variant": "softmax+ape", "seed": s, "status": "finished", "top1": 0.9, "code_revision": rev}
        for s, rev in ((1, a), (2, a), (3, b), (4, ""))
    ]
    from rpevit.lab.revision import UNRECORDED, revisions_line

    line = revisions_line(results(found))
    assert line.startswith("Code revisions its finished runs were trained from: ")
    assert f"`{'a' * 12}` (2 runs)" in line and f"`{'b' * 12}+dirty` (1 run)" in line and "`unnamed` (1 run)" in line
    assert "— 2 from an uncommitted, unnamed or unrecorded revision" in line
    assert line.endswith("— 4 recorded before records listed every revision (only their last is known).")

    listed = [
        {"variant": "favor+ape", "seed": s, "status": "finished", "top1": 0.9, "code_revision": revs[-1],
         "code_revisions": revs}
        for s, revs in ((1, [a, c]), (2, [c]), (3, [UNRECORDED, c]))
    ]  # fmt: skip
    line = revisions_line(results(listed))
    assert f"`{'a' * 12}` (1 run), `{'c' * 12}` (3 runs), `unrecorded` (1 run)" in line
    assert line.endswith("— 1 from an uncommitted, unnamed or unrecorded revision — 2 resumed across revisions.")
    assert revisions_line([]) == "Code revisions: no finished run yet."


def test_the_report_names_the_machines_its_runs_trained_on():
    """Float results depend on the CPU: a report counts each machine a run trained on (resumed runs under each)."""
    from rpevit.lab.revision import UNRECORDED, machines_line, provenance_line

    found = [
        {"variant": "favor+ape", "seed": s, "status": "finished", "top1": 0.9, "code_revision": "a" * 40,
         "code_revisions": ["a" * 40], "device_name": names[-1] if names else "AMD EPYC", "device_names": names}
        for s, names in ((1, []), (2, ["AMD EPYC", "Intel Xeon"]), (3, [UNRECORDED, "Intel Xeon"]), (4, ["Intel Xeon"]))
    ]  # fmt: skip
    line = machines_line(results(found))
    assert line.startswith("Machines they trained on: `AMD EPYC` (2 runs), `Intel Xeon` (3 runs), `unrecorded` (1 run)")
    assert line.endswith(
        "— 1 resumed on another machine — 2 trained before records listed every machine (only the last is known)."
    )
    assert machines_line([]) == "" and provenance_line([]) == "Code revisions: no finished run yet."
    both = provenance_line(results(found[3:]))
    revisions = f"Code revisions its finished runs were trained from: `{'a' * 12}` (1 run)."
    assert both == revisions + " Machines they trained on: `Intel Xeon` (1 run)."


def test_the_overview_ends_with_each_longer_study_s_line_which_the_readme_pilots_block_leaves_out(tmp_path):
    """reports/gap_pilots.md says where the pilots' question went next (each long_study.QUOTED study's one line,
    linked); the README quotes that line in its own long block, so its pilots block leaves the paragraph out."""
    from campaign import long_study, pilot_overview

    assert pilot_overview.longer_lines(tmp_path) == []  # no report yet: nothing said
    name = long_study.QUOTED[0]
    (tmp_path / name).mkdir()
    (tmp_path / name / "README.md").write_text(
        f"# {name}\n\n**In one line**: `{name}`, 3 of 20 runs: **NO-GO so far**.\n"
    )
    said = pilot_overview.longer_lines(tmp_path)
    assert said == [
        "",
        f"**Trained longer** after these pilots, each pre-registered in its own preset ([{name}]({name}/README.md)): "
        f"`{name}`, 3 of 20 runs: **NO-GO so far**.",
    ]
    lines = ["# t", "", "**No Performer**", "", "| a |", "|---|", "| 1 |", "", "After the table.", *said]
    assert pilot_overview.readme_block(lines) == [
        "**No Performer**",
        "",
        "| a |",
        "|---|",
        "| 1 |",
        "",
        "After the table.",
    ]
