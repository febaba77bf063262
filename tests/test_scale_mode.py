"""The norm's scale mode: ρ_t, r_t of J along h_t (and along 𝟙/√d, LayerNorm's shift
direction), and its count by the symmetry-removed rule."""
from __future__ import annotations

import numpy as np
import torch

from analysis.spectrum.rates import SCALE_RESIDUAL_MAX, classify, marginal_threshold, mode_masks
from sweep.numerics.spectra import eigvals, scale_direction, shift_direction
from sweep.worker.model import load_model


def layer_summary(zeta, dtype, rho=None, resid=None) -> dict:
    """Counts of the symmetry-removed classes of (T, d) eigenvalues, and λ min of the rest."""
    c = classify(zeta, marginal_threshold(dtype), rho, resid, modes="symmetry-removed")
    return {"scale": c.scale, "stable": c.stable.size, "marginal": c.marginal,
            "unstable": c.unstable, "lam_min": c.stable.min()}


def test_scale_direction_recovers_a_known_eigenpair():
    gen = torch.Generator().manual_seed(0)
    d = 6
    V = torch.randn(d, d, generator=gen, dtype=torch.float64)               # eigenvectors
    zeta = torch.tensor([1 - 3e-4, 0.9, 0.5, 0.3, -0.2, 0.05], dtype=torch.float64)
    J = (V @ torch.diag(zeta) @ torch.linalg.inv(V))[None].repeat(2, 1, 1)  # (2, d, d)
    h = torch.stack([2.5 * V[:, 0], torch.randn(d, generator=gen, dtype=torch.float64)])  # (2, d)
    rho, r = scale_direction(J, h)
    assert abs(rho[0].item() - (1 - 3e-4)) < 1e-12 and r[0].item() < 1e-12   # an eigenvector
    Jh = J[1] @ h[1]                                                       # a generic vector
    want_rho = torch.dot(h[1], Jh) / torch.dot(h[1], h[1])
    want_r = (Jh - want_rho * h[1]).norm() / h[1].norm()
    torch.testing.assert_close(torch.stack([rho[1], r[1]]), torch.stack([want_rho, want_r]),
                               rtol=1e-12, atol=1e-12)                     # float64
    assert r[1].item() > SCALE_RESIDUAL_MAX
    rho32, _ = scale_direction(J.float(), h)                               # the run dtype
    assert rho32.dtype == torch.float32


def test_layer_summary_counts_the_scale_mode_by_eigenvector():
    # per token: λ = 3e-4 (the scale mode when r is small), 1e-2, 1, and |ζ| = 1.5
    row = np.array([np.exp(-3e-4), np.exp(-1e-2) * 1j, np.exp(-1.0), 1.5], np.complex64)
    zeta = np.tile(row, (4, 1))                                            # (T, d)
    rho = np.full(4, np.exp(-3e-4))
    resid = np.array([1e-5, 1e-5, 1e-5, 0.5])                              # token 3: h no eigenvector
    s = layer_summary(zeta, "float32", rho, resid)
    assert (s["scale"], s["stable"], s["marginal"], s["unstable"]) == (3, 9, 0, 4)
    np.testing.assert_allclose(s["lam_min"], 3e-4, rtol=1e-3)           # token 3 keeps it
    old = layer_summary(zeta, "float32")                                   # a store without ρ, r
    assert (old["scale"], old["stable"]) == (0, 12)


def test_scale_and_shift_directions_take_two_distinct_eigenvalues():
    # per token: two eigenvalues at 1 (scale and LayerNorm shift: 1 + 2e-7 and the fp32
    # rounding of the exact ζ = 1 along 𝟙, λ ≈ 6e-8) beside two physical modes
    row = np.array([1 + 2e-7, 1 - 6e-8, np.exp(-1e-3), np.exp(-1.0)], np.complex64)
    zeta = np.tile(row, (4, 1))                                            # (T, d)
    rho = np.ones((4, 2))                                                  # both ρ = 1: ties
    resid = np.array([[1e-6, 1e-7], [1e-6, 1e-7], [1e-6, 0.5], [0.5, 0.5]])  # (T, 2)
    lam, m = mode_masks(zeta, marginal_threshold("float32"), rho, resid)
    # tokens 0, 1: both modes near 1 removed, each direction its own eigenvalue
    np.testing.assert_array_equal(m["scale"][:2], [[True, True, False, False]] * 2)
    assert m["scale"][2].sum() == 1 and m["scale"][3].sum() == 0           # shift r too large
    assert m["stable"][:2, :2].sum() == 0 and (m["scale"] & m["stable"]).sum() == 0
    s = layer_summary(zeta, "float32", rho, resid)
    # token 2: scale takes the nearer (1 − 6e-8), 1 + 2e-7 stays "unstable"; token 3: none
    assert (s["scale"], s["stable"], s["unstable"]) == (5, 9, 2)
    np.testing.assert_allclose(s["lam_min"], 6e-8, rtol=0.1)              # token 3 only
    # the first column alone (an older store: shift NaN) is the scale mode only
    one = mode_masks(zeta, 1e-9, rho[:, 0], resid[:, 0])[1]["scale"]
    nan = mode_masks(zeta, 1e-9, np.c_[rho[:, 0], np.full(4, np.nan)],
                     np.c_[resid[:, 0], np.full(4, np.nan)])[1]["scale"]
    np.testing.assert_array_equal(one, nan)
    assert one.sum() == 3


def test_parallel_residual_neox_has_an_exact_shift_mode(tiny_checkpoints):
    from transformers import GPTNeoXConfig

    path = tiny_checkpoints["gpt_neox"]
    assert GPTNeoXConfig.from_pretrained(path).use_parallel_residual
    model = load_model(path, dtype="float64")
    tokens = torch.arange(8) * 7 % 64
    for layer in range(2):
        h = model.hidden_states(tokens, layer)                             # (8, d)
        jac = model.block(layer).jacobians(h, 0, 8)                        # (8, d, d)
        rho, r = shift_direction(jac)
        assert r.max().item() < 1e-5 and (rho - 1).abs().max().item() < 1e-5   # J𝟙 = 𝟙
        zeta = eigvals(jac).numpy()                                        # (8, d)
        assert np.abs(zeta - rho.numpy()[:, None]).min(1).max() < 1e-5     # an eigenvalue ≈ 1
        rho_h, r_h = scale_direction(jac, h)
        rr = np.stack([rho_h.numpy(), rho.numpy()], 1)
        rs = np.stack([r_h.numpy(), r.numpy()], 1)
        m = mode_masks(zeta, marginal_threshold("float64"), rr, rs)[1]
        assert (m["scale"].sum(1) >= 1).all()                              # shift at least


def test_shift_mode_is_exact_for_sequential_layernorm_and_absent_for_rmsnorm(tiny_checkpoints):
    # pre-LN sequential block h1 = h + attn(LN1 h), out = h1 + mlp(LN2 h1): h → h + c𝟙 leaves
    # LN1 h, hence h1 − h, and LN2 h1 unchanged, so J𝟙 = 𝟙 here too (GPT-2); RMSNorm has no
    # shift invariance (Mamba, LLaMA)
    tokens = torch.arange(8) * 5 % 64
    for arch, exact in (("gpt2", True), ("mamba", False), ("llama", False)):
        model = load_model(tiny_checkpoints[arch], dtype="float64")
        h = model.hidden_states(tokens, 1)
        _, r = shift_direction(model.block(1).jacobians(h, 0, 8))
        if exact:
            assert r.max().item() < 1e-5, arch
        else:
            assert r.min().item() > SCALE_RESIDUAL_MAX, arch
