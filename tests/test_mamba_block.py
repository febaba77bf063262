"""MambaOps against stock transformers and against a plain token-by-token fp64 reference.

Stock HF Mamba rounds the RMSNorm, the residual and A through fp32 even in a float64 model,
so it can only confirm our fp64 math to ~1e-7; the plain loop below (written from the
equations, sharing no code with sweep/blocks/mamba.py) confirms it to rounding.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment

from sweep.numerics import linalg
from sweep.worker.model import load_model

L = 10          # tokens; the tiny Mamba has d = 16, d_inner = 32, N = 4, dt_rank = 4, K = 4
LAYER = 1


# ---------------------------------------------------------------- plain reference

def plain_block(blk, h):
    """(L, d) -> (L, d): the Mamba block token by token, from the equations, in h's dtype."""
    mix = blk.mixer
    di, N, R = mix.intermediate_size, mix.ssm_state_size, mix.time_step_rank
    K = mix.conv_kernel_size
    w_conv = mix.conv1d.weight[:, 0, :]                              # (di, K)
    A = -torch.exp(mix.A_log)                                        # (di, N)
    s = h.new_zeros(di, N)
    xs = [h.new_zeros(di)] * (K - 1)                                 # pre-conv x of positions < 0
    out = []
    for t in range(h.shape[0]):
        ht = h[t]
        u = blk.norm.weight * ht / torch.sqrt(ht.pow(2).mean() + blk.norm.variance_epsilon)
        xz = mix.in_proj.weight @ u
        x, z = xz[:di], xz[di:]
        xs = xs + [x]
        c = mix.conv1d.bias + sum(w_conv[:, k] * xs[-K + k] for k in range(K))
        xi = c * torch.sigmoid(c)
        proj = mix.x_proj.weight @ xi
        dt = torch.log1p(torch.exp(mix.dt_proj.weight @ proj[:R] + mix.dt_proj.bias))
        B, C = proj[R:R + N], proj[R + N:]
        s = torch.exp(dt[:, None] * A) * s + (dt * xi)[:, None] * B[None, :]
        y = s @ C + mix.D * xi
        out.append(ht + mix.out_proj.weight @ (y * z * torch.sigmoid(z)))
    return torch.stack(out)


def hf_block(blk, h):
    """(L, d) -> (L, d) through the unmodified transformers MambaBlock."""
    return blk(h[None])[0]


def full_jacobian(f, h):
    """(L, d) -> (L, d, L, d) sequence Jacobian by autograd."""
    return torch.autograd.functional.jacobian(f, h, vectorize=True)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def mamba64(tiny_checkpoints):
    return load_model(tiny_checkpoints["mamba"], dtype="float64")


@pytest.fixture(scope="module")
def mamba32(tiny_checkpoints):
    return load_model(tiny_checkpoints["mamba"], dtype="float32")


def _h(model):
    """(L, d) hidden state entering LAYER for fixed random tokens."""
    tokens = torch.randint(0, model.vocab_size, (L,), generator=torch.Generator().manual_seed(3))
    return model.hidden_states(tokens, LAYER)


def _blk(model):
    """The unmodified HF block, widened like the model's BlockOps (weights stay stored narrow)."""
    return copy.deepcopy(model.hf.backbone.layers[LAYER]).to(model.dtype)


# ---------------------------------------------------------------- forward / step

def test_forward_fp64_matches_plain_and_hf(mamba64):
    h, ops = _h(mamba64), mamba64.block(LAYER)
    ours = ops.forward(h)
    with torch.no_grad():
        plain, stock = plain_block(_blk(mamba64), h), hf_block(_blk(mamba64), h)
    assert ours.dtype == torch.float64
    assert rel(ours, plain) <= 1e-10
    assert 0 < rel(ours, stock) <= 1e-6   # stock HF's fp32 casts: nonzero, fp32-sized


def test_forward_fp32_matches_hf(mamba32):
    h, ops = _h(mamba32), mamba32.block(LAYER)
    with torch.no_grad():
        stock = hf_block(_blk(mamba32), h)
    assert rel(ops.forward(h), stock) <= 1e-5


@pytest.mark.parametrize("t0", [0, 4])
def test_step_equals_forward_row(mamba64, mamba32, t0):
    for model, tol in ((mamba64, 1e-13), (mamba32, 1e-5)):
        h, ops = _h(model), model.block(LAYER)
        pre = ops.prefix(h, t0, L)
        assert pre["ssm"].shape == (L - t0, ops.d_inner, ops.d_state)
        assert pre["conv"].shape == (L - t0, ops.d_inner, ops.d_conv - 1)
        rows = torch.stack([ops.step(h[t], {k: v[t - t0] for k, v in pre.items()}) for t in range(t0, L)])
        assert rel(rows, ops.forward(h)[t0:]) <= tol


# ---------------------------------------------------------------- J_tt

@pytest.fixture(scope="module")
def full64(mamba64):
    """Full sequence Jacobians (L, d, L, d) of stock HF and of the plain reference, fp64."""
    h, blk = _h(mamba64), _blk(mamba64)
    return h, full_jacobian(lambda x: hf_block(blk, x), h), full_jacobian(lambda x: plain_block(blk, x), h)


