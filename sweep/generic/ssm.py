"""Mamba-style layers: Δ_t, A_log, and a structured derivative for the decode op.

Every Mamba-style mixer in transformers (Mamba, Falcon-Mamba, Jamba: Mamba-1; Mamba-2, Bamba,
Zamba2, Falcon-H1: Mamba-2) advances its SSM state one token through a module-level function
named `*selective_state_update`, which transformers declares replaceable by a kernel
(`use_kernel_func_from_hub_with_fallback("selective_state_update", "mamba_ssm")`). Its
reference implementation materialises the state update exp(Δ A) ⊙ s + Δ B x on the whole
(heads, head_dim, state) grid; autograd of it then carries that grid once per cotangent,
2.7e8 numbers per token for Mamba-2-370m (7 s a token, 25× its eig).

`patched(layer)` swaps that function, in the modules the layer's classes come from, for
`_Update`: its forward calls transformers' own function (so the values, the in-place state
update and its float32 rounding are transformers'), its backward is the derivative of
    y = (s ⊙ exp(Δ A) + Δ B x) · C + D x,   optionally × silu(z),   Δ = softplus(dt + b)
contracted over the state before anything is batched: O(heads × head_dim + state) per
cotangent. tests/test_generic_ssm.py checks it against autograd of transformers' function.

The one-token causal convolution before the scan (`*causal_conv1d_update`, equally
replaceable) has a reference implementation through a depthwise `F.conv1d`, whose batched
backward falls back to one call per cotangent (a quarter of a Mamba-2-370m token's time);
`_ConvUpdate` keeps its values and gives autograd its derivative, which for the new token is
diagonal in the channel: act'(pre) × the kernel's last tap.

Both layouts are handled as (b, H, P, N): Mamba-1 has one "head" per channel (P = 1) and B, C
shared by all of them; Mamba-2 has H heads of P channels in G groups sharing B and C.
While patched, every call made without autograd (the model's own decode step) records
Δ_t = softplus(dt + bias) in `recorded`, one value per channel (Mamba-1) or per head
(Mamba-2).
"""
from __future__ import annotations

import contextlib
import sys

import torch
import torch.nn.functional as F

import inspect

# transformers' Mamba-style ops, by the end of their module-level names: the one-token
# state update (decode), and the whole-sequence scans (a sequence's first token)
UPDATE, SCAN1, SCAN2 = "selective_state_update", "selective_scan", "chunk_scan"
CONV = "causal_conv1d_update"         # the one-token causal convolution before the scan
OPS = (UPDATE, SCAN1, SCAN2, CONV)


def ssm_mixer(layer: torch.nn.Module) -> torch.nn.Module | None:
    """The module of `layer` that owns A_log (A = -exp(A_log)), or None."""
    for m in layer.modules():
        if isinstance(getattr(m, "A_log", None), torch.nn.Parameter):
            return m
    return None


@contextlib.contextmanager
def patched(layer: torch.nn.Module, recorded: list):
    """Within the block, the Mamba-style ops of `layer`'s modules record Δ of their last
    token into `recorded` (calls without autograd), and the state update has its
    structured derivative (calls with autograd)."""
    modules = {sys.modules[type(m).__module__] for m in layer.modules()}
    swapped = []
    for mod in modules:
        for name, fn in list(vars(mod).items()):
            op = next((o for o in OPS if name.endswith(o)), None)
            if op and callable(fn) and not isinstance(fn, _Wrapped):
                setattr(mod, name, _Wrapped(fn, op, recorded))
                swapped.append((mod, name, fn))
    try:
        yield
    finally:
        for mod, name, fn in swapped:
            setattr(mod, name, fn)


