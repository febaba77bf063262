"""GPT-NeoX / Pythia residual block (transformers GPTNeoXLayer) as a one-token map.

    parallel (use_parallel_residual):  h' = h + dense(Attn(ln_in(h))) + MLP(ln_post(h))
    serial:                            a = h + dense(Attn(ln_in(h)));  h' = a + MLP(ln_post(a))

query_key_value packs each head's [q | k | v] together (output viewed as (H, 3*hd)),
and rotary acts on the first rotary_pct * hd dims of each head (partial rotary).
"""
from __future__ import annotations

import torch.nn.functional as F
from transformers.activations import ACT2FN

from sweep.blocks.attention import AttentionBlockOps, mlp_jac_gelu


def rotary_params(rotary_emb) -> tuple:
    """HF rotary module -> (inv_freq (rot/2,), attention_scaling); static RoPE types only."""
    if "dynamic" in rotary_emb.rope_type:
        raise ValueError(f"rope_type {rotary_emb.rope_type!r} rescales with sequence length; not supported")
    return rotary_emb.inv_freq.detach(), float(rotary_emb.attention_scaling)


class GPTNeoXOps(AttentionBlockOps):
    """Block `layer` of a GPTNeoXForCausalLM (or GPTNeoXModel), in the model's dtype."""

    arch = "gpt_neox"

    def __init__(self, hf_model, layer: int):
        cfg = hf_model.config
        base = getattr(hf_model, "gpt_neox", hf_model)
        blk = base.layers[layer]
        self.d_model = cfg.hidden_size
        self.n_heads = self.n_kv_heads = cfg.num_attention_heads
        self.head_dim = self.d_model // self.n_heads
        self.scale = self.head_dim**-0.5
        self.parallel = bool(cfg.use_parallel_residual)
        self.rotary = rotary_params(base.rotary_emb)
        self.eps = cfg.layer_norm_eps
        self.ln1 = (blk.input_layernorm.weight.detach(), blk.input_layernorm.bias.detach())  # (d,) x2
        self.ln2 = (blk.post_attention_layernorm.weight.detach(), blk.post_attention_layernorm.bias.detach())
        att, mlp = blk.attention, blk.mlp
        self.qkv_lin = linear_params(att.query_key_value)  # (3d, d), (3d,) | None
        self.out_lin = linear_params(att.dense)  # (d, d)
        self.fc_in = linear_params(mlp.dense_h_to_4h)  # (d_ff, d)
        self.fc_out = linear_params(mlp.dense_4h_to_h)  # (d, d_ff)
        self.act = ACT2FN[cfg.hidden_act]

    def norm1(self, h):  # (..., d) -> (..., d)
        return F.layer_norm(h, (self.d_model,), *self.ln1, eps=self.eps)

    def norm2(self, h):  # (..., d) -> (..., d)
        return F.layer_norm(h, (self.d_model,), *self.ln2, eps=self.eps)

    def qkv(self, x):  # (..., d) -> 3 x (..., H, hd)
        qkv = F.linear(x, *self.qkv_lin).unflatten(-1, (self.n_heads, 3 * self.head_dim))  # (..., H, 3hd)
        return qkv.chunk(3, dim=-1)

    def out(self, o):  # (..., d) -> (..., d)
        return F.linear(o, *self.out_lin)

    def mlp(self, x):  # (..., d) -> (..., d)
        return F.linear(self.act(F.linear(x, *self.fc_in)), *self.fc_out)

    def qkv_weights(self):  # -> 3 x (H, hd, d)
        return self.qkv_lin[0].unflatten(0, (self.n_heads, 3 * self.head_dim)).chunk(3, dim=1)

    def out_weight(self):  # -> (d, d)
        return self.out_lin[0]

    def mlp_jac(self, x, scratch=None, cols=None, out=None):  # (d,) -> (d, d) or (d, c1 - c0)
        return mlp_jac_gelu(x, self.fc_in, self.fc_out, self.act, scratch, cols, out)


def linear_params(lin) -> tuple:
    """nn.Linear -> (weight (out, in), bias (out,) or None), detached."""
    return lin.weight.detach(), None if lin.bias is None else lin.bias.detach()
