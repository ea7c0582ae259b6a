"""rpevit.lab.design: the pre-registered design's validation, training order, stopping rule and budget."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys

import pytest

from rpevit.core.errors import UserError
from rpevit.lab import design
from rpevit.lab.params import load_params
from rpevit.lab.result import results
from rpevit.lab.schedule import policy, time_limit
from rpevit.lab.schedule.wanted import planned_runs, primary_settled, secondary_held, snapshot, wanted
from rpevit.lab.store import catalog, records
from rpevit.lab.store.catalog import Snapshot
from rpevit.lab.store.run import Run

PRIMARY = ["softmax+ape", "favor+ape", "softmax+rope_mixed", "favor+rope_mixed"]
HEADER = f"""datasets: [mnist5k]
variants: [{", ".join(PRIMARY)}, softmax+krpe]
seeds: [0, 1, 2, 3, 4]
"""
DESIGN = f"""design:
  primary: [{", ".join(PRIMARY)}]
  secondary: [softmax+krpe]
  contrasts:
    - {{name: gap, kind: equal, terms: {{favor+ape: 1, softmax+ape: -1}}}}
    - name: closed
      kind: greater
      terms: {{favor+rope_mixed: 1, softmax+rope_mixed: -1, favor+ape: -1, softmax+ape: 1}}
  stopping: {{min_seeds: 2, max_seeds: 4, half_width: 0.5}}
  secondary_seeds: 2