class _Wrapped:
    """One of transformers' Mamba-style ops, called as transformers calls it."""

    def __init__(self, fn, op: str, recorded: list):
        self.fn, self.op, self.recorded = fn, op, recorded
        self.signature = inspect.signature(fn)

    def __call__(self, *args, **kwargs):
        a = self.signature.bind(*args, **kwargs).arguments
        if self.op == CONV:
            if not torch.is_grad_enabled() or not _ConvUpdate.applies(a):
                return self.fn(*args, **kwargs)
            out, new_state = _ConvUpdate.apply(self.fn, a["hidden_states"], a["conv_state"],
                                               a["weight"], a.get("bias"), a.get("activation"))
            with torch.no_grad():
                a["conv_state"].copy_(new_state)
            return out
        if not torch.is_grad_enabled():
            self.recorded.append(_last_delta(self.op, a))
            return self.fn(*args, **kwargs)
        if self.op != UPDATE:
            return self.fn(*args, **kwargs)
        out, _, new_state = _Update.apply(self.fn, a["state"], a["hidden_states"], a["dt"], a["A"],
                                          a["B"], a["C"], a.get("D"), a.get("dt_bias"),
                                          a.get("dt_softplus", False), a.get("z"))
        with torch.no_grad():
            a["state"].copy_(new_state)
        return out


def _last_delta(op: str, a: dict) -> torch.Tensor:
    """Δ of the call's last token as the op computes it: (b, channels) Mamba-1, (b, heads) Mamba-2."""
    if op == SCAN1:                                    # dt (b, D, L), bias (D,)
        bias, softplus = a.get("delta_bias"), a.get("delta_softplus", False)
        raw = a["dt"] if bias is None else a["dt"] + bias.to(a["dt"].dtype)[..., None]
        return (F.softplus(raw) if softplus else raw)[..., -1]
    raw = a["dt"] if a.get("dt_bias") is None else a["dt"] + a["dt_bias"].to(a["dt"].dtype)
    delta = F.softplus(raw) if a.get("dt_softplus", False) else raw
    if op == SCAN2:                                    # dt (b, L, H)
        lo, hi = a.get("dt_limit", (0.0, float("inf")))
        return torch.clamp(delta, min=lo, max=hi)[:, -1]
    return delta[..., 0] if a["A"].dim() == 3 else delta   # Mamba-2 repeats dt over head_dim


class _Update(torch.autograd.Function):
    """y = transformers' selective state update; backward = its structured derivative."""

    generate_vmap_rule = True

    @staticmethod
    def forward(fn, state, x, dt, A, B, C, D, dt_bias, dt_softplus, z):
        new = state.clone()
        out = fn(new, x, dt, A, B, C, D, dt_bias=dt_bias, dt_softplus=dt_softplus, z=z)
        return out, state.clone(), new         # y, the state before and after the token

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, _, x, dt, A, B, C, D, dt_bias, dt_softplus, z = inputs
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.save_for_backward(output[1], output[2], x, dt, A, B, C, D, dt_bias, z)
        ctx.softplus = dt_softplus

    @staticmethod
    def backward(ctx, g, _before, _after):
        return (None, None, *_vjp(g, *ctx.saved_tensors, ctx.softplus))


class _ConvUpdate(torch.autograd.Function):
    """y = transformers' one-token causal convolution (+ activation); backward: its derivative
    in the new token, act'(pre) ⊙ weight[:, -1] per channel (the state is the held prefix)."""

    generate_vmap_rule = True
    ACTIVATIONS = (None, "silu", "swish")

    @staticmethod
    def applies(a: dict) -> bool:
        """One new token, a state as long as the kernel, an activation with a derivative here."""
        return (a["hidden_states"].shape[-1] == 1 and a["conv_state"].shape[-1] == a["weight"].shape[-1]
                and a.get("activation") in _ConvUpdate.ACTIVATIONS)

    @staticmethod
    def forward(fn, x, state, weight, bias, activation):
        new = state.clone()
        out = fn(x, new, weight, bias, activation=activation)
        return out, new                        # y (b, C, 1), the state after the token (b, C, K)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, x, _, weight, bias, activation = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1], weight, bias)
        ctx.activation, ctx.dtype = activation, x.dtype

    @staticmethod
    def backward(ctx, g, _new):
        new, weight, bias = ctx.saved_tensors
        slope = weight[:, -1]                                                # (C,)
        if ctx.activation is not None:
            pre = (new.to(weight.dtype) * weight).sum(-1) + (0 if bias is None else bias)  # (b, C)
            sig = torch.sigmoid(pre)
            slope = slope * sig * (1 + pre * (1 - sig))                     # silu'
        return None, (g * slope[..., None].to(g.dtype)).to(ctx.dtype), None, None, None, None


