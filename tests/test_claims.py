"""The claims table: comparisons built from records, verdicts that follow the planted truth."""
from __future__ import annotations

import numpy as np

from rpevit import claims
from rpevit.claims import Claim, correctness, evaluate_claims
from rpevit.schema import make_record


def record(variant, accuracy, seed, rng, n=2000, ms=1.0, load=0.1, resolution_eval=()):
    correct = rng.random(n) < accuracy
    text = "".join("1" if c else "0" for c in correct)
    return make_record(dataset="toy", variant=variant, seed=seed, status="finished", top1=correct.mean(),
                       test_correct=text, ms_per_image_batched=ms, load_average=load, cpu_count=2,
                       resolution_eval=list(resolution_eval))


def test_verdicts_follow_planted_differences():
    rng = np.random.default_rng(0)
    base = [rng.random(2000) < 0.85 for _ in range(3)]
    records = []
    for seed in range(3):
        same = "".join("1" if c else "0" for c in base[seed])
        worse = base[seed].copy()
        worse[np.flatnonzero(worse)[:100]] = False  # 5 points worse on the same images
        records += [make_record(dataset="toy", variant="softmax+ape", seed=seed, test_correct=same,
                                ms_per_image_batched=1.0 + 0.01 * seed, load_average=0.1, cpu_count=2),
                    make_record(dataset="toy", variant="relu+ape", seed=seed, test_correct=same,
                                ms_per_image_batched=1.0 + 0.01 * seed, load_average=0.1, cpu_count=2),
                    make_record(dataset="toy", variant="favor+ape", seed=seed,
                                test_correct="".join("1" if c else "0" for c in worse),
                                ms_per_image_batched=2.0, load_average=5.0, cpu_count=2)]
    table = [Claim("t", "favor below softmax", "less", "favor+ape", "softmax+ape"),
             Claim("t", "favor above softmax", "greater", "favor+ape", "softmax+ape"),
             Claim("t", "relu matches softmax", "equal", "relu+ape", "softmax+ape"),
             Claim("t", "favor as fast", "equal", "favor+ape", "softmax+ape", measure="ms_per_image_batched"),
             Claim("t", "never run", "greater", "softmax+krpe", "softmax+ape")]
    rows = {row["claim"]: row for row in evaluate_claims(records, table)}
    assert rows["favor below softmax"]["verdict"] == "supported"
    assert abs(rows["favor below softmax"]["effect"] + 5.0) < 1e-9
    assert rows["favor above softmax"]["verdict"] == "contradicted"
    assert rows["relu matches softmax"]["verdict"] == "supported"
    timing = rows["favor as fast"]
    assert timing["verdict"] == "contradicted" and timing["effect"] > 90 and "busy" in timing["note"]
    assert rows["never run"]["verdict"].startswith("inconclusive") and rows["never run"]["seeds"] == 0
    assert all(row["p_holm"] >= row["p"] for row in rows.values() if row["seeds"])


def test_resolution_claims_read_the_evaluated_correctness():
    rng = np.random.default_rng(1)
    rows = [{"resolution": 36, "mode": "extrapolate", "correct": "1101"}]
    rec = record("softmax+ape", 0.9, 0, rng, resolution_eval=rows)
    assert correctness(rec, 36).tolist() == [True, True, False, True]
    assert correctness(rec, 44) is None


def test_every_published_claim_names_variants_of_the_claims_preset():
    from rpevit.params import load_params
    from rpevit.variants import parse_variant

    variants = {parse_variant(v).name for v in load_params("cpu_claims").variants}
    for claim in claims.CLAIMS:
        assert claim.a in variants and claim.b in variants, claim
        if claim.resolution:
            assert claim.resolution in load_params("cpu_claims").evaluate.resolutions
