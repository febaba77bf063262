"""The one-screen spectral summary: counts, both β with CIs and their difference, checked
against the store's eigenvalues counted directly."""
from __future__ import annotations

import numpy as np

from analysis.fit.fits import fit_ir_exponent
from analysis.views.summary import format_summary, summary_rows
from sweep.cli import main
from tests.synthetic_store import synthetic_model, write_store


def _with_symmetry_mode(m, lam=3e-6):
    """m whose ζ ≈ 1 of every token becomes a stable ζ = 1 − lam along h_t (r_t = 1e-6)."""
    ev = m.eigenvalues.copy()                                             # (rows, seq, L, d)
    near = np.argmin(np.abs(ev - 1), axis=-1)[..., None]
    np.put_along_axis(ev, near, np.complex64(1 - lam), axis=-1)
    m.eigenvalues = ev
    m.scale_rayleigh = np.full(m.shape[:3], 1 - lam, np.float32)
    m.scale_residual = np.full(m.shape[:3], 1e-6, np.float32)
    return m


def test_summary_rows_give_both_counts_and_betas(tmp_path):
    m = _with_symmetry_mode(synthetic_model(rows=2, nseq=2, lmax=32, d=48, seed=11))
    store = write_store(tmp_path / "s.zarr", [m])
    rows = summary_rows(store, n_boot=50)
    assert [r["layer"] for r in rows] == m.layers
    for i, r in enumerate(rows):
        z = m.eigenvalues[i].reshape(-1, m.shape[-1]).astype(np.complex128)   # every token
        mod = np.abs(z)
        lam_all = -np.log(mod[(mod > 0) & (mod < 1)])                     # the paper's count
        assert r["stable_all_stable"] == lam_all.size
        assert r["scale"] == 2 * 32 and r["stable_symmetry_removed"] == lam_all.size - 2 * 32
        np.testing.assert_allclose(r["beta_all_stable"], fit_ir_exponent(lam_all).beta, rtol=1e-12)
        assert r["ci_lo_all_stable"] < r["beta_all_stable"] < r["ci_hi_all_stable"]
        assert r["delta_beta"] == r["beta_all_stable"] - r["beta_symmetry_removed"]
        assert r["delta_beta"] < -0.05          # 64 stable modes below the window lower β
        np.testing.assert_allclose(r["lam_min"], lam_all.min(), rtol=1e-9)    # |ζ| to an ulp
    text = format_summary(rows)
    assert "β all-stable [CI]" in text and "β symmetry-removed [CI]" in text and "Δβ" in text


def test_status_spectra_prints_every_layer(tmp_path, capsys):
    m = synthetic_model(rows=2, nseq=1, lmax=16, d=48)
    store = write_store(tmp_path / "s.zarr", [m])
    assert main(["status", str(store), "--spectra"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith(m.name)]
    # two ledger lines and two summary lines, one per stored layer
    assert len(lines) == 4 and "β all-stable" in out