"""


def preset(tmp_path, design_text=DESIGN, header=HEADER):
    path = tmp_path / "designed.yaml"
    path.write_text(header + design_text)
    return load_params(path)


def _two_secondary(tmp_path, **budgets):
    """The test preset with two secondary variants (softmax+krpe listed before favor+krpe)."""
    params = preset(
        tmp_path,
        DESIGN.replace("secondary: [softmax+krpe]", "secondary: [softmax+krpe, favor+krpe]"),
        HEADER.replace("softmax+krpe]", "softmax+krpe, favor+krpe]"),
    )
    return dataclasses.replace(params, design=dataclasses.replace(params.design, **budgets))


def test_primary_runs_seed_major_then_secondary_variant_by_variant(tmp_path):
    params = preset(tmp_path)
    order = catalog.grid(params)
    assert order[:4] == [("mnist5k", v, 0) for v in PRIMARY]  # every primary variant's seed 0 first
    assert order[4:8] == [("mnist5k", v, 1) for v in PRIMARY]
    assert [run[2] for run in order[:20]] == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4  # spare seed 4 too
    assert order[20:] == [("mnist5k", "softmax+krpe", 0), ("mnist5k", "softmax+krpe", 1)]
    # secondary variants in the order listed, each with all its seeds: a budget cut leaves the last untrained
    assert catalog.grid(_two_secondary(tmp_path))[20:] == [
        ("mnist5k", "softmax+krpe", 0),
        ("mnist5k", "softmax+krpe", 1),
        ("mnist5k", "favor+krpe", 0),
        ("mnist5k", "favor+krpe", 1),
    ]


def _finished(accuracies: dict, seconds=10.0, epochs=2):
    return [
        {
            "dataset": "mnist5k",
            "variant": v,
            "seed": s,
            "status": "finished",
            "top1": a,
            "train_seconds_per_epoch": seconds,
            "epochs": epochs,
        }
        for (v, s), a in accuracies.items()
    ]


def _accuracies(seeds, spread):
    """Primary accuracies whose contrasts vary across seeds by ±spread points."""
    out = {}
    for s in seeds:
        wobble = spread / 100 * (1 if s % 2 else -1)
        out.update(
            {
                ("softmax+ape", s): 0.90,
                ("favor+ape", s): 0.89 + wobble,
                ("softmax+rope_mixed", s): 0.91,
                ("favor+rope_mixed", s): 0.905,
            }
        )
    return out


def test_stopping_rule_adds_seeds_while_intervals_are_wide_and_stops_when_narrow(tmp_path):
    params = preset(tmp_path)
    run = ("mnist5k", "favor+ape", 2)
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 1), _finished(_accuracies([0], 0.0))) == ("train", "")
    # two seeds whose contrast differs by 2 points: the 95 % half-width is far above 0.5 → a third seed
    wide = _finished(_accuracies([0, 1], 1.0))
    assert policy.primary_progress(params, wide)[:2] == (2, 3)
    assert policy.decide(Run(params, *run), wide) == ("train", "")
    # identical contrasts in both seeds: half-width 0 → the rule is met at min_seeds, seed 2 is not started
    narrow = _finished(_accuracies([0, 1], 0.0))
    verdict, why = policy.decide(Run(params, *run), narrow)
    assert verdict == "skip" and "stopping rule needs 2 primary seeds" in why
    # wide at every seed: stops at max_seeds (4)
    wide4 = _finished(_accuracies([0, 1, 2, 3], 1.0))
    assert policy.decide(Run(params, "mnist5k", "favor+ape", 4), wide4)[0] == "skip"
    # secondary variants train once the primary grid is settled
    assert policy.decide(Run(params, "mnist5k", "softmax+krpe", 1), narrow) == ("train", "")


def test_runs_the_seeds_in_flight_decide_wait_for_them(tmp_path):
    """Two processes side by side: the one that finishes first neither starts the next primary seed
    nor jumps to a secondary variant while the other still trains the seed that decides both."""
    params = preset(tmp_path)  # min_seeds 2
    accuracy = _accuracies([0, 1, 2], 1.0)
    del accuracy[("favor+rope_mixed", 2)]
    partial, flying = _finished(accuracy), {("mnist5k", "favor+rope_mixed", 2)}
    verdict, why = policy.decide(Run(params, "mnist5k", "softmax+ape", 3), partial, flying)
    assert verdict == "wait" and "favor+rope_mixed seed 2 is in flight" in why
    verdict, why = policy.decide(Run(params, "mnist5k", "softmax+krpe", 0), partial, flying)
    assert verdict == "wait" and "primary grid comes first" in why
    # the seed's last run finished: wide → seed 3 trains, and the secondary waits for it in turn
    wide = _finished(_accuracies([0, 1, 2], 1.0))
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 3), wide) == ("train", "")
    assert policy.decide(Run(params, "mnist5k", "softmax+krpe", 0), wide, {("mnist5k", "softmax+ape", 3)})[0] == "wait"
    # narrow → seed 3 is not needed, and the secondary trains beside any leftover primary run
    narrow = _finished(_accuracies([0, 1, 2], 0.0))
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 3), narrow)[0] == "skip"
    assert policy.decide(Run(params, "mnist5k", "softmax+krpe", 0), narrow, flying) == ("train", "")
    # nothing in flight (the missing run failed): no waiting for what will not come
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 3), partial)[0] == "skip"
    assert policy.decide(Run(params, "mnist5k", "softmax+krpe", 0), partial) == ("train", "")
    # a run in flight of a later seed, or of another dataset, decides nothing here
    for elsewhere in (("mnist5k", "softmax+ape", 4), ("other", "favor+rope_mixed", 2)):
        assert policy.decide(Run(params, "mnist5k", "softmax+ape", 3), partial, {elsewhere})[0] == "skip"


def test_budget_stops_new_runs_once_spent(tmp_path):
    params = preset(tmp_path)
    params = dataclasses.replace(params, design=dataclasses.replace(params.design, budget_hours=1.0))
    spent = _finished(_accuracies([0, 1], 1.0), seconds=3600 / 16, epochs=2)  # 8 runs × 0.125 h = 1 h
    verdict, why = policy.decide(Run(params, "mnist5k", "softmax+krpe", 0), spent)
    assert verdict == "skip" and "budget of 1 training hours is spent (1.0 h)" in why


def _budgeted(tmp_path, **budgets):
    params = preset(tmp_path)
    return dataclasses.replace(params, design=dataclasses.replace(params.design, **budgets))


def test_a_primary_seed_starts_only_if_the_budget_covers_it_and_a_started_one_is_finished(tmp_path):
    # two complete primary seeds, 4 runs × 0.25 h each: 1 h per seed, 2 h spent
    wide = _finished(_accuracies([0, 1], 1.0), seconds=450, epochs=2)
    roomy, tight = _budgeted(tmp_path, budget_hours=3.0), _budgeted(tmp_path, budget_hours=2.9)
    assert policy.decide(Run(roomy, "mnist5k", "softmax+ape", 2), wide) == ("train", "")
    verdict, why = policy.decide(Run(tight, "mnist5k", "softmax+ape", 2), wide)
    assert verdict == "skip" and "budget left (0.9 of 2.9 training hours) does not cover another primary seed" in why
    # seed 2 started (one run finished, or one in flight): its other runs train even past the budget
    started = wide + _finished({("softmax+ape", 2): 0.9}, seconds=3600, epochs=2)
    assert policy.decide(Run(tight, "mnist5k", "favor+ape", 2), started) == ("train", "")
    flying = {("mnist5k", "softmax+ape", 2)}
    assert policy.decide(Run(tight, "mnist5k", "favor+ape", 2), wide, flying) == ("train", "")


def test_secondary_variants_can_have_their_own_budget(tmp_path):
    narrow = _finished(_accuracies([0, 1], 0.0), seconds=3600, epochs=2)  # primary settled, 16 h spent
    shared, own = (
        _budgeted(tmp_path, budget_hours=16.0),
        _budgeted(tmp_path, budget_hours=16.0, secondary_budget_hours=2.0),
    )
    assert policy.decide(Run(shared, "mnist5k", "softmax+krpe", 0), narrow)[0] == "skip"  # one budget: spent by primary
    assert policy.decide(Run(own, "mnist5k", "softmax+krpe", 0), narrow) == ("train", "")
    secondary = narrow + _finished({("softmax+krpe", 0): 0.9}, seconds=3600, epochs=2)
    # the budget is spent, but softmax+krpe has started: it trains all its seeds (a variant is trained whole)
    assert policy.decide(Run(own, "mnist5k", "softmax+krpe", 1), secondary) == ("train", "")
    two = _two_secondary(tmp_path, secondary_budget_hours=2.0)
    verdict, why = policy.decide(Run(two, "mnist5k", "favor+krpe", 0), secondary)  # a new variant does not start
    assert verdict == "skip" and "secondary budget of 2 training hours is spent (2.0 h)" in why
    assert policy.decide(Run(two, "mnist5k", "favor+krpe", 1), narrow, {("mnist5k", "favor+krpe", 0)}) == ("train", "")
    diverged = [{**secondary[-1], "variant": "favor+krpe", "status": "diverged"}] + secondary
    assert policy.decide(Run(two, "mnist5k", "favor+krpe", 1), diverged) == (
        "train",
        "",
    )  # started: its seed 0 diverged
    # secondary hours do not count against the primary budget: a new primary seed still fits
    wide = _finished(_accuracies([0, 1], 1.0), seconds=450, epochs=2)
    heavy = wide + _finished({("softmax+krpe", 0): 0.9}, seconds=36000, epochs=2)
    roomy = _budgeted(tmp_path, budget_hours=3.0, secondary_budget_hours=50.0)
    assert policy.decide(Run(roomy, "mnist5k", "softmax+ape", 2), heavy) == ("train", "")


def test_the_analysis_uses_the_complete_primary_seeds(tmp_path):
    params = preset(tmp_path)
    runs = _finished(_accuracies([0, 1], 1.0)) + _finished({("softmax+ape", 2): 0.9, ("favor+ape", 2): 0.9})
    runs += _finished({("softmax+krpe", 2): 0.9})  # a secondary run: kept whatever its seed
    kept = policy.complete_seed_records(params, runs)
    assert {(r["variant"], r["seed"]) for r in runs} - {(r["variant"], r["seed"]) for r in kept} == {
        ("softmax+ape", 2),
        ("favor+ape", 2),
    }
    plain = preset(tmp_path, design_text="")
    assert policy.complete_seed_records(plain, runs) == results(runs)


def test_in_flight_names_the_runs_another_live_process_holds(tmp_path):
    params = preset(tmp_path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        runs = {place: Run(params, *place, runs_root=tmp_path).rooted() for place in catalog.grid(params)[:3]}
        held, own, stale = runs.values()
        for run, pid in ((held, other.pid), (own, os.getpid()), (stale, 2**22 + 1)):
            run.dir.mkdir(parents=True)
            (run.dir / records.LOCK).write_text(f"{pid} {socket.gethostname()}")
        assert records.RunLock(held.dir).holder() == f"{other.pid} on {socket.gethostname()}"
        assert catalog.in_flight(params, tmp_path) == {held.place}  # not this process's own, not a dead one
    finally:
        other.kill()
        other.wait()
    assert catalog.in_flight(params, tmp_path) == set()
    # a lock just created and not yet written, or one of another machine, is held; no lock is not
    (own.dir / records.LOCK).write_text("")
    (stale.dir / records.LOCK).write_text("123 some-other-host")
    assert "not written yet" in records.RunLock(own.dir).holder()
    assert records.RunLock(stale.dir).holder() == "123 on some-other-host"
    assert catalog.in_flight(params, tmp_path) == {own.place, stale.place}
    with pytest.raises(records.RunBusy, match="not written yet"):
        records.RunLock(own.dir).__enter__()  # never deleted from under its writer
    assert (own.dir / records.LOCK).read_text() == ""
    (held.dir / records.LOCK).unlink()
    assert records.RunLock(held.dir).holder() is None


@pytest.mark.parametrize(
    "text, message",
    [
        (DESIGN.replace("secondary: [softmax+krpe]", "secondary: []"), "softmax\\+krpe in variants but neither"),
        (DESIGN.replace("kind: equal", "kind: similar"), "kind 'similar'"),
        (DESIGN.replace("softmax+ape: -1}}", "softmax+ape: -2}}"), "sum to 0"),
        (DESIGN.replace("favor+ape: 1, softmax", "relu+ape: 1, softmax"), "relu\\+ape is not one of this preset"),
        (DESIGN.replace("max_seeds: 4", "max_seeds: 9"), "max_seeds \\(9\\) ≤ the 5 seeds"),
        (DESIGN.replace("secondary: [softmax+krpe]", "secondary: [softmax+krpe, favor+ape]"), "both primary"),
        (DESIGN + "  secondary_budget_hours: 5\n", "secondary_budget_hours needs budget_hours"),
        (DESIGN + "  budget_hours: -1\n", "design.budget_hours: -1"),
        (  # three terms, or a weighted pair that is not (−w, +w), is no difference of differences
            DESIGN.replace("favor+ape: -1, softmax+ape: 1}", "favor+ape: -1}").replace(
                "rope_mixed: -1,", "rope_mixed: 0,"
            ),
            "neither a − b",
        ),
        (
            DESIGN.replace("favor+ape: -1, softmax+ape: 1}", "favor+ape: -0.5, softmax+ape: 0.25, softmax+krpe: 0.25}"),
            "neither",
        ),
        (
            DESIGN.replace("favor+ape: -1, softmax+ape: 1}", "favor+ape: -2, softmax+ape: 2}").replace(
                "favor+rope_mixed: 1, softmax+rope_mixed: -1", "favor+rope_mixed: 2, softmax+rope_mixed: -2"
            ),
            "neither",
        ),
    ],
)
def test_bad_designs_are_one_error(tmp_path, text, message):
    with pytest.raises(UserError, match=message):
        preset(tmp_path, text)


def test_contrast_shapes_read_as_a_minus_b_or_a_weighted_difference_of_differences():
    """ "Closes at least half of the gap" is (a − b) − 0.5·(c − d) > 0: terms +1, −1, −0.5, +0.5."""
    half = design.Contrast(
        "half", "greater", {"favor+rope_mixed": 1, "softmax+ape": 0.5, "favor+ape": -0.5, "softmax+rope_mixed": -1}
    )
    assert design.contrast_shape(half) == ("favor+rope_mixed", "softmax+rope_mixed", "favor+ape", "softmax+ape", 0.5)
    gap = design.Contrast("gap", "equal", {"favor+ape": 1, "softmax+ape": -1})
    assert design.contrast_shape(gap) == ("favor+ape", "softmax+ape", None, None, 1.0)
    closed = design.Contrast(
        "closed", "greater", {"favor+rope_mixed": 1, "softmax+rope_mixed": -1, "favor+ape": -1, "softmax+ape": 1}
    )
    assert design.contrast_shape(closed) == ("favor+rope_mixed", "softmax+rope_mixed", "favor+ape", "softmax+ape", 1.0)


def test_a_design_leaves_run_keys_alone(tmp_path):

    designed, plain = preset(tmp_path), preset(tmp_path, design_text="")
    assert Run(designed, "mnist5k", "favor+ape", 0).key == Run(plain, "mnist5k", "favor+ape", 0).key
    assert not plain.design.active and catalog.grid(plain)[:2] == [
        ("mnist5k", "softmax+ape", 0),
        ("mnist5k", "softmax+ape", 1),
    ]


def test_the_eta_counts_the_runs_the_design_wants_and_no_other_process_trains(tmp_path):
    from rpevit.lab.schedule import study
    from rpevit.lab.schedule.cell import cells, settle

    params = preset(tmp_path)  # min_seeds 2, max_seeds 4, 2 secondary seeds
    grid = cells(params, catalog.grid(params), tmp_path / "runs", tmp_path / "reports")
    todo = [(run, settle(run, repair=False)) for run in grid]

    # nothing finished: primary seeds 0-1 (8 runs) and the 2 secondary runs; seeds 2-3 wait on the rule
    def counted(part):
        return study.wanted_left(params, part, snapshot(params, tmp_path / "runs", tmp_path / "reports"))[0]

    assert counted(todo) == 10
    assert counted(todo[5:]) == 5 and counted([]) == 0
    seen = snapshot(params, tmp_path / "runs", tmp_path / "reports")
    assert study.wanted_left(params, todo, seen)[1] is None  # no finished run to take a pace from
    pace = [{"dataset": grid[0].dataset, "variant": "softmax+ape", "status": "finished", "train_seconds_per_epoch": 10}]
    count, seconds = study.wanted_left(params, todo, dataclasses.replace(seen, pace=pace))
    assert count == 10 and seconds == pytest.approx(10 * time_limit.expected_seconds(grid[0], pace))  # one pace
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        grid[0].dir.mkdir(parents=True)
        (grid[0].dir / records.LOCK).write_text(f"{other.pid} {socket.gethostname()}")
        assert counted(todo) == 9  # another process trains the first run
    finally:
        other.kill()
        other.wait()


def test_seed_values_are_not_their_positions(tmp_path):
    """Seeds 11-15: a rule that confused a seed's value with its place in the list would fail here."""
    params = preset(tmp_path, header=HEADER.replace("seeds: [0, 1, 2, 3, 4]", "seeds: [11, 12, 13, 14, 15]"))

    def accuracies(seeds, spread):
        return {(v, 11 + s): a for (v, s), a in _accuracies([s - 11 for s in seeds], spread).items()}

    wide = _finished(accuracies([11, 12], 1.0), seconds=450, epochs=2)  # 1 h per seed
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 13), wide) == ("train", "")
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 14), wide)[0] == "skip"
    partial = [r for r in wide if (r["variant"], r["seed"]) != ("favor+rope_mixed", 12)]
    verdict, why = policy.decide(
        Run(params, "mnist5k", "softmax+ape", 13), partial, {("mnist5k", "favor+rope_mixed", 12)}
    )
    assert verdict == "wait" and "favor+rope_mixed seed 12 is in flight" in why
    # the budget: a new seed 13 does not fit in 2.9 h; once started (seed 13 in flight) it is finished
    tight = dataclasses.replace(params, design=dataclasses.replace(params.design, budget_hours=2.9))
    assert policy.decide(Run(tight, "mnist5k", "softmax+ape", 13), wide)[0] == "skip"
    assert policy.decide(Run(tight, "mnist5k", "favor+ape", 13), wide, {("mnist5k", "softmax+ape", 13)}) == (
        "train",
        "",
    )
    # a shared budget counts secondary hours against a new primary seed
    roomy = dataclasses.replace(params, design=dataclasses.replace(params.design, budget_hours=3.4))
    with_secondary = wide + _finished({("softmax+krpe", 11): 0.9}, seconds=900, epochs=2)  # + 0.5 h
    assert policy.decide(Run(roomy, "mnist5k", "softmax+ape", 13), wide) == ("train", "")
    assert policy.decide(Run(roomy, "mnist5k", "softmax+ape", 13), with_secondary)[0] == "skip"
    kept = policy.complete_seed_records(params, wide + _finished({("softmax+ape", 13): 0.9}))
    assert sorted({r["seed"] for r in kept}) == [11, 12]


