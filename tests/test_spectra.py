"""sweep.numerics.spectra: eig per token with NaN rows for non-finite matrices."""
from __future__ import annotations

import numpy as np
import torch

from sweep.numerics.spectra import all_finite, eigvals


def test_eigvals_batched_matches_numpy_and_flags_nonfinite():
    J = torch.randn(4, 6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    J[2, 1, 3] = float("nan")
    z = eigvals(J)
    assert z.shape == (4, 6) and z.dtype == torch.complex128
    assert torch.isnan(z[2]).all() and not torch.isnan(z[[0, 1, 3]]).any()
    for t in (0, 1, 3):
        ref = np.linalg.eigvals(J[t].numpy())
        assert np.allclose(np.sort_complex(z[t].numpy()), np.sort_complex(ref), atol=1e-12)
    assert eigvals(J.float()).dtype == torch.complex64


def test_all_finite_is_exact_for_nan_inf_and_overflowing_sums():
    big = torch.finfo(torch.float32).max
    J = torch.ones(5, 4, 4)
    J[1, 0, 0] = float("nan")
    J[2, 3, 1] = float("inf")
    J[3, 0, 0], J[3, 1, 1] = float("inf"), float("-inf")     # the sum is NaN, not inf
    J[4] = big                                               # finite entries, overflowing sum
    assert all_finite(J).tolist() == [True, False, False, False, True]
    assert all_finite(J.double()).tolist() == [True, False, False, False, True]
