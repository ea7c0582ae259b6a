"""Feature maps φ for kernelized (linear) attention: FAVOR+ and Performer-ReLU.

Linear attention replaces exp(qᵀk/√d) by φ(q)ᵀφ(k); the backends in linear.py then compute
out_i = φ(q_i)ᵀ[Σ_j φ(k_j) v_jᵀ] / φ(q_i)ᵀ[Σ_j φ(k_j)] in O(N·m·d).

FAVOR+ (Choromanski et al., ICLR 2021, "Rethinking Attention with Performers", Lemma 1 —
positive random features for the softmax kernel, §2.4 — orthogonal random features):

    φ(x̃)_l = m^(−1/2) · exp(ω_lᵀx̃ − ‖x̃‖²/2),   x̃ = x·d^(−1/4),   E_ω[φ(q̃)ᵀφ(k̃)] = exp(qᵀk/√d)

for ω_l ~ N(0, I_d) marginally. The rows ω_1..ω_m are drawn as ⌈m/d⌉ independent blocks of d
mutually orthogonal rows (the Q of a QR factorisation of a d×d Gaussian matrix, made Haar by
the sign of diag(R)), each row rescaled by an independent χ(d) norm so it is marginally
N(0, I_d); orthogonality lowers the estimator's variance and keeps it unbiased. In floating
point the exponent is shifted by a detached stabilizer M (queries: a max per token; keys: one
max per leading index over all tokens and features, so it cancels in the attention ratio) and a
floor ε is added: φ = m^(−1/2)·(exp(ω_lᵀx̃ − ‖x̃‖²/2 − M) + ε), ε = FAVOR_EPS = 1e-6 as in
google-research/performer fast_attention (numerical_stabilizer). Since ε is added after the
shift it is relative to the largest feature, so it never vanishes in fp32 and keeps every
feature — hence every denominator — strictly positive.

Performer-ReLU (the "generalized attention" of the same paper, §2.2 with f = ReLU):

    φ(x) = ReLU(d^(−1/4)·W x) + ε,   ε = RELU_EPS = 1e-3,

with W = I ("identity": no projection, m = d), a fixed random orthogonal-block matrix
("random") or a learned linear map ("learned"). The d^(−1/4) scaling makes φ(q)ᵀφ(k) scale
like qᵀk/√d, and ε = 1e-3 matches lucidrains/performer-pytorch (kernel_epsilon); it keeps
features positive when every ReLU input is negative.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

FAVOR_EPS = 1e-6
RELU_EPS = 1e-3


def default_favor_features(head_dim: int) -> int:
    """Default FAVOR+ feature count m = 4·⌈d·ln(d)/4⌉ (at least 4)."""
    return max(4, 4 * math.ceil(head_dim * math.log(head_dim) / 4))


def orthogonal_gaussian_matrix(
    num_rows: int, dim: int, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(num_rows, dim) block-orthogonal Gaussian rows with χ(dim) norms, drawn on the CPU."""
    num_blocks = math.ceil(num_rows / dim)
    gaussian = torch.randn(num_blocks, dim, dim, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)  # (blocks, d, d) each
    # multiply column c of Q by sign(R_cc): makes Q Haar-distributed (Mezzadri 2007)
    signs = torch.where(torch.diagonal(r, dim1=-2, dim2=-1) >= 0, 1.0, -1.0).to(q.dtype)
    q = q * signs[:, None, :]
    rows = q.reshape(num_blocks * dim, dim)[:num_rows]  # rows of each block are orthonormal
    gaussian_rows = torch.randn(num_rows, dim, generator=generator, dtype=torch.float64)
    norms = gaussian_rows.norm(dim=-1)  # χ(d) draws
    return (rows * norms[:, None]).to(dtype)


def favor_log_features(x: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """Unstabilized log-features ω_lᵀx̃ − ‖x̃‖²/2, x̃ = x·d^(−1/4), ω (…, m, d): (..., T, m)."""
    x = x * x.shape[-1] ** -0.25
    projection = x @ omega.to(x.dtype).transpose(-2, -1)  # (..., T, m)
    return projection - 0.5 * (x * x).sum(dim=-1, keepdim=True)


def favor_features(
    x: torch.Tensor, omega: torch.Tensor, stabilizer: str | None, eps: float = FAVOR_EPS
) -> torch.Tensor:
    """FAVOR+ positive features m^(−1/2)(exp(log-features − M) + ε) of x (..., T, d): (..., T, m).

    stabilizer: "query" — M = max over features per token (cancels with the row normalizer);
    "key" — ONE M per leading index over all tokens and features (cancels in the ratio; a
    per-key max would not); None — M = 0 (the raw estimator, for tests).
    """
    logits = favor_log_features(x, omega)  # (..., T, m)
    if stabilizer == "query":
        logits = logits - logits.amax(dim=-1, keepdim=True).detach()  # (..., T, 1)
    elif stabilizer == "key":
        logits = logits - logits.amax(dim=(-2, -1), keepdim=True).detach()  # (..., 1, 1)
    elif stabilizer is not None:
        raise ValueError(f"stabilizer must be 'query', 'key' or None, got {stabilizer!r}")
    return (torch.exp(logits) + eps) * omega.shape[-2] ** -0.5


def relu_features(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = RELU_EPS) -> torch.Tensor:
    """Performer-ReLU features ReLU(d^(−1/4)·W x) + ε of x (..., T, d): (..., T, m); W=None is I."""
    x = x * x.shape[-1] ** -0.25
    if weight is not None:
        x = F.linear(x, weight.to(x.dtype))  # (..., T, m)
    return F.relu(x) + eps
