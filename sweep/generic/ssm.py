"""Mamba-style layers: Δ_t, A_log, and structured derivatives for the one-token ops.

Every Mamba-style mixer in transformers (Mamba, Falcon-Mamba, Jamba: Mamba-1; Mamba-2, Bamba,
Zamba2, Falcon-H1, GraniteMoeHybrid, NemotronH: Mamba-2) advances its SSM state one token
through a module-level op that transformers declares replaceable by mamba_ssm's kernel
`selective_state_update`, after a one-token causal convolution replaceable by causal_conv1d's
`causal_conv1d_update`. tdos recognises the ops by that kernel name and reads their calls
through those packages' public signatures (`op_of`, `SIGNATURES`), not through transformers'
private parameter names.

The state update's reference implementation materialises exp(Δ A) ⊙ s + Δ B x on the whole
(heads, head_dim, state) grid; autograd of it then carries that grid once per cotangent,
2.7e8 numbers per token for Mamba-2-370m (7 s a token, 25× its eig). `patched(layer)` swaps
the op, in the modules the layer's classes come from, for `_Update`: its forward calls
transformers' own op (so the values, the in-place state update and its float32 rounding are
transformers'), its backward is the derivative of
    y = (s ⊙ exp(Δ A) + Δ B x) · C + D x,   optionally × silu(z),   Δ = softplus(dt + b)
contracted over the state before anything is batched: O(heads × head_dim + state) per
cotangent. The convolution's reference goes through a depthwise `F.conv1d`, whose batched
backward falls back to one call per cotangent; `_ConvUpdate` keeps its values and gives
autograd its derivative, diagonal in the channel for the new token: act'(pre) × the last tap.
tests/test_generic_ssm.py checks both against autograd of transformers' own ops.

A call that does not fit (another signature, layout or kernel option) is differentiated by
plain autograd through transformers' own code, on the prefix's private copy of the cache
(sweep/generic/prefix.py): exact, slower (docs/models.md), and named in `fallbacks`. The
worker's self-check (sweep/generic/selfcheck.py) holds either route to autograd of the
unmodified layer's whole-sequence call on every worker.

Both layouts are handled as (b, H, P, N): Mamba-1 has one "head" per channel (P = 1) and B, C
shared by all of them; Mamba-2 has H heads of P channels in G groups sharing B and C.
While patched, every state update made without autograd (the model's own decode step)
records Δ_t = softplus(dt + bias) in `recorded`, one value per channel (Mamba-1) or per head
(Mamba-2).

Gated delta-rule layers (OLMo-Hybrid, Qwen3-Next, Kimi-Linear and their kin) hand their
kernel, declared replaceable by flash-linear-attention's `fused_recurrent_gated_delta_rule` /
`chunk_gated_delta_rule` (Kimi: `fused_recurrent_kda` / `chunk_kda`), the per-token log decay
g: the state is multiplied by exp(g_t) before the token's delta-rule update. While patched,
those calls made without autograd record the rate −g_t of their last token (per head, or per
key channel of each head), read through fla's public signature like the Mamba ops; `Steps`
turns it into Δ_t = −g_t / exp(A_log) of the layer's own A_log, so that Δ_t·exp(A_log) is
transformers' own gate. Calls with autograd go through transformers' code unchanged.
"""
from __future__ import annotations

import contextlib
import inspect

import torch
import torch.nn.functional as F

from sweep.checkpoints import hf

# The ops tdos intercepts, known by what they are: the drop-in kernel each one stands for.
# transformers declares them replaceable by mamba_ssm's `selective_state_update` and
# causal_conv1d's `causal_conv1d_update`; since 5.25 each is a kernels `Func` module carrying
# that name as `kernel_layer_name`, before as a plain function named after it. Because
# transformers hands the same call to those packages' kernels, it must use their public
# argument order and names, so the calls are read through those signatures (below), never
# through transformers' own parameter names, which a release may rename.
UPDATE = "selective_state_update"
CONV = "causal_conv1d_update"
# flash-linear-attention's gated delta rules; transformers' own fallbacks were once plain
# functions named torch_recurrent_gated_delta_rule, recurrent_kimi_delta_attention, …
DECAY = ("recurrent_gated_delta_rule", "chunk_gated_delta_rule", "recurrent_kda", "chunk_kda",
         "recurrent_kimi_delta_attention", "chunk_kimi_delta_attention")
