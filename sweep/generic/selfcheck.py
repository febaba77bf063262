"""The first block of each model on each worker checks itself against transformers alone.

Two premises of a sweep are measured on the real weights, through the layer's own
whole-sequence call (captured from the model's no-cache forward of a short random sequence),
the route tdos' tests use as their oracle:

- causality: the union of eig(J_tt) over t is the spectrum of the sequence Jacobian only
  when that Jacobian is block lower-triangular. `later_dependence` puts random cotangents on
  every output position but the last and measures the gradients on the inputs after it.
- the engine's J_tt: the generic path reads transformers' decoding, its cache and its
  Mamba-style ops; a release that changes any of them could change J_tt silently.
  `diagonal_error` compares uᵀJ_tt of the engine at the last probe token (prefix held fixed)
  with the same products from autograd of the whole-sequence call, for random directions u,
  relative to the layer's own share uᵀ(J_tt − I) (the residual identity is exact in both
  routes and would hide an error in the rest).

Bounds are the dtype's (`Dtype.selfcheck` in sweep/format/dtypes.py), with room above the
largest difference between the two correct routes measured on all tested families
(docs/models.md): transformers rounds RMSNorm variances and A_log to float32 inside float64
models.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sweep.numerics.dtypes import row_of
from sweep.plan.layers import decoder_layers

PROBE_TOKENS = 4
PROBE_DIRECTIONS = 4      # random directions: a wrong entry is missed with probability 0


def bound(dtype: torch.dtype) -> float:
    """The largest `diagonal_error` accepted for a model computing in `dtype`."""
    return row_of(dtype).selfcheck


class _Captured(Exception):
    pass


@dataclass(frozen=True)
class WholeSequenceCall:
    """The layer's call in the model's no-cache forward of `ids` (1, n)."""

    layer: torch.nn.Module
    x: torch.Tensor           # (1, n, d) hidden-state input
    args: tuple
    kwargs: dict

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x, *self.args, **self.kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out         # (1, n, d)


def probe_ids(vocab: int, seed: int = 0) -> torch.Tensor:
    """(PROBE_TOKENS,) random token ids of the checks."""
    return torch.randint(0, vocab, (PROBE_TOKENS,), generator=torch.Generator().manual_seed(seed))


def whole_sequence_call(model: torch.nn.Module, layer: int, ids: torch.Tensor) -> WholeSequenceCall:
    """Capture decoder layer `layer`'s arguments in model(ids) without a cache."""
    block = decoder_layers(model)[layer]
    call = {}

    def capture(module, args, kwargs):
        call["args"], call["kwargs"] = args, kwargs
        raise _Captured

    hook = block.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        with torch.no_grad():
            model(ids[None], use_cache=False)
    except _Captured:
        pass
    finally:
        hook.remove()
    args, kwargs = call["args"], dict(call["kwargs"])
    x = args[0] if args else kwargs.pop("hidden_states")
    return WholeSequenceCall(block, x.detach().clone(), tuple(args[1:]), kwargs)


def input_gradients(call: WholeSequenceCall, w: torch.Tensor) -> torch.Tensor:
    """(k, 1, n, d) cotangents on the call's output -> (k, 1, n, d) gradients on its input."""
    x = call.x.clone().requires_grad_(True)
    with torch.enable_grad():
        y = call(x)
        g, = torch.autograd.grad(y, x, w, is_grads_batched=True)
    return g


def later_dependence(call: WholeSequenceCall, seed: int = 0) -> float:
    """max over t > s of |∂h_{l+1,s}/∂h_{l,t}| along random directions, relative to the
    largest dependence on inputs at or before s; 0.0 for a causal layer."""
    gen = torch.Generator().manual_seed(seed)
    _, n, d = call.x.shape
    k = PROBE_DIRECTIONS
    # cotangent batch (s, direction): random on output position s alone, s < n - 1
    w = torch.zeros(n - 1, k, 1, n, d, dtype=call.x.dtype)
    for s in range(n - 1):
        w[s, :, 0, s] = torch.randn(k, d, generator=gen, dtype=call.x.dtype)
    g = input_gradients(call, w.reshape(-1, 1, n, d)).reshape(n - 1, k, n, d)   # (s, direction, t, d)
    later = max(float(g[s, :, s + 1:].abs().max()) for s in range(n - 1))
    earlier = max(float(g[s, :, : s + 1].abs().max()) for s in range(n - 1)) or 1.0
    return later / earlier


def diagonal_error(call: WholeSequenceCall, jac: torch.Tensor, seed: int = 0) -> float:
    """max |uᵀ(J − J_ref)| / max |uᵀ(J_ref − I)| over random u, where J (d, d) is an engine's
    J_tt of the call's last token and J_ref that of autograd of the whole-sequence call."""
    gen = torch.Generator().manual_seed(seed + 1)
    _, n, d = call.x.shape
    u = torch.randn(PROBE_DIRECTIONS, d, generator=gen, dtype=call.x.dtype)      # (k, d)
    w = torch.zeros(PROBE_DIRECTIONS, 1, n, d, dtype=call.x.dtype)
    w[:, 0, -1] = u
    ref = input_gradients(call, w)[:, 0, -1]                                          # (k, d) uᵀ J_ref
    ours = u @ jac.to(u.dtype)                                                   # (k, d) uᵀ J
    share = (ref - u).abs().max().clamp_min(torch.finfo(u.dtype).tiny)
    return float((ours - ref).abs().max() / share)
