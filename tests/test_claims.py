"""The claims table: comparisons built from records, verdicts that follow the planted truth."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from scipy import stats as scipy_stats

from analysis import claims
from analysis.claims import Claim, Comparison, correctness, evaluate_claims
from rpevit.core import stats
from rpevit.lab.schema import make_record

T = claims.Source("t")


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
        Claim(T, "favor below softmax", "less", Comparison("favor+ape", "softmax+ape")),
        Claim(T, "favor above softmax", "greater", Comparison("favor+ape", "softmax+ape")),
        Claim(T, "relu matches softmax", "equal", Comparison("relu+ape", "softmax+ape")),
        Claim(T, "favor as fast", "equal", Comparison("favor+ape", "softmax+ape"), measure="ms_per_image_batched"),
        Claim(T, "relu as fast", "equal", Comparison("relu+ape", "softmax+ape"), measure="ms_per_image_batched"),
        Claim(T, "never run", "greater", Comparison("softmax+krpe", "softmax+ape")),
        Claim(
            T, "other regime", "greater", Comparison("favor+ape", "softmax+ape"), untestable="400 epochs on CIFAR-100"
        ),
        Claim(T, "gap closed", "greater", Comparison("favor+ape", "softmax+ape", c="relu+ape", d="softmax+ape")),
    ]
    rows = {row["claim"]: row for row in evaluate_claims(records, table)}
    assert rows["favor below softmax"]["verdict"] == "supported"
    assert abs(rows["favor below softmax"]["effect"] + 5.0) < 1e-9
    assert rows["favor above softmax"]["verdict"] == "contradicted"
    assert rows["relu matches softmax"]["verdict"] == "supported"
    for name in ("favor as fast", "relu as fast"):  # time claims read only the speed benchmark, never run timings
        assert rows[name]["verdict"] == claims.NO_DATA and "bench speed" in rows[name]["reason"]
        assert "effect" not in rows[name]
    assert rows["never run"]["verdict"] == "no data" and rows["never run"]["seeds"] == 0
    assert claims.verdict_text(rows["never run"]) == "no data: not run yet"
    assert rows["other regime"]["verdict"] == "not testable here" and "CIFAR-100" in rows["other regime"]["reason"]
    # (favor − softmax) − (relu − softmax) = −5 points in every seed: the difference of differences
    closed = rows["gap closed"]
    assert abs(closed["effect"] + 5.0) < 1e-9 and closed["verdict"] == "contradicted"
    assert closed["comparison"] == Comparison("favor+ape", "softmax+ape", "relu+ape", "softmax+ape")
    assert str(closed["comparison"]) == "(favor+ape − softmax+ape) − (relu+ape − softmax+ape)"
    for row in rows.values():
        if np.isfinite(row.get("p_support", np.nan)):
            assert row["p_support_holm"] >= row["p_support"] and row["p_contradict_holm"] >= row["p_contradict"]
    one = evaluate_claims([r for r in records if r["seed"] == 0], table[:1])[0]
    assert one["verdict"] == claims.UNDECIDED and claims.verdict_text(one) == "undecided: one seed"


def test_accuracy_rows_are_t_tests_over_per_seed_contrasts():
    """Planted 4 seeds × 10 images: se, df, n and the interval are those of a t-test over the 4 per-seed
    contrasts (by hand), not over the 10 per-image ones (which give n = 10 and a different se)."""
    correct_a = [6, 8, 4, 7]  # images right per seed; b is right on the first 5 of 10 in every seed
    records = []
    for seed, right in enumerate(correct_a):
        for variant, k in (("favor+ape", right), ("softmax+ape", 5)):
            bits = "1" * k + "0" * (10 - k)
            records.append(make_record(dataset="toy", variant=variant, seed=seed, test_correct=bits))
    per_seed = 100.0 * (np.array(correct_a) - 5) / 10  # [10, 30, −10, 20] points
    per_image = np.stack([100.0 * (np.arange(10) < k) for k in correct_a]) - 100.0 * (np.arange(10) < 5)
    assert per_image.mean(axis=0).std(ddof=1) / np.sqrt(10) != pytest.approx(per_seed.std(ddof=1) / 2)
    table = [
        Claim(T, "favor above", "greater", Comparison("favor+ape", "softmax+ape")),
        Claim(T, "favor level", "equal", Comparison("favor+ape", "softmax+ape"), margin_value=5.0),
    ]
    rows = {row["claim"]: row for row in evaluate_claims(records, table)}
    se = per_seed.std(ddof=1) / 2
    for name, confidence in (("favor above", 0.95), ("favor level", 0.90)):
        row = rows[name]
        half = scipy_stats.t.ppf((1 + confidence) / 2, 3) * se
        assert (row["n"], row["df"], row["seeds"]) == (4, 3, 4)
        assert row["effect"] == pytest.approx(12.5) and row["se"] == pytest.approx(se, rel=1e-12)
        assert (row["low"], row["high"]) == (pytest.approx(12.5 - half, rel=1e-12), pytest.approx(12.5 + half))
        assert row["confidence"] == pytest.approx(confidence)
        assert row["se (images)"] == pytest.approx(stats.image_standard_error(per_image), rel=1e-12)
    assert rows["favor above"]["p_support"] == pytest.approx(scipy_stats.t.sf(12.5 / se, 3), rel=1e-9)


def test_a_comparison_is_a_value_with_terms_and_words():
    plain = Comparison("favor+krpe", "softmax+krpe")
    assert plain.terms == {"favor+krpe": 1.0, "softmax+krpe": -1.0} and not plain.differences
    assert str(Comparison("softmax+ape", "softmax+rope_axial", resolution=36)) == (
        "softmax+ape − softmax+rope_axial @ 36 px extrapolate"
    )
    dod = Comparison("favor+rope_mixed", "softmax+rope_mixed", "favor+ape", "softmax+ape")
    assert dod.terms == {"favor+rope_mixed": 1, "softmax+rope_mixed": -1, "favor+ape": -1, "softmax+ape": 1}
    with pytest.raises(ValueError, match="needs both c and d"):
        Comparison("favor+ape", "softmax+ape", c="relu+ape")
    from analysis.claims import narration

    assert narration.side_names(plain) == ("favor (Performer)", "softmax")
    assert narration.side_names(Comparison("softmax+ape", "softmax+rope_axial")) == ("ape", "rope_axial")
    assert narration.ahead(dod, True) == "favor − softmax higher with rope_mixed than with ape"
    mixed = Comparison("favor+ape", "softmax+ape", "relu+krpe", "softmax+ape")
    assert narration.ahead(mixed, False) == "(favor+ape − softmax+ape) lower than (relu+krpe − softmax+ape)"
    assert narration.performer_vs_exact(plain) and narration.performer_vs_exact(dod)
    assert not narration.performer_vs_exact(Comparison("favor+rope_axial+ape", "favor+ape"))


def test_resolution_claims_read_the_evaluated_correctness():
    rng = np.random.default_rng(1)
    rows = [{"resolution": 36, "mode": "extrapolate", "correct": "1101"}]
    rec = record("softmax+ape", 0.9, 0, rng, resolution_eval=rows)
    assert correctness(rec, 36).tolist() == [True, True, False, True]
    assert correctness(rec, 44) is None


def test_every_testable_published_claim_names_variants_of_the_converged_preset():
    from rpevit.core.variants import parse_variant
    from rpevit.lab.params import load_params

    params = load_params("fmnist_converged")
    variants = {parse_variant(v).name for v in params.variants}
    for claim in claims.claims_for(params):
        if claim.untestable:
            continue
        comparison = claim.comparison
        assert set(comparison.variants) <= variants, claim
        if comparison.resolution:
            assert comparison.resolution in params.evaluate.resolutions
            assert params.evaluate.covers(comparison.a) and params.evaluate.covers(comparison.b), claim


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
        Claim(claims.S002, f"{b} matches softmax with {m}", "equal", Comparison(f"{b}+{m}", f"softmax+{m}"))
        for m in ("krpe", "rope_mixed")
        for b in ("favor", "relu")
    ] + [
        Claim(claims.S001, "plain FAVOR+ is below softmax", "less", Comparison("favor+ape", "softmax+ape")),
        Claim(
            claims.S001,
            "about as fast",
            "equal",
            Comparison("favor+ape", "softmax+ape"),
            measure="ms_per_image_batched",
        ),
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
    from rpevit.lab.params import load_params

    params = load_params("smoke")
    rng = np.random.default_rng(3)
    found = [dict(r, dataset="mnist5k", device="cpu", amp="fp32") for r in _runs(rng, {"softmax+ape": 0.9}, seeds=(0,))]
    (row,) = claims.protocol_rows(params, found)
    assert row["training images"] == 4000 and row["test images"] == "1000"  # the preset's split; the records
    assert row["epochs"] == params.train.epochs and row["runs finished"] == f"1 of {len(params.variants)}"
    assert abs(row["training hours (sum over runs)"] - 16.0 * 5 / 3600) < 1e-12
    assert row["trained on"] == "cpu fp32 (1)"
    two_places = found + [dict(found[0], seed=1, device="cuda", amp="bf16")]
    (row,) = claims.protocol_rows(params, two_places, planned=[("mnist5k", "softmax+ape", s) for s in (0, 1, 2)])
    assert row["runs finished"] == "2 of 3" and row["trained on"] == "cpu fp32 (1), cuda bf16 (1)"
    assert "no finished run" in claims.protocol_rows(params, [])[0]["test images"]
    text = claims.protocol_text(params)
    assert f"±{claims.registry.MARGIN_POINTS:g} point" in text and "0.80–1.20× the other's inference time" in text
    assert f"{len(claims.CLAIMS)} claims" in text and "Performer − softmax (positive = Performer ahead)" in text


def test_claims_table_is_short_with_the_verdict_second_and_details_apart():
    rng = np.random.default_rng(4)
    found = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8, "softmax+krpe": 0.9, "favor+krpe": 0.89})
    rows = claims.mark_unplanned(
        evaluate_claims(found, _gap_table()),
        ["softmax+ape", "favor+ape", "softmax+krpe", "favor+krpe", "relu+krpe"],
    )
    by = {str(row["comparison"]): row for row in rows}
    assert by["relu+krpe − softmax+krpe"]["reason"] == "not run yet"
    assert by["relu+rope_mixed − softmax+rope_mixed"]["reason"] == claims.NOT_PLANNED
    table = claims.claims_table(rows)
    assert list(table[0]) == ["claim", "verdict", "reading", claims.EFFECT_HEADER]
    assert "Performer − softmax" in claims.EFFECT_HEADER
    assert table[0]["claim"] == "seed 002: favor matches softmax with krpe"
    assert table[1]["verdict"] == claims.NO_DATA and table[1]["reading"] == "no data: not run yet"  # bare verdicts
    assert table[3]["reading"] == f"no data: {claims.NOT_PLANNED}"
    assert {row["verdict"] for row in table} <= {"supported", "contradicted", "inconclusive", claims.NO_DATA}
    details = claims.claims_details(rows)
    assert {"effect", "low", "high", "p for", "p against (Holm)", "se (seeds)", "verdict", "reason"} <= set(details[0])
    assert details[0]["Holm family"] == "seed 002" and "verdict, one Holm over the whole table" in details[0]
    assert details[0]["comparison (effect a − b; Performer − softmax: positive = Performer ahead)"] == (
        "favor+krpe − softmax+krpe"
    )
    counts = {row["source"]: row for row in claims.verdict_counts(rows)}
    assert counts["all"]["rows"] == len(rows) == 6
    assert counts[str(claims.S002)][claims.NO_DATA] == 3 and counts[str(claims.S001)][claims.NO_DATA] == 1
    expected = [("toy", v, s) for v in ("softmax+ape", "relu+krpe") for s in (0, 1, 2)]
    missing = claims.missing_runs(found, expected)
    assert missing == [
        {"dataset": "toy", "variant": "softmax+ape", "seeds": (2,)},
        {"dataset": "toy", "variant": "relu+krpe", "seeds": (0, 1, 2)},
    ]
    assert claims.missing_table(missing)[1]["missing seeds"] == "0, 1, 2"


def _tested(effect, low, high, kind="equal", verdict="inconclusive", p_support=0.2, p_contradict=0.3, **extra):
    return {
        "comparison": Comparison("favor+krpe", "softmax+krpe"),
        "measure": claims.TOP1,
        "kind": kind,
        "margin": 1.0 if kind in ("equal", "at_least") else None,
        "effect": effect,
        "low": low,
        "high": high,
        "verdict": verdict,
        "reason": "",
        "p_support": p_support,
        "p_contradict": p_contradict,
        **extra,
    }


def test_effects_and_undecided_rows_state_their_direction():
    ahead = _tested(0.65, 0.19, 1.12)
    assert claims.effect_words(ahead) == "+0.65 points [+0.19, +1.12] (favor (Performer) ahead)"  # the one sign
    assert claims.verdict_text(ahead) == (
        "inconclusive — interval excludes 0: favor (Performer) ahead, but crossing the +1-point margin"
    )
    behind = _tested(-0.83, -1.71, 0.04)
    assert claims.effect_words(behind) == "−0.83 points [−1.71, +0.04] (softmax ahead)"  # signed as a − b, then words
    assert claims.interval_reading(behind) == "interval spans 0: direction unclear; crossing the −1-point margin"
    inside = _tested(0.3, 0.1, 0.5, p_support=0.01)
    assert claims.interval_reading(inside) == (
        "interval excludes 0: favor (Performer) ahead, inside ±1 point; raw p for the claim 0.010, "
        "not significant after Holm"
    )
    against = _tested(0.83, 0.23, 1.43, kind="less", p_support=0.99, p_contradict=0.013)
    assert claims.interval_reading(against).startswith(
        "interval excludes 0: favor (Performer) ahead, against the claim; "
        "raw p against the claim 0.013, not significant after Holm"
    )
    assert claims.interval_reading(_tested(0.3, -1.5, 1.5)).endswith("; crossing the ±1-point margin")
    assert claims.interval_reading(_tested(3.0, 2.0, 4.0, kind="at_least")).endswith(", wholly beyond −1 point")
    assert claims.verdict_text(_tested(0.3, 0.1, 0.5, verdict="supported")) == "supported"
    slower = dict(_tested(174.0, 131.0, 217.0), measure=claims.TIME, verdict="undecided", reason=claims.BUSY)
    assert claims.effect_words(slower) == "favor (Performer) at 2.74× softmax's time [2.31, 3.17]"  # one time unit
    assert claims.verdict_text(slower) == "undecided: busy machine"
    reading = claims.interval_reading(dict(slower, margin=20.0, kind="equal"))
    assert reading == "interval excludes 1×: favor (Performer) slower, wholly beyond 0.80–1.20× time"
    crossing = claims.interval_reading(dict(_tested(10.0, -5.0, 25.0), measure=claims.TIME, margin=20.0))
    assert crossing == "interval spans 1×: direction unclear; crossing the 0.80–1.20× time margin"
    assert claims.effect_words(_tested(float("nan"), float("nan"), float("nan"))) == ""


def test_answer_says_not_answered_without_data_and_names_the_findings():
    rng = np.random.default_rng(5)
    empty = evaluate_claims([], _gap_table(), datasets=["toy"])
    text = claims.answer_text(empty, [{"dataset": "toy", "variant": "favor+krpe", "seeds": (0, 1)}], 2)
    assert "not answered yet" in text and "2 of 2 planned runs" in text and "none of the 4 rows has data" in text
    plan = {"softmax+ape": 0.9, "favor+ape": 0.75, "softmax+krpe": 0.9, "favor+krpe": 0.75}
    found = _runs(rng, plan, seeds=(0, 1, 2, 3), n=3000)  # the seed is the unit: 4 seeds give the t-test power
    found += [dict(r, variant="relu+krpe") for r in found if r["variant"] == "softmax+krpe"]  # the same images right
    rows = evaluate_claims(found, _gap_table())
    text = claims.answer_text(rows, [], 10)
    assert "— partly: yes for 1 of the 4 rows, no for 1; no verdict for the other 2 (2 no data).**" in text
    assert "effects Performer − softmax: positive = Performer ahead" in text
    assert (
        "matches softmax (interval inside ±1 point): `relu+krpe − softmax+krpe` on toy: "
        "+0.00 points [+0.00, +0.00] (relu (Performer) ahead) (4 seeds)" in text
    )
    assert "- per Performer backend: `favor` 1 contradicted, 1 no data; `relu` 1 supported, 1 no data." in text
    only_open = [r for r in rows if str(r["comparison"]) != "relu+krpe − softmax+krpe"]
    short = "— no for 1 of the 3 rows; no verdict for the other 2 (2 no data).**"
    assert short in claims.answer_text(only_open, [], 10)
    open_only = [dict(r, verdict=claims.INCONCLUSIVE) for r in rows if r["verdict"] != claims.NO_DATA]
    assert "— no verdict from the data so far (2 inconclusive).**" in claims.answer_text(open_only, [], 10)
    assert "All 10 planned runs have finished" in text
    assert "a gap beyond ±1 point remains" in text and "`favor+krpe − softmax+krpe` on toy: −" in text
    assert "(softmax ahead)" in text
    assert "For scale" in text and "`favor+ape − softmax+ape` on toy: −" in text


def test_busy_text_flags_busy_timings_and_the_benchmark_the_time_claims_read():
    rng = np.random.default_rng(6)
    quiet = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8})
    rows = evaluate_claims(quiet, _gap_table())
    text = claims.busy_text(quiet, rows, "toy")
    assert "None of the 4 finished runs" in text and "No verdict reads per-run timings" in text
    assert text.endswith("This preset has none yet: its 1 time-claim rows have no data.")
    assert "--params toy --csv reports/bench/cpu_speed_toy.csv" in text
    loaded = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8}, load=7.5)
    speed = [
        {"round": r, "variant": v, "ms_per_image_batched": 1.0 + 0.01 * r, "load_average": 4.0, "cpu_count": 2}
        for r in range(3)
        for v in ("softmax+ape", "favor+ape")
    ]
    rows = evaluate_claims(loaded, _gap_table(), speed=speed)
    text = claims.busy_text(loaded, rows)
    assert "4 of 4 finished runs" in text and "7.5 on 2 core(s)" in text
    assert "**undecided: busy machine**" in text and "- about as fast · toy" in text
    assert claims.busy_text([], rows).startswith("No finished runs")


def test_forest_figure_has_a_panel_per_source_and_measure_each_on_its_own_scale():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(7)
    found = _runs(rng, {"softmax+ape": 0.9, "favor+ape": 0.8, "softmax+krpe": 0.9, "favor+krpe": 0.89})
    for r in found:  # at 36 px: softmax+ape keeps 90 %, softmax+krpe gets nothing right
        if r["variant"] in ("softmax+ape", "softmax+krpe"):
            bits = "1" * 900 + "0" * 100 if r["variant"] == "softmax+ape" else "0" * 1000
            r["resolution_eval"] = [{"resolution": 36, "mode": "extrapolate", "correct": bits}]
    other = Claim(
        claims.S000, "APE beats RoPE", "greater", Comparison("favor+ape", "softmax+ape"), untestable="400 epochs"
    )
    far = Claim(claims.S003, "36 px: APE ≥ KRPE", "at_least", Comparison("softmax+ape", "softmax+krpe", resolution=36))
    rows = evaluate_claims(found, [*_gap_table(), other, far])
    fig = claims.forest_figure(rows, "toy")
    gap, scale, timing, untestable, resolution = fig.axes
    labels = [t.get_text() for t in gap.get_yticklabels()]
    assert labels == [f"{b} matches softmax with {m}" for m in ("krpe", "rope_mixed") for b in ("favor", "relu")]
    assert gap.get_title(loc="left") == "seed 002, §Goal" and "Performer − softmax" in gap.get_xlabel()
    assert timing.get_title(loc="left") == "seed 001, Tables 1–2 — inference time"
    assert any(t.get_text() == "no data: not run yet" for t in gap.texts)
    assert any(t.get_text() == "not testable here: 400 epochs" for t in untestable.texts)
    assert any(t.get_text().startswith(("inconclusive · ", "supported · ", "contradicted · ")) for t in gap.texts)
    for axis in fig.axes:  # every inconclusive row says why: where its interval lies
        for text in (t.get_text() for t in axis.texts if t.get_text().startswith("inconclusive · ")):
            assert "\n(interval " in text or "(" in text, text
    assert any(
        t.get_text().startswith("supported · +90.00 points") and "(ape ahead)" in t.get_text() for t in resolution.texts
    )
    assert resolution.get_xlim()[1] > 85 and gap.get_xlim()[1] < 30  # each panel on its own scale
    assert "a, the claim's first variant" in resolution.get_xlabel()
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
        rows = claims.crossover_rows(claims.time_ratios(_sweep(speed)))
        assert len(rows) == 1 and rows[0]["source"] == claims.S000_SPEED
        return rows[0]

    at_256 = verdict({16: 0.5, 64: 0.8, 256: 1.6, 1024: 4.0})
    assert at_256["verdict"] == "supported" and at_256["measured from (tokens)"] == 256
    assert abs(at_256["effect"] - 1 / 1.6) < 0.04  # time × softmax: a 1.6× speed-up is 0.625× the time
    early = verdict({16: 0.5, 64: 1.5, 256: 2.0, 1024: 4.0})
    assert early["verdict"] == "contradicted" and early["reason"] == "faster already at 64 tokens"
    assert claims.verdict_text(early) == "contradicted (faster already at 64 tokens)"
    late = verdict({16: 0.3, 64: 0.5, 256: 0.7, 1024: 2.0})
    assert late["reason"].startswith("still slower at 256") and late["measured from (tokens)"] == 1024
    never = verdict({16: 0.3, 64: 0.5, 256: 0.5, 1024: 0.6})
    assert never["measured from (tokens)"] is None
    assert claims.crossover_table([never])[0]["faster from (tokens)"] == "never in the sweep"
    tie = verdict({16: 0.5, 64: 0.8, 256: 1.0, 1024: 3.0})
    assert tie["verdict"] == "inconclusive"


def test_time_ratios_give_intervals_around_the_planted_ratio_in_the_one_time_unit():
    """time × softmax = Performer time / softmax time (> 1: slower): a Performer planted 2× slower reads 2."""
    rows = claims.time_ratios(_sweep({64: 0.5, 1024: 3.0}))
    assert [r["reading"] for r in rows] == ["slower", "faster"]
    for row, planted in zip(rows, (2.0, 1 / 3.0)):
        assert row["low"] < row[claims.TIME_X] < row["high"]
        assert row["low"] < planted * 1.05 and planted * 0.95 < row["high"]
    figure = claims.time_ratio_figure(rows)
    assert len(figure.axes[0].lines) >= 3  # the series, 1× and the claimed crossover
    assert "> 1: slower" in figure.axes[0].get_ylabel()
    crossover = claims.crossover_table(claims.crossover_rows(rows))
    assert any("time × softmax" in key and "> 1: slower" in key for key in crossover[0])


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
        Claim(T, "favor as fast", "equal", Comparison("favor+ape", "softmax+ape"), measure="ms_per_image_batched"),
        Claim(T, "relu as fast", "equal", Comparison("relu+ape", "softmax+ape"), measure="ms_per_image_batched"),
    ]
    rows = {row["claim"]: row for row in evaluate_claims([], table, datasets=["toy"], speed=speed)}
    assert rows["favor as fast"]["verdict"] == "contradicted" and 130 < rows["favor as fast"]["effect"] < 170
    assert rows["relu as fast"]["verdict"] == "supported"
    assert "5 benchmark rounds" in rows["relu as fast"]["test"]
    loaded = [dict(r, load_average=4.0) for r in speed]
    rows = {row["claim"]: row for row in evaluate_claims([], table, datasets=["toy"], speed=loaded)}
    assert rows["favor as fast"]["verdict"] == "undecided" and rows["favor as fast"]["reason"] == "busy machine"


def test_a_speed_sweep_on_a_busy_machine_gives_no_verdict():
    sweep = [
        {"backend": b, "tokens": t, "inference_batch_seconds": [s * (1 + 0.01 * k) for k in range(4)]}
        for t, speedup in {16: 0.5, 64: 0.8, 256: 1.6, 1024: 4.0}.items()
        for b, s in (("softmax", 1.0), ("relu", 1.0 / speedup))
    ]
    quiet = claims.crossover_rows(claims.time_ratios(sweep))
    loaded = claims.crossover_rows(claims.time_ratios(sweep), busy_machine=True)
    assert quiet[0]["verdict"] == "supported" and claims.verdict_text(loaded[0]) == "undecided: busy machine"


def _designed_study(rng, plan: dict[str, float], seeds=(1, 2, 3, 4, 5), n=20000):
    """fmnist_converged's design on dataset 'toy': primary records with planted accuracies."""
    from rpevit.lab.params import load_params

    params = dataclasses.replace(load_params("fmnist_converged"), datasets=("toy",))
    found = []
    for variant, accuracy in plan.items():
        for seed in seeds:
            rec = record(variant, accuracy, seed, rng, n=n)
            rec.update(train_seconds_per_epoch=60.0, epochs=26, num_params=1234)
            found.append(rec)
    return params, found


