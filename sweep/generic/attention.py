"""The attention function tdos registers with transformers' `AttentionInterface`.

Every model that dispatches through the interface (Llama, Qwen, Mistral, Gemma, Phi, OLMo,
Mixtral, GPT-2, GPT-J, OPT, GPT-NeoX, the hybrids' attention layers, …) then computes softmax
attention here, with the model's own projections, norms, rotary and masks around it.

Two things differ from transformers' `sdpa`/`eager` functions, neither changing the value:
- softmax runs in the inputs' dtype for float32 and float64 (eager's float32 upcast would
  round a float64 sweep to float32; half precision is still upcast);
- while `prefix.PrefixView` holds a prefix fixed, the keys and values of earlier tokens
  arrive through `held_prefix` instead of being concatenated to the new token's: the
  batched backward of J_tt then multiplies cotangents by the unbatched prefix, where a
  concatenated (cotangent-batched) key tensor would copy the prefix once per cotangent
  (82 % of the time of a naive `jacfwd` at Qwen3-0.6B's shape).

Products run batched over (batch row, key/value head), and a product with the held prefix
goes through `_Held`, whose backward folds the cotangent batch into the rows of one product
per head with the prefix. Left to autograd, the batched backward broadcasts the constant
prefix to one small matrix product per cotangent, or (per-head 2-D products) stacks the
heads' cotangents back together; at Qwen3-0.6B's shape with 480 prefix tokens either costs
more than the layer's dense products.
"""
from __future__ import annotations

import contextvars

import torch

NAME = "tdos"
# keyword arguments of transformers' attention calls that carry no math beyond what this
# function implements (the mask already encodes causality and sliding windows)
_INERT = {"dropout", "scaling", "sliding_window", "softcap", "s_aux", "is_causal",
          "position_ids", "cache_position", "output_attentions", "use_cache", "position_bias"}

# the prefix (keys, values) of each key/value update of the call being differentiated, in
# call order: prefix.PrefixView appends one per update, each attention call takes the first
# (a shared block's attention may report another layer_idx than its cache slot: Zamba2)
held_prefix: contextvars.ContextVar[list | None] = contextvars.ContextVar("tdos_prefix",
                                                                          default=None)
calls = [0]              # attention calls so far: a probe tells whether a layer routes here
key_shapes: list = []    # the shape of the keys of each call (the probe's last few kept)


def register() -> None:
    """Make `attn_implementation="tdos"` available (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, attend)
    AttentionMaskInterface.register(NAME, sdpa_mask)   # boolean masks, or None when trivial


def attend(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None,
           s_aux=None, is_causal=None, position_bias=None, **kwargs):
    """query (b, h, q, hd), key/value (b, h_kv, k, hd) -> ((b, q, h, hd), None), as
    transformers' attention functions return."""
    unknown = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and k not in _INERT)
    if unknown:
        raise NotImplementedError(f"attention argument(s) {unknown} of {type(module).__name__} "
                                  f"are not implemented by tdos' attention function")
    if dropout and module.training:
        raise NotImplementedError("attention dropout in training mode")
    calls[0] += 1
    key_shapes[:] = [*key_shapes[-7:], tuple(key.shape)]
    held = held_prefix.get()
    blocks = [(key, value)]
    if held:
        blocks.insert(0, held.pop(0))
    b, h, q, hd = query.shape
    scores = _scores(query, blocks, hd ** -0.5 if scaling is None else scaling)   # (b, h, q, k)
    p = _weights(module, scores, attention_mask, softcap, s_aux, is_causal, position_bias)
    return _mix(p, blocks, b, h, q).transpose(1, 2).contiguous(), None


def _scores(query, blocks, scaling):
    """q·kᵀ over every block of keys: (b, h, q, k_total)."""
    b, h, q, hd = query.shape
    h_kv = blocks[0][0].shape[1]
    qs = query.reshape(b * h_kv, (h // h_kv) * q, hd)              # heads grouped by kv head
    parts = [_product(qs, K.reshape(b * h_kv, -1, hd).transpose(1, 2)) for K, _ in blocks]
    s = torch.cat(parts, -1) if len(parts) > 1 else parts[0]       # (b h_kv, g q, k_total)
    return s.reshape(b, h, q, -1) * scaling


def _weights(module, s, mask, softcap, s_aux, is_causal, position_bias):
    """Attention probabilities (b, h, q, k) from scores, with every transformers option."""
    k = s.shape[-1]
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if position_bias is not None:
        s = s + position_bias[..., -k:]
    if mask is not None:
        mask = mask[..., -k:]
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    elif s.shape[2] > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True)):
        q = s.shape[2]
        s = s.masked_fill(~torch.ones(q, k, dtype=torch.bool, device=s.device).tril(k - q), float("-inf"))
    work = torch.float32 if s.dtype in (torch.float16, torch.bfloat16) else s.dtype
    if s_aux is None:
        return torch.softmax(s.to(work), -1).to(s.dtype)
    sink = s_aux.reshape(1, -1, 1, 1).expand(*s.shape[:3], 1).to(s.dtype)   # gpt-oss sinks
    return torch.softmax(torch.cat([s, sink], -1).to(work), -1)[..., :-1].to(s.dtype)


def _mix(p, blocks, b, h, q):
    """Σ_blocks p·V: (b, h, q, hd)."""
    h_kv = blocks[0][0].shape[1]
    sizes = [K.shape[-2] for K, _ in blocks]
    p = p.reshape(b * h_kv, (h // h_kv) * q, -1)
    parts = p.split(sizes, -1) if len(sizes) > 1 else (p,)
    out = sum(_product(w, V.reshape(b * h_kv, -1, V.shape[-1])) for w, (_, V) in zip(parts, blocks))
    return out.reshape(b, h, q, -1)


def _product(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """x @ m, (n, r, c) @ (n, c, k), n heads; through `_Held` when m is a constant (the held
    prefix) and x is not."""
    if m.requires_grad or not x.requires_grad:
        return x @ m
    return _Held.apply(x, m)


class _Held(torch.autograd.Function):
    """x @ m for a constant m; backward: the cotangent times mᵀ by `_FoldedProduct`."""

    @staticmethod
    def forward(x, m):
        return x @ m

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[1])

    @staticmethod
    def backward(ctx, g):
        m, = ctx.saved_tensors
        return _FoldedProduct.apply(g, m.transpose(1, 2)), None


class _FoldedProduct(torch.autograd.Function):
    """g @ m for a constant m, (n, r, k) @ (n, k, c); under vmap (J_tt's batched cotangents)
    one product per head with the cotangent batch folded into g's rows."""

    @staticmethod
    def forward(g, m):
        return g @ m

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def vmap(info, in_dims, g, m):
        if in_dims[1] is not None:                      # a batched m: nothing to fold
            return torch.vmap(torch.matmul, in_dims=in_dims)(g, m), 0
        n, batch, r, k = g.movedim(in_dims[0], 1).shape                   # (n, B, r, k)
        folded = g.movedim(in_dims[0], 1).reshape(n, batch * r, k) @ m     # (n, B r, c)
        return folded.reshape(n, batch, r, -1), 1
