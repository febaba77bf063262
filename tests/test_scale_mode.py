"""The norm's scale mode: ρ_t, r_t of J along h_t, and the summary table's count of it."""
from __future__ import annotations

import numpy as np
import torch

from analysis.rates import SCALE_RESIDUAL_MAX
from sweep.spectra import scale_direction
from sweep.summary import layer_summary


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