def _speed(times: dict[str, float], rounds: int = 4) -> list[dict]:
    return [
        {
            "round": k,
            "variant": v,
            "ms_per_image_batched": t * (1 + 0.01 * k),
            "train_seconds_per_image": t * (1 + 0.02 * k) / 500,
        }
        for k in range(rounds)
        for v, t in times.items()
    ]


def test_the_pre_registered_answer_states_scope_gaps_closing_cost_and_limits():
    plan = {"softmax+ape": 0.90, "favor+ape": 0.80, "relu+ape": 0.90}
    plan |= {"softmax+rope_mixed": 0.90, "favor+rope_mixed": 0.90, "relu+rope_mixed": 0.90}
    params, found = _designed_study(np.random.default_rng(3), plan)
    rows = evaluate_claims(found, claims.design_claims(params), datasets=params.datasets)
    times = {"softmax+ape": 1.0, "favor+ape": 2.0, "relu+ape": 0.9}
    speed = _speed(times | {"softmax+rope_mixed": 1.2, "favor+rope_mixed": 2.4, "relu+rope_mixed": 1.2})
    flat = [{"dataset": "toy", "plateau met": False}] * len(found)
    text = claims.design_answer_text(params, rows, found, flat, speed)
    assert text.startswith("**Scope.** `toy` with the recipe of `params/fmnist_converged.yaml`")
    assert "(1,234 parameters), 26 epochs; 5 complete primary seeds (1, 2, 3, 4, 5)" in text
    assert "Convergence is read as budget sensitivity: whether the contrasts change when the primary" in text
    assert "The plateau rule (best validation top-1 gaining" in text and "0 of 30 runs meet it" in text
    lines = text.splitlines()
    favor_ape = next(line for line in lines if line.startswith("- FAVOR+ gap with APE:"))
    gap = re.search(r"APE: −(\d+\.\d\d) points \[−(\d+\.\d\d), −(\d+\.\d\d)\]", favor_ape)  # the a − b sign
    assert 9.5 < float(gap[1]) < 10.5 and float(gap[2]) > float(gap[1]) > float(gap[3])  # 10-point gap, margin 1
    assert favor_ape.endswith("(90 % interval, 5 seeds) — **contradicted** (softmax ahead).")
    relu_ape = next(line for line in lines if line.startswith("- ReLU gap with APE:"))
    assert "— **supported** (equal within ±1 point; the estimate has " in relu_ape  # the sign is only the estimate's
    closes = next(line for line in lines if line.startswith("- RoPE-Mixed closes the FAVOR+ gap:"))
    assert "**supported**" in closes and "(95 % interval, 5 seeds)" in closes
    assert "- `favor+ape` vs `softmax+ape`: inference 2.00× [2.00, 2.00], training 2.00× [" in text
    assert "- `relu+rope_mixed` vs `softmax+rope_mixed`: inference 1.00× [" in text
    assert "smaller than its longer-budget check `fmnist_plateau_check` can detect" in text
    assert "**In short.** Of its 6 pre-registered contrasts: 4 supported, 1 contradicted, 1 inconclusive." in text
    family = next(line for line in lines if line.startswith("- claims the seeds cannot decide at their family's"))
    need = scipy_stats.t.isf(0.05 / 12, 4)  # 6 claims, 2 one-sided p-values each; 5 seeds
    assert "(12 one-sided p-values, first step p < 0.0042): " in family
    assert f"5 seeds: t > {need:.1f} (1 inconclusive)" in family
    assert "within the pre-registered contrasts (one family)" in text
    assert "1 dataset (toy)" in text and "####" not in text
    # the fraction of the gap closed: FAVOR+'s 10-point gap closed fully (Fieller interval around 1); ReLU has none
    fraction = next(
        line for line in lines if line.startswith("- RoPE-Mixed closes the FAVOR+ gap: ") and "of the gap" in line
    )
    found_fraction = re.search(
        r": (\d\.\d\d) of the gap \[(\d\.\d\d), (\d\.\d\d)\] \(95 % Fieller interval, 5 seeds\)", fraction
    )
    ratio, low, high = (float(found_fraction[k]) for k in (1, 2, 3))
    assert low < ratio < high and 0.9 < ratio < 1.1 and high - low < 0.2  # planted: the whole gap closed
    relu_fraction = [line for line in lines if line.startswith("- RoPE-Mixed closes the ReLU gap: not estimable")]
    assert relu_fraction and "(ReLU gap with APE: " in relu_fraction[0] and "is unbounded" in relu_fraction[0]
    checked = claims.design_answer_text(params, rows, found, flat, speed, "**Longer-budget check** (`chk`): held.")
    assert checked.index("- RoPE-Mixed closes the ReLU gap") < checked.index("**Longer-budget check** (`chk`): held.")
    assert checked.index("**Longer-budget check**") < checked.index("**What it costs.**")
    assert "**Longer-budget check**" not in text

    converged = [{"dataset": "toy", "plateau met": True}] * len(found)
    quiet = claims.design_answer_text(params, rows, found, converged, None)
    assert "30 of 30 runs meet it" in quiet and "whether the gaps hold" not in quiet
    assert "- not measured: no side-by-side speed benchmark of `fmnist_converged`" in quiet
    busy = [{**r, "load_average": 9.0, "cpu_count": 2.0} for r in speed]  # timed on a loaded machine: no interval
    loaded = claims.design_answer_text(params, rows, found, converged, busy)
    assert "- `favor+ape` vs `softmax+ape`: inference 2.00×, training 2.00× the time" in loaded
    assert "timed on a busy machine" in loaded
    one_round = claims.design_answer_text(params, rows, found, converged, [r for r in speed if r["round"] == 0])
    assert "inference: fewer than 2 rounds, no ratio" in one_round

    early = [r for r in found if r["seed"] <= 2]  # before the stopping rule's first 3 seeds
    text = claims.design_answer_text(params, evaluate_claims(early, claims.design_claims(params), ["toy"]), early, [])
    assert "2 complete primary seeds (1, 2) so far; the stopping rule (every 95 % half-width ≤ 0.5 points" in text
    assert "wants more: the study is still training" in text
    assert "No run has a training history to judge its plateau by." in text


