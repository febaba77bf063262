"""LLaMA residual block (transformers LlamaDecoderLayer) as a one-token map.

    a = h + o_proj(Attn(rms_in(h)));   h' = a + down(act(gate(rms_post(a))) * up(rms_post(a)))

Grouped-query attention: num_key_value_heads key/value heads, each read by
num_attention_heads / num_key_value_heads query heads. Unlike LlamaRMSNorm, which
computes in float32 whatever the input dtype, the norm here stays in the model dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from sweep.blocks.attention import AttentionBlockOps, mlp_jac_glu
from sweep.blocks.gpt_neox import linear_params, rotary_params


class LlamaOps(AttentionBlockOps):
    """Block `layer` of a LlamaForCausalLM (or LlamaModel), in the model's dtype."""

    arch = "llama"

    def __init__(self, hf_model, layer: int):
        cfg = hf_model.config
        base = getattr(hf_model, "model", hf_model)
        blk = base.layers[layer]
        att, mlp = blk.self_attn, blk.mlp
        self.d_model = cfg.hidden_size
        self.n_heads = cfg.num_attention_heads
        self.n_kv_heads = cfg.num_key_value_heads
        self.head_dim = att.head_dim
        self.scale = self.head_dim**-0.5
        self.rotary = rotary_params(base.rotary_emb)
        self.eps1 = blk.input_layernorm.variance_epsilon
        self.eps2 = blk.post_attention_layernorm.variance_epsilon
        self.w1 = blk.input_layernorm.weight.detach()  # (d,)
        self.w2 = blk.post_attention_layernorm.weight.detach()
        self.q_lin, self.k_lin, self.v_lin = linear_params(att.q_proj), linear_params(att.k_proj), linear_params(att.v_proj)
        self.o_lin = linear_params(att.o_proj)  # (d, H*hd)
        self.gate, self.up, self.down = linear_params(mlp.gate_proj), linear_params(mlp.up_proj), linear_params(mlp.down_proj)
        self.act = ACT2FN[cfg.hidden_act]

    def norm1(self, h):  # (..., d) -> (..., d)
        return _rms_norm(h, self.w1, self.eps1)

    def norm2(self, h):  # (..., d) -> (..., d)
        return _rms_norm(h, self.w2, self.eps2)

    def qkv(self, x):  # (..., d) -> (..., H, hd), (..., Hkv, hd), (..., Hkv, hd)
        q = F.linear(x, *self.q_lin).unflatten(-1, (self.n_heads, self.head_dim))
        k = F.linear(x, *self.k_lin).unflatten(-1, (self.n_kv_heads, self.head_dim))
        v = F.linear(x, *self.v_lin).unflatten(-1, (self.n_kv_heads, self.head_dim))
        return q, k, v

    def out(self, o):  # (..., H*hd) -> (..., d)
        return F.linear(o, *self.o_lin)

    def mlp(self, x):  # (..., d) -> (..., d)
        return F.linear(self.act(F.linear(x, *self.gate)) * F.linear(x, *self.up), *self.down)

    def qkv_weights(self):  # -> (H, hd, d), (Hkv, hd, d), (Hkv, hd, d)
        q = self.q_lin[0].unflatten(0, (self.n_heads, self.head_dim))
        k = self.k_lin[0].unflatten(0, (self.n_kv_heads, self.head_dim))
        return q, k, self.v_lin[0].unflatten(0, (self.n_kv_heads, self.head_dim))

    def out_weight(self):  # -> (d, H*hd)
        return self.o_lin[0]

    def mlp_jac(self, x, scratch=None, cols=None, out=None):  # (d,) -> (d, d) or (d, c1 - c0)
        return mlp_jac_glu(x, self.gate, self.up, self.down, self.act, scratch, cols, out)


def _rms_norm(h, weight, eps):
    """(..., d) -> (..., d): weight * h / sqrt(mean(h^2) + eps), in h's dtype."""
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))