def test_a_seed_whose_primary_run_diverged_is_lost_and_the_next_seed_stands_in(tmp_path):
    params = preset(tmp_path)  # seeds 0-4, min_seeds 2, max_seeds 4
    odd = {(v, 2): a for (v, _), a in _accuracies([1], 1.0).items()}  # seed 2 differs from seed 0: wide
    runs = _finished({**_accuracies([0], 1.0), **odd})
    runs += [{**r, "status": "diverged"} for r in _finished({("favor+ape", 1): 0.1})]
    runs += _finished({("softmax+ape", 1): 0.9})  # its seed-mates are set aside with it
    progress = policy.primary_progress(params, runs)
    assert (progress.complete, progress.needed, progress.lost) == (2, 3, {1: "favor+ape"})  # seeds 0 and 2
    verdict, why = policy.decide(Run(params, "mnist5k", "softmax+rope_mixed", 1), runs)
    assert verdict == "skip" and "seed 1 is lost: favor+ape diverged there" in why
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 3), runs) == ("train", "")  # the third usable seed
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 4), runs)[0] == "skip"
    assert sorted({r["seed"] for r in policy.complete_seed_records(params, runs)}) == [0, 2]
    # every seed lost but two: the rule cannot ask for more seeds than there are
    gone = runs + [{**r, "status": "diverged"} for r in _finished({("favor+ape", 3): 0.1, ("favor+ape", 4): 0.1})]
    assert policy.primary_progress(params, gone)[:2] == (2, 2)


