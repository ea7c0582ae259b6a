"""Rotary methods in the 2D Fourier plane (RoPE-ViT §3.3-style analysis).

For one head a rotary method makes the positional part of a logit Σ_c Re[a_c·exp(i f_c·Δ)], one 2D
frequency f_c = (f_x, f_y) (radians per patch) per rotated channel pair. Here:

- `effective_frequencies`: a module's frequencies from its rotation matrices alone — the joint
  eigen-phases of the commuting one-patch shifts R(0)ᵀR(e_row), R(0)ᵀR(e_col) — the same way for
  every rotary method, cross-checked against what its parameters state (`parameter_frequencies`,
  `frequency_crosscheck`);
- `rotation_identity_errors`: orthogonality, the relative identity R(r)ᵀR(r′) = R(0)ᵀR(r′ − r) and
  the fast rotation path against the dense matrices;
- `Reconstruction`: how well a head's basis {1, cos(f·Δ), sin(f·Δ)} fits target patterns (least
  squares) on the offsets or the patches of a grid;
- `learned_layers`: per layer of a trained model, its frequencies and parameter change vs the
  same layer at init.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from .position import POSITIONS, build_position

F64 = torch.float64


def rotary_methods() -> list[str]:
    """Every rotary method of the registry."""
    return [name for name, method in POSITIONS.items() if method.mechanism == "rotary"]


def build_rotary(methods, config, head_dim: int, heads: int, seed: int = 0) -> dict:
    """{method: module at init} for each rotary method (built in order after seeding torch)."""
    torch.manual_seed(seed)
    return {method: build_position(method, config, head_dim, heads) for method in methods}


def wrap(angles: torch.Tensor) -> torch.Tensor:
    """Angles wrapped to (−π, π]: on integer patch positions a frequency is only defined mod 2π."""
    return torch.atan2(torch.sin(angles), torch.cos(angles))


def effective_frequencies(module) -> torch.Tensor:
    """(heads, dim, 2) 2D frequencies (f_x, f_y) = (f_col, f_row) of a rotary module, from R alone.

    G_row = R(0)ᵀR(1, 0) and G_col = R(0)ᵀR(0, 1) are commuting orthogonal matrices (the one-patch
    shifts of the relative kernel); the eigenvectors of a generic combination diagonalise both, and
    the phases of their eigenvalues are the frequencies (each channel pair gives ±f).
    """
    module = copy.deepcopy(module).to(F64)
    with torch.no_grad():
        shifts = module.rotation_matrices(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=F64))
    g_row = (shifts[:, 0].mT @ shifts[:, 1]).to(torch.complex128)  # (h, d, d)
    g_col = (shifts[:, 0].mT @ shifts[:, 2]).to(torch.complex128)
    _, vectors = torch.linalg.eig(0.6180339887 * g_row + 0.4142135624 * g_col)  # (h, d, d), columns
    eigen_row = (vectors.conj() * (g_row @ vectors)).sum(-2)  # vᴴ G v per eigenvector: (h, d)
    eigen_col = (vectors.conj() * (g_col @ vectors)).sum(-2)
    return torch.stack((eigen_col.angle(), eigen_row.angle()), dim=-1)


def parameter_frequencies(module) -> torch.Tensor | None:
    """The frequencies a module's own parameters state, (heads or 1, k, 2) as (f_x, f_y), or None.

    Duck-typed: RoPE-style modules expose frequencies() → (f_row, f_col) per pair; Cayley-STRING wraps
    a RoPE-Mixed (`mixed`); Circulant-STRING exposes phase_steps() → 2·Im FFT(c_k) per rfft mode.
    """
    for candidate in (module, getattr(module, "mixed", None)):
        if candidate is not None and callable(getattr(candidate, "frequencies", None)):
            f = candidate.frequencies(F64, "cpu").detach()  # (2, h or 1, pairs): f_row, f_col
            return torch.stack((f[1], f[0]), dim=-1)
    if callable(getattr(module, "phase_steps", None)):
        steps = module.phase_steps(F64).detach()  # (2, h, d//2 + 1)
        return torch.stack((steps[1], steps[0]), dim=-1)
    return None


def set_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Hausdorff distance of two point sets (k, 2), coordinates wrapped mod 2π."""
    diff = wrap(a[:, None, :] - b[None, :, :]).norm(dim=-1)
    return max(diff.min(1).values.max().item(), diff.min(0).values.max().item())


