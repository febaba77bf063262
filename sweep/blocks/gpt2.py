"""GPT-2 residual block (transformers GPT2Block) as a one-token map.

    a = h + c_proj(Attn(ln_1(h)));   h' = a + mlp_c_proj(act(c_fc(ln_2(a))))

Conv1D weights are stored (in, out): y = x @ W + b. The attention scale is
head_dim**-0.5 (scale_attn_weights) and, when scale_attn_by_inverse_layer_idx, also
1/(layer+1). reorder_and_upcast_attn only reorders/upcasts the same product, so the math
here is unchanged by it (in float64 we stay float64).
"""
from __future__ import annotations

import torch.nn.functional as F
from transformers.activations import ACT2FN

from sweep.blocks.attention import AttentionBlockOps, mlp_jac_gelu


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
        # Conv1D stores (in, out); transposed views give the nn.Linear (out, in) convention
        self.qkv_lin = _conv1d(blk.attn.c_attn)  # (3d, d): rows [q | k | v], heads contiguous
        self.out_lin = _conv1d(blk.attn.c_proj)  # (d, d)
        self.fc_in = _conv1d(blk.mlp.c_fc)  # (d_ff, d)
        self.fc_out = _conv1d(blk.mlp.c_proj)  # (d, d_ff)
        self.act = ACT2FN[cfg.activation_function]  # gelu_new: tanh form, dtype-preserving

    def norm1(self, h):  # (..., d) -> (..., d)
        return F.layer_norm(h, (self.d_model,), *self.ln1, eps=self.eps)

    def norm2(self, h):  # (..., d) -> (..., d)
        return F.layer_norm(h, (self.d_model,), *self.ln2, eps=self.eps)

    def qkv(self, x):  # (..., d) -> 3 x (..., H, hd)
        qkv = F.linear(x, *self.qkv_lin)  # (..., 3d)
        return tuple(z.unflatten(-1, (self.n_heads, self.head_dim)) for z in qkv.chunk(3, dim=-1))

    def out(self, o):  # (..., d) -> (..., d)
        return F.linear(o, *self.out_lin)

    def mlp(self, x):  # (..., d) -> (..., d)
        return F.linear(self.act(F.linear(x, *self.fc_in)), *self.fc_out)

    def qkv_weights(self):  # -> 3 x (H, hd, d)
        return tuple(w.unflatten(0, (self.n_heads, self.head_dim)) for w in self.qkv_lin[0].chunk(3, dim=0))

    def out_weight(self):  # -> (d, d)
        return self.out_lin[0]

    def mlp_jac(self, x, scratch=None, cols=None, out=None):  # (d,) -> (d, d) or (d, c1 - c0)
        return mlp_jac_gelu(x, self.fc_in, self.fc_out, self.act, scratch, cols, out)


def _conv1d(conv) -> tuple:
    """transformers Conv1D (y = x @ W + b, W (in, out)) -> (weight (out, in) view, bias (out,))."""
    return conv.weight.detach().T, conv.bias.detach()
