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
from sweep.numerics.workspace import JAC_WORKSPACE_BYTES, column_bytes, column_chunk

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
    # J_tt's columns are formed a chunk at a time, the chunk as wide as keeps its temporaries
    # within this many bytes (sweep/numerics/workspace.py; sweep/budget/memory.py charges it)
    jac_workspace_bytes: int = JAC_WORKSPACE_BYTES

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

    def mlp_jac(self, x, scratch: dict | None = None, cols: tuple | None = None, out=None):
        """x (d,) -> d mlp(x) / dx (d, d), or its columns cols = (c0, c1) only (d, c1 - c0),
        written into `out` when given."""
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

    def jacobians(self, h: torch.Tensor, t0: int, t1: int, out: torch.Tensor | None = None,
                  columns: int | None = None) -> torch.Tensor:
        """(L, d) -> (t1-t0, d, d): J_tt from the analytic one-token Jacobian.

        Explicit products instead of autodiff through the step: torch.func's batched
        tangents pay for copies of the (d, t1, heads, hd) prefix products and for the
        identity times every weight matrix; here the only O(d^3) work is the MLP Jacobian
        (d x d_ff x d) and three (d x d) products. Per token, two (d, d) arrays besides J_tt
        (the attention part, the MLP Jacobian) and chunks of `columns` columns (default from
        jac_workspace_bytes) of everything else. `out` as in BlockOps.jacobians.
        """
        pre = self.prefix(h, t0, t1)
        T, d = t1 - t0, self.d_model
        J = h.new_empty(T, d, d) if out is None else out
        c = columns or column_chunk(d, column_bytes(d, h.element_size()), self.jac_workspace_bytes)
        scratch: dict = {}
        for i in range(T):
            self._token_jacobian(h[t0 + i], {k: v[i] for k, v in pre.items()}, J[i], c, scratch)
        return J

    def _token_jacobian(self, h_t, pre: dict, out: torch.Tensor, c: int, scratch: dict) -> None:
        """h_t (d,), one token's prefix state -> J_tt written into out (d, d), `c` columns at
        a time: the attention part G = d attn_out / d h (d, d), the MLP Jacobian M (d, d) at
        its input, then per column chunk C

            serial:    J[:, C] = (I + G)[:, C] + M N2 (I + G)[:, C]      N2 = d norm2 / d a
            parallel:  J[:, C] = (I + G)[:, C] + M N2[:, C]               N2 at h_t
        """
        d = self.d_model
        g = _buffer(scratch, "attn", (d, d), h_t)
        a = self._attention_into(h_t, pre, g, c, scratch)      # (d,) the stream after attention
        g.diagonal().add_(1)                                   # I + G
        y = self.norm2(h_t if self.parallel else a)            # (d,) the MLP's input
        m = _buffer(scratch, "mlp", (d, d), h_t)
        for c0 in range(0, d, c):
            c1 = min(d, c0 + c)
            _into_cols(m, c0, c1, lambda into: self.mlp_jac(y, scratch, (c0, c1), into))   # (d, n)
        for c0 in range(0, d, c):
            c1 = min(d, c0 + c)
            if self.parallel:
                z = _cols_through(self.norm2, h_t, _identity_cols(d, c0, c1, h_t))   # (d, n)
            else:
                z = _cols_through(self.norm2, a, g[:, c0:c1])                        # (d, n)
            _into_cols(out, c0, c1, lambda into: linalg.matmul(m, z, out=into))
            out[:, c0:c1].add_(g[:, c0:c1])

    def _attention_into(self, h_t, pre: dict, g: torch.Tensor, c: int, scratch: dict) -> torch.Tensor:
        """Write G = d attn_out / d h_t (d, d) into g; return a = h_t + attn_out (d,).

        G = W_o (d o / d x) N1 with x = norm1(h_t): d o / d x along x's basis vectors, c of
        them at a time (slices of the projections' weights, no product), times W_o into g's
        columns; then N1 from the right, row by row (vjp), in place.
        """
        d = self.d_model
        x = self.norm1(h_t)  # (d,)
        o, parts = self._attention_state(x, pre)
        w_o = self.out_weight()  # (d, H*hd)
        for c0 in range(0, d, c):
            c1 = min(d, c0 + c)
            d_o = self._attention_push(parts, c0, c1)  # (n, H*hd): row i = d o / d x_{c0+i}
            _into_cols(g, c0, c1, lambda into: linalg.matmul(w_o, d_o.T, out=into))
        for r0 in range(0, d, c):
            r1 = min(d, r0 + c)
            g[r0:r1] = _rows_through(self.norm1, h_t, g[r0:r1])
        return h_t + self.out(o)

    def _attention_state(self, x: torch.Tensor, pre: dict) -> tuple:
        """x = norm1(h_t) (d,) -> o (H*hd,) and what d o / d x is made of.

        With p = softmax over [prefix ; own] and o = sum_j p_j v_j (per query head),
            do = scale * sum_j p_j (v_j - o) k_j^T dq + scale * p_own (v - o) q^T dk + p_own dv,
        q, k rotated (rotary is linear in q, k, so it rotates their Jacobians alike).
        """
        q, k, v = self.qkv(x)  # (H, hd), (Hkv, hd), (Hkv, hd)
        cos, sin = pre["cos"], pre["sin"]  # (rot,)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
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
        return o.reshape(-1), (m_q, m_k, p[:, :, -1], cos, sin)

    def _attention_push(self, parts: tuple, c0: int, c1: int) -> torch.Tensor:
        """d o / d x_i for x's basis vectors i in [c0, c1) -> (n, H*hd)."""
        m_q, m_k, p_own, cos, sin = parts
        wq, wk, wv = self.qkv_weights()  # (H, hd, d), (Hkv, hd, d) x2
        n, (g, hd) = c1 - c0, wk.shape[:2]
        jq = apply_rotary(wq[..., c0:c1].permute(2, 0, 1), cos, sin)  # (n, H, hd): row i = d q / d x_i
        jk = apply_rotary(wk[..., c0:c1].permute(2, 0, 1), cos, sin)  # (n, Hkv, hd)
        jv = wv[..., c0:c1].permute(2, 0, 1)  # (n, Hkv, hd)
        d_o = (torch.einsum("gref,igrf->igre", m_q, jq.reshape(n, g, -1, hd))
               + torch.einsum("gref,igf->igre", m_k, jk)
               + p_own[None, :, :, None] * jv[:, :, None, :])  # (n, Hkv, R, hd)
        return d_o.reshape(n, -1)


