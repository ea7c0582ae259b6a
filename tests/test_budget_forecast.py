"""The budget forecast: the runs left one after another under the stopping rule, at the CPU seconds per
epoch each variant's runs took so far (campaign/budget_forecast.py)."""

from __future__ import annotations

import pytest
from test_gap_pilot import REFERENCE, _keep

from campaign.budget_forecast import Left, budget_sentences, forecast, measured, project

RATES = {"softmax+ape": 60.0, "favor+ape": 120.0}  # CPU seconds per epoch
LEFT = [Left("favor+ape", 1, 4), *(Left(v, s, 0) for s in (2, 3) for v in RATES)]


def test_the_runs_left_train_in_order_until_the_budget_is_spent():
    """10 epochs a run: seed 1's favor has 6 left (0.2 h), each later seed 10 + 20 minutes (0.5 h)."""
    assert project(RATES, 10, LEFT, 1.0, 99) == (pytest.approx(2.2), set())
    # from 1.0 h against a 1.5 h budget: seed 2's softmax starts at 1.2 h, its favor at 1.3667 h, and each
    # finishes; seed 3's softmax would start at 1.7 h, past the budget, so neither of seed 3's runs starts
    assert project(RATES, 10, LEFT, 1.0, 1.5) == (pytest.approx(1.7), {3})
    # a started run finishes even when the budget is already spent; nothing after it starts
    assert project(RATES, 10, LEFT, 2.0, 1.5) == (pytest.approx(2.2), {2, 3})


def test_the_forecast_gives_the_range_of_paces_and_the_seeds_it_leaves_whole():
    rates = {"softmax+ape": [60.0, 60.0], "favor+ape": [120.0, 240.0]}
    text = forecast(rates, 10, LEFT, 1.0, 1.9, seeds=[1, 2, 3])
    assert "the 5 runs left" in text and "favor+ape 2.0–4.0" in text and "softmax+ape 1.0–1.0" in text
    # fastest: ends at 1.0 + 0.2 + 0.5 + 0.5 = 2.2 h; slowest (favor 4 min an epoch): seed 3's softmax would
    # start at 1.0 + 0.4 + 0.1667 + 0.6667 = 2.23 h, past 1.9, so seed 3 does not finish
    assert "the epoch time to 2.2 hours at the fastest pace and 2.2 at the slowest" in text
    assert "the seeds with all their runs are 1, 2 at the slowest pace and 1–3 at the fastest" in text
    assert "every seed's runs start within the budget" in forecast(rates, 10, LEFT, 1.0, 99, seeds=[1, 2, 3])
    assert "are 1 at the slowest pace and 1, 2 at the fastest" in forecast(rates, 10, LEFT, 1.0, 1.45, [1, 2, 3])
    # more runs start at the fastest pace, so it can end later than the slowest: said, not left to puzzle over
    more = forecast(rates, 10, LEFT, 1.0, 1.45, [1, 2, 3])
    assert "1.7 hours at the fastest pace and 1.6 at the slowest (more runs start before the budget" in more
    assert "(more runs start" not in text
    assert forecast(rates, 10, [], 1.0, 99, [1]) == ""
    unmeasured = forecast({"softmax+ape": [60.0]}, 10, LEFT, 1.0, 99, [1, 2, 3])
    assert unmeasured == " No forecast of the runs left yet: favor+ape has no finished run or trained epoch to time."


def test_paces_and_epochs_are_read_from_the_records_and_checkpoints(tmp_path):
    """A finished run's epochs (its history and cool-downs) fix a run's length; every run's CPU seconds per
    epoch so far, finished or not, is a pace of its variant; a run gone on from another preset's gives none."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run

    (tmp_path / "ref.yaml").write_text("# Budget: ≤ 3 one-thread CPU hours.\n" + REFERENCE + "order: seed\n")
    params = load_params(tmp_path / "ref.yaml")
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    done, going, continued = (Run(params, "mnist5k", v, 1, **roots) for v in ("softmax+ape", "favor+ape", "relu+ape"))
    row = {"train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "val_acc": 0.5, "lr": 0.001, "seconds": 9.0}
    _keep(done, {8: 80.0, 16: 84.0, 32: 86.0})
    record = records.read_record(done.kept_dir)
    for budget, epochs in (("8", 2), ("16", 4)):
        record["budgets"][budget]["history"] = [{"cpu_seconds": 30.0}] * epochs
    records.write_json(done.kept_dir / "record.json", record)
    records.write_csv(done.kept_dir / "history.csv", [{"epoch": e, **row, "cpu_seconds": 30.0} for e in range(1, 33)])
    records.write_csv(going.dir / "history.csv", [{"epoch": e, **row, "cpu_seconds": 90.0} for e in (1, 2, 3)])
    records.save_checkpoint(going.dir / records.CHECKPOINT, {"epoch": 3})
    records.write_csv(continued.dir / "history.csv", [{"epoch": 1, **row, "cpu_seconds": 9.0}])
    records.save_checkpoint(
        continued.dir / records.CHECKPOINT, {"epoch": 1, "continued_from": {"preset": "x", "epoch": 1, "budgets": []}}
    )
    rates, full, left = measured(params, **roots)
    assert rates == {"softmax+ape": [30.0], "favor+ape": [90.0]} and full == 38
    assert left[:3] == [Left("favor+ape", 1, 3), Left("relu+ape", 1, 1), Left("softmax+ape", 2, 0)]
    sentences = budget_sentences(params, tmp_path / "ref.yaml", complete=False, **roots)
    # relu's one run went on from another preset's, so it has no pace of its own yet
    assert "budget of 3 one-thread CPU hours. No forecast of the runs left yet: relu+ape has no" in sentences
    assert "Forecast" not in budget_sentences(params, tmp_path / "ref.yaml", complete=True, **roots)
