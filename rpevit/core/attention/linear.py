"""Non-causal linear (kernelized) attention: FAVOR+ and Performer-ReLU backends.

Katharopoulos et al. 2020 ("Transformers are RNNs") / Choromanski et al. 2021 (Performer):

    out_i = ψ(q_i)ᵀ[Σ_j ψ(k_j) v_jᵀ] / max(φ(q_i)ᵀ[Σ_j φ(k_j)], DENOMINATOR_EPS)

two matrix products per head, O(N·m·d) time and O(m·d) state, never the N×N matrix. Without
a post-map rotation ψ = φ. With one (RoFormer, Su et al. 2021, §3.3 "RoPE with linear
attention"), the numerator uses ψ(q_i) = R_i φ(q_i), ψ(k_j) = R_j φ(k_j), with R an orthogonal
position-dependent map of the m-dim feature space, and the denominator stays unrotated: the
numerator kernel φ(q)ᵀR(r_j − r_i)φ(k) is exactly relative, weights can be negative, and the
positive unrotated denominator is the only thing clamped. A pre-map rotation (rotate q, k,
then φ) is done by the caller (layer.py) and needs nothing here.

Numerics: feature maps and sums run in max(float32, input dtype) with autocast disabled (fp16
overflow of Σφ(k) is the classic NaN source); the output is cast back to v's dtype.
DENOMINATOR_EPS = 1e-12 is a pure underflow guard: the feature floors (features.py) already
bound the denominator below by N·ε/m (FAVOR+, ε = 1e-6) or N·m·ε² (ReLU, ε = 1e-3) in exact
arithmetic, so the clamp never biases a well-formed attention row.

`weights()` returns the dense matrix A with out = A v built from the very same features, for
inspection and as the test reference.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ..errors import UserError
from ..options import neutral
from ..precision import autocast_off, compute_dtype
from .features import (
    FAVOR_EPS,
    RELU_EPS,
    default_favor_features,
    favor_features,
    orthogonal_gaussian_matrix,
    relu_features,
)
from .separable import separable_linear_attention
from .separable import weights as separable_weights
from .toeplitz import biased_linear_attention, biased_linear_weights, fft_is_cheaper

DENOMINATOR_EPS = 1e-12


def _cast(tensor, dtype):
    return None if tensor is None else tensor.to(dtype)


def _bias_terms(bias, grid, dtype):
    """(table (h, 2H−1, 2W−1), CLS terms (h, 3) or None) of a relative-bias module for this grid, in the
    attention's compute dtype (a bias of another dtype is cast to it, as the softmax backend casts its mask)."""
    return bias.table(grid).to(dtype), _cast(bias.cls_terms() if grid.cls else None, dtype)


def separable(bias) -> bool:
    """True for a bias additive over the axes, b(Δ) = b_row(Δrow) + b_col(Δcol) (it has `factors`)."""
    return hasattr(bias, "factors")


def decaying(bias) -> bool:
    """True for a separable geometric decay, b(Δ) = −λ_row·|Δrow| − λ_col·|Δcol| (it has `axis_rates`)."""
    return separable(bias) and hasattr(bias, "axis_rates")


def bias_paths(bias) -> tuple[str, ...]:
    """The exact paths (besides auto) that can apply this relative bias inside linear attention."""
    return ("axis",) * separable(bias) + ("scan",) * decaying(bias) + ("fft", "dense")


def _separable_terms(bias, grid, dtype):
    """(row logits, col logits, CLS terms or None, decay rates or None) of a separable bias, in `dtype`."""
    row, col = bias.factors(grid)
    decay = bias.axis_rates(grid) if decaying(bias) else None
    return tuple(_cast(t, dtype) for t in (row, col, bias.cls_terms() if grid.cls else None, decay))


def key_sums(num_k: torch.Tensor, den_k: torch.Tensor, v: torch.Tensor):
    """Σ_j ψ(k_j) v_jᵀ (B, h, m, d) and Σ_j φ(k_j) (B, h, m): the sums every query reads."""
    # with a relative bias, toeplitz.py computes these sums per query by 2D FFT convolution
    return num_k.transpose(-2, -1) @ v, den_k.sum(dim=-2)


def _denominator(den_q, normalizer, eps: float):
    """max(φ(q_i)ᵀ Σ_j φ(k_j), eps): (B, h, T, 1) from φ(q) (B, h, T, m) and Σ_j φ(k_j) (B, h, m)."""
    return (den_q @ normalizer.unsqueeze(-1)).clamp_min(eps)