def test_the_pre_registered_answer_counts_seeds_as_the_stopping_rule_does():
    plan = {v: 0.9 for v in ("softmax+ape", "favor+ape", "relu+ape", "softmax+rope_mixed", "favor+rope_mixed")}
    params, found = _designed_study(np.random.default_rng(4), plan | {"relu+rope_mixed": 0.9}, seeds=range(1, 11))
    lost = next(r for r in found if r["variant"] == "favor+ape" and r["seed"] == 2)
    lost.update(status="diverged")  # seed 2 is lost; the others stand in
    analysed = [r for r in found if r is not lost]
    rows = evaluate_claims(analysed, claims.design_claims(params), ["toy"])
    text = claims.design_answer_text(params, rows, found, [])
    assert "9 complete primary seeds (1, 3, 4, 5, 6, 7, 8, 9, 10); seed 2 lost (a primary run diverged)" in text
    assert "the stopping rule's target (every 95 % half-width ≤ 0.5 points, or 10 seeds) is met" in text
    noisy = dict(plan, **{"favor+ape": 0.5})  # a planted gap far too wide to fit the target…
    params, found = _designed_study(np.random.default_rng(5), noisy | {"relu+rope_mixed": 0.9}, seeds=(1, 2, 3), n=50)
    params = dataclasses.replace(params, seeds=(1, 2, 3))  # … and no seed left for more
    text = claims.design_answer_text(params, evaluate_claims(found, claims.design_claims(params), ["toy"]), found, [])
    assert "3 complete primary seeds (1, 2, 3); the stopping rule" in text and "no seed of the preset is left" in text