def _buffer(scratch: dict, name: str, shape: tuple, like: torch.Tensor) -> torch.Tensor:
    """A work array of `shape` like `like`, kept in `scratch` across the tokens of a block."""
    buf = scratch.get(name)
    if buf is None or buf.shape != shape or buf.dtype != like.dtype:
        buf = scratch[name] = like.new_empty(shape)
    return buf


def _into_cols(dst: torch.Tensor, c0: int, c1: int, make) -> None:
    """dst[:, c0:c1] = make(out): straight into dst (out=dst) when the chunk is all of its
    columns, else through make(None)'s (d, c1 - c0)."""
    if c0 == 0 and c1 == dst.shape[1]:
        make(dst)
    else:
        dst[:, c0:c1] = make(None)


def _identity_cols(d: int, c0: int, c1: int, like: torch.Tensor) -> torch.Tensor:
    """Columns c0..c1 of the (d, d) identity, (d, c1 - c0)."""
    e = like.new_zeros(d, c1 - c0)
    e[c0:c1].fill_diagonal_(1)
    return e


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
    """A work buffer shaped and typed like `like` (d_ff, n), from storage kept in `scratch`
    across calls (None: no reuse)."""
    if scratch is None:
        return None
    buf, n = scratch.get("ff"), like.numel()
    if buf is None or buf.numel() < n or buf.dtype != like.dtype:
        buf = scratch["ff"] = like.new_empty(n)
    return buf[:n].view(like.shape)


def mlp_jac_gelu(x, fc_in: tuple, fc_out: tuple, act, scratch: dict | None = None,
                 cols: tuple | None = None, out=None):
    """act(W1 x + b1) -> W2 (.) + b2:  x (d,) -> (d, d) = W2 diag(act'(u)) W1, or its columns
    cols = (c0, c1) (d, c1 - c0), into `out` when given."""
    w1, b1 = fc_in  # (d_ff, d), (d_ff,) | None
    u = torch.nn.functional.linear(x, w1, b1)  # (d_ff,)
    w = w1 if cols is None else w1[:, cols[0]:cols[1]]  # (d_ff, n)
    inner = torch.mul(act_grad(act, u)[:, None], w, out=_ff_buffer(scratch, w))  # (d_ff, n)
    return linalg.matmul(fc_out[0], inner, out=out)


def mlp_jac_glu(x, gate: tuple, up: tuple, down: tuple, act, scratch: dict | None = None,
                cols: tuple | None = None, out=None):
    """Wd (act(Wg x + bg) * (Wu x + bu)) + bd:  x (d,) -> (d, d), or its columns cols = (c0, c1)
    (d, c1 - c0), into `out` when given."""
    g = torch.nn.functional.linear(x, *gate)  # (d_ff,)
    u = torch.nn.functional.linear(x, *up)  # (d_ff,)
    s = slice(None) if cols is None else slice(*cols)
    wg, wu = gate[0][:, s], up[0][:, s]  # (d_ff, n) each
    inner = torch.mul((act_grad(act, g) * u)[:, None], wg, out=_ff_buffer(scratch, wg))
    inner.addcmul_(act(g)[:, None], wu)  # (d_ff, n)
    return linalg.matmul(down[0], inner, out=out)
