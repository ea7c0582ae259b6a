"""The claims table: comparisons built from records, verdicts that follow the planted truth."""

from __future__ import annotations

import numpy as np

from rpevit import claims
from rpevit.claims import Claim, correctness, evaluate_claims
from rpevit.schema import make_record


def record(variant, accuracy, seed, rng, n=2000, ms=1.0, load=0.1, resolution_eval=()):
    correct = rng.random(n) < accuracy
    text = "".join("1" if c else "0" for c in correct)
    return make_record(
        dataset="toy",
        variant=variant,
        seed=seed,
        status="finished",
        top1=correct.mean(),
        test_correct=text,
        ms_per_image_batched=ms,
        load_average=load,
        cpu_count=2,
        resolution_eval=list(resolution_eval),
    )


def test_verdicts_follow_planted_differences():
    rng = np.random.default_rng(0)
    base = [rng.random(2000) < 0.85 for _ in range(3)]
    records = []
    for seed in range(3):
        same = "".join("1" if c else "0" for c in base[seed])
        worse = base[seed].copy()
        worse[np.flatnonzero(worse)[:100]] = False  # 5 points worse on the same images
        bits = "".join("1" if c else "0" for c in worse)
        for variant, correct, ms, load in [
            ("softmax+ape", same, 1.0 + 0.01 * seed, 0.1),
            ("relu+ape", same, 1.0 + 0.01 * seed, 0.1),
            ("favor+ape", bits, 2.0, 5.0),
        ]:
            records.append(
                make_record(
                    dataset="toy",
                    variant=variant,
                    seed=seed,
                    test_correct=correct,
                    ms_per_image_batched=ms,
                    load_average=load,
                    cpu_count=2,
                )
            )
    table = [
        Claim("t", "favor below softmax", "less", "favor+ape", "softmax+ape"),
        Claim("t", "favor above softmax", "greater", "favor+ape", "softmax+ape"),
        Claim("t", "relu matches softmax", "equal", "relu+ape", "softmax+ape"),
        Claim("t", "favor as fast", "equal", "favor+ape", "softmax+ape", measure="ms_per_image_batched"),
        Claim("t", "relu as fast", "equal", "relu+ape", "softmax+ape", measure="ms_per_image_batched"),
        Claim("t", "never run", "greater", "softmax+krpe", "softmax+ape"),
        Claim("t", "other regime", "greater", "favor+ape", "softmax+ape", untestable="400 epochs on CIFAR-100"),
        Claim("t", "gap closed", "greater", "favor+ape", "softmax+ape", c="relu+ape", d="softmax+ape"),
    ]
    rows = {row["claim"]: row for row in evaluate_claims(records, table)}
    assert rows["favor below softmax"]["verdict"] == "supported"
    assert abs(rows["favor below softmax"]["effect"] + 5.0) < 1e-9
    assert rows["favor above softmax"]["verdict"] == "contradicted"
    assert rows["relu matches softmax"]["verdict"] == "supported"
    timing = rows["favor as fast"]  # 100 % slower, but timed on a busy machine: no verdict from it
    assert timing["verdict"] == "inconclusive (busy machine)" and timing["effect"] > 90 and "busy" in timing["note"]
    assert rows["relu as fast"]["verdict"] == "supported"
    assert rows["never run"]["verdict"] == "inconclusive (no data)" and rows["never run"]["seeds"] == 0
    assert rows["other regime"]["verdict"] == "not testable here" and "CIFAR-100" in rows["other regime"]["note"]
    # (favor − softmax) − (relu − softmax) = −5 points in every seed: the difference of differences
    closed = rows["gap closed"]
    assert abs(closed["effect"] + 5.0) < 1e-9 and closed["verdict"] == "contradicted"
    assert closed["comparison"] == "(favor+ape − softmax+ape) − (relu+ape − softmax+ape)"
    for row in rows.values():
        if np.isfinite(row.get("p_support", np.nan)):
            assert row["p_support_holm"] >= row["p_support"] and row["p_contradict_holm"] >= row["p_contradict"]


def test_resolution_claims_read_the_evaluated_correctness():
    rng = np.random.default_rng(1)
    rows = [{"resolution": 36, "mode": "extrapolate", "correct": "1101"}]
    rec = record("softmax+ape", 0.9, 0, rng, resolution_eval=rows)
    assert correctness(rec, 36).tolist() == [True, True, False, True]
    assert correctness(rec, 44) is None


