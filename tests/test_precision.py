"""fp32 against fp64 on blocks whose eigenvalues are known: Hungarian matching token by
token, the relative error of λ, the rate below which fp32 is not resolved, Δβ per L."""
from __future__ import annotations

import numpy as np
import pytest
from synthetic_store import SyntheticModel, write_store

from analysis import open_store
from analysis.studies.precision import (RESOLVED_MAX, compare_precision, match_tokens,
                                        precision_pairs)

# true eigenvalues of every J_tt (real, so a real V gives a real matrix): slow modes from
# λ = 2e-8 (below fp32's spacing at 1, 6e-8) to λ = 1, two negative ones, one |ζ| > 1
LAMBDAS = np.array([2e-8, 3e-5, 1e-3, 1e-2, 0.05, 0.3, 1.0])
TRUE = np.concatenate([np.exp(-LAMBDAS), [-0.5, -0.2, 1.3]])
D, T = TRUE.size, 12
STABLE = np.sort(np.concatenate([LAMBDAS, np.log([2.0, 5.0])]))    # 0 < |ζ| < 1: 9 per token


def _blocks(seed=0):
    """(T, D, D) float64 J_t = V_t diag(TRUE) V_t⁻¹ with well-conditioned random V_t."""
    rng = np.random.default_rng(seed)
    V = np.eye(D) + 0.15 * rng.standard_normal((T, D, D))
    return V @ (TRUE[None, :, None] * np.linalg.inv(V))


def _nearest_true(z):
    return np.argmin(np.abs(np.asarray(z)[..., None] - TRUE), axis=-1)    # (..., D)


@pytest.fixture(scope="module")
def spectra():
    J = _blocks()
    z64 = np.stack([np.linalg.eigvals(j) for j in J])                     # (T, D) complex128
    rng = np.random.default_rng(1)
    z32 = np.stack([rng.permutation(np.linalg.eigvals(j.astype(np.float32))) for j in J])
    return z64, z32.astype(np.complex64)


def test_hungarian_matching_pairs_each_eigenvalue_with_its_own(spectra):
    z64, z32 = spectra
    i64, i32 = _nearest_true(z64), _nearest_true(z32)                    # the oracle: the truth
    assert (np.sort(i64, 1) == np.arange(D)).all() and (np.sort(i32, 1) == np.arange(D)).all()
    idx = match_tokens(z64, z32)
    for t in range(T):
        want = np.array([np.nonzero(i32[t] == k)[0][0] for k in i64[t]])
        np.testing.assert_array_equal(idx[t], want)
    bad = z32.copy()
    bad[3, 0] = np.nan                                                    # a flagged token
    assert (match_tokens(z64, bad)[3] == -1).all() and (match_tokens(z64, bad)[2] >= 0).all()


def _store(path, z64, z32, layers=(4,)):
    def model(name, z, dtype):
        ev = np.broadcast_to(z, (1, 1) + z.shape).copy()                   # (1, 1, T, D)
        return SyntheticModel(name=name, eigenvalues=ev, layers=list(layers), arch="gpt2",
                              dtype=dtype, token_block=4, path="same/checkpoint")
    return write_store(path, [model("m32", z32, "float32"), model("m64", z64, "float64")])


def test_precision_comparison_on_known_blocks(tmp_path, spectra):
    z64, z32 = spectra
    path = _store(tmp_path / "p.zarr", z64, z32)
    stores = {n: open_store(path, n) for n in ("m32", "m64")}
    assert precision_pairs(stores) == [("m64", "m32", 4)]
    cmp = compare_precision(path, None, "m32", "m64", layer=4, lengths=[4, 8, 12])
    assert cmp.names == ("m64", "m32") and cmp.dtypes == ("float64", "float32")
    m = cmp.matched
    assert m.n_tokens == T and m.lam_ref.size == T * STABLE.size           # every stable mode
    np.testing.assert_allclose(np.sort(m.lam_ref), np.repeat(STABLE, T), rtol=1e-6)
    err = m.rel_err
    slow = m.lam_ref < 1e-7
    assert np.median(err[slow]) > RESOLVED_MAX and err[~slow].max() < 1e-2
    # the bin of λ = 2e-8 is the only unresolved one: its upper edge 10^-7.5
    assert cmp.unresolved_below == pytest.approx(10 ** -7.5)
    for modes in ("all-stable", "symmetry-removed"):
        db = cmp.delta_beta(modes)
        assert list(db) == [4, 8, 12]
        for L, (b64, b32) in cmp.betas[modes].items():
            assert db[L] == b64 - b32
    d = cmp.to_dict()
    assert d["unresolved_below"] == cmp.unresolved_below and d["matched_pairs"] == T * STABLE.size
