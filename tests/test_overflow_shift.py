"""Every overflow shift of the relative-bias paths, one term at a time.

A bias term far outside exp's range (+800: exp overflows float64 past 709) must enter its query's shift
on every path — Toeplitz FFT and dense (rpevit/core/attention/toeplitz.py), separable axis, scan, FFT and
dense (separable.py) — for each term it has: the table, CLS→patch, patch→CLS and CLS→CLS. The result must
be finite and equal the float64 dense reference, which shifts every query row by its own largest bias (a
shift common to a row cancels in its ratio, so the reference is exact). Leaving one term out of one
path's shift gives inf/inf = NaN or a wrong mixture: each case below fails then.
"""

from __future__ import annotations

import pytest
import torch
from test_toeplitz import make_inputs, reference_attention, reference_bias

from rpevit.core.attention.separable import separable_linear_attention
from rpevit.core.attention.toeplitz import biased_linear_attention, biased_linear_weights
from rpevit.core.grid import Grid

F64 = torch.float64
FAR = 800.0  # exp(800) overflows float64
GRID = Grid(4, 5, cls=True)
TERMS = ("table", "cls_to_patch", "patch_to_cls", "cls_to_cls")


def raised(term: str, table: torch.Tensor, cls_terms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The table and CLS terms with `term` raised by FAR (one CLS column, or the whole table)."""
    if term == "table":
        return table + FAR, cls_terms
    column = TERMS.index(term) - 1
    return table, cls_terms + FAR * torch.nn.functional.one_hot(torch.tensor(column), 3).to(F64)


def expected(inputs, table, cls_terms):
    """The float64 dense reference with each query row shifted by its own largest bias."""
    bias = reference_bias(table, cls_terms, GRID)
    return reference_attention(*inputs, bias - bias.amax(-1, keepdim=True))


def check(out, reference):
    assert torch.isfinite(out).all(), "a term beyond exp's range reached exp unshifted"
    assert float((out - reference).abs().max()) <= 1e-10


@pytest.mark.parametrize("term", TERMS)
@pytest.mark.parametrize("path", ["fft", "dense"])
def test_toeplitz_paths_shift_every_term(path, term):
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(GRID, post=True, seed=300)
    table, cls_terms = raised(term, table, cls_terms)
    if path == "fft":
        out = biased_linear_attention(q_num, k_num, q_den, k_den, v, GRID, table, cls_terms)
    else:
        out = biased_linear_weights(q_num, k_num, q_den, k_den, GRID, table, cls_terms) @ v
    check(out, expected((q_num, k_num, q_den, k_den, v), table, cls_terms))


@pytest.mark.parametrize("term", TERMS)
@pytest.mark.parametrize("path", ["axis", "fft", "dense"])
def test_separable_paths_shift_every_term(path, term):
    """Table r ⊕ c: the table term raises the row logits (every entry of r ⊕ c by FAR)."""
    q_num, k_num, q_den, k_den, v, _, cls_terms = make_inputs(GRID, post=True, seed=310)
    generator = torch.Generator().manual_seed(311)
    row = torch.randn(3, 2 * GRID.height - 1, generator=generator, dtype=F64)
    col = torch.randn(3, 2 * GRID.width - 1, generator=generator, dtype=F64)
    table, cls_terms = raised(term, row[:, :, None] + col[:, None, :], cls_terms)
    if term == "table":
        row = row + FAR
    out = separable_linear_attention(q_num, k_num, q_den, k_den, v, GRID, row, col, cls_terms, path=path)
    check(out, expected((q_num, k_num, q_den, k_den, v), table, cls_terms))


@pytest.mark.parametrize("term", TERMS)
def test_the_scan_path_shifts_every_term(term):
    """The scan path's table is the decay −λ(|Δrow| + |Δcol|) ≤ 0: its extreme is λ far beyond exp's range
    (every off-diagonal weight underflows), the CLS terms are raised as on every path."""
    q_num, k_num, q_den, k_den, v, _, cls_terms = make_inputs(GRID, post=True, seed=320)
    rates = torch.tensor([0.3, 0.05, 1.2], dtype=F64) if term != "table" else torch.full((3,), FAR, dtype=F64)
    rows = torch.arange(-(GRID.height - 1), GRID.height, dtype=F64).abs()
    cols = torch.arange(-(GRID.width - 1), GRID.width, dtype=F64).abs()
    table = -rates[:, None, None] * (rows[None, :, None] + cols[None, None, :])
    _, cls_terms = raised(term, table, cls_terms) if term != "table" else (table, cls_terms)
    out = separable_linear_attention(
        q_num, k_num, q_den, k_den, v, GRID, None, None, cls_terms, decay=rates, path="scan"
    )
    check(out, expected((q_num, k_num, q_den, k_den, v), table, cls_terms))