def test_a_run_left_unfinished_by_a_stopped_process_is_taken_up_before_any_later_run(tmp_path, monkeypatch, capsys):
    from rpevit.lab.progress import Progress
    from rpevit.lab.schedule import study
    from rpevit.lab.schedule.cell import cells, settle

    params = preset(tmp_path)  # seeds 0-4, min_seeds 2
    grid = cells(params, catalog.grid(params), tmp_path / "runs", tmp_path / "reports")
    todo = [(run, settle(run, repair=False)) for run in grid]
    accuracy = _accuracies([0, 1], 1.0)
    del accuracy[("favor+rope_mixed", 1)]
    missing = ("mnist5k", "favor+rope_mixed", 1)
    # what this process sees at each look: the other process trains seed 1's last run, then it has stopped
    looks = iter([({missing}, _finished(accuracy)), ({missing}, _finished(accuracy)), (set(), _finished(accuracy))])
    monkeypatch.setattr(catalog, "in_flight_and_records", lambda params, *roots: next(looks))
    monkeypatch.setattr(study, "POLL_SECONDS", 0)
    order = study.designed_order(params, todo, Progress(len(todo)))
    run, _ = next(order)
    assert run.place == missing  # not seed 2 (the rule decides after seed 1) nor softmax+krpe (primary first)
    out = capsys.readouterr().out
    assert out.count("waiting: softmax+ape on mnist5k, seed 2 (favor+rope_mixed seed 1 is in flight") == 1
    assert "runs in flight hold" in out and "favor+rope_mixed/seed1/.lock" in out


