"""GPT-2, GPT-NeoX and LLaMA block math against the unmodified HF decoder layers.

Each tiny model is built from its config, seeded, with every parameter drawn away from
the stock initialisation (non-unit norms, non-zero biases, O(1) attention logits) so no
term of the block is trivial. The HF layer is called the way its model calls it: SDPA
attention with the mask from `create_causal_mask`, and rotary tables as
`position_embeddings`. Checks:

  forward  == HF layer forward                    (fp64 1e-10, fp32 rounding)
  step     == forward row t                       (fp64 1e-12, fp32 rounding)
  J_tt     == diagonal blocks of the sequence Jacobian of the HF layer (fp64 1e-8), for
              both the analytic fast path `jacobians` and the jacrev reference,
              the blocks above the diagonal are exactly zero, and the union of eig(J_tt)
              is the spectrum of the full (L*d, L*d) sequence Jacobian (1e-8).

LlamaRMSNorm computes in float32 whatever the input dtype, so in float64 the HF reference
gets a dtype-preserving RMSNorm with the same weight and eps (test-side only). HF builds
rotary tables in float32 always; in float64 the HF layer is handed our float64 tables,
and `test_rotary_tables_match_hf` pins those tables to HF's.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from transformers import (GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM,
                          LlamaConfig, LlamaForCausalLM)
from transformers.masking_utils import create_causal_mask

from sweep.blocks.gpt2 import GPT2Ops
from sweep.blocks.gpt_neox import GPTNeoXOps
from sweep.blocks.llama import LlamaOps
from sweep.numerics import linalg

L = 7  # tokens; the sequence Jacobian is (L*d, L*d)


def _gpt2(**kw):
    cfg = GPT2Config(vocab_size=11, n_embd=16, n_layer=2, n_head=2, n_positions=16, layer_norm_epsilon=1e-4,
                     bos_token_id=0, eos_token_id=0, **kw)
    return GPT2LMHeadModel(cfg)


def _neox(parallel):
    cfg = GPTNeoXConfig(vocab_size=11, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=40, max_position_embeddings=16, rotary_pct=0.5, rotary_emb_base=50.0,
                        layer_norm_eps=1e-4, use_parallel_residual=parallel, bos_token_id=0, eos_token_id=0)
    return GPTNeoXForCausalLM(cfg)


def _llama():
    cfg = LlamaConfig(vocab_size=11, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=48, max_position_embeddings=16, rms_norm_eps=1e-4,
                      attention_bias=True, mlp_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 30.0},
                      bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return LlamaForCausalLM(cfg)


# name -> (model builder, Ops class, layer)
CASES = {
    "gpt2": (lambda: _gpt2(), GPT2Ops, 1),
    "gpt2-inverse-layer-scale": (lambda: _gpt2(scale_attn_by_inverse_layer_idx=True), GPT2Ops, 1),
    "neox-parallel": (lambda: _neox(True), GPTNeoXOps, 1),
    "neox-serial": (lambda: _neox(False), GPTNeoXOps, 0),
    "llama-gqa": (_llama, LlamaOps, 1),
}
TOL = {  # relative, max-abs-error / max-abs-value
    torch.float64: {"forward": 1e-10, "step": 1e-12, "jac": 1e-8, "eig": 1e-8},
    torch.float32: {"forward": 2e-6, "step": 5e-6, "jac": 1e-5},
}


class DtypeRMSNorm(torch.nn.Module):
    """LlamaRMSNorm without its float32 round trip (test-side float64 reference)."""

    def __init__(self, norm):
        super().__init__()
        self.weight, self.eps = norm.weight, norm.variance_epsilon

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _randomize(model, seed):
    """Every parameter O(1)-perturbed: norm weights near 1, everything else N(0, 0.3^2)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            is_norm_weight = p.ndim == 1 and name.endswith("weight") and ("ln" in name or "norm" in name)
            p.copy_(1.0 + 0.2 * noise if is_norm_weight else 0.3 * noise)


