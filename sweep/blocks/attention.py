"""Causal self-attention blocks as one-token maps, shared by GPT-2, GPT-NeoX and LLaMA.

All three are pre-norm residual blocks:

    serial    (GPT-2, LLaMA, NeoX use_parallel_residual=False):
        a = h + Attn(norm1(h));   h' = a + MLP(norm2(a))
    parallel  (NeoX use_parallel_residual=True):
        h' = h + Attn(norm1(h)) + MLP(norm2(h))

For token t with the earlier positions held fixed, the state the prefix leaves behind is
the keys and values of positions < t (already rotated at their own positions). The
one-token step recomputes q, k, v of token t and attends over [fixed prefix K, V ; own k, v],
so d h'_t / d h_t is exactly the token-diagonal block J_tt of the sequence Jacobian.

Everything runs in the dtype of the weights: no softmax or norm upcasts, so a float64
model gives float64-accurate Jacobians (HF's eager softmax and LlamaRMSNorm go through
float32; its rotary tables are always built in float32).
"""
from __future__ import annotations

import torch
from torch.func import jacfwd, vmap

from sweep.blocks.base import BlockOps


# ---------------------------------------------------------------------------- rotary


def rotary_tables(inv_freq: torch.Tensor, scaling: float, pos: torch.Tensor, dtype) -> tuple:
    """inv_freq (rot/2,), pos (L,) int -> cos, sin (L, rot) in `dtype`.

    The angles are formed in the model dtype: in float32 this is HF's table bit for bit,
    in float64 it is the exact rotation for the (float32-defined) frequencies.
    """
    freqs = pos.to(dtype)[:, None] * inv_freq.to(dtype)[None, :]  # (L, rot/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (L, rot)
    return emb.cos() * scaling, emb.sin() * scaling


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (..., heads, hd), cos/sin (..., rot) -> (..., heads, hd); rotates the first rot dims
    (rotate-half convention; rot < hd is NeoX's partial rotary)."""
    rot = cos.shape[-1]
    cos, sin = cos[..., None, :], sin[..., None, :]  # (..., 1, rot): same for every head
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    x1, x2 = x_rot[..., : rot // 2], x_rot[..., rot // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)  # (..., heads, rot)
    return torch.cat((x_rot * cos + rotated * sin, x_pass), dim=-1)


# ---------------------------------------------------------------------------- attention


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q (L, H, hd), k/v (L, Hkv, hd) -> (L, H*hd): causal softmax attention.

    Query head h reads key/value head h // (H/Hkv) (HF repeat_kv order).
    """
    L, H, hd = q.shape
    g = k.shape[1]
    qg = q.reshape(L, g, H // g, hd)  # (L, Hkv, R, hd)
    s = torch.einsum("qgrd,kgd->grqk", qg, k) * scale  # (Hkv, R, L, L)
    causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()  # (L, L) key <= query
    s = torch.where(causal, s, torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
    p = torch.softmax(s, dim=-1)  # (Hkv, R, L, L)
    return torch.einsum("grqk,kgd->qgrd", p, v).reshape(L, H * hd)


def attend_one(q, k, v, pk, pv, mask, scale: float) -> torch.Tensor:
    """One query token over the fixed prefix and its own key/value.

    q (H, hd), k/v (Hkv, hd) own; pk/pv (t1, Hkv, hd) prefix keys/values, padded;
    mask (t1,) bool, True where the prefix position is earlier than this token -> (H*hd,)
    """
    H, hd = q.shape
    g = k.shape[0]
    qg = q.reshape(g, H // g, hd)  # (Hkv, R, hd)
    s_pre = torch.einsum("grd,tgd->grt", qg, pk) * scale  # (Hkv, R, t1)
    s_pre = torch.where(mask, s_pre, torch.tensor(float("-inf"), dtype=s_pre.dtype, device=s_pre.device))
    s_own = torch.einsum("grd,gd->gr", qg, k)[..., None] * scale  # (Hkv, R, 1)
    p = torch.softmax(torch.cat((s_pre, s_own), dim=-1), dim=-1)  # (Hkv, R, t1+1)
    o = torch.einsum("grt,tgd->grd", p[..., :-1], pv) + p[..., -1:] * v[:, None, :]  # (Hkv, R, hd)
    return o.reshape(H * hd)


# ---------------------------------------------------------------------------- the block


class AttentionBlockOps(BlockOps):
    """A pre-norm attention + MLP residual block; subclasses supply the pieces.

    Subclasses set `d_model`, `n_heads`, `n_kv_heads`, `head_dim`, `scale`, `parallel`,
    `rotary` ((inv_freq, scaling) or None) and implement norm1, norm2, qkv, out, mlp, each
    written for any leading dims (..., d).
    """

    n_heads: int
    n_kv_heads: int
    head_dim: int
    scale: float
    parallel: bool = False
    rotary: tuple | None = None  # (inv_freq (rot/2,), attention_scaling)
    # tokens per vmap chunk of the jacfwd: bounds the (chunk, d, ..., 4d) temporaries
    jac_chunk: int = 4

    def norm1(self, h):  # (..., d) -> (..., d)
        raise NotImplementedError

    def norm2(self, h):  # (..., d) -> (..., d)
        raise NotImplementedError

    def qkv(self, x):  # (..., d) -> q (..., H, hd), k (..., Hkv, hd), v (..., Hkv, hd)
        raise NotImplementedError

    def out(self, o):  # (..., H*hd) -> (..., d)
        raise NotImplementedError

    def mlp(self, x):  # (..., d) -> (..., d)
        raise NotImplementedError

    def _tables(self, pos: torch.Tensor, dtype) -> tuple:
        """pos (L,) -> cos, sin (L, rot), or empty (L, 0) tables without rotary."""
        if self.rotary is None:
            empty = torch.zeros(pos.shape[0], 0, dtype=dtype, device=pos.device)
            return empty, empty
        inv_freq, scaling = self.rotary
        return rotary_tables(inv_freq, scaling, pos, dtype)

    def _residual(self, h, attn_out):
        """h, attn_out (..., d) -> h' (..., d) in this block's residual arrangement."""
        if self.parallel:
            return h + attn_out + self.mlp(self.norm2(h))
        a = h + attn_out
        return a + self.mlp(self.norm2(a))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(L, d) -> (L, d)"""
        q, k, v = self.qkv(self.norm1(h))  # (L, H, hd), (L, Hkv, hd) x2
        cos, sin = self._tables(torch.arange(h.shape[0], device=h.device), h.dtype)  # (L, rot)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return self._residual(h, self.out(causal_attention(q, k, v, self.scale)))

    def prefix(self, h: torch.Tensor, t0: int, t1: int) -> dict:
        """(L, d) -> per token t in [t0, t1): the rotated keys/values of h[:t1], a mask
        selecting positions < t, and the rotary table row at position t.

        k/v are stride-0 expanded views (T, t1, Hkv, hd): no copy per token.
        """
        T = t1 - t0
        _, k, v = self.qkv(self.norm1(h[:t1]))  # (t1, Hkv, hd) x2
        pos = torch.arange(t1, device=h.device)
        cos, sin = self._tables(pos, h.dtype)  # (t1, rot)
        k = apply_rotary(k, cos, sin)
        mask = pos[None, :] < pos[t0:t1, None]  # (T, t1) prefix position j < t
        return {
            "k": k.expand(T, *k.shape),
            "v": v.expand(T, *v.shape),
            "mask": mask,
            "cos": cos[t0:t1],  # (T, rot)
            "sin": sin[t0:t1],
        }

    def step(self, h_t: torch.Tensor, pre: dict) -> torch.Tensor:
        """h_t (d,), one token's prefix state -> (d,)"""
        q, k, v = self.qkv(self.norm1(h_t))  # (H, hd), (Hkv, hd) x2
        q, k = apply_rotary(q, pre["cos"], pre["sin"]), apply_rotary(k, pre["cos"], pre["sin"])
        o = attend_one(q, k, v, pre["k"], pre["v"], pre["mask"], self.scale)  # (H*hd,)
        return self._residual(h_t, self.out(o))

    def jacobians(self, h: torch.Tensor, t0: int, t1: int) -> torch.Tensor:
        """(L, d) -> (t1-t0, d, d): forward-mode J_tt of the one-token step.

        jacfwd pushes the d unit tangents through the step as one batched forward pass,
        which beats jacrev's saved-activation backward here (inputs and outputs are both d).
        """
        pre = self.prefix(h, t0, t1)
        jac = vmap(jacfwd(self.step, argnums=0), in_dims=(0, 0), chunk_size=self.jac_chunk)
        return jac(h[t0:t1], pre)