def test_a_designed_order_ends_by_naming_what_it_did_not_start(tmp_path, monkeypatch, capsys):
    from rpevit.lab.progress import Progress
    from rpevit.lab.schedule import study
    from rpevit.lab.schedule.cell import cells, settle

    params = preset(tmp_path)
    grid = cells(params, catalog.grid(params), tmp_path / "runs", tmp_path / "reports")
    todo = [(run, settle(run, repair=False)) for run in grid]
    narrow = _finished(_accuracies([0, 1], 0.0))  # the rule is met at 2 seeds
    monkeypatch.setattr(catalog, "in_flight_and_records", lambda params, *roots: (set(), narrow))
    chosen = [run.place for run, _ in study.designed_order(params, todo, Progress(len(todo)))]
    assert chosen == [("mnist5k", "softmax+krpe", 0), ("mnist5k", "softmax+krpe", 1)]  # the secondary runs
    out = capsys.readouterr().out
    assert out.count("not started:") == 12 and "softmax+ape on mnist5k, seed 2 (the stopping rule needs 2" in out


CHECK = f"""datasets: [mnist5k]
variants: [{", ".join(PRIMARY)}]
seeds: [0, 1]
design:
  primary: [{", ".join(PRIMARY)}]
  contrasts:
    - {{name: gap, kind: equal, terms: {{favor+ape: 1, softmax+ape: -1}}}}
  stopping: {{min_seeds: 2, max_seeds: 2}}
train: {{epochs: 4}}
"""