def test_the_pre_registered_answer_of_two_datasets_has_a_block_each():
    plan = {v: 0.9 for v in ("softmax+ape", "favor+ape", "relu+ape", "softmax+rope_mixed", "favor+rope_mixed")}
    params, found = _designed_study(np.random.default_rng(6), plan | {"relu+rope_mixed": 0.9})
    found += [{**r, "dataset": "toy2"} for r in found]
    params = dataclasses.replace(params, datasets=("toy", "toy2"))
    rows = evaluate_claims(found, claims.design_claims(params), ["toy", "toy2"])
    text = claims.design_answer_text(params, rows, found, [], None)
    assert text.startswith("#### toy\n\n**Scope.** `toy`") and "\n\n#### toy2\n\n**Scope.** `toy2`" in text
    assert text.count("**What it costs.**") == 1 and "2 datasets (toy, toy2)" in text


def test_an_interim_table_is_corrected_for_the_family_of_the_finished_study():
    rng = np.random.default_rng(11)
    found = _runs(rng, {"softmax+ape": 0.90, "favor+ape": 0.86}, seeds=(0, 1, 2, 3))
    table = _gap_table()
    now = {row["claim"]: row for row in evaluate_claims(found, table)}
    later = [
        ("toy", f"{b}+{m}", s)
        for b in ("softmax", "favor", "relu")
        for m in ("ape", "krpe", "rope_mixed")
        for s in range(4)
    ]
    planned = evaluate_claims(found, table, planned=later)
    by = {row["claim"]: row for row in planned}
    tested = by["plain FAVOR+ is below softmax"]
    p_for, p_against = tested["p_support"], tested["p_contradict"]
    assert 0 < p_for < 0.05
    # now: a family of one row (2 p-values); the 4 rows the plan will test are seed 002's, another family
    assert now["plain FAVOR+ is below softmax"]["p_support_holm"] == pytest.approx(min(1.0, 2 * p_for))
    assert tested["p_support_holm"] == pytest.approx(min(1.0, 2 * p_for))
    assert claims.family_size(planned) == (1, 5)
    assert {row["family"] for row in planned if row["pending"]} == {claims.S002.tag}
    # a planned row of the tested row's own source joins its family with both p-values at 1
    same_source = [
        *table,
        Claim(claims.S001, "plain ReLU is below softmax", "less", Comparison("relu+ape", "softmax+ape")),
    ]
    joined = {row["claim"]: row for row in evaluate_claims(found, same_source, planned=later)}
    assert joined["plain FAVOR+ is below softmax"]["p_support_holm"] == pytest.approx(
        stats.holm([p_for, p_against, 1.0, 1.0])[0]
    )
    # the whole-table correction stays as a sensitivity reading: 10 p-values there
    assert tested["verdict_whole_table"] == ("supported" if 10 * p_for < 0.05 else "inconclusive")
    pending = [row for row in planned if row["pending"]]
    assert len(pending) == 4 and all(row["verdict"] == claims.NO_DATA for row in pending)
    assert "in the Holm family" in claims.verdict_text(pending[0])
    assert "1 tested now and 4 awaiting" in claims.family_text(planned)
    assert claims.family_text(list(now.values())) == (
        "One Holm correction over the 2 one-sided p-values of 1 row: every row tested now."
    )
    # a row whose variants get fewer than two common planned seeds can never be tested: not in the family
    one_seed = [place for place in later if place[1] != "relu+krpe" or place[2] == 0]
    assert claims.family_size(evaluate_claims(found, table, planned=one_seed)) == (1, 4)
    # a row with one seed so far, and more planned, waits in the family too
    single = found + _runs(rng, {"softmax+krpe": 0.9, "favor+krpe": 0.9}, seeds=(0,))
    row = {r["claim"]: r for r in evaluate_claims(single, table, planned=later)}["favor matches softmax with krpe"]
    assert row["verdict"] == claims.UNDECIDED and row["pending"]