def linear_attention(num_q, num_k, den_q, den_k, v, eps: float = DENOMINATOR_EPS):
    """ψ(q_i)ᵀΣ_j ψ(k_j)v_jᵀ / max(φ(q_i)ᵀΣ_j φ(k_j), eps): (B, h, T, d)."""
    context, normalizer = key_sums(num_k, den_k, v)  # (B, h, m, d), (B, h, m)
    return (num_q @ context) / _denominator(den_q, normalizer, eps)  # (B, h, T, d)


def dense_linear_attention(num_q, num_k, den_q, den_k, eps: float = DENOMINATOR_EPS):
    """The matrix A (B, h, T, T) with linear_attention(...) = A v."""
    kernel = num_q @ num_k.transpose(-2, -1)  # (B, h, T, T)
    return kernel / _denominator(den_q, den_k.sum(dim=-2), eps)


class LinearAttention(nn.Module):
    """Shared core of the linear backends; subclasses define the feature map φ (`features`)."""

    exact = False  # a kernel feature map stands in for exp(qᵀk/√d)
    mechanisms = ("absolute", "gate", "rotary", "bias")
    num_features: int

    def _common_options(self, options) -> None:
        self.rotation_site, self.bias_path = options.rotation_site, options.bias_path

    def feature_dim(self) -> int:
        """m, the feature dimension a post-map rotation acts on."""
        return self.num_features

    def features(self, q: torch.Tensor, k: torch.Tensor):
        """φ(q), φ(k): (B, h, T, m) each, in q's dtype."""
        raise NotImplementedError

    def _feature_pairs(self, q, k, grid, feature_rotation):
        """(ψ(q), ψ(k), φ(q), φ(k)): numerator (possibly rotated) and denominator features."""
        phi_q, phi_k = self.features(q, k)  # (B, h, T, m)
        if feature_rotation is None:
            return phi_q, phi_k, phi_q, phi_k
        if self.num_features % 2:
            raise UserError(
                f"a post-map rotation ('post' rotation_site) rotates pairs of features, so "
                f"it needs an even number of features m; this {type(self).__name__} has "
                f"m={self.num_features}. Choose an even m (model.favor.num_features / "
                "model.relu.num_features) or set rotation_site: pre."
            )
        return (*feature_rotation.rotate_pair(phi_q, phi_k, grid), phi_q, phi_k)

    def forward(self, q, k, v, grid, bias=None, feature_rotation=None):
        """Attention output (B, h, T, d) in v's dtype; a relative bias goes through the 2D FFT path."""
        dtype = compute_dtype(q.dtype)
        with autocast_off(q.device):
            pairs = self._feature_pairs(q.to(dtype), k.to(dtype), grid, feature_rotation)
            if bias is None:
                out = linear_attention(*pairs, v.to(dtype))  # (B, h, T, d)
            elif separable(bias):  # additive over axes: applied one axis at a time (separable.py)
                row, col, cls_terms, decay = _separable_terms(bias, grid, dtype)
                out = separable_linear_attention(
                    *pairs, v.to(dtype), grid, row, col, cls_terms, decay=decay, path=self.bias_path
                )
            elif self._use_fft(grid, v.shape[-1]):
                out = biased_linear_attention(*pairs, v.to(dtype), grid, *_bias_terms(bias, grid, dtype))
            else:  # small grids: the same attention through its N×N matrix is cheaper
                out = biased_linear_weights(*pairs, grid, *_bias_terms(bias, grid, dtype)) @ v.to(dtype)
        return out.to(v.dtype)

    def weights(self, q, k, grid, bias=None, feature_rotation=None):
        """The dense attention matrix (B, h, T, T) in q's dtype (computed like forward)."""
        dtype = compute_dtype(q.dtype)
        with autocast_off(q.device):
            pairs = self._feature_pairs(q.to(dtype), k.to(dtype), grid, feature_rotation)
            if bias is None:
                return dense_linear_attention(*pairs).to(q.dtype)
            if separable(bias):
                row, col, cls_terms, _ = _separable_terms(bias, grid, dtype)
                return separable_weights(*pairs, grid, row, col, cls_terms).to(q.dtype)
            return biased_linear_weights(*pairs, grid, *_bias_terms(bias, grid, dtype)).to(q.dtype)

    def check_bias(self, bias) -> None:
        """`bias_path` axis / scan exist only for separable biases (rpevit.core.attention.separable)."""
        if self.bias_path in ("axis", "scan") and not separable(bias):
            raise UserError(
                f"bias_path: {self.bias_path!r} applies a separable bias (manhattan, axial_rpe) axis by "
                f"axis; {type(bias).__name__} is not separable — use auto, fft or dense."
            )
        if self.bias_path == "scan" and not decaying(bias):
            raise UserError(
                f"bias_path: 'scan' runs recurrences of a geometric decay (manhattan); {type(bias).__name__} "
                "has no decay rates — use auto, axis, fft or dense."
            )

    def _use_fft(self, grid, head_dim: int) -> bool:
        """Relative bias: the O(N log N) FFT path, or the dense N×N path where that is cheaper."""
        if self.bias_path == "auto":
            return fft_is_cheaper(grid, self.num_features, head_dim)
        return self.bias_path == "fft"