def checked(tmp_path, check_text=CHECK, main_train="train: {epochs: 2}\n"):
    """A designed preset whose design names a longer-budget check (written beside it)."""
    (tmp_path / "check.yaml").write_text(check_text)
    linked = DESIGN + f"  plateau_check: {tmp_path / 'check.yaml'}\n"
    return preset(tmp_path, linked + main_train)


def test_secondary_runs_are_held_while_the_longer_budget_check_wants_runs(tmp_path, monkeypatch):
    params = checked(tmp_path)
    narrow = _finished(_accuracies([0, 1], 0.0))  # the primary grid is settled at 2 seeds
    secondary = ("mnist5k", "softmax+krpe", 0)
    assert policy.decide(Run(params, *secondary), narrow) == ("train", "")
    assert policy.decide(Run(params, *secondary), narrow, secondary_held="the check first") == (
        "skip",
        "the check first",
    )
    assert policy.decide(Run(params, "mnist5k", "softmax+ape", 1), [], secondary_held="x") == ("train", "")  # primary
    roots = (tmp_path / "runs", tmp_path / "reports")
    held = secondary_held(params, *roots)
    assert "check.yaml trains before the secondary variants and wants 8 more runs" in held
    assert f"python -m rpevit study {tmp_path / 'check.yaml'}" in held
    check = load_params(tmp_path / "check.yaml")
    one_seed = [{**r, "epochs": 4} for r in _finished(_accuracies([0], 0.0))]
    flying = {("mnist5k", "softmax+ape", 1)}
    monkeypatch.setattr(catalog, "in_flight_and_records", lambda params, *roots: (flying, one_seed))
    assert wanted(check, Snapshot(one_seed, flying)).runs == [("mnist5k", v, 1) for v in PRIMARY]
    assert "wants 4 more runs (1 in flight)" in secondary_held(params, *roots)
    everything = {("mnist5k", v, 1) for v in PRIMARY}  # the check's last runs all train elsewhere
    monkeypatch.setattr(catalog, "in_flight_and_records", lambda params, *roots: (everything, one_seed))
    assert secondary_held(params, *roots).endswith(
        "(all in flight in other processes); run this study again once they finish"
    )
    done = one_seed + [{**r, "epochs": 4} for r in _finished(_accuracies([1], 0.0))]
    monkeypatch.setattr(catalog, "in_flight_and_records", lambda params, *roots: (set(), done))
    assert secondary_held(params, *roots) == ""  # the check is settled: secondary runs may train
    assert secondary_held(preset(tmp_path), *roots) == ""  # no check named