def test_a_row_whose_runs_the_design_ruled_out_says_so():
    rng = np.random.default_rng(12)
    found = _runs(rng, {"softmax+ape": 0.90, "favor+ape": 0.86}, seeds=(0, 1, 2))
    variants = ["softmax+ape", "favor+ape", "softmax+krpe", "favor+krpe", "relu+krpe"]
    # the plan trains the krpe variants except relu+krpe (e.g. the secondary budget is spent)
    planned = [("toy", v, s) for v in variants[:4] for s in range(3)]
    rows = claims.mark_unplanned(evaluate_claims(found, _gap_table(), planned=planned), variants, planned)
    by = {str(row["comparison"]): row for row in rows}
    assert by["favor+krpe − softmax+krpe"]["reason"] == "not run yet" and by["favor+krpe − softmax+krpe"]["pending"]
    assert (
        by["relu+krpe − softmax+krpe"]["reason"] == claims.RULED_OUT and not by["relu+krpe − softmax+krpe"]["pending"]
    )
    assert by["relu+rope_mixed − softmax+rope_mixed"]["reason"] == claims.NOT_PLANNED
    assert {row["claim"]: row for row in rows}["plain FAVOR+ is below softmax"]["verdict"] != claims.NO_DATA
    # without the plan: only what the preset's variants say
    plain = {str(r["comparison"]): r for r in claims.mark_unplanned(evaluate_claims(found, _gap_table()), variants)}
    assert plain["relu+krpe − softmax+krpe"]["reason"] == "not run yet"