def test_every_testable_published_claim_names_variants_of_the_converged_preset():
    from rpevit.params import load_params
    from rpevit.variants import parse_variant

    params = load_params("fmnist_converged")
    variants = {parse_variant(v).name for v in params.variants}
    for claim in claims.claims_for(params):
        if claim.untestable:
            continue
        assert set(claim.variants) <= variants, claim
        if claim.resolution:
            assert claim.resolution in params.evaluate.resolutions
            assert params.evaluate.covers(claim.a) and params.evaluate.covers(claim.b), claim


# --------------------------------------------------------------------------- the claims notebook's helpers


def _runs(rng, plan, seeds=(0, 1), n=1000, load=0.1):
    """Records of dataset 'toy' with planted accuracies {variant: accuracy}."""
    out = []
    for variant, accuracy in plan.items():
        for seed in seeds:
            rec = record(variant, accuracy, seed, rng, n=n, load=load)
            rec.update(n_test=n, train_images_per_second=250.0, train_seconds_per_epoch=16.0, epochs=5)
            out.append(rec)
    return out


def _gap_table():
    return [
        Claim(claims.S002, f"{m} closes the {b}–softmax gap", "equal", f"{b}+{m}", f"softmax+{m}")
        for m in ("krpe", "rope_mixed")
        for b in ("favor", "relu")
    ] + [
        Claim(claims.S001, "plain FAVOR+ is below softmax", "less", "favor+ape", "softmax+ape"),
        Claim(claims.S001, "about as fast", "equal", "favor+ape", "softmax+ape", measure="ms_per_image_batched"),
    ]


def test_seed_and_run_tables_give_means_and_intervals():
    rng = np.random.default_rng(2)
    found = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8}, seeds=(0, 1, 2))
    seeds = {row["variant"]: row for row in claims.seed_table(found)}
    assert seeds["softmax+ape"]["seeds"] == 3
    assert seeds["softmax+ape"]["95% t low"] < seeds["softmax+ape"]["top-1 %"] < seeds["softmax+ape"]["95% t high"]
    runs = claims.run_table(found, n_resamples=200)
    assert len(runs) == 6 and all(r["test images"] == 1000 for r in runs)
    assert all(r["95% bootstrap low"] < r["top-1 %"] < r["95% bootstrap high"] for r in runs)
    assert abs(runs[0]["top-1 %"] - 100 * correctness(found[0]).mean()) < 1e-9


def test_protocol_reads_the_preset_and_the_records():
    from rpevit.params import load_params

    params = load_params("smoke")
    rng = np.random.default_rng(3)
    found = [dict(r, dataset="mnist5k") for r in _runs(rng, {"softmax+ape": 0.9}, seeds=(0,))]
    (row,) = claims.protocol_rows(params, found)
    assert row["training images"] == "4000" and row["test images"] == "1000"
    assert row["epochs"] == params.train.epochs and row["runs finished"] == f"1 of {len(params.variants)}"
    assert abs(row["training hours (sum over runs)"] - 16.0 * 5 / 3600) < 1e-12
    assert "no finished run" in claims.protocol_rows(params, [])[0]["training images"]
    text = claims.protocol_text(params)
    assert f"±{claims.MARGIN_POINTS:g} point" in text and f"±{claims.MARGIN_TIME_PCT:g} %" in text
    assert f"{len(claims.CLAIMS)} claims" in text


def test_claims_table_counts_missing_runs_and_unplanned_variants():
    rng = np.random.default_rng(4)
    found = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8, "softmax+krpe": 0.9, "favor+krpe": 0.89})
    rows = claims.mark_unplanned(
        evaluate_claims(found, _gap_table()),
        ["softmax+ape", "favor+ape", "softmax+krpe", "favor+krpe", "relu+krpe"],
    )
    by = {row["comparison"]: row for row in rows}
    assert by["relu+krpe vs softmax+krpe"]["note"] == "not run yet"
    assert by["relu+rope_mixed vs softmax+rope_mixed"]["note"] == claims.NOT_PLANNED
    table = claims.claims_table(rows)
    assert list(table[0])[:4] == ["source", "claim", "dataset", "contrast (a vs b: a − b)"]
    assert {"effect", "low", "high", "p for", "p against (Holm)", "se (seeds)", "verdict", "note"} <= set(table[0])
    counts = {row["source"]: row for row in claims.verdict_counts(rows)}
    assert counts["all"]["rows"] == len(rows) == 6
    assert counts[claims.S002][claims.NO_DATA] == 3 and counts[claims.S001][claims.NO_DATA] == 0
    expected = [("toy", v, s) for v in ("softmax+ape", "relu+krpe") for s in (0, 1, 2)]
    assert claims.missing_runs(found, expected) == [
        {"dataset": "toy", "variant": "softmax+ape", "missing seeds": "2"},
        {"dataset": "toy", "variant": "relu+krpe", "missing seeds": "0, 1, 2"},
    ]