def test_a_designed_study_skips_its_secondary_runs_while_its_check_wants_runs(tmp_path, monkeypatch, capsys):
    from rpevit.lab.progress import Progress
    from rpevit.lab.schedule import study
    from rpevit.lab.schedule.cell import cells, settle

    params = checked(tmp_path)
    grid = cells(params, catalog.grid(params), tmp_path / "runs", tmp_path / "reports")
    todo = [(run, settle(run, repair=False)) for run in grid]
    narrow = _finished(_accuracies([0, 1], 0.0))  # the study's own records; its check has none
    monkeypatch.setattr(
        catalog, "in_flight_and_records", lambda read, *roots: (set(), narrow if read.name == params.name else [])
    )
    assert list(study.designed_order(params, todo, Progress(len(todo)))) == []
    out = capsys.readouterr().out
    assert "not started: softmax+krpe on mnist5k, seed 0 (the longer-budget check" in out


@pytest.mark.parametrize(
    "check_text, message",
    [
        (CHECK.replace("seeds: [0, 1]", "seeds: [0, 7]"), "use seeds of this preset"),
        (CHECK.replace("epochs: 4", "epochs: 2"), "train more than 2 epochs"),
        (CHECK.replace("epochs: 4}", "epochs: 4, lr: 0.01}"), "change nothing but train.epochs"),
        (CHECK + "model: {dim: 32}\n", "change nothing but train.epochs"),
        (CHECK + "data: {augment: flip}\n", "change nothing but train.epochs"),
        (CHECK.replace("datasets: [mnist5k]", "datasets: [fashion_mnist]"), "use the datasets"),
        (CHECK + "name: designed\n", "have a name of its own"),
        (
            CHECK.replace(", softmax+rope_mixed", ""),  # from its variants and its primary list
            "train exactly this design's primary variants",
        ),
        (
            CHECK.replace("max_seeds: 2}\n", "max_seeds: 2}\n  plateau_check: other\n"),
            "names a plateau check of its own",
        ),
    ],
)
def test_a_longer_budget_check_that_does_not_match_its_study_is_one_error(tmp_path, check_text, message):
    with pytest.raises(UserError, match=message):
        checked(tmp_path, check_text)


def test_a_missing_check_preset_is_one_error(tmp_path):
    with pytest.raises(UserError, match="no preset file"):
        preset(tmp_path, DESIGN + "  plateau_check: no_such_check\n")