def frequency_crosscheck(modules: dict, frequencies: dict) -> list[dict]:
    """Per method: its eigen-frequencies vs the frequencies its parameters state (±f, wrapped),
    worst head's set distance in rad/patch."""
    rows = []
    for method, module in modules.items():
        found = frequencies[method]
        stated = parameter_frequencies(module)
        row = {"method": method, "eigen-frequencies per head": found.shape[1]}
        if stated is None:
            row["max distance to parameter frequencies"] = "— (no frequency parameters exposed)"
        else:
            stated = wrap(stated.to(F64)).expand(found.shape[0], -1, -1)
            distance = max(set_distance(found[h], torch.cat((stated[h], -stated[h]))) for h in range(found.shape[0]))
            row["max distance to parameter frequencies"] = f"{distance:.1e}"
        rows.append(row)
    return rows


def rotation_identity_errors(module, coords: torch.Tensor, heads: int, seed: int = 0) -> dict:
    """Worst Frobenius errors (over heads and positions) of a rotary module in float64 at `coords`
    (N, 2): ‖RᵀR − I‖ (orthogonality), ‖R(r)ᵀR(r′) − R(0)ᵀR(r′ − r)‖ over all pairs (relative), and
    ‖rotate(z) − R z‖ for random z (the fast path against the dense matrices)."""
    module = copy.deepcopy(module).to(F64)
    coords = coords.to(F64)
    n = coords.shape[0]
    pairs = (coords[None, :, :] - coords[:, None, :]).reshape(-1, 2)  # r′ − r: (N², 2)
    with torch.no_grad():
        R = module.rotation_matrices(coords)  # (h or 1, N, d, d)
        eye = torch.eye(R.shape[-1], dtype=F64)
        orthogonality = (R.mT @ R - eye).norm(dim=(-2, -1)).max().item()
        lhs = (R.mT[:, :, None] @ R[:, None, :]).flatten(1, 2)  # (h, N², d, d)
        rhs = module.rotation_matrices(torch.zeros(1, 2, dtype=F64)).mT @ module.rotation_matrices(pairs)
        relative = (lhs - rhs).norm(dim=(-2, -1)).max().item()
        z = torch.randn(2, heads, n, R.shape[-1], generator=torch.Generator().manual_seed(seed), dtype=F64)
        dense = torch.einsum("hnij,bhnj->bhni", R.expand(heads, -1, -1, -1), z)
        fast = (module.rotate(z, coords) - dense).norm(dim=-1).max().item()
    return {"orthogonality": orthogonality, "relative": relative, "fast path": fast}


DOMAINS = ("offsets", "patches")  # where Reconstruction fits its targets