def _as_heads(state, x, dt, A, B, C, D, bias, z):
    """Mamba-1 tensors as Mamba-2's (b, H, P, N) layout with P = 1 and one group."""
    if state.dim() == 4:
        return state, x, dt, A, B, C, D, bias, z
    last = (lambda t: None if t is None else t[..., None])
    return (state[:, :, None], x[..., None], dt[..., None], A[:, None], B[:, None], C[:, None],
            last(D), last(bias), last(z))


def _vjp(g, prev, new, x, dt, A, B, C, D, bias, z, softplus):
    """Cotangents of (x, dt, A, B, C, D, dt_bias, softplus, z) for cotangent g of y."""
    shapes = (x.shape, dt.shape, B.shape, C.shape, None if z is None else z.shape)
    prev, x, dt, A, B, C, D, bias, z = _as_heads(prev, x, dt, A, B, C, D, bias, z)
    new = new if new.dim() == 4 else new[:, :, None]
    g = g if g.dim() == 3 else g[..., None]
    b, H, P, N = prev.shape
    G = B.shape[1]
    raw = dt if bias is None else dt + bias.to(dt.dtype)
    step = F.softplus(raw) if softplus else raw                              # Δ (b, H, P)
    Bh, Ch = B.repeat_interleave(H // G, 1), C.repeat_interleave(H // G, 1)  # (b, H, N)
    decay = torch.exp(step.float()[..., None] * A.float())                   # (b, H, P, N)
    y0 = (new.to(Ch.dtype) * Ch[:, :, None]).sum(-1) + (0 if D is None else x * D)
    g_z = None
    if z is not None:
        sig = torch.sigmoid(z)
        g_z = g * y0 * sig * (1 + z * (1 - sig))
        g = g * F.silu(z)
    bc = (Bh * Ch).sum(-1)[..., None]                                        # (b, H, 1)
    # Σ_n C_n s_n A_n exp(Δ A_n): the decay's share of ∂y/∂Δ, free of the cotangent
    q = (Ch[:, :, None] * prev.float() * A.float() * decay).sum(-1).to(g.dtype)
    g_x = g * (step * bc) + (0 if D is None else g * D)
    g_dt = g * (q + x * bc)
    if softplus:
        g_dt = g_dt * torch.sigmoid(raw)
    # B and C: contractions over the heads of a group as 2-D products, so a batch of
    # cotangents folds into their rows instead of copying the state per cotangent
    rows = g.reshape(b, G, (H // G) * P)
    states = new.reshape(b, G, (H // G) * P, N).to(g.dtype)
    weight = (g * step * x).reshape(b, G, -1).sum(-1)                        # (b, G)
    # (torch.mm: is_grads_batched's legacy vmap batches 2-D mm only, torch.vmap batches both)
    g_C = torch.stack([torch.stack([torch.mm(rows[i, j][None], states[i, j])[0] for j in range(G)])
                       for i in range(b)])                                   # (b, G, N)
    g_B = weight[..., None] * C
    return (g_x.reshape(shapes[0]), g_dt.reshape(shapes[1]), None, g_B.reshape(shapes[2]),
            g_C.reshape(shapes[3]), None, None, None,
            None if g_z is None else g_z.reshape(shapes[4]))