def _decoder(model):
    base = getattr(model, "transformer", None) or getattr(model, "gpt_neox", None) or model.model
    return base, getattr(base, "h", None) or base.layers


def build(case, dtype):
    """-> (ops, hf_fn: (L, d) -> (L, d) through the HF layer, d)"""
    make, ops_cls, layer = CASES[case]
    torch.manual_seed(0)
    model = make()
    _randomize(model, seed=1)
    model = model.to(dtype).eval()
    base, layers = _decoder(model)
    hf_layer = layers[layer]
    ops = ops_cls(model, layer)
    if dtype == torch.float64 and case.startswith("llama"):
        hf_layer.input_layernorm = DtypeRMSNorm(hf_layer.input_layernorm)
        hf_layer.post_attention_layernorm = DtypeRMSNorm(hf_layer.post_attention_layernorm)

    def hf_fn(h):  # (L, d) -> (L, d), called as the HF model calls its layers
        x = h[None]  # (1, L, d)
        pos = torch.arange(h.shape[0])[None]  # (1, L)
        mask = create_causal_mask(config=model.config, inputs_embeds=x, attention_mask=None, cache=None,
                                  position_ids=pos)
        kw = {"attention_mask": mask, "position_ids": pos}
        if hasattr(base, "rotary_emb"):
            kw["position_embeddings"] = (base.rotary_emb(x, pos) if dtype == torch.float32
                                         else tuple(t[None] for t in ops.rope_tables(pos[0], dtype)))
        return hf_layer(x, **kw)[0]

    return ops, hf_fn, model.config.hidden_size


