"""The chunked kernel-sum engine of biased linear attention: Σ_j K_ij ψ(q_i)ᵀψ(k_j) v_j and its
denominator for any linear operator K on the patch grid, in bounded memory, with its own backward.

Kernelized attention with relative weights (Luo et al., NeurIPS 2021, eq. 10 of "Stable, Fast and
Accurate: Kernelized Attention with Relative Positional Encoding") needs, per query i, the sums
Σ_j c_ij ψ(k_j) v_jᵀ and Σ_j c_ij φ(k_j): grids of m·(d + 1) channels pushed through one operator
K = [c_ij]. The operators live with their math — the block-Toeplitz FFT map in
rpevit.core.attention.toeplitz, the separable axis / decay maps in rpevit.core.attention.separable; this
module only streams channels through them and closes the CLS border.

Memory: the m·(d + 1) channels never exist at once. `kernel_sums` streams chunks of
(batch·head, feature) slabs — at most a byte budget of the operator's working memory (the FFT
operator: toeplitz.FFT_CHUNK_BYTES of padded spectrum) — through K and contracts each with ψ(q) at
once; its backward (`_KernelSums`, a custom autograd
Function) recomputes each chunk instead of keeping the spectra and per-query sums, so autograd saves
only q, k, v and the kernel: O(N·(m + d)) per head instead of ≈ 5·N·m·d. Measured with the FFT
operator on the 2-core CPU (one layer with projections, N = 4,096, 8 heads, d = 32, fwd+bwd, 1 thread) against the
unchunked path: m = 32 — 7.4 s → 2.4 s, saved for backward 1,256 → 55 MB, peak RSS 3.5 GB → 205
MB; m = 112 — 36.9 s → 7.8 s, 4,381 → 179 MB, 12.3 GB → 309 MB (the unchunked path's GiB-sized
buffers missed every cache).

CLS breaks the grid structure; it is a rank-one border handled in O(N) by `normalize_with_cls`.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ..precision import autocast_off

DENOMINATOR_EPS = 1e-12
"""Clamp of the denominator: an underflow / round-off guard only (weights are shifted so they stay ≤ 1)."""


ACCELERATOR_CHUNK_BYTES = 512 << 20
"""Chunk budget on non-CPU devices (CUDA): large, so each kernel launch sees ≥ 10⁷ elements. Not
measured (no GPU at hand when written): a device-independent starting point, not a tuned value."""


def chunk_budget(device: torch.device, cpu_bytes: int) -> int:
    """The chunk budget in bytes: `cpu_bytes` on CPU, ACCELERATOR_CHUNK_BYTES elsewhere."""
    return cpu_bytes if device.type == "cpu" else ACCELERATOR_CHUNK_BYTES


class KernelOperator:
    """A linear map y = K x of grids x (gc, C, H, W), the same K for every channel of one head.

    Instances carry the grid as `height`, `width`, and the memory `layout` in which `kernel_sums`
    builds the channel grids they receive (the logical shape is always (gc, C, H, W)):
    "channels_first" — memory (gc, C, H, W), for 2D FFTs over the trailing dims; "rows_first" —
    memory (gc, H, C, W), so a product along the rows (W) is one GEMM over (H·C, W) and a product
    along the columns (H) one GEMM over (H, C·W), both without copies.
    Subclasses implement the map, its transpose and the gradient of ⟨p, K x⟩ with respect to their
    parameters; `kernel_sums` streams chunks of channels through them. `heads` (gc,) long: the head
    of each slab of the chunk. `state` is what `prepare` made of the parameters (under no_grad).
    """

    layout = "channels_first"

    def bytes_per_channel(self, height: int, width: int, dtype: torch.dtype) -> int:
        """Working memory of one channel, compared with the chunk budget."""
        raise NotImplementedError

    def prepare(self, params):
        return params

    def forward(self, x, heads, state, keep: bool):
        """(K x, cache for `backward`'s parameter gradients, or None if not `keep`)."""
        raise NotImplementedError

    def backward(self, p, x, heads, state, cache, grads):
        """Kᵀ p; when `grads` (from `new_grads`) is given, also add ∂⟨p, K x⟩/∂params into it."""
        raise NotImplementedError

    def new_grads(self, state, params) -> list:
        return [torch.zeros_like(param) for param in params]

    def finish_grads(self, grads, state, params) -> tuple:
        return tuple(grads)


def _chunks(slabs: int, features: int, per_feature: int, budget: int):
    """(g0, g1, l0, l1) ranges over slabs × features with ≤ `budget` bytes each (≥ one feature)."""
    lc = max(1, min(features, budget // max(1, per_feature)))
    gc = max(1, budget // max(1, features * per_feature)) if lc == features else 1
    for g0 in range(0, slabs, gc):
        for l0 in range(0, features, lc):
            yield g0, min(slabs, g0 + gc), l0, min(features, l0 + lc)


_ORDER = {"channels_first": (0, 1, 2, 3, 4), "rows_first": (0, 3, 1, 2, 4)}  # memory order of (gc, lc, E, H, W)


def outer_channels(k_num, values, k_den, layout):
    """Channels (gc, lc, E, H, W) of G_j = ψ(k_j) ⊗ [v_j, 1], with φ(k_j) in the last channel, stored
    in the operator's memory layout (a permuted view when "rows_first")."""
    order, inverse = _ORDER[layout], [_ORDER[layout].index(i) for i in range(5)]
    # the product of the permuted factors is contiguous in the layout's memory order; its inverse
    # permutation is the (gc, lc, E, H, W) view (no `out=` into a permuted view: a graph break)
    x = torch.mul(k_num[:, :, None].permute(*order), values[:, None].permute(*order)).permute(*inverse)
    if k_den is not None:
        x[:, :, -1] = k_den
    return x


class _KernelSums(torch.autograd.Function):
    """[Σ_j K_ij ψ(q_i)ᵀψ(k_j) v_j ; Σ_j K_ij φ(q_i)ᵀφ(k_j)] over patch tokens, in chunks.

    Forward: for each chunk of (slab, feature) pairs, the channels ψ(k)_l ⊗ [v, 1] (φ(k)_l in the
    last) go through K and are contracted with ψ(q)_l (φ(q)_l for the last) at once; only the
    (gc, lc, d+1, H, W) chunk exists at a time. Backward recomputes each chunk: S = K X gives
    ∂ψ(q), ∂φ(q); Kᵀ P with P = ψ(q) ⊗ [∂num, ∂den] gives ∂ψ(k), ∂φ(k), ∂v; the operator adds its
    parameter gradients. Only the inputs are saved for backward (O(N·(m + d)) per slab).
    """

    @staticmethod
    def forward(ctx, op, budget, heads, q_num, k_num, q_den, k_den, v, *params):
        shared = q_den is None
        batch, height, width = q_num.shape[0], op.height, op.width
        state = op.prepare(params)
        q_t, k_t, qd_t, kd_t, values = _slabs(q_num, k_num, q_den, k_den, v, height, width, op.layout)
        slabs, m, d = q_t.shape[0], q_t.shape[1], v.shape[-1]
        out = q_num.new_zeros(slabs, d + 1, height, width)
        per_feature = (d + 1) * op.bytes_per_channel(height, width, q_num.dtype)
        for g0, g1, l0, l1 in _chunks(slabs, m, per_feature, budget):
            idx = torch.arange(g0, g1, device=q_num.device) % heads
            x = outer_channels(k_t[g0:g1, l0:l1], values[g0:g1], None if shared else kd_t[g0:g1, l0:l1], op.layout)
            y = op.forward(x.flatten(1, 2), idx, state, keep=False)[0].unflatten(1, (l1 - l0, d + 1))
            # contract with ψ(q) at once (addcmul per feature: no chunk-sized temporary). ψ ≡ φ: the
            # last channel, ψ(k)·1 contracted with ψ(q), is the denominator
            for i, l in enumerate(range(l0, l1)):
                if shared:
                    out[g0:g1].addcmul_(q_t[g0:g1, l, None], y[:, i])
                else:
                    out[g0:g1, :d].addcmul_(q_t[g0:g1, l, None], y[:, i, :d])
                    out[g0:g1, d].addcmul_(qd_t[g0:g1, l], y[:, i, d])
        ctx.op, ctx.budget, ctx.heads, ctx.shared = op, budget, heads, shared
        ctx.save_for_backward(q_num, k_num, q_den, k_den, v, *params)
        out = out.flatten(-2).unflatten(0, (batch, -1))  # (B, h, d+1, N)
        return out[:, :, :d].transpose(-2, -1), out[:, :, d]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_num, grad_den):
        # in the forward's precision even when backward() is called inside an autocast region
        with autocast_off(ctx.saved_tensors[0].device):
            return _KernelSums._gradients(ctx, grad_num, grad_den)

    @staticmethod
    def _gradients(ctx, grad_num, grad_den):
        q_num, k_num, q_den, k_den, v, *params = ctx.saved_tensors
        op, shared, heads = ctx.op, ctx.shared, ctx.heads
        need = ctx.needs_input_grad[3:]
        need_q, need_k = need[0] or need[2], need[1] or need[3] or need[4]
        need_params = any(need[5:])
        height, width = op.height, op.width
        state = op.prepare(params)
        q_t, k_t, qd_t, kd_t, values = _slabs(q_num, k_num, q_den, k_den, v, height, width, op.layout)
        slabs, m, d = q_t.shape[0], q_t.shape[1], v.shape[-1]
        grad_num = torch.zeros_like(v) if grad_num is None else grad_num
        grad_den = v.new_zeros(v.shape[:-1]) if grad_den is None else grad_den
        go = torch.cat((grad_num.transpose(-2, -1), grad_den.unsqueeze(-2)), dim=-2)  # (B, h, d+1, N)
        go = go.reshape(slabs, d + 1, height, width)
        dq, dqd = torch.zeros_like(q_t), (None if shared else torch.zeros_like(q_t))
        dk, dkd = torch.zeros_like(k_t), (None if shared else torch.zeros_like(k_t))
        dv = torch.zeros_like(values)
        grads = op.new_grads(state, params) if need_params else None
        per_feature = (d + 1) * op.bytes_per_channel(height, width, q_num.dtype)
        for g0, g1, l0, l1 in _chunks(slabs, m, per_feature, ctx.budget):
            idx = torch.arange(g0, g1, device=q_num.device) % heads
            kn, qn, g_out = k_t[g0:g1, l0:l1], q_t[g0:g1, l0:l1], go[g0:g1]
            x = outer_channels(kn, values[g0:g1], None if shared else kd_t[g0:g1, l0:l1], op.layout)
            cache = None
            if need_q or need_params:
                y, cache = op.forward(x.flatten(1, 2), idx, state, keep=need_params)
                y = y.unflatten(1, (l1 - l0, d + 1))
                if need_q:
                    if shared:
                        dq[g0:g1, l0:l1] = (y * g_out[:, None]).sum(2)
                    else:
                        dq[g0:g1, l0:l1] = (y[:, :, :d] * g_out[:, None, :d]).sum(2)
                        dqd[g0:g1, l0:l1] = y[:, :, -1] * g_out[:, None, -1]
                del y
            if need_k or need_params:
                p = outer_channels(qn, g_out, None if shared else qd_t[g0:g1, l0:l1] * g_out[:, None, -1], op.layout)
                dx = op.backward(p.flatten(1, 2), x.flatten(1, 2), idx, state, cache, grads)
                dx = dx.unflatten(1, (l1 - l0, d + 1))
                if shared:
                    dk[g0:g1, l0:l1] = (dx * values[g0:g1, None]).sum(2)
                else:
                    dk[g0:g1, l0:l1] = (dx[:, :, :d] * values[g0:g1, None, :d]).sum(2)
                    dkd[g0:g1, l0:l1] = dx[:, :, -1]
                for i in range(l1 - l0):
                    dv[g0:g1].addcmul_(kn[:, i, None], dx[:, i])
        param_grads = op.finish_grads(grads, state, params) if need_params else (None,) * len(params)

        def back(t, like):  # (slabs, C, H, W) → like (B, h, N, C)
            return None if t is None else t.flatten(-2).transpose(-2, -1).reshape(like.shape)

        dv = dv[:, :d]
        return (
            None,
            None,
            None,
            back(dq, q_num),
            back(dk, k_num),
            None if shared else back(dqd, q_den),
            None if shared else back(dkd, k_den),
            back(dv, v),
            *param_grads,
        )


def _slabs(q_num, k_num, q_den, k_den, v, height, width, layout):
    """Copies (B·h, C, H, W) of ψ(q), ψ(k), φ(q), φ(k) (None if shared) and [v, 1] in `layout`."""

    def grid_form(t):
        if t is None:
            return None
        t = t.flatten(0, 1).unflatten(1, (height, width))  # (G, H, W, C)
        if layout == "rows_first":
            return t.permute(0, 1, 3, 2).contiguous().permute(0, 2, 1, 3)  # memory (G, H, C, W)
        return t.permute(0, 3, 1, 2).contiguous()  # memory (G, C, H, W)

    ones = v.new_ones(v.shape[:-1] + (1,))
    return (
        grid_form(q_num),
        grid_form(k_num),
        grid_form(q_den),
        grid_form(k_den),
        grid_form(torch.cat((v, ones), dim=-1)),
    )


def kernel_sums(op: KernelOperator, params, q_num, k_num, q_den, k_den, v, budget: int):
    """Σ_j K_ij ψ(q_i)ᵀψ(k_j) v_j (B, h, N, d) and Σ_j K_ij φ(q_i)ᵀφ(k_j) (B, h, N, 1) over the patches.

    q_num, k_num (ψ), q_den, k_den (φ): (B, h, N, m) patch tokens only; v (B, h, N, d); K = the
    operator with `params` (tensors, differentiable), applied in chunks of ≤ `budget` bytes of the
    operator's working memory. ψ ≡ φ (the same tensors) shares the channels: the denominator is the
    sum with value 1, one extra channel per feature. Gradients by the chunks' own backward.
    """
    shared = q_num is q_den and k_num is k_den
    num, den = _KernelSums.apply(
        op, budget, q_num.shape[1], q_num, k_num, None if shared else q_den, None if shared else k_den, v, *params
    )
    return num, den.unsqueeze(-1)


def normalize_with_cls(
    numerator, denominator, q_num, k_num, q_den, k_den, v, cls_weights, grid, eps: float = DENOMINATOR_EPS
) -> torch.Tensor:
    """out = numerator / max(denominator, eps) after adding the CLS rank-one border: (B, h, T, d).

    numerator (B, h, N, d) and denominator (B, h, N, 1): the patch queries' sums over the patch keys;
    q_num … v: all T tokens; cls_weights: the weights exp(b − M) of [CLS→patch, patch→CLS, CLS→CLS],
    either (h, 3) or a triple of tensors broadcastable to (1, h, 1, 1), (1, h, N, 1), (1, h, 1, 1)
    (per-query shifts). Patch queries get exp(b_patch→cls)·ψ(q_i)ᵀψ(k_cls)·v_cls (and likewise in
    the denominator); the CLS query reads every patch key with weight exp(b_cls→patch) and itself
    with exp(b_cls→cls).
    """
    p = grid.prefix
    if p:
        if torch.is_tensor(cls_weights):
            cls_weights = [cls_weights[:, i, None, None][None] for i in range(3)]  # (1, h, 1, 1) each
        c_to_patch, patch_to_c, c_to_c = cls_weights
        k_patch, kd_patch, v_patch = k_num[:, :, p:], k_den[:, :, p:], v[:, :, p:]
        q_patch, qd_patch = q_num[:, :, p:], q_den[:, :, p:]
        k_cls, kd_cls, v_cls = k_num[:, :, :1], k_den[:, :, :1], v[:, :, :1]  # (B, h, 1, ·)
        numerator = numerator + patch_to_c * (q_patch @ k_cls.transpose(-2, -1)) * v_cls
        denominator = denominator + patch_to_c * (qd_patch @ kd_cls.transpose(-2, -1))
        q_cls, qd_cls = q_num[:, :, :1], q_den[:, :, :1]  # (B, h, 1, m)
        cls_num = (
            c_to_patch * (q_cls @ k_patch.transpose(-2, -1)) @ v_patch
            + c_to_c * (q_cls @ k_cls.transpose(-2, -1)) * v_cls
        )  # (B, h, 1, d)
        cls_den = c_to_patch * (qd_cls @ kd_patch.transpose(-2, -1)).sum(-1, keepdim=True) + c_to_c * (
            qd_cls @ kd_cls.transpose(-2, -1)
        )  # (B, h, 1, 1)
        numerator = torch.cat((cls_num, numerator), dim=2)
        denominator = torch.cat((cls_den, denominator), dim=2)
    return numerator / denominator.clamp_min(eps)


def convert(q_num, k_num, q_den, k_den, v, dtype):
    """The five attention inputs in `dtype`, keeping ψ ≡ φ (the same tensor objects) when it holds."""
    shared = q_num is q_den and k_num is k_den
    q_num, k_num, v = q_num.to(dtype), k_num.to(dtype), v.to(dtype)
    if shared:
        return q_num, k_num, q_num, k_num, v
    return q_num, k_num, q_den.to(dtype), k_den.to(dtype), v
