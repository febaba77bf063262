"""sweep.blas: the measured choice between torch's and numpy's BLAS computes the same product."""
from __future__ import annotations

import pytest
import torch

from sweep import blas


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_both_libraries_give_the_product(dtype):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 96, generator=g, dtype=dtype), torch.randn(96, 48, generator=g, dtype=dtype)
    ref = (a.double() @ b.double()).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-13
    for name, mm in blas._LIBS.items():
        out = torch.empty(64, 48, dtype=dtype)
        mm(a, b, out)
        torch.testing.assert_close(out, ref, rtol=tol, atol=tol, msg=name)
    out = torch.full((64, 48), float("nan"), dtype=dtype)
    assert blas.matmul_into(a, b.T.contiguous().T, out) is out           # strided operand too
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    key = ((64, 96), (96, 48), dtype, torch.get_num_threads())
    assert blas.choices()[key] in blas._LIBS


def test_numpy_competes_only_at_torch_thread_count():
    """numpy's bundled OpenBLAS can be set to torch's thread count on Linux, so it may race."""
    assert blas._set_numpy_threads(torch.get_num_threads())
