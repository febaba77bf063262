"""Is a layer causal? The premise of J_tt's spectrum, checked on the real weights.

The union of eig(J_tt) over t is the spectrum of the sequence Jacobian only when that
Jacobian is block lower-triangular: no output position may depend on a later input. For
transformers' decoder-only causal LMs every block above the diagonal is exactly zero (the
mask puts -inf before the softmax, recurrences only look back). `later_dependence` measures
it on a short random sequence through the layer's own whole-sequence call: cotangents on
every output position but the last, gradients with respect to the inputs after it.
"""
from __future__ import annotations

import torch

from sweep.generic.layers import decoder_layers

PROBE_TOKENS = 4
PROBE_DIRECTIONS = 4      # random cotangents: a nonzero J_ts is missed with probability 0


class _Captured(Exception):
    pass


def later_dependence(model: torch.nn.Module, layer: int, vocab: int, seed: int = 0) -> float:
    """max over t > s of |∂h_{l+1,s}/∂h_{l,t}| along random directions, relative to the
    largest dependence on inputs at or before s; 0.0 for a causal layer."""
    block = decoder_layers(model)[layer]
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, PROBE_TOKENS), generator=gen)
    call = {}

    def capture(module, args, kwargs):
        call["args"], call["kwargs"] = args, kwargs
        raise _Captured

    hook = block.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        with torch.no_grad():
            model(ids, use_cache=False)
    except _Captured:
        pass
    finally:
        hook.remove()
    args, kwargs = call["args"], dict(call["kwargs"])
    x = (args[0] if args else kwargs.pop("hidden_states")).detach().clone().requires_grad_(True)
    n, k = PROBE_TOKENS, PROBE_DIRECTIONS
    with torch.enable_grad():
        out = block(x, *args[1:], **kwargs)
        y = out[0] if isinstance(out, (tuple, list)) else out            # (1, n, d)
        # cotangent batch (s, direction): random on output position s alone, s < n - 1
        w = torch.zeros(n - 1, k, *y.shape, dtype=y.dtype)
        for s in range(n - 1):
            w[s, :, 0, s] = torch.randn(k, y.shape[-1], generator=gen, dtype=y.dtype)
        g, = torch.autograd.grad(y, x, w.reshape(-1, *y.shape), is_grads_batched=True)
    g = g.reshape(n - 1, k, n, -1)                                       # (s, direction, t, d)
    later = max(float(g[s, :, s + 1:].abs().max()) for s in range(n - 1))
    earlier = max(float(g[s, :, : s + 1].abs().max()) for s in range(n - 1)) or 1.0
    return later / earlier
