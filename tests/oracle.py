"""Independent oracles for the generic path, written against transformers alone.

`sequence_jacobian`: autograd of the unmodified decoder layer over a whole short sequence,
called exactly as the model's own no-cache forward calls it (arguments captured by a hook):
the (L·d) x (L·d) Jacobian, whose diagonal blocks are J_tt and whose blocks above the
diagonal must be zero. `scan_deltas`: Δ_t as transformers hands it to its own scan kernel
(dt and its bias, softplus), captured during the same forward; `gate_rates`: the log decay a
gated delta rule hands its chunked kernel, likewise. `oracle_model`: the
checkpoint as transformers alone loads it in float64.
"""
from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment

from sweep.plan.layers import decoder_layers


class _Captured(Exception):
    pass


def oracle_model(path):
    """transformers' own load of a checkpoint in float64: its default attention, eager
    experts (the grouped kernel has no float64), no parameter gradients."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float64).eval()
    if getattr(m.config, "_experts_implementation", None):
        m.set_experts_implementation("eager")
    m.requires_grad_(False)
    return m


def _run_until(model, layer: int, ids: torch.Tensor, before: bool, seen=None) -> None:
    """model(ids) without a cache, stopped just before (or after) layer `layer`; with `seen`
    (a dict), the layer's call arguments are recorded into it."""
    def stop(module, args, kwargs, *out):
        if seen is not None:
            seen["args"], seen["kwargs"] = args, dict(kwargs)
        raise _Captured

    mod = decoder_layers(model)[layer]
    h = (mod.register_forward_pre_hook if before else mod.register_forward_hook)(stop, with_kwargs=True)
    try:
        with torch.no_grad():
            model(ids[None], use_cache=False)
    except _Captured:
        pass
    finally:
        h.remove()


def _layer_call(model, layer: int, ids: torch.Tensor):
    """(hidden input (1, L, d), other args, kwargs) of layer `layer` in model(ids)."""
    got = {}
    _run_until(model, layer, ids, before=True, seen=got)
    args, kwargs = got["args"], got["kwargs"]
    x = args[0] if args else kwargs.pop("hidden_states")
    return x, args[1:], kwargs


def layer_input(model, layer: int, ids: torch.Tensor) -> torch.Tensor:
    """(L, d) h_l: the input of decoder layer `layer` in transformers' own model(ids)."""
    return _layer_call(model, layer, ids)[0][0].detach()


def layer_output(model, layer: int, ids: torch.Tensor) -> torch.Tensor:
    """(L, d) h_{l+1}: the output of decoder layer `layer` in transformers' own model(ids)."""
    x, args, kwargs = _layer_call(model, layer, ids)
    with torch.no_grad():
        out = decoder_layers(model)[layer](x, *args, **kwargs)
    return (out[0] if isinstance(out, (tuple, list)) else out)[0].detach()


def sequence_jacobian(model, layer: int, ids: torch.Tensor):
    """(h (L, d), J (L, d, L, d)): J[s, :, t, :] = ∂h_{l+1,s}/∂h_{l,t} of the unmodified layer."""
    x, args, kwargs = _layer_call(model, layer, ids)
    block = decoder_layers(model)[layer]

    def f(v):
        out = block(v, *args, **kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out

    with torch.enable_grad():
        J = torch.autograd.functional.jacobian(f, x.detach().clone(), vectorize=True)
    L, d = x.shape[1:]
    return x[0].detach(), J.reshape(L, d, L, d)


def scan_deltas(model, layer: int, ids: torch.Tensor) -> torch.Tensor:
    """(L, channels): Δ_t = softplus(dt + bias) of layer `layer` as its whole-sequence scan
    receives it (Mamba-1 scans: dt (1, D, L); Mamba-2 chunk scans: dt (1, L, H)); for a gated
    delta rule, −g_t / exp(A_log) of the log decay g (1, L, H) or (1, L, H, K) its chunked
    kernel receives. The scans are found by the kernel they stand for and read by that
    kernel's public signature."""
    return _scan_deltas(model, layer, ids, gates=False)


def gate_rates(model, layer: int, ids: torch.Tensor) -> torch.Tensor:
    """(L, channels): −g_t, the log decay rate that a gated delta-rule layer's whole-sequence
    call hands its chunked kernel (per head, or per key channel of each head)."""
    return _scan_deltas(model, layer, ids, gates=True)


def _scan_deltas(model, layer, ids, gates: bool) -> torch.Tensor:
    block = decoder_layers(model)[layer]
    modules = {sys.modules[type(m).__module__] for m in block.modules()}
    seen, saved, inside = [], [], []
    for mod in modules:
        for name, fn in list(vars(mod).items()):
            kernel = _scan_kernel(name, fn)
            if kernel:
                saved.append((mod, name, fn))
                setattr(mod, name, _recording(fn, kernel, seen, inside, None if gates else block))
    # the module-level op serves every layer: record it inside this layer's call only
    hook = block.register_forward_pre_hook(lambda module, args: inside.append(True))
    try:
        _run_until(model, layer, ids, before=False)
    finally:
        hook.remove()
        for mod, name, fn in saved:
            setattr(mod, name, fn)
    return seen[0]


# mamba_ssm's public whole-sequence scans, as transformers hands them their arguments
def _selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                       **options):
    pass