OPS = (UPDATE, CONV, *DECAY)


def _selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                            dt_softplus=False, **kernel_options):
    """mamba_ssm.ops.triton.selective_state_update's signature (its public API)."""


def _causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, **kernel_options):
    """causal_conv1d.causal_conv1d_update's signature (its public API)."""


def _gated_delta_rule(q, k, v, g, beta=None, *options, **kernel_options):
    """fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule's and fla.ops.kda's leading
    arguments (their public API): g (b, T, H) or (b, T, H, K), the log decay."""


SIGNATURES = {UPDATE: inspect.signature(_selective_state_update),
              CONV: inspect.signature(_causal_conv1d_update),
              **{op: inspect.signature(_gated_delta_rule) for op in DECAY}}
KERNEL_OPTIONS = ("cu_seqlens", "seq_idx", "state_batch_indices", "dst_state_batch_indices",
                  "pad_slot_id", "cache_seqlens", "conv_state_indices", "num_accepted_tokens")
fallbacks: set[str] = set()    # ops whose calls did not fit: differentiated by plain autograd


def op_of(name: str, fn) -> str | None:
    """Which intercepted op the module attribute `name` = `fn` is, or None."""
    if isinstance(fn, _Wrapped):
        return fn.op
    if not callable(fn):
        return None
    known = hf.kernel_name(fn) or name
    return next((o for o in OPS if isinstance(known, str) and known.endswith(o)), None)


@contextlib.contextmanager
def patched(layer: torch.nn.Module, recorded: list, structured: bool = True):
    """Within the block, the selective state update of `layer`'s modules records Δ of its
    token into `recorded` (calls without autograd), and with `structured` the one-token ops
    get their structured derivatives (calls with autograd; otherwise plain autograd through
    transformers' own code, the reference)."""
    swapped = []
    for mod, name, fn in hf.module_functions(layer):
        op = op_of(name, fn)
        if op and not isinstance(fn, _Wrapped):
            setattr(mod, name, _Wrapped(fn, op, recorded, structured))
            swapped.append((mod, name, fn))
    try:
        yield
    finally:
        for mod, name, fn in swapped:
            setattr(mod, name, fn)


class _Wrapped:
    """One of transformers' one-token Mamba-style ops, called as transformers calls it."""

    def __init__(self, fn, op: str, recorded: list, structured: bool = True):
        self.fn, self.op, self.recorded, self.structured = fn, op, recorded, structured

    def __call__(self, *args, **kwargs):
        if self.op in DECAY:
            if not torch.is_grad_enabled():
                self.recorded.append(_rate(args, kwargs))
            return self.fn(*args, **kwargs)
        a = _bound(self.op, args, kwargs)
        if not torch.is_grad_enabled():
            if self.op == UPDATE and a is not None:
                self.recorded.append(_delta(a))
            return self.fn(*args, **kwargs)
        if a is None or not self.structured:
            if a is None:
                fallbacks.add(self.op)
            return self.fn(*args, **kwargs)
        if self.op == CONV:
            out, new_state = _ConvUpdate.apply(self.fn, a["x"], a["conv_state"], a["weight"],
                                               a["bias"], a["activation"])
            state = a["conv_state"]
        else:
            out, _, new_state = _Update.apply(self.fn, a["state"], a["x"], a["dt"], a["A"], a["B"],
                                              a["C"], a["D"], a["dt_bias"], a["dt_softplus"], a["z"])
            state = a["state"]
        with torch.no_grad():
            state.copy_(new_state)
        return out


