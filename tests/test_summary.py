"""The one-screen spectral summary: counts out of all modes, and the store's primary β
(the report's number), checked against the store's eigenvalues counted directly."""
from __future__ import annotations

import numpy as np

from analysis.fit.fits import WINDOW, mle_ir_exponent
from analysis.views.summary import format_summary, summary_rows
from sweep.cli import main
from sweep.format.settings import Settings
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


def test_summary_rows_count_of_all_modes_and_give_the_primary_beta(tmp_path):
    m = _with_symmetry_mode(synthetic_model(rows=2, nseq=2, lmax=32, d=48, seed=11))
    store = write_store(tmp_path / "s.zarr", [m])
    settings = Settings(n_boot=50)
    rows = summary_rows(store, settings)
    assert [r["layer"] for r in rows] == m.layers
    text = format_summary(rows, settings)
    for i, r in enumerate(rows):
        z = m.eigenvalues[i].reshape(-1, m.shape[-1]).astype(np.complex128)   # every token
        mod = np.abs(z)
        lam_all = -np.log(mod[(mod > 0) & (mod < 1)])                     # the paper's count
        assert r["stable_all_stable"] == lam_all.size
        assert r["scale"] == 2 * 32 and r["stable_symmetry_removed"] == lam_all.size - 2 * 32
        np.testing.assert_allclose(r["lam_min"], lam_all.min(), rtol=1e-9)    # |ζ| to an ulp
        # the store's primary (tdos' for a store that is not the paper's): the in-window MLE of
        # the symmetry-removed count; the removed mode sits at 3e-6, below the window
        h = r["primary"]
        assert h.name == "mle:symmetry-removed" and h.L == 32 and h.n_boot == 50
        np.testing.assert_allclose(h.beta, mle_ir_exponent(lam_all, WINDOW).beta, rtol=1e-12)
        assert h.ci[0] < h.beta < h.ci[1] and h.n_modes == ((lam_all >= 1e-4) & (lam_all <= 5e-2)).sum()
        # totals: |ζ| ≥ 1 of all modes (tokens × d), with its share
        unstable, total = int((mod >= 1).sum()), z.size
        assert (r["unstable"], r["modes"], r["tokens"]) == (unstable, total, 2 * 32)
        assert f"{unstable} of {total} ({unstable / total:.0%})" in text
        assert f"{h.beta:+.3f} [{h.ci[0]:+.3f},{h.ci[1]:+.3f}]" in text
    assert "β mle:symmetry-removed [90% CI]" in text.splitlines()[0]
    assert "β all-stable" not in text                 # other estimators are the report's diagnostics


def test_status_spectra_prints_every_layer_and_one_meaning_of_tokens(tmp_path, capsys):
    m = synthetic_model(rows=2, nseq=1, lmax=16, d=48)
    store = write_store(tmp_path / "s.zarr", [m])
    assert main(["status", str(store), "--spectra"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith(m.name)]
    # two ledger lines and two summary lines, one per stored layer
    assert len(lines) == 4 and "β mle:symmetry-removed" in out
    heads = [ln.split() for ln in out.splitlines() if ln.startswith("model ")]
    assert heads[0][5] == "L" and sum("tokens" in h for h in heads) == 1