def test_answer_says_not_answered_without_data_and_names_the_findings():
    rng = np.random.default_rng(5)
    empty = evaluate_claims([], _gap_table(), datasets=["toy"])
    text = claims.answer_text(empty, [{"dataset": "toy", "variant": "favor+krpe", "missing seeds": "0, 1"}], 2)
    assert "not answered yet" in text and "2 of 2 planned runs" in text and "none of the 4 rows has data" in text
    plan = {"softmax+ape": 0.9, "favor+ape": 0.75, "softmax+krpe": 0.9, "favor+krpe": 0.75}
    found = _runs(rng, plan, seeds=(0, 1, 2, 3), n=3000)  # the seed is the unit: 4 seeds give the t-test power
    found += [dict(r, variant="relu+krpe") for r in found if r["variant"] == "softmax+krpe"]  # the same images right
    rows = evaluate_claims(found, _gap_table())
    text = claims.answer_text(rows, [], 10)
    assert "— partly: yes for 1 of the 4 rows, no for 1; undecided for the other 2.**" in text
    assert "gap closed (interval inside ±1 point): `relu+krpe vs softmax+krpe` on toy: +0.00 [+0.00, +0.00]" in text
    assert "- per Performer backend: `favor` 1 contradicted, 1 no data; `relu` 1 supported, 1 no data." in text
    only_open = [r for r in rows if r["comparison"] != "relu+krpe vs softmax+krpe"]
    assert "— no for 1 of the 3 rows; undecided for the other 2.**" in claims.answer_text(only_open, [], 10)
    assert "All 10 planned runs have finished" in text
    assert "a gap beyond ±1 point remains" in text and "`favor+krpe vs softmax+krpe` on toy" in text
    assert "For scale" in text and "`favor+ape vs softmax+ape` on toy" in text


def test_busy_text_flags_busy_timings_and_their_claims():
    rng = np.random.default_rng(6)
    quiet = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8})
    rows = evaluate_claims(quiet, _gap_table())
    assert "None of the 4 finished runs" in claims.busy_text(quiet, rows)
    loaded = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8}, load=7.5)
    rows = evaluate_claims(loaded, _gap_table())
    text = claims.busy_text(loaded, rows)
    assert "4 of 4 finished runs" in text and "7.5 on 2 core(s)" in text and "about as fast · toy" in text
    assert claims.busy_text([], rows).startswith("No finished runs")
    others = [r for r in loaded if r["variant"] == "softmax+ape"]
    text = claims.busy_text(others, evaluate_claims(others, _gap_table()))
    assert text.endswith("The time claims have no data yet.")


def test_forest_figure_has_a_row_per_claim_and_dataset_and_a_panel_per_unit():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(7)
    found = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8, "softmax+krpe": 0.9, "favor+krpe": 0.89})
    other = Claim(claims.S000, "APE beats RoPE", "greater", "favor+ape", "softmax+ape", untestable="400 epochs")
    rows = evaluate_claims(found, [*_gap_table(), other])
    fig = claims.forest_figure(rows, "toy")
    accuracy, timing = fig.axes
    labels = [t.get_text() for t in accuracy.get_yticklabels()]
    assert len(labels) == 6 and labels[0] == "seed 002 · krpe closes the favor–softmax gap · toy"
    assert len(timing.get_yticklabels()) == 1
    assert any(t.get_text() == "not run yet" for t in accuracy.texts)
    assert any(t.get_text() == "not testable here: 400 epochs" for t in accuracy.texts)
    assert fig.legends and "supported" in [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)
    empty = claims.forest_figure([], "nothing")
    assert len(empty.axes) == 1
    plt.close(empty)


def _sweep(speed: dict[int, float], noise: float = 0.03, batches: int = 6) -> list[dict]:
    """A timing sweep where softmax takes 1 s per batch and favor `1 / speed[tokens]` s (log-normal noise)."""
    rng = np.random.default_rng(0)
    rows = []
    for tokens, factor in speed.items():
        for backend, mean in (("softmax", 1.0), ("favor", 1.0 / factor)):
            times = mean * np.exp(rng.normal(0, noise, batches))
            rows.append({"backend": backend, "tokens": tokens, "inference_batch_seconds": times.tolist()})
    return rows


