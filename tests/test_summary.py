"""The one-screen spectral summary: counts and quantiles recovered from known spectra."""
from __future__ import annotations

import numpy as np

from sweep.cli import main
from sweep.summary import layer_summary
from tests.synthetic_store import synthetic_model, write_store


def test_layer_summary_counts_known_spectrum():
    # per token: 3 stable (λ = 1e-3, 1e-2, 1), one exact ζ = 1, one unstable, one ζ = 0
    row = np.array([np.exp(-1e-3), np.exp(-1e-2) * 1j, np.exp(-1.0), 1.0, 1.5, 0.0], np.complex64)
    s = layer_summary(np.tile(row, (4, 1)), "float32")
    assert (s["modes"], s["stable"], s["marginal"], s["unstable"]) == (24, 12, 4, 4)
    np.testing.assert_allclose([s["lam_min"], s["lam_max"]], [1e-3, 1.0], rtol=1e-3)
    assert s["max_abs"] == 1.5


def test_status_spectra_prints_every_layer(tmp_path, capsys):
    m = synthetic_model(rows=2, nseq=1, lmax=16, d=48)
    store = write_store(tmp_path / "s.zarr", [m])
    assert main(["status", str(store), "--spectra"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith(m.name)]
    # two ledger lines and two summary lines, one per stored layer
    assert len(lines) == 4 and "λ median" in out
