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
from torch.func import jvp, vjp, vmap

from sweep.blocks.base import BlockOps
from sweep.numerics import linalg

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
    written for any leading dims (..., d); for the analytic Jacobian also qkv_weights,
    out_weight and mlp_jac.
    """

    n_heads: int
    n_kv_heads: int
    head_dim: int
    scale: float
    parallel: bool = False
    rotary: tuple | None = None  # (inv_freq (rot/2,), attention_scaling)
    # the attention part is vmapped over as many tokens as keep its (chunk, d, d)
    # temporaries within this many bytes: 16 MiB stays under glibc's largest mmap threshold
    # (32 MiB), so they come from reused heap (4 tokens fp32, 2 fp64 at d = 1024)
    jac_chunk_bytes: int = 16 << 20
    jac_chunk_max: int = 8

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

    def qkv_weights(self):  # -> dq/dx (H, hd, d), dk/dx (Hkv, hd, d), dv/dx (Hkv, hd, d)
        raise NotImplementedError

    def out_weight(self):  # -> d out / d o  (d, H*hd)
        raise NotImplementedError

    def mlp_jac(self, x, scratch: dict | None = None):  # (d,) -> (d, d): d mlp(x) / dx
        raise NotImplementedError

    def rope_tables(self, pos: torch.Tensor, dtype) -> tuple:
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
        cos, sin = self.rope_tables(torch.arange(h.shape[0], device=h.device), h.dtype)  # (L, rot)
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
        cos, sin = self.rope_tables(pos, h.dtype)  # (t1, rot)
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

    def jacobians(self, h: torch.Tensor, t0: int, t1: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """(L, d) -> (t1-t0, d, d): J_tt from the analytic one-token Jacobian.

        Explicit products instead of autodiff through the step: torch.func's batched
        tangents pay for copies of the (d, t1, heads, hd) prefix products and for the
        identity times every weight matrix; here the only O(d^3) work is the MLP
        Jacobian (d x d_ff x d) and two (d x d) products. The attention part is vmapped
        over a few tokens at a time (jac_chunk_bytes); the MLP part runs token by token
        in one reused (d_ff, d) scratch: a batched (chunk, d_ff, d) temporary is 64-128 MiB
        at d = 1024, mmap'd and page-faulted anew every time (10-20 us a page on the
        development VM), which cost more than its arithmetic in fp64. `out` as in
        BlockOps.jacobians.
        """
        pre = self.prefix(h, t0, t1)
        T, d = t1 - t0, self.d_model
        J = h.new_empty(T, d, d) if out is None else out
        attention = vmap(self._attention_part, in_dims=(0, 0))
        scratch: dict = {}
        chunk = max(1, min(self.jac_chunk_max, self.jac_chunk_bytes // (d * d * h.element_size())))
        for c0 in range(0, T, chunk):
            c1 = min(T, c0 + chunk)
            hc = h[t0 + c0: t0 + c1]
            attn, a = attention(hc, {k: v[c0:c1] for k, v in pre.items()})   # (n, d, d), (n, d)
            for i in range(c1 - c0):
                self._with_mlp(hc[i], attn[i], a[i], J[c0 + i], scratch)
        return J

    def _attention_part(self, h_t: torch.Tensor, pre: dict) -> tuple:
        """h_t (d,), one token's prefix state -> d attn_out / d h_t (d, d), and the residual
        stream after attention a = h_t + attn_out (d,) (serial blocks' MLP input)."""
        x = self.norm1(h_t)  # (d,)
        o, d_o = self._attention_jac(x, pre)  # (H*hd,), (d_in, H*hd): row i = d o / d x_i
        attn = self.out_weight() @ d_o.T  # (d, d): d attn_out / d x
        return _rows_through(self.norm1, h_t, attn), h_t + self.out(o)

    def _with_mlp(self, h_t, attn, a, out, scratch: dict) -> torch.Tensor:
        """One token: attention part (d, d) and a (d,) -> J_tt written into `out` (d, d)."""
        if self.parallel:
            out.copy_(attn).add_(_rows_through(self.norm2, h_t, self.mlp_jac(self.norm2(h_t), scratch)))
            out.diagonal().add_(1)
            return out
        attn.diagonal().add_(1)  # d a / d h
        mlp = self.mlp_jac(self.norm2(a), scratch)  # (d, d)
        return linalg.matmul(mlp, _cols_through(self.norm2, a, attn), out=out).add_(attn)

    def _attention_jac(self, x: torch.Tensor, pre: dict) -> tuple:
        """x = norm1(h_t) (d,) -> o (H*hd,), d o / d x as (d_in, H*hd).

        With p = softmax over [prefix ; own] and o = sum_j p_j v_j (per query head),
            do = scale * sum_j p_j (v_j - o) k_j^T dq + scale * p_own (v - o) q^T dk + p_own dv,
        q, k rotated (rotary is linear in q, k, so it rotates their Jacobians alike).
        """
        d = x.shape[0]
        q, k, v = self.qkv(x)  # (H, hd), (Hkv, hd), (Hkv, hd)
        wq, wk, wv = self.qkv_weights()  # (H, hd, d), (Hkv, hd, d) x2
        cos, sin = pre["cos"], pre["sin"]  # (rot,)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        jq = apply_rotary(wq.permute(2, 0, 1), cos, sin)  # (d, H, hd): row i = d q / d x_i
        jk = apply_rotary(wk.permute(2, 0, 1), cos, sin)  # (d, Hkv, hd)
        jv = wv.permute(2, 0, 1)  # (d, Hkv, hd)
        g, hd = k.shape
        qg = q.reshape(g, -1, hd)  # (Hkv, R, hd)
        keys = torch.cat((pre["k"].transpose(0, 1), k[:, None]), dim=1)  # (Hkv, t1+1, hd): [prefix ; own]
        vals = torch.cat((pre["v"].transpose(0, 1), v[:, None]), dim=1)  # (Hkv, t1+1, hd)
        s = torch.einsum("grd,gtd->grt", qg, keys) * self.scale  # (Hkv, R, t1+1)
        live = torch.cat((pre["mask"], pre["mask"].new_ones(1)))  # (t1+1,)
        s = torch.where(live, s, torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
        p = torch.softmax(s, dim=-1)  # (Hkv, R, t1+1)
        o = torch.einsum("grt,gtd->grd", p, vals)  # (Hkv, R, hd)
        # centred values: the softmax Jacobian in the stable (v_j - o) form, no cancellation
        pvc = p[..., None] * (vals[:, None] - o[:, :, None])  # (Hkv, R, t1+1, hd)
        m_q = self.scale * pvc.transpose(-1, -2) @ keys[:, None]  # (Hkv, R, hd, hd): do/dq
        m_k = self.scale * pvc[:, :, -1, :, None] * qg[:, :, None, :]  # (Hkv, R, hd, hd): do/dk own
        d_o = (torch.einsum("gref,igrf->igre", m_q, jq.reshape(d, g, -1, hd))
               + torch.einsum("gref,igf->igre", m_k, jk)
               + p[None, :, :, -1, None] * jv[:, :, None, :])  # (d, Hkv, R, hd)
        return o.reshape(-1), d_o.reshape(d, -1)


def _rows_through(norm, h, m):
    """m (n, d) -> m @ (d norm / d h) at h (d,), row by row (vjp): O(n d), not O(n d^2)."""
    _, pull = vjp(norm, h)
    return vmap(lambda row: pull(row)[0])(m)


def _cols_through(norm, h, m):
    """m (d, n) -> (d norm / d h) @ m at h (d,), column by column (jvp)."""
    push = lambda col: jvp(norm, (h,), (col,))[1]  # noqa: E731
    return vmap(push, in_dims=1, out_dims=1)(m)


def act_grad(act, u):
    """Elementwise derivative act'(u), u (n,) -> (n,), by one jvp with a ones tangent."""
    return jvp(act, (u,), (torch.ones_like(u),))[1]


def _ff_buffer(scratch: dict | None, like: torch.Tensor) -> torch.Tensor | None:
    """A (d_ff, d) work buffer like `like`, kept in `scratch` across calls (None: no reuse)."""
    if scratch is None:
        return None
    buf = scratch.get("ff")
    if buf is None or buf.shape != like.shape or buf.dtype != like.dtype:
        buf = scratch["ff"] = torch.empty_like(like)
    return buf


def mlp_jac_gelu(x, fc_in: tuple, fc_out: tuple, act, scratch: dict | None = None):
    """act(W1 x + b1) -> W2 (.) + b2:  x (d,) -> (d, d) = W2 diag(act'(u)) W1."""
    w1, b1 = fc_in  # (d_ff, d), (d_ff,) | None
    u = torch.nn.functional.linear(x, w1, b1)  # (d_ff,)
    inner = torch.mul(act_grad(act, u)[:, None], w1, out=_ff_buffer(scratch, w1))  # (d_ff, d)
    return linalg.matmul(fc_out[0], inner)


def mlp_jac_glu(x, gate: tuple, up: tuple, down: tuple, act, scratch: dict | None = None):
    """Wd (act(Wg x + bg) * (Wu x + bu)) + bd:  x (d,) -> (d, d)."""
    g = torch.nn.functional.linear(x, *gate)  # (d_ff,)
    u = torch.nn.functional.linear(x, *up)  # (d_ff,)
    inner = torch.mul((act_grad(act, g) * u)[:, None], gate[0], out=_ff_buffer(scratch, gate[0]))
    inner.addcmul_(act(g)[:, None], up[0])  # (d_ff, d)
    return linalg.matmul(down[0], inner)