def _bound(op: str, args, kwargs) -> dict | None:
    """The call's arguments by the kernel's public names (defaults filled in), or None when
    the call does not have the shapes tdos' structured derivative is written for."""
    try:
        b = SIGNATURES[op].bind(*args, **kwargs)
    except TypeError:
        return None
    b.apply_defaults()
    a = b.arguments
    # options that make the call something other than one decode step of one sequence
    # (packed sequences, cache slots); other keywords (a layer's own kwargs passed through,
    # as Zamba2 does) transformers drops before any kernel sees them, and so does tdos
    if any(a["kernel_options"].get(k) is not None for k in KERNEL_OPTIONS):
        return None
    return a if (_ConvUpdate.applies(a) if op == CONV else _Update.applies(a)) else None


def _delta(a: dict) -> torch.Tensor:
    """Δ of the update's token as the op computes it: (b, channels) Mamba-1, (b, heads) Mamba-2."""
    raw = a["dt"] if a["dt_bias"] is None else a["dt"] + a["dt_bias"].to(a["dt"].dtype)
    delta = F.softplus(raw) if a["dt_softplus"] else raw
    return delta[..., 0] if a["A"].dim() == 3 else delta   # Mamba-2 repeats dt over head_dim


def _rate(args, kwargs) -> torch.Tensor | None:
    """−g of the call's last token, (b, heads) or (b, heads·key channels); None when the call
    has no tensor g by fla's signature."""
    try:
        g = SIGNATURES[DECAY[0]].bind(*args, **kwargs).arguments["g"]
    except TypeError:
        return None
    if not isinstance(g, torch.Tensor) or g.dim() < 3:
        return None
    return -g[:, -1].reshape(g.shape[0], -1)


class Steps:
    """Δ_t of one decoder layer from what its recorded calls hold: Mamba's as recorded; a
    gated delta rule's rate −g_t over exp(A_log) of the head its channel belongs to."""

    def __init__(self, layer: torch.nn.Module, kind):
        self.layer, self.kind, self.width = layer, kind.ssm, kind.delta_channels

    def __call__(self, recorded: torch.Tensor) -> torch.Tensor:
        """recorded (channels,): one sequence's entry of the call -> Δ_t (channels,)."""
        from sweep.plan.layers import a_log

        if recorded.shape != (self.width,):
            raise ValueError(f"the decode step's {self.kind} call gave a decay of shape "
                             f"{tuple(recorded.shape)}, not ({self.width},)")
        if self.kind != "deltanet":
            return recorded
        # A_log read now: a layer-local worker swaps the layer's parameters in and out
        intrinsic = torch.exp(a_log(self.layer)).to(recorded.dtype)             # (H,)
        return recorded / intrinsic.repeat_interleave(self.width // intrinsic.shape[0])


class _Update(torch.autograd.Function):
    """y = transformers' selective state update; backward = its structured derivative."""

    generate_vmap_rule = True

    @staticmethod
    def applies(a: dict) -> bool:
        """The layouts `_vjp` is written for: Mamba-1 state (b, D, N) with B, C (b, N); Mamba-2
        (b, H, P, N) with B, C (b, G, N), G dividing H; x, dt, z shaped like the state less N."""
        state, x, B, C = a["state"], a["x"], a["B"], a["C"]
        if not all(isinstance(t, torch.Tensor) for t in (state, x, a["dt"], a["A"], B, C)):
            return False
        lead = state.shape[:-1]
        groups = state.dim() == 4 and B.dim() == 3 and state.shape[1] % B.shape[1] == 0
        return (state.dim() in (3, 4) and x.shape == lead and a["dt"].shape == lead
                and a["A"].shape == state.shape[1:] and B.shape == C.shape
                and (B.dim() == 2 if state.dim() == 3 else groups)
                and B.shape[-1] == state.shape[-1]
                and (a["z"] is None or a["z"].shape == lead)
                and all(t is None or t.shape == lead[1:] for t in (a["D"], a["dt_bias"])))

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
        x, state, weight = a["x"], a["conv_state"], a["weight"]
        return (all(isinstance(t, torch.Tensor) for t in (x, state, weight)) and x.dim() == 3
                and x.shape[-1] == 1 and state.shape[:2] == x.shape[:2]
                and weight.shape == (x.shape[1], state.shape[-1])
                and a["activation"] in _ConvUpdate.ACTIVATIONS)

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