def _mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                               initial_states=None, seq_idx=None, cu_seqlens=None,
                               dt_softplus=False, **options):
    pass


# flash-linear-attention's whole-sequence gated delta rules (fla.ops.gated_delta_rule, fla.ops.kda)
def _chunk_gated_delta_rule(q, k, v, g, beta=None, *options, **kw):
    pass


_SCANS = {"selective_scan": _selective_scan_fn, "chunk_scan": _mamba_chunk_scan_combined,
          "selective_scan_fn": _selective_scan_fn, "mamba_chunk_scan_combined": _mamba_chunk_scan_combined,
          "chunk_gated_delta_rule": _chunk_gated_delta_rule, "chunk_kda": _chunk_gated_delta_rule,
          "chunk_kimi_delta_attention": _chunk_gated_delta_rule}


def _scan_kernel(name: str, fn):
    """The reference signature of the whole-sequence scan `fn` stands for, or None."""
    if not callable(fn):
        return None
    kernel = getattr(fn, "kernel_layer_name", None)          # transformers >= 5.25: kernels' Func
    if kernel is not None:
        return _SCANS.get(kernel)
    return next((f for k, f in _SCANS.items() if name.endswith(k)), None)


def _recording(fn, kernel, seen, inside, block):
    """`fn` recording Δ (or, with block None, a delta rule's −g) of its calls while `inside`."""
    import inspect

    sig = inspect.signature(kernel)

    def call(*args, **kwargs):
        if not inside:
            return fn(*args, **kwargs)
        a = sig.bind(*args, **kwargs).arguments
        if kernel is _chunk_gated_delta_rule:
            rate = -a["g"][0].reshape(a["g"].shape[1], -1).detach()                 # (L, c)
            if block is not None:               # Δ = −g / exp(A_log) of the channel's head
                a_log = next(p for n, p in block.named_parameters() if n.endswith("A_log"))
                heads = torch.exp(a_log.detach().reshape(-1))
                rate = rate / heads.repeat_interleave(rate.shape[1] // heads.shape[0])
            seen.append(rate)
        elif kernel is _selective_scan_fn:
            bias, soft = a.get("delta_bias"), a.get("delta_softplus", False)
            raw = a["delta"] + (0 if bias is None else bias[..., None])
            seen.append((F.softplus(raw) if soft else raw)[0].T.detach())          # (L, D)
        else:
            bias, soft = a.get("dt_bias"), a.get("dt_softplus", False)
            raw = a["dt"] + (0 if bias is None else bias)
            seen.append((F.softplus(raw) if soft else raw)[0].detach())            # (L, H)
        return fn(*args, **kwargs)
    return call


def matched_eigvals_error(got: np.ndarray, want: np.ndarray) -> float:
    """max over tokens of |ζ - ζ'| / max|ζ'| after matching each token's eigenvalues
    (Hungarian, LAPACK's order is no property of the spectrum): got, want (L, d) complex."""
    worst = 0.0
    for a, b in zip(got, want):
        rows, cols = linear_sum_assignment(np.abs(a[:, None] - b[None, :]))
        worst = max(worst, float(np.abs(a[rows] - b[cols]).max() / np.abs(b).max()))
    return worst