def test_the_answer_figure_draws_only_the_pre_registered_contrasts():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.claims.registry import design_source
    from rpevit.lab.params import load_params

    params = load_params("fmnist_converged")
    found = []
    rng = np.random.default_rng(1)
    for variant in params.variants[:6]:
        for seed in range(1, 4):
            found.append(
                {"dataset": "fashion_mnist", "variant": variant, "seed": seed, "status": "finished",
                 "top1": 0.9 + 0.002 * rng.standard_normal(), "epochs": params.train.epochs}
            )  # fmt: skip
    rows = evaluate_claims(found, claims.claims_for(params), datasets=params.datasets)
    fig = claims.answer_figure(rows, params)
    (axis,) = fig.axes
    labels = [t.get_text() for t in axis.get_yticklabels()]
    primary = [r["claim"] for r in rows if r["source"] == design_source(params)]
    assert len(primary) == 6 and sorted(labels) == sorted(primary)  # the six contrasts, nothing else
    plt.close(fig)
    assert claims.answer_figure(rows, load_params("smoke")) is None  # no design, no answer figure


@pytest.mark.parametrize(("favor_rope", "verdict"), [(0.86, "supported"), (0.84, "contradicted")])
def test_closing_at_least_half_of_the_gap_is_a_weighted_difference_of_differences(favor_rope, verdict):
    """A 10-point FAVOR+ gap with APE; with RoPE-Mixed it is 4 points (60 % closed) or 6 (40 %):
    (a − b) − 0.5·(c − d) is +1 or −1 point, so "closes at least half" is supported or contradicted."""
    from rpevit.lab.design import Contrast

    plan = {"softmax+ape": 0.90, "favor+ape": 0.80, "relu+ape": 0.90, "softmax+rope_mixed": 0.90}
    plan |= {"favor+rope_mixed": favor_rope, "relu+rope_mixed": 0.90}
    params, found = _designed_study(np.random.default_rng(7), plan, n=40000)
    half = Contrast(
        "RoPE-Mixed closes at least half of the FAVOR+ gap",
        "greater",
        {"favor+rope_mixed": 1, "softmax+rope_mixed": -1, "favor+ape": -0.5, "softmax+ape": 0.5},
    )
    params = dataclasses.replace(params, design=dataclasses.replace(params.design, contrasts=(half,)))
    (row,) = evaluate_claims(found, claims.design_claims(params), datasets=params.datasets)
    assert row["comparison"].weight == 0.5 and row["comparison"].terms["softmax+ape"] == 0.5
    assert row["effect"] == pytest.approx(1.0 if verdict == "supported" else -1.0, abs=0.25)
    assert row["verdict"] == verdict
