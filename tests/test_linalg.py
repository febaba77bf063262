"""sweep.numerics.linalg: the CPU's GEMM/eig library, chosen by config and by the CPU vendor alone."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

from sweep.numerics import linalg
from sweep.numerics.spectra import eigvals


def test_auto_follows_the_vendor_table_and_explicit_choices_win():
    amd = linalg.resolve("auto", "AuthenticAMD", threads=1)
    assert amd == {"gemm": "openblas", "eig32": "torch", "eig64": "openblas"}
    torch_only = dict.fromkeys(linalg.OPS, "torch")
    assert linalg.resolve("auto", "GenuineIntel", threads=1) == torch_only
    assert linalg.resolve("auto", "", threads=1) == torch_only
    assert linalg.resolve("auto", "AuthenticAMD", threads=2) == torch_only   # no two thread pools
    for choice in ("torch", "openblas"):
        for threads in (1, 2):
            assert linalg.resolve(choice, "AuthenticAMD", threads) == dict.fromkeys(linalg.OPS, choice)
    with pytest.raises(ValueError, match="compute.cpu_linalg: 'mkl' is not one of auto, torch, openblas"):
        linalg.resolve("mkl")


def test_using_is_scoped_to_its_block_and_thread():
    here = linalg.resolve("auto")                 # the default outside any `using`
    assert linalg.current() == here
    seen = {}
    with linalg.using("torch"):
        assert linalg.current() == dict.fromkeys(linalg.OPS, "torch")
        t = threading.Thread(target=lambda: seen.update(other=linalg.current()))
        t.start()
        t.join()
        with linalg.using("openblas"):
            assert linalg.current() == dict.fromkeys(linalg.OPS, "openblas")
        assert linalg.current()["gemm"] == "torch"
    assert linalg.current() == here
    assert seen["other"] == here                  # a Dask worker's other thread is unaffected


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("choice", ["torch", "openblas"])
def test_matmul_writes_out_in_place_and_agrees(choice, dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(40, 96, generator=g, dtype=dtype)
    b = torch.randn(30, 96, generator=g, dtype=dtype).T      # a transposed view, as GPT-2's weights
    ref = a.double() @ b.double()
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    with linalg.using(choice):
        out = torch.full((40, 30), float("nan"), dtype=dtype)
        ptr = out.data_ptr()
        assert linalg.matmul(a, b, out=out) is out and out.data_ptr() == ptr
        fresh = linalg.matmul(a, b)
    for r in (out, fresh):
        assert r.dtype == dtype and r.shape == (40, 30)
        assert (r.double() - ref).abs().max() <= tol * ref.abs().max()
    # bit for bit the chosen library's own product: the route really is the one asked for
    own = torch.from_numpy(a.numpy() @ b.numpy()) if choice == "openblas" else torch.matmul(a, b)
    assert torch.equal(out, own) and torch.equal(fresh, own)


def _matched_gap(a: np.ndarray, b: np.ndarray) -> float:
    cost = np.abs(a[:, None] - b[None, :])
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("choice", ["torch", "openblas"])
def test_eigvals_either_library_matches_fp64_numpy_and_leaves_J_alone(choice, dtype):
    g = torch.Generator().manual_seed(1)
    J = (torch.eye(48, dtype=torch.float64) + torch.randn(3, 48, 48, generator=g, dtype=torch.float64) / 7).to(dtype)
    J[1] = J[1].T.contiguous()                                 # a nonsymmetric matrix and its transpose
    before = J.clone()
    with linalg.using(choice):
        z = eigvals(J)
    assert z.dtype == (torch.complex128 if dtype == torch.float64 else torch.complex64)
    assert torch.equal(J, before)                              # the task reads J again (ρ, r)
    scratch: dict = {}
    with linalg.using(choice):
        linalg.eigvals_cpu(J[0], scratch)
    assert ("eig" in scratch) == (choice == "openblas")        # scipy's route, in its reused copy
    tol = 1e-11 if dtype == torch.float64 else 2e-5
    for t in range(3):
        ref = np.linalg.eigvals(J[t].double().numpy())
        assert _matched_gap(z[t].numpy().astype(complex), ref) <= tol * np.abs(ref).max()
    flagged = J.clone()
    flagged[1, 2, 0] = float("nan")                            # a flagged block: the rest as before
    with linalg.using(choice):
        zf = eigvals(flagged)
    assert torch.isnan(zf[1]).all() and torch.equal(zf[[0, 2]], z[[0, 2]])