class Reconstruction:
    """Least-squares fits of target patterns by one head's rotary features 1, cos(f·r), sin(f·r).

    domain "offsets": the (2S−1)² offsets of an S×S patch grid (where a logit kernel lives);
    "patches": the S×S positions, centred. Targets: diagonal and axial stripes of period
    `stripe_period` patches and a radial Gaussian bump of width `bump_width`.
    """

    def __init__(self, side: int, domain: str = "offsets", stripe_period: float = 8.0, bump_width: float = 1.5):
        if domain not in DOMAINS:
            raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
        self.side, self.domain = side, domain
        if domain == "offsets":
            axis = torch.arange(-(side - 1), side, dtype=F64)
        else:
            axis = torch.arange(side, dtype=F64)
            axis = axis - axis.mean()
        self.axis = axis
        ys, xs = torch.meshgrid(axis, axis, indexing="ij")  # rows (y), columns (x)
        self.shape = xs.shape
        self.points = torch.stack((xs.reshape(-1), ys.reshape(-1)), dim=-1)  # (P, 2) as (x, y)
        diagonal = (xs + ys) / math.sqrt(2)
        self.targets = {
            "diagonal stripes": torch.cos(2 * math.pi * diagonal / stripe_period),
            "radial bump": torch.exp(-(xs**2 + ys**2) / (2 * bump_width**2)),
            "axial stripes": torch.cos(2 * math.pi * xs / stripe_period),
        }
        self._matrix = torch.stack([t.reshape(-1) for t in self.targets.values()])  # (T, P)

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """imshow extent (left, right, bottom, top) of a target or fit."""
        a = self.axis
        return (a[0].item() - 0.5, a[-1].item() + 0.5, a[-1].item() + 0.5, a[0].item() - 0.5)

    def fit(self, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Fits of every target from frequencies (k, 2): (fits (T, P), relative residuals (T,)),
        residual = ‖t − t̂‖ / ‖t − mean t‖ (0: exact, 1: nothing explained)."""
        phase = self.points @ freqs.to(F64).T  # (P, k)
        basis = torch.cat((torch.ones(len(self.points), 1, dtype=F64), phase.cos(), phase.sin()), dim=1)
        fitted = (basis @ (torch.linalg.pinv(basis) @ self._matrix.T)).T  # min-norm least squares
        centred = self._matrix - self._matrix.mean(dim=1, keepdim=True)
        return fitted, (self._matrix - fitted).norm(dim=1) / centred.norm(dim=1)

    def residuals(self, freq_sets: torch.Tensor) -> dict:
        """Per target: (residual per head, the best head's fit reshaped to the domain) for a
        (heads, k, 2) frequency set."""
        fits = [self.fit(freq_sets[h]) for h in range(freq_sets.shape[0])]
        out = {}
        for index, name in enumerate(self.targets):
            per_head = [r[index].item() for _, r in fits]
            best = int(np.argmin(per_head))
            out[name] = (per_head, fits[best][0][index].reshape(self.shape))
        return out

    def rows(self, frequencies: dict) -> list[dict]:
        """Per method and target: features per head, mean residual over heads, best head residual."""
        rows = []
        for method, freq_sets in frequencies.items():
            for name, (per_head, _) in self.residuals(freq_sets).items():
                rows.append(
                    {
                        "method": method,
                        "target": name,
                        "features per head": 1 + 2 * freq_sets.shape[1],
                        "mean residual over heads": float(np.mean(per_head)),
                        "best head residual": float(np.min(per_head)),
                    }
                )
        return rows


def learned_layers(model, initial) -> list[dict]:
    """Per block of a trained model with learnable rotary parameters: layer, rotation site, trained
    and initial frequencies (heads, k, 2) and the relative parameter change ‖θ − θ₀‖ / ‖θ₀‖; empty
    when the method has fixed frequencies (e.g. RoPE-Axial) or no rotary method."""
    layers = []
    for index, (block, block0) in enumerate(zip(model.blocks, initial.blocks)):
        rotary, rotary0 = block.attn.rotary, block0.attn.rotary
        if rotary is None:
            break
        now = [p.detach().flatten() for p in rotary.parameters()]
        if not now:
            break
        now, then = torch.cat(now), torch.cat([p.detach().flatten() for p in rotary0.parameters()])
        layers.append(
            {
                "layer": index,
                "site": block.attn.rotation_site,
                "trained": effective_frequencies(rotary),
                "init": effective_frequencies(rotary0),
                "change": ((now - then).norm() / then.norm().clamp_min(1e-12)).item(),
            }
        )
    return layers


def learned_rows(record: dict, layers: list[dict], reconstruction: Reconstruction) -> list[dict]:
    """Table rows of `learned_layers`: parameter change and mean-over-heads residual of each target,
    init → trained."""
    rows = []
    for layer in layers:
        row = {
            "variant": record["variant"],
            "dataset": record["dataset"],
            "seed": record["seed"],
            "layer": layer["layer"],
            "site": layer["site"],
            "parameter change": f"{layer['change']:.2%}",
        }
        before, after = reconstruction.residuals(layer["init"]), reconstruction.residuals(layer["trained"])
        for name in reconstruction.targets:
            row[f"{name}: init → trained"] = f"{np.mean(before[name][0]):.3f} → {np.mean(after[name][0]):.3f}"
        rows.append(row)
    return rows