@pytest.mark.parametrize("cpu_linalg", ["torch", "openblas"])
@pytest.mark.parametrize("t0,t1", [(0, L), (4, 9)])
def test_jacobians_equal_diagonal_blocks_fp64(mamba64, full64, t0, t1, cpu_linalg):
    h, full_hf, full_plain = full64
    ops = mamba64.block(LAYER)
    with linalg.using(cpu_linalg):                    # the J_tt product through either BLAS
        fast = ops.jacobians(h, t0, t1)
    ref = ops.jacobians_ref(h, t0, t1)
    diag_hf = torch.stack([full_hf[t, :, t, :] for t in range(t0, t1)])
    diag_plain = torch.stack([full_plain[t, :, t, :] for t in range(t0, t1)])
    assert fast.shape == (t1 - t0, ops.d_model, ops.d_model)
    assert rel(fast, ref) <= 1e-10
    for J in (fast, ref):
        assert rel(J, diag_plain) <= 1e-8
        assert rel(J, diag_hf) <= 1e-6
    # only h[:t1] matters; a worker's reused `out` buffer gets the same numbers
    with linalg.using(cpu_linalg):
        torch.testing.assert_close(ops.jacobians(h[:t1], t0, t1), fast, rtol=0, atol=0)
        out = torch.full_like(fast, float("nan"))
        assert ops.jacobians(h, t0, t1, out=out) is out
    torch.testing.assert_close(out, fast, rtol=0, atol=0)


def test_jacobians_fast_vs_ref_fp32(mamba32):
    h, ops = _h(mamba32), mamba32.block(LAYER)
    fast, ref = ops.jacobians(h, 2, L), ops.jacobians_ref(h, 2, L)
    assert fast.dtype == torch.float32
    assert rel(fast, ref) <= 1e-5


def test_sequence_jacobian_is_causal_with_eigs_from_diagonal(mamba64, full64):
    h, full_hf, full_plain = full64
    d = h.shape[1]
    for full in (full_hf, full_plain):
        for t in range(L):
            assert torch.count_nonzero(full[t, :, t + 1:, :]) == 0     # no dependence on later tokens
    diag = mamba64.block(LAYER).jacobians(h, 0, L)
    union = torch.linalg.eigvals(diag).flatten().numpy()
    seq = torch.linalg.eigvals(full_plain.reshape(L * d, L * d)).numpy()
    cost = abs(union[:, None] - seq[None, :])
    rows, cols = linear_sum_assignment(cost)
    assert cost[rows, cols].max() <= 1e-8


# ---------------------------------------------------------------- Δ and A

def _hf_delta(blk, h):
    """(L, d_inner) Δ_t from inside the unmodified HF mixer (x_proj output -> dt_proj -> softplus)."""
    mix, seen = blk.mixer, {}
    handle = mix.x_proj.register_forward_hook(lambda mod, args, out: seen.update(proj=out))
    try:
        with torch.no_grad():
            blk(h[None])
    finally:
        handle.remove()
    time_step = seen["proj"][0, :, : mix.time_step_rank]
    return F.softplus(mix.dt_proj(time_step))


@pytest.mark.parametrize("t0,t1", [(0, L), (5, 8)])
def test_delta_matches_hf_internals(mamba64, mamba32, t0, t1):
    for model, tol in ((mamba64, 1e-6), (mamba32, 1e-5)):
        h, ops = _h(model), model.block(LAYER)
        ours = ops.delta(h, t0, t1)
        assert ours.shape == (t1 - t0, ops.d_inner) and ours.dtype == model.dtype
        assert rel(ours, _hf_delta(_blk(model), h)[t0:t1]) <= tol


def test_a_log_is_hf_parameter(mamba64):
    ops, mix = mamba64.block(LAYER), _blk(mamba64).mixer
    assert ops.a_log().shape == (ops.d_inner, ops.d_state)
    torch.testing.assert_close(torch.exp(ops.a_log()), torch.exp(mix.A_log), rtol=0, atol=0)
    assert torch.unique(ops.a_log()).numel() > ops.d_state    # perturbed: not the S4D init


def test_projection_biases_and_no_conv_bias():
    """use_bias=True / use_conv_bias=False variant (not among the released checkpoints)."""
    from transformers import MambaConfig, MambaForCausalLM

    from sweep.blocks.mamba import MambaOps

    torch.manual_seed(1)
    cfg = MambaConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, state_size=3, time_step_rank=2,
                      use_bias=True, use_conv_bias=False)
    hf = MambaForCausalLM(cfg).double().eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    blk, ops = hf.backbone.layers[0], MambaOps(hf, 0)
    h = torch.randn(6, 8, dtype=torch.float64)
    with torch.no_grad():
        assert rel(ops.forward(h), hf_block(blk, h)) <= 1e-6
    full = full_jacobian(lambda x: hf_block(blk, x), h)
    fast = ops.jacobians(h, 1, 6)
    assert rel(fast, ops.jacobians_ref(h, 1, 6)) <= 1e-10
    assert rel(fast, torch.stack([full[t, :, t, :] for t in range(1, 6)])) <= 1e-6