@dataclass(frozen=True)
class FavorOptions:
    """FAVOR+ options: m random features (None = 4·⌈d ln d/4⌉), redraw every k training steps (0 =
    never), where a rotary method acts (q, k "pre" the feature map, or φ(q), φ(k) "post"), and the
    exact path for a relative bias ("auto" = whichever costs fewer multiply-adds)."""

    num_features: int | None = None
    redraw_steps: int = 0
    rotation_site: Literal["pre", "post"] = "pre"
    bias_path: Literal["auto", "fft", "dense", "axis", "scan"] = neutral("auto")

    def check(self, where: str) -> None:
        if self.num_features is not None and (self.num_features < 1 or self.num_features % 2):
            raise UserError(
                f"{where}.num_features must be a positive even integer (pairs of features are "
                f"rotated by post-map rotary methods), got {self.num_features}; or leave it "
                "null for the default 4·⌈d·ln d/4⌉."
            )
        if self.redraw_steps < 0:
            raise UserError(f"{where}.redraw_steps must be ≥ 0 (0 = never redraw), got {self.redraw_steps}.")


REDRAW_EVERY = 1000  # training steps between FAVOR+ redraws for `favor_redraw` (performer-pytorch's default)


def feature_seed(seed: int, layer: int, draw: int) -> int:
    """The seed of FAVOR+'s ω for (run seed, layer index, redraw count): a 63-bit hash of the three,
    the same in every process, so data-parallel ranks draw the same ω with no communication."""
    digest = hashlib.sha256(f"rpevit favor+ omega {seed} {layer} {draw}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class FavorAttention(LinearAttention):
    """FAVOR+ Performer attention (positive orthogonal random features for exp(qᵀk/√d)).

    m = options.num_features, or by default m = 4·⌈d·ln(d)/4⌉ (at least 4): performer-pytorch's
    d·ln d, rounded up to a multiple of 4 so a post-map RoPE-Axial (m % 4 == 0) fits; d = 16 →
    48, d = 32 → 112, d = 64 → 268. One ω (m, d) per layer, shared by q and k (separate draws
    bias the estimator) and by all heads, stored in the `omega` buffer (in state_dict), drawn at
    init from the global torch RNG (so a run's init is that of earlier rpevit versions). With
    options.redraw_steps = k > 0 a fresh ω is drawn after every k-th training step
    (`count_training_step`, called by the training loop outside any compiled region, so the
    count never enters a compiled graph's guards; it is kept in the `redraw_counter` buffer, so
    it is checkpointed); k = 0 never redraws. A redraw's ω comes from a generator seeded by
    `feature_seed(run seed, layer index, redraw count)` (Choromanski et al. 2021 §4: any fresh
    independent draw serves), so every data-parallel rank draws the same matrix without a
    broadcast; the model sets (seed, layer) with `place`. A redraw swaps in a new tensor (no
    in-place write), so graphs built with the old ω still backpropagate. `feature_eps` is the
    floor ε added to the features (FAVOR_EPS = 1e-6).
    """

    Options = FavorOptions
    summary = "FAVOR+ (Choromanski et al. 2021): positive orthogonal random features, one ω per layer, O(N·m·d)"

    def __init__(self, options: FavorOptions, head_dim: int, heads: int):
        super().__init__()
        options.check("model.favor")
        m = default_favor_features(head_dim) if options.num_features is None else options.num_features
        self._common_options(options)
        self.head_dim, self.num_features = head_dim, m
        self.redraw_steps = options.redraw_steps
        self.feature_eps = FAVOR_EPS
        self.register_buffer("omega", orthogonal_gaussian_matrix(m, head_dim))  # (m, d)
        self.register_buffer("redraw_counter", torch.zeros((), dtype=torch.long))
        self._calls = 0  # python mirror of redraw_counter: no device sync per step
        self.seed, self.layer = 0, 0

    def place(self, seed: int, layer: int) -> None:
        """The run seed and this layer's index, which seed every redraw of ω."""
        self.seed, self.layer = int(seed), int(layer)

    def features(self, q, k):
        """Stabilized FAVOR+ features φ(q) (per-token max), φ(k) (one max per batch, head)."""
        return (
            favor_features(q, self.omega, "query", self.feature_eps),
            favor_features(k, self.omega, "key", self.feature_eps),
        )

    def redraw(self) -> None:
        """Replace ω by the draw for (seed, layer, steps counted so far), on ω's device and dtype."""
        generator = torch.Generator().manual_seed(feature_seed(self.seed, self.layer, self._calls))
        self.omega = orthogonal_gaussian_matrix(self.num_features, self.head_dim, generator).to(self.omega)

    def count_training_step(self) -> None:
        """Count one training step (training mode only); redraw ω after every `redraw_steps`-th."""
        if not self.training or self.redraw_steps <= 0:
            return
        self._calls += 1
        self.redraw_counter.fill_(self._calls)
        if self._calls % self.redraw_steps == 0:
            self.redraw()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._calls = int(self.redraw_counter)


@dataclass(frozen=True)
class FavorRedrawOptions(FavorOptions):
    """FAVOR+ options with ω redrawn every 1,000 training steps unless set (performer-pytorch's default)."""

    redraw_steps: int = REDRAW_EVERY


class FavorRedrawAttention(FavorAttention):
    """FAVOR+ whose random features are redrawn during training (Choromanski et al. 2021 §4; every
    `redraw_steps` = 1,000 steps by default, performer-pytorch's `feature_redraw_interval`): the network
    cannot adapt to one fixed ω, so it learns the softmax kernel FAVOR+ estimates rather than one random
    feature attention. The same module as `favor` in every other respect; its options live under
    `model.favor_redraw`."""

    Options = FavorRedrawOptions
    summary = "FAVOR+ with ω redrawn every 1,000 training steps (performer-pytorch's default), O(N·m·d)"


@dataclass(frozen=True)
class ReluOptions:
    """Performer-ReLU options: the feature map W ("identity": W = I, seed 000; "random": fixed
    orthogonal Gaussian; "learned": seed 001), its size m (None = head dim), the rotation site
    (default "post": pre-map rotation is not relative for ReLU features) and the bias path."""

    feature_map: Literal["identity", "random", "learned"] = "identity"
    num_features: int | None = None
    rotation_site: Literal["pre", "post"] = "post"
    bias_path: Literal["auto", "fft", "dense", "axis", "scan"] = neutral("auto")

    def check(self, where: str) -> None:
        if self.num_features is not None and self.num_features < 1:
            raise UserError(f"{where}.num_features must be a positive integer, got {self.num_features}.")
        if self.feature_map == "identity" and self.num_features is not None:
            raise UserError(
                f"{where}.num_features={self.num_features} needs {where}.feature_map 'random' or "
                "'learned'; 'identity' features have m = head dim (leave num_features null)."
            )


class ReluAttention(LinearAttention):
    """Performer-ReLU attention: φ(x) = ReLU(d^(−1/4)·W x) + ε, ε = RELU_EPS = 1e-3.

    options.feature_map: "identity" — W = I, m = d (seed 000, no projection); "random" — W a
    fixed orthogonal-block Gaussian matrix (rows χ(d)-scaled, `projection` buffer, never
    redrawn), m = options.num_features or d; "learned" — W a bias-free nn.Linear(d, m)
    with PyTorch's default init (seed 001), m = options.num_features or d. One W per layer,
    shared by q, k and all heads.
    """

    Options = ReluOptions
    summary = "Performer-ReLU: φ(x) = ReLU(d^(−1/4)Wx) + 10⁻³, W identity / random / learned, O(N·m·d)"

    def __init__(self, options: ReluOptions, head_dim: int, heads: int):
        super().__init__()
        options.check("model.relu")
        kind, m = options.feature_map, options.num_features
        self._common_options(options)
        self.kind, self.num_features = kind, head_dim if m is None else m
        self.feature_eps = RELU_EPS
        if kind == "learned":
            self.projection = nn.Linear(head_dim, self.num_features, bias=False)
        else:
            weight = orthogonal_gaussian_matrix(self.num_features, head_dim) if kind == "random" else None
            self.register_buffer("projection", weight)  # (m, d); None (not saved) for identity

    def _weight(self):
        if isinstance(self.projection, nn.Linear):
            return self.projection.weight  # (m, d)
        return self.projection  # (m, d) buffer or None (identity)

    def features(self, q, k):
        """ReLU features φ(q), φ(k) with the layer's W."""
        weight = self._weight()
        return relu_features(q, weight, self.feature_eps), relu_features(k, weight, self.feature_eps)
