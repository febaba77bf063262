"""Mamba-1 residual block: dtype-true math, one-token step, and the structured J_tt.

One block maps the residual stream h (L, d) to h + out_proj(mixer(RMSNorm(h))). Per token:

    u   = w ⊙ h / r,  r = sqrt(mean(h²) + eps)              RMSNorm           (d,)
    x,z = W_in u                                             in_proj           (d_inner,) each
    c   = b_conv + Σ_k w_conv[:, k] ⊙ x_{t-K+1+k}            causal depthwise conv
    ξ   = silu(c);  (ρ, B, C) = W_x ξ                        x_proj: (R,), (N,), (N,)
    Δ   = softplus(W_dt ρ + b_dt)                            selective step    (d_inner,)
    s_t = exp(Δ A) ⊙ s_{t-1} + (Δ ξ) ⊗ B,  A = -exp(A_log)   SSM state         (d_inner, N)
    y   = s_t C + D ⊙ ξ;   o = y ⊙ silu(z)
    h'  = h + W_out o

Stock transformers computes the norm, the residual and parts of the scan in fp32 even in a
float64 model; everything here stays in the parameters' dtype, so fp64 runs really are fp64.

With the conv window and s_{t-1} held fixed (the prefix), differentiating the lines above
gives J_tt = I + W_out [diag(a) W_x' + diag(b) W_z' + low rank] J_norm, the low-rank part
coming through Δ (rank R), B (rank 1 after contracting with C) and C (rank N): see
`_jac_factors`. `jacobians` builds that from a few matrix products per token;
`jacobians_ref` (BlockOps) differentiates `step` with torch.func.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from sweep.blocks.base import BlockOps
from sweep.numerics import linalg

_SOFTPLUS_THRESHOLD = 20.0   # F.softplus default: identity above it, derivative exactly 1
SCAN_CHUNK = 32              # tokens per batch of decays/drives: 2 x 4 MiB at d_inner 2048, fp32
JAC_CHUNK = 8                # tokens per batch of J_tt factors: U, Vᵀ 5-11 MiB each at d_inner 2048


def _param(t):
    """A module parameter as a plain tensor (None stays None): the block math is never trained."""
    return None if t is None else t.detach()


def _silu_grad(v: torch.Tensor) -> torch.Tensor:
    sig = torch.sigmoid(v)
    return sig * (1 + v * (1 - sig))


class MambaOps(BlockOps):
    """Exact dynamics of Mamba block `layer` of a transformers MambaForCausalLM/MambaModel."""

    arch = "mamba"

    def __init__(self, hf_model, layer: int):
        backbone = getattr(hf_model, "backbone", hf_model)
        blk = backbone.layers[layer]
        mix = blk.mixer
        self.layer = layer
        self.d_model = mix.hidden_size
        self.d_inner, self.d_state = mix.intermediate_size, mix.ssm_state_size
        self.dt_rank, self.d_conv = mix.time_step_rank, mix.conv_kernel_size
        self.eps = blk.norm.variance_epsilon
        self.norm_w = _param(blk.norm.weight)  # (d,)
        self.w_in, self.b_in = _param(mix.in_proj.weight), _param(mix.in_proj.bias)  # (2 d_inner, d)
        self.w_conv = _param(mix.conv1d.weight)[:, 0, :]  # (d_inner, K)
        self.b_conv = _param(mix.conv1d.bias) if mix.use_conv_bias else torch.zeros_like(self.w_conv[:, 0])
        self.w_x = _param(mix.x_proj.weight)  # (R + 2N, d_inner)
        self.w_dt, self.b_dt = _param(mix.dt_proj.weight), _param(mix.dt_proj.bias)  # (d_inner, R), (d_inner,)
        self.A_log, self.D = _param(mix.A_log), _param(mix.D)  # (d_inner, N), (d_inner,)
        self.w_out, self.b_out = _param(mix.out_proj.weight), _param(mix.out_proj.bias)  # (d, d_inner)
        self._folded = None                                        # (W_x', W_z'), built on first use

    @property
    def folded_in_proj(self) -> tuple[torch.Tensor, torch.Tensor]:
        """in_proj's x and z halves with the norm weight folded into their columns, (d_inner, d) each.

        The J_norm factor is then diag-free, (I - h hᵀ/(d r²)) / r, applied once to the (d, d)
        result. Built on the first `jacobians` call only: a block that just advances hidden
        states (every layer below the swept one) never holds this extra copy of in_proj.
        """
        if self._folded is None:
            self._folded = (self.w_in[: self.d_inner] * self.norm_w, self.w_in[self.d_inner:] * self.norm_w)
        return self._folded

    # ------------------------------------------------------------------ shared pieces

    @property
    def A(self) -> torch.Tensor:
        return -torch.exp(self.A_log)                              # (d_inner, N)

    def _norm(self, h):
        """(..., d) -> u (..., d), r (..., 1)."""
        r = torch.sqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.norm_w * (h / r), r

    def _in_proj(self, u):
        """(..., d) -> x, z (..., d_inner) each."""
        xz = F.linear(u, self.w_in, self.b_in)
        return xz[..., : self.d_inner], xz[..., self.d_inner:]

    def _selective(self, xi):
        """(..., d_inner) -> dt_pre (..., d_inner), B (..., N), C (..., N)."""
        R, N = self.dt_rank, self.d_state
        proj = xi @ self.w_x.T                                     # (..., R + 2N)
        rho, B, C = proj[..., :R], proj[..., R: R + N], proj[..., R + N:]
        return F.linear(rho, self.w_dt, self.b_dt), B, C

    def _out(self, h, y, z):
        """residual + out_proj(y ⊙ silu(z)): (..., d), (..., d_inner) x2 -> (..., d)."""
        return h + F.linear(y * F.silu(z), self.w_out, self.b_out)

    def _sequence(self, h, gate: bool = True):
        """(L, d) -> dict of per-position inputs to the scan, and the padded pre-conv x.

        gate=False skips z, the output gate (half of in_proj): prefix states and Δ never use it.
        """
        u, _ = self._norm(h)
        if gate:
            x, z = self._in_proj(u)                                # (L, d_inner) each
        else:
            b = None if self.b_in is None else self.b_in[: self.d_inner]
            x, z = F.linear(u, self.w_in[: self.d_inner], b), None
        K = self.d_conv
        xpad = torch.cat([x.new_zeros(K - 1, self.d_inner), x])    # (L + K - 1, d_inner)
        c = (xpad.unfold(0, K, 1) * self.w_conv).sum(-1) + self.b_conv  # (L, d_inner)
        xi = F.silu(c)
        dt_pre, B, C = self._selective(xi)
        return dict(xpad=xpad, z=z, xi=xi, dt=F.softplus(dt_pre), B=B, C=C)

    def _scan(self, seq, keep_from: int, outputs: bool = True):
        """Selective scan over the whole sequence -> y (L, d_inner) or None, S (L - keep_from + 1, d_inner, N).

        S[j] = s_{keep_from - 1 + j} (S[0] = 0 when keep_from = 0): only the states a
        token block needs are kept, never the full (L, d_inner, N) history. With
        outputs=False (a prefix needs only states) no y is computed.

        The decays e^{ΔA} and drives (Δξ) ⊗ B are formed SCAN_CHUNK tokens at a time, so
        the sequential loop is one fused multiply-add per token, in place in the drive
        buffer, which then holds the chunk's states for y and S.
        """
        A, L = self.A, seq["xi"].shape[0]
        s = seq["xi"].new_zeros(self.d_inner, self.d_state)       # s_{-1}
        S = s.new_zeros(L - keep_from + 1, self.d_inner, self.d_state)
        dt_xi = seq["dt"] * seq["xi"]                              # (L, d_inner)
        ys = []
        for c0 in range(0, L, SCAN_CHUNK):
            c1 = min(L, c0 + SCAN_CHUNK)
            decay = torch.exp(seq["dt"][c0:c1, :, None] * A)      # (n, d_inner, N)
            states = dt_xi[c0:c1, :, None] * seq["B"][c0:c1, None, :]   # drives, then states
            for i in range(c1 - c0):
                s = states[i].addcmul_(decay[i], s)               # s_t = e^{ΔA} s_{t-1} + drive
            if outputs:
                ys.append((states @ seq["C"][c0:c1, :, None])[..., 0] + self.D * seq["xi"][c0:c1])
            lo = max(c0, keep_from - 1)                            # states kept: t >= keep_from - 1
            if lo < c1:
                S[lo - keep_from + 1: c1 - keep_from + 1] = states[lo - c0:]
        return (torch.cat(ys) if outputs else None), S

    def _token(self, h, conv, s_prev):
        """One token (or a batch of them) with its prefix -> every intermediate of the step.

        h (..., d); conv (..., d_inner, K-1) the previous pre-conv x; s_prev (..., d_inner, N).
        """
        u, r = self._norm(h)
        x, z = self._in_proj(u)
        c = self.b_conv + (conv * self.w_conv[:, :-1]).sum(-1) + self.w_conv[:, -1] * x
        xi = F.silu(c)
        dt_pre, B, C = self._selective(xi)
        dt = F.softplus(dt_pre)
        s = torch.exp(dt[..., None] * self.A) * s_prev + (dt * xi)[..., None] * B[..., None, :]
        y = (s * C[..., None, :]).sum(-1) + self.D * xi
        return dict(r=r, z=z, c=c, xi=xi, dt_pre=dt_pre, dt=dt, B=B, C=C, s=s, y=y)

    # ------------------------------------------------------------------ BlockOps

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(L, d) -> (L, d): h_{l+1} for the whole causal sequence."""
        seq = self._sequence(h)
        y, _ = self._scan(seq, keep_from=h.shape[0])
        return self._out(h, y, seq["z"])

    def prefix(self, h: torch.Tensor, t0: int, t1: int) -> dict:
        """(L, d) -> {"conv": (T, d_inner, K-1) previous pre-conv x, "ssm": (T, d_inner, N) s_{t-1}}.

        One scan over h[:t1]; T = t1 - t0.
        """
        seq = self._sequence(h[:t1], gate=False)
        _, S = self._scan(seq, keep_from=t0, outputs=False)
        conv = seq["xpad"].unfold(0, self.d_conv - 1, 1)[t0:t1]   # (T, d_inner, K-1)
        return {"conv": conv, "ssm": S[:-1]}

    def step(self, h_t: torch.Tensor, prefix_t: dict) -> torch.Tensor:
        """(d,), one token's prefix -> (d,): h_{l+1,t} with the conv window and s_{t-1} fixed."""
        v = self._token(h_t, prefix_t["conv"], prefix_t["ssm"])
        return self._out(h_t, v["y"], v["z"])

    def delta(self, h: torch.Tensor, t0: int, t1: int) -> torch.Tensor:
        """(L, d) -> (t1-t0, d_inner): Δ_t = softplus(dt_proj(ρ_t) + b); needs only the conv window."""
        lo = max(0, t0 - self.d_conv + 1)     # earlier positions never reach tokens >= t0
        return self._sequence(h[lo:t1], gate=False)["dt"][t0 - lo:]

    def a_log(self) -> torch.Tensor:
        """(d_inner, N): A_log, A = -exp(A_log)."""
        return self.A_log

    # ------------------------------------------------------------------ fast J_tt

    def _jac_factors(self, v, s_prev):
        """Per-token factors of J_tt - I = W_out [diag(a) W_x' + diag(b) W_z' + U Vᵀ diag(g) W_x'] J_norm'.

        v: `_token` of the block's tokens (T, ...); s_prev (T, d_inner, N). Returns
        a, b, g (T, d_inner); U (T, d_inner, k); Vt (T, k, d_inner), k = R + 1 + N.
        Derivation (ξ' = dξ, with g = silu'(c) ⊙ w_conv[:, -1] so that ξ' = g ⊙ W_x' u'):
          y' = (D + Δ (B·C)) ⊙ ξ' + p ⊙ (W_dt ρ') + Δ ξ (C·B') + s_t C',
          p  = softplus'(Δ_pre) ⊙ (Σ_n e^{ΔA} A s_{t-1} C + ξ (B·C)),
          o' = silu(z) ⊙ y' + y ⊙ silu'(z) ⊙ z'.
        """
        R, N = self.dt_rank, self.d_state
        A, sz = self.A, F.silu(v["z"])                                         # (T, d_inner)
        g = _silu_grad(v["c"]) * self.w_conv[:, -1]                            # (T, d_inner)
        bc = (v["B"] * v["C"]).sum(-1, keepdim=True)                           # (T, 1)
        dsp = torch.where(v["dt_pre"] > _SOFTPLUS_THRESHOLD, torch.ones_like(v["dt_pre"]),
                          torch.sigmoid(v["dt_pre"]))
        decay = (torch.exp(v["dt"][..., None] * A) * A * s_prev) @ v["C"][..., None]  # (T, d_inner, 1)
        p = dsp * (decay[..., 0] + v["xi"] * bc)                               # (T, d_inner)
        a = sz * (self.D + v["dt"] * bc) * g
        b = v["y"] * _silu_grad(v["z"])
        U = torch.cat([p[..., None] * self.w_dt, (v["dt"] * v["xi"])[..., None], v["s"]], -1)
        T = U.shape[0]
        w_b, w_c = self.w_x[R: R + N], self.w_x[R + N:]                        # (N, d_inner)
        Vt = torch.cat([self.w_x[:R].expand(T, R, -1), (v["C"] @ w_b)[:, None, :],
                        w_c.expand(T, N, -1)], 1)                              # (T, k, d_inner)
        return a, b, g, sz[..., None] * U, Vt

    def jacobians(self, h: torch.Tensor, t0: int, t1: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """(L, d) -> (t1-t0, d, d): structured J_tt; one (d, d_inner)@(d_inner, d) GEMM per token.

        The low-rank term is folded into the (d_inner, d) factor before that GEMM,
        U (Vᵀ diag(g) W_x'), one rank-k update on the narrow side instead of two products
        with W_out and a (d, k)@(k, d) on the wide one. Per-token buffers are reused (no
        fresh multi-MB temporaries per token: at d = 1024 their page faults used to cost
        more than the arithmetic); `out` as in BlockOps.jacobians.
        """
        pre = self.prefix(h, t0, t1)
        hb = h[t0:t1]                                                          # (T, d)
        v = self._token(hb, pre["conv"], pre["ssm"])
        w_xin, w_zin = self.folded_in_proj
        T, d = hb.shape
        J = h.new_empty(T, d, d) if out is None else out
        buf = h.new_empty(self.d_inner, d)
        # the factors JAC_CHUNK tokens at a time: U, Vᵀ of a whole 32-token fp64 block are
        # 42 MiB each, past glibc's largest mmap threshold, so page-faulted anew every task
        for c0 in range(0, T, JAC_CHUNK):
            c1 = min(T, c0 + JAC_CHUNK)
            vc = {k: x[c0:c1] for k, x in v.items()}
            a, b, g, U, Vt = self._jac_factors(vc, pre["ssm"][c0:c1])
            inv_r = 1 / vc["r"]                                                # (n, 1)
            # the 1/r of J_norm' = (I - h hᵀ/(d r²)) / r goes into the per-token factors
            a, b, U = a * inv_r, b * inv_r, U * inv_r[:, :, None]
            right = ((Vt * g[:, None, :]).reshape(-1, self.d_inner) @ w_xin).view(c1 - c0, -1, d)  # (n, k, d)
            for i in range(c1 - c0):
                torch.mul(w_xin, a[i, :, None], out=buf)
                buf.addcmul_(w_zin, b[i, :, None]).addmm_(U[i], right[i])      # (d_inner, d)
                Jt = linalg.matmul(self.w_out, buf, out=J[c0 + i])             # (d, d)
                # (I - h hᵀ/(d r²)) on the right; the norm weight is folded into W_x', W_z'
                ht = hb[c0 + i]
                Jt.addr_(Jt @ ht, ht, alpha=-float(inv_r[i]) ** 2 / d)
                Jt.diagonal().add_(1)
        return J
