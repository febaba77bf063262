"""fp32 against fp64 on blocks whose eigenvalues are known: Hungarian matching token by
token, the relative error of λ, the rate below which fp32 is not resolved, Δβ per L."""
from __future__ import annotations

import numpy as np
import pytest
from synthetic_store import SyntheticModel, write_store

from analysis import open_store
from analysis.fit.fits import fit_ir_exponent
from analysis.io.aggregate import aggregate
from analysis.spectrum.observables import block_classes
from analysis.studies.precision import (RESOLVED_MAX, compare_precision, match_tokens,
                                        measured_floors, precision_pairs)
from analysis.spectrum.rates import FP64_ONLY
from analysis.studies.tables import beta_vs_length, ir_row
from sweep.format.settings import Settings

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
        ev = np.broadcast_to(z, (len(layers), 1) + z.shape).copy()          # (rows, 1, T, D)
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


def test_fp32_all_stable_counts_only_resolved_modes_and_says_how_many(tmp_path, spectra):
    """The fp32 model's all-stable count leaves out the modes below its resolution floor and
    says so; β is then the fit of the rates at or above it (the oracle: the store's raw rates
    filtered by hand). The floor its fp64 twin measured (10^-7.5) is found; a floor of 5e-5
    (a bin edge: 10^-4.3) leaves out the 3e-5 mode of every token. Without a twin the floor
    is the dtype table's, labelled fp64-only; fp64 counts everything."""
    z64, z32 = spectra
    path = _store(tmp_path / "p.zarr", z64, z32)
    stores = {n: open_store(path, n) for n in ("m32", "m64")}
    floors = measured_floors(stores)
    assert list(floors) == ["m32"] and floors["m32"][4][0] == pytest.approx(10 ** -7.5)
    assert "measured against its fp64 twin 'm64' at layer 4" in floors["m32"][4][1]
    s = Settings(n_boot=20, window=(1e-4, 0.5))
    agg = aggregate(path, progress=None)
    row = ir_row(stores["m32"], agg.model("m32"), 4, T, s, measured=(5e-5, "by hand"))[0]
    x = row.by_mode["all-stable"]
    rates = block_classes(stores["m32"], 4, T)["all-stable"].stable
    kept = rates[rates >= 10 ** -4.3]
    assert x.floor == pytest.approx(10 ** -4.3) and x.n_unresolved == rates.size - kept.size >= T
    assert x.beta == fit_ir_exponent(kept, s.window).beta != fit_ir_exponent(rates, s.window).beta
    assert "by hand" in x.floor_source and row.by_mode["symmetry-removed"].floor_source == ""
    bare = ir_row(stores["m32"], agg.model("m32"), 4, T, s)[0].by_mode["all-stable"]
    assert FP64_ONLY in bare.floor_source and bare.floor == pytest.approx(1e-9)
    ref = ir_row(stores["m64"], agg.model("m64"), 4, T, s)[0].by_mode["all-stable"]
    assert ref.floor == 0 and ref.n_unresolved == 0 and ref.floor_source == ""
    table = beta_vs_length(stores["m32"], agg.model("m32"), 4, [T], s, measured=(5e-5, "by hand"))
    assert f"{T}: {x.n_unresolved:,}." in table.to_markdown()


def test_every_shared_layer_gets_its_own_measured_floor(tmp_path, spectra):
    """A twin sharing layers 2 and 4 measures the floor at both, not only at the pair's
    representative layer: no shared layer falls back to the dtype table's fp64-only floor."""
    z64, z32 = spectra
    path = _store(tmp_path / "two.zarr", z64, z32, layers=(2, 4))
    stores = {n: open_store(path, n) for n in ("m32", "m64")}
    assert precision_pairs(stores) == [("m64", "m32", 4)]
    floors = measured_floors(stores)["m32"]
    assert sorted(floors) == [2, 4]
    for layer, (lam, how) in floors.items():
        assert lam == pytest.approx(10 ** -7.5) and f"at layer {layer}" in how