def test_the_primary_grid_is_settled_once_no_primary_run_is_left(tmp_path):
    params = preset(tmp_path)  # min_seeds 2, max_seeds 4
    assert not primary_settled(params, _finished(_accuracies([0], 0.0)))  # below min_seeds
    assert not primary_settled(params, _finished(_accuracies([0, 1], 1.0)))  # wide: seed 2 wanted
    assert primary_settled(params, _finished(_accuracies([0, 1], 0.0)))  # the target met
    assert primary_settled(params, _finished(_accuracies([0, 1, 2, 3], 1.0)))  # max_seeds
    wide = _finished(_accuracies([0, 1], 1.0), seconds=450, epochs=2)  # 1 h per seed, 2 h spent
    tight = _budgeted(tmp_path, budget_hours=2.9)
    assert primary_settled(tight, wide)  # the budget does not cover seed 2
    started = wide + _finished({("softmax+ape", 2): 0.9}, seconds=450, epochs=2)
    assert not primary_settled(tight, started)  # a started seed is finished first


def test_a_settled_primary_grid_shows_its_contrasts_with_the_reports_intervals_and_no_verdict(tmp_path):
    from campaign.findings import settled_primary

    params = preset(tmp_path)
    assert settled_primary(params, _finished(_accuracies([0, 1], 1.0))) == ""  # seed 2 still wanted
    # four complete seeds (max_seeds); gap per seed −2, 0, −2, 0; closed 1.5, −0.5, 1.5, −0.5; a secondary run
    runs = _finished(_accuracies([0, 1, 2, 3], 1.0)) + _finished({("softmax+krpe", 0): 0.5})
    text = settled_primary(params, runs)
    assert "Its primary grid is settled: 4 complete primary seeds (0, 1, 2, 3); the stopping rule" in text
    assert "gap −1.00 [−2.36, +0.36] (90 % interval)" in text  # equal: (1 − 2α) interval, as in the report
    assert "closed +0.50 [−1.34, +2.34] (95 % interval)" in text  # greater: (1 − α) interval
    assert "no verdict yet" in text


def test_the_planned_runs_are_the_finished_ones_and_those_the_design_still_wants(tmp_path):
    params = preset(tmp_path)  # min_seeds 2, max_seeds 4, secondary softmax+krpe on seeds 0-1
    narrow = _finished(_accuracies([0, 1], 0.0))  # the stopping rule is met at 2 seeds
    secondary = [("mnist5k", "softmax+krpe", 0), ("mnist5k", "softmax+krpe", 1)]
    assert sorted(planned_runs(params, narrow)) == sorted(
        [("mnist5k", v, s) for v in PRIMARY for s in (0, 1)] + secondary
    )
    wide = _finished(_accuracies([0, 1], 1.0))  # a third primary seed is wanted, seeds 3-4 not yet
    assert {s for _, v, s in planned_runs(params, wide) if v in PRIMARY} == {0, 1, 2}
    spent = _budgeted(tmp_path, budget_hours=0.001)
    assert planned_runs(spent, narrow) == [("mnist5k", v, s) for s in (0, 1) for v in PRIMARY]
    plain = preset(tmp_path, design_text="")  # without a design: its whole grid
    assert planned_runs(plain, narrow) == catalog.grid(plain)


def test_one_wanted_answers_the_scheduler_the_status_the_planned_count_and_the_eta(tmp_path):
    """wanted.wanted sorts the unfinished runs of the grid, in training order, into left (a run in flight
    elsewhere counts as left), waiting and held, from one snapshot; the planned count is the finished runs
    plus its runs, and a run it rules out is in no group."""
    params = preset(tmp_path)  # min_seeds 2, max_seeds 4, 2 secondary seeds
    current = _finished(_accuracies([0], 0.0))  # primary seed 0 complete
    flying = ("mnist5k", "softmax+ape", 1)
    found = wanted(params, Snapshot(current, {flying}))
    unfinished = [place for place in catalog.grid(params) if place not in {r.place for r in results(current)}]
    assert flying in found.left and not set(found.left) & set(found.waiting)
    assert found.runs == [place for place in unfinished if place in set(found.left) | set(found.waiting)]
    assert [place for place, _ in found.sorted] == [place for place in unfinished if place in set(found.runs)]
    assert {v for _, v, s in found.runs if s >= 2} <= set(PRIMARY) and found.waiting  # seeds 2-3 wait on the rule
    settled = _finished(_accuracies([0, 1], 0.0))  # the target met at two seeds: later primary seeds ruled out
    assert not {s for _, v, s in wanted(params, Snapshot(settled)).runs if v in PRIMARY}
    assert planned_runs(params, current) == [r.place for r in results(current)] + wanted(params, Snapshot(current)).runs
    held = wanted(params, Snapshot(current, held="the check first"))
    assert held.held == [("mnist5k", "softmax+krpe", s) for s in (0, 1)] and not set(held.held) & set(held.runs)
