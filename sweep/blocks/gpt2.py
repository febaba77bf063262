"""GPT-2 residual block (transformers GPT2Block) as a one-token map.

    a = h + c_proj(Attn(ln_1(h)));   h' = a + mlp_c_proj(act(c_fc(ln_2(a))))

Conv1D weights are stored (in, out): y = x @ W + b. The attention scale is
head_dim**-0.5 (scale_attn_weights) and, when scale_attn_by_inverse_layer_idx, also
1/(layer+1). reorder_and_upcast_attn only reorders/upcasts the same product, so the math
here is unchanged by it (in float64 we stay float64).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from sweep.blocks.attention import AttentionBlockOps


class GPT2Ops(AttentionBlockOps):
    """Block `layer` of a GPT2LMHeadModel (or GPT2Model), in the model's dtype."""

    arch = "gpt2"

    def __init__(self, hf_model, layer: int):
        cfg = hf_model.config
        if cfg.add_cross_attention:
            raise ValueError("gpt2: cross-attention blocks are not a causal residual map")
        base = getattr(hf_model, "transformer", hf_model)
        blk = base.h[layer]
        self.d_model = cfg.hidden_size
        self.n_heads = self.n_kv_heads = cfg.num_attention_heads
        self.head_dim = self.d_model // self.n_heads
        self.scale = self.head_dim**-0.5 if cfg.scale_attn_weights else 1.0
        if cfg.scale_attn_by_inverse_layer_idx:
            self.scale /= float(layer + 1)
        self.eps = cfg.layer_norm_epsilon
        self.ln1 = (blk.ln_1.weight.detach(), blk.ln_1.bias.detach())  # (d,), (d,)
        self.ln2 = (blk.ln_2.weight.detach(), blk.ln_2.bias.detach())
        self.w_qkv = blk.attn.c_attn.weight.detach()  # (d, 3d)
        self.b_qkv = blk.attn.c_attn.bias.detach()  # (3d,)
        self.w_o = blk.attn.c_proj.weight.detach()  # (d, d)
        self.b_o = blk.attn.c_proj.bias.detach()
        self.w_fc = blk.mlp.c_fc.weight.detach()  # (d, d_ff)
        self.b_fc = blk.mlp.c_fc.bias.detach()
        self.w_proj = blk.mlp.c_proj.weight.detach()  # (d_ff, d)
        self.b_proj = blk.mlp.c_proj.bias.detach()
        self.act = ACT2FN[cfg.activation_function]  # gelu_new: tanh form, dtype-preserving

    def norm1(self, h):  # (..., d) -> (..., d)
        return F.layer_norm(h, (self.d_model,), *self.ln1, eps=self.eps)

    def norm2(self, h):  # (..., d) -> (..., d)
        return F.layer_norm(h, (self.d_model,), *self.ln2, eps=self.eps)

    def qkv(self, x):  # (..., d) -> 3 x (..., H, hd)
        qkv = x @ self.w_qkv + self.b_qkv  # (..., 3d): [q | k | v], heads contiguous in each
        return tuple(z.unflatten(-1, (self.n_heads, self.head_dim)) for z in qkv.chunk(3, dim=-1))

    def out(self, o):  # (..., d) -> (..., d)
        return o @ self.w_o + self.b_o

    def mlp(self, x):  # (..., d) -> (..., d)
        return self.act(x @ self.w_fc + self.b_fc) @ self.w_proj + self.b_proj