def _hidden(d, dtype, n=L, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return (1.5 * torch.randn(n, d, generator=gen, dtype=torch.float64) + 0.3).to(dtype)  # (n, d)


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


DTYPES = [torch.float64, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_hf(case, dtype):
    ops, hf_fn, d = build(case, dtype)
    h = _hidden(d, dtype)
    with torch.no_grad():
        ours, ref = ops.forward(h), hf_fn(h)
    assert ours.dtype == dtype and ours.shape == (L, d)
    assert _rel(ours, ref) <= TOL[dtype]["forward"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_step_matches_forward(case, dtype):
    ops, _, d = build(case, dtype)
    h = _hidden(d, dtype, n=L + 2)  # tokens past t1 must not matter
    t0, t1 = 2, L
    pre = ops.prefix(h, t0, t1)
    with torch.no_grad():
        rows = torch.stack([ops.step(h[t], {k: x[t - t0] for k, x in pre.items()}) for t in range(t0, t1)])
        full = ops.forward(h[:t1])
    assert _rel(rows, full[t0:t1]) <= TOL[dtype]["step"]


def _sequence_jacobian(hf_fn, h):
    """(L, d) -> (L, d, L, d): d hf_fn(h)_t / d h_s of the whole sequence."""
    return torch.autograd.functional.jacobian(hf_fn, h)


def _match_eigs(a, b):
    """max |a_i - b_pi(i)| over the optimal one-to-one matching of two complex spectra."""
    cost = np.abs(a[:, None] - b[None, :])
    rows, cols = linear_sum_assignment(cost)
    return cost[rows, cols].max()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_jacobians_match_hf_sequence_jacobian(case, dtype):
    ops, hf_fn, d = build(case, dtype)
    h = _hidden(d, dtype)
    full = _sequence_jacobian(hf_fn, h)  # (L, d, L, d)
    diag = torch.stack([full[t, :, t, :] for t in range(L)])  # (L, d, d)
    tol = TOL[dtype]["jac"]
    for cpu_linalg in ("torch", "openblas"):  # the MLP and J_tt products through either BLAS
        with linalg.using(cpu_linalg):
            assert _rel(ops.jacobians(h, 0, L), diag) <= tol
    assert _rel(ops.jacobians_ref(h, 0, L), diag) <= tol
    assert _rel(ops.jacobians(h, 3, L), diag[3:]) <= tol  # a later block of tokens alone
    out = torch.full((L - 3, d, d), float("nan"), dtype=dtype)  # a worker's reused buffer
    assert ops.jacobians(h, 3, L, out=out) is out and _rel(out, diag[3:]) <= tol
    if dtype != torch.float64:
        return
    for t in range(L):  # causal: later positions never feed back
        assert torch.count_nonzero(full[t, :, t + 1:, :]) == 0
    ours = torch.linalg.eigvals(ops.jacobians(h, 0, L)).reshape(-1).numpy()  # (L*d,)
    ref = torch.linalg.eigvals(full.reshape(L * d, L * d)).numpy()
    assert _match_eigs(ours, ref) <= TOL[dtype]["eig"] * np.abs(ref).max()


@pytest.mark.parametrize("case", list(CASES))
def test_jacobians_in_column_chunks_match_the_whole_width_and_hf(case):
    """J_tt's columns formed a few at a time (uneven chunks, one column, a chunk from a byte
    bound): the same J_tt as all columns at once, and as autograd of the HF layer (float64)."""
    from sweep.numerics.workspace import column_bytes, column_chunk

    ops, hf_fn, d = build(case, torch.float64)
    h = _hidden(d, torch.float64)
    full = _sequence_jacobian(hf_fn, h)  # (L, d, L, d)
    diag = torch.stack([full[t, :, t, :] for t in range(L)])  # (L, d, d)
    whole = ops.jacobians(h, 0, L, columns=d)
    bound = column_chunk(d, column_bytes(d, 8), 5 * column_bytes(d, 8))   # five columns' bytes
    assert 1 < bound <= 5
    for columns in (1, 5, d - 1, bound):
        for cpu_linalg in ("torch", "openblas"):
            with linalg.using(cpu_linalg):
                chunked = ops.jacobians(h, 0, L, columns=columns)
                assert _rel(chunked, diag) <= TOL[torch.float64]["jac"]
                assert _rel(chunked, whole) <= 1e-13
    assert _rel(whole, ops.jacobians_ref(h, 0, L)) <= TOL[torch.float64]["jac"]


def test_a_narrow_workspace_bound_forms_fewer_columns_at_once():
    """The default chunk comes from the block's byte bound: at the default every column of a
    small block at once; a bound of a few columns' bytes gives chunks of that width, and J_tt
    is the same."""
    from sweep.numerics.workspace import column_bytes, column_chunk

    ops, _, d = build("llama-gqa", torch.float64)
    assert column_chunk(d, column_bytes(d, 8)) == d
    h = _hidden(d, torch.float64)
    whole = ops.jacobians(h, 0, L)
    ops.jac_workspace_bytes = 3 * column_bytes(d, 8)
    assert column_chunk(d, column_bytes(d, 8), ops.jac_workspace_bytes) <= 3
    assert _rel(ops.jacobians(h, 0, L), whole) <= 1e-13


@pytest.mark.parametrize("case", ["neox-parallel", "llama-gqa"])
def test_rotary_tables_match_hf(case):
    """fp32: HF's own tables exactly; fp64: HF's float32-built tables to float32 accuracy."""
    make, ops_cls, layer = CASES[case]
    for dtype, tol in ((torch.float32, 0.0), (torch.float64, 1e-6)):
        model = make().to(dtype)
        base, _ = _decoder(model)
        pos = torch.arange(3 * L)
        ours = ops_cls(model, layer).rope_tables(pos, dtype)  # (3L, rot) x2
        ref = base.rotary_emb(torch.zeros(1, 1, 4, dtype=dtype), pos[None])  # (1, 3L, rot) x2
        for a, b in zip(ours, ref):
            assert a.dtype == dtype and a.shape == b[0].shape
            assert (a - b[0]).abs().max().item() <= tol