def test_speed_crossover_verdicts_follow_the_planted_crossover():
    def verdict(speed):
        rows = claims.crossover_rows(claims.speedups(_sweep(speed)))
        assert len(rows) == 1 and rows[0]["source"] == claims.S000_SPEED
        return rows[0]

    at_256 = verdict({16: 0.5, 64: 0.8, 256: 1.6, 1024: 4.0})
    assert at_256["verdict"] == "supported" and at_256["measured from (tokens)"] == 256
    assert abs(at_256["effect"] - 1.6) < 0.1
    early = verdict({16: 0.5, 64: 1.5, 256: 2.0, 1024: 4.0})
    assert early["verdict"].startswith("contradicted (faster already at 64")
    late = verdict({16: 0.3, 64: 0.5, 256: 0.7, 1024: 2.0})
    assert late["verdict"].startswith("contradicted (still slower at 256") and late["measured from (tokens)"] == 1024
    never = verdict({16: 0.3, 64: 0.5, 256: 0.5, 1024: 0.6})
    assert never["measured from (tokens)"] == "never in the sweep"
    tie = verdict({16: 0.5, 64: 0.8, 256: 1.0, 1024: 3.0})
    assert tie["verdict"] == "inconclusive"


def test_speedups_give_intervals_around_the_planted_ratio():
    rows = claims.speedups(_sweep({64: 0.5, 1024: 3.0}))
    assert [r["reading"] for r in rows] == ["slower", "faster"]
    for row, planted in zip(rows, (0.5, 3.0)):
        assert row["low"] < row["speedup ×"] < row["high"]
        assert row["low"] < planted * 1.05 and planted * 0.95 < row["high"]
    figure = claims.speedup_figure(rows)
    assert len(figure.axes[0].lines) >= 3  # the series, 1× and the claimed crossover


def test_baseline_text_states_the_softmax_level_with_its_interval():
    rng = np.random.default_rng(5)
    found = _runs(rng, {"softmax+ape": 0.8, "favor+ape": 0.7}, seeds=(0, 1, 2))
    text = claims.baseline_text(claims.seed_table(found))
    mean = np.mean([100 * r["top1"] for r in found if r["variant"] == "softmax+ape"])
    assert f"reaches {mean:.2f} % test top-1 on toy (mean of 3 seeds, 95% t-interval [" in text
    assert claims.baseline_text([]) == "No finished run of the baseline `softmax+ape` yet."


def test_time_claims_read_the_side_by_side_benchmark_when_it_is_there():
    rng = np.random.default_rng(9)
    speed = [
        {
            "round": r,
            "variant": v,
            "ms_per_image_batched": ms * (1 + 0.02 * rng.standard_normal()),
            "load_average": 0.3,
            "cpu_count": 2,
        }
        for r in range(5)
        for v, ms in (("softmax+ape", 1.0), ("favor+ape", 2.5), ("relu+ape", 1.01))
    ]
    table = [
        Claim("t", "favor as fast", "equal", "favor+ape", "softmax+ape", measure="ms_per_image_batched"),
        Claim("t", "relu as fast", "equal", "relu+ape", "softmax+ape", measure="ms_per_image_batched"),
    ]
    rows = {row["claim"]: row for row in evaluate_claims([], table, datasets=["toy"], speed=speed)}
    assert rows["favor as fast"]["verdict"] == "contradicted" and 130 < rows["favor as fast"]["effect"] < 170
    assert rows["relu as fast"]["verdict"] == "supported"
    assert "5 benchmark rounds" in rows["relu as fast"]["test"]
    loaded = [dict(r, load_average=4.0) for r in speed]
    rows = {row["claim"]: row for row in evaluate_claims([], table, datasets=["toy"], speed=loaded)}
    assert rows["favor as fast"]["verdict"] == "inconclusive (busy machine)"


def test_a_speed_sweep_on_a_busy_machine_gives_no_verdict():
    sweep = [
        {"backend": b, "tokens": t, "inference_batch_seconds": [s * (1 + 0.01 * k) for k in range(4)]}
        for t, speedup in {16: 0.5, 64: 0.8, 256: 1.6, 1024: 4.0}.items()
        for b, s in (("softmax", 1.0), ("relu", 1.0 / speedup))
    ]
    quiet = claims.crossover_rows(claims.speedups(sweep))
    loaded = claims.crossover_rows(claims.speedups(sweep), busy_machine=True)
    assert quiet[0]["verdict"] == "supported" and loaded[0]["verdict"] == "inconclusive (busy machine)"
