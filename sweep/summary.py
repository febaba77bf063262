"""A one-screen spectral summary per (model, layer), read back from the store.

Printed when a sweep completes and by `tdos status --spectra`, so a researcher sees at a
glance what landed: how many modes are stable (0 < |ζ| < 1), how deep the infrared goes,
and how many modes are the norm's scale mode (J h_t ≈ ρ_t h_t) or sit at |ζ| = 1 to
rounding rather than in the physics. The fits, histograms and figures are the analysis
package's job; this is the sanity check.
"""
from __future__ import annotations

import numpy as np
import zarr

from analysis.rates import marginal_threshold, mode_masks
from sweep.store import DONE, SCALE_ARRAYS, SHIFT_ARRAYS, group_ready


def layer_summary(zeta: np.ndarray, dtype: str, rho: np.ndarray | None = None,
                  resid: np.ndarray | None = None) -> dict:
    """zeta (T, d) complex, finite rows only; rho, resid (T,) or (T, 2) (scale, shift) or
    None -> counts and rate
    quantiles of the stable modes. Classes as in the analysis (analysis.rates.mode_masks):
    the norm's scale mode by its eigenvector, |ζ| = 1 up to rounding by value."""
    lam, m = mode_masks(zeta, marginal_threshold(dtype), rho, resid)         # (T, d)
    stable = lam[m["stable"]]
    q = np.quantile(stable, [0.0, 0.5, 1.0]) if stable.size else [np.nan] * 3
    mod = np.abs(zeta.astype(np.complex128))
    return {"modes": int(zeta.size), "stable": int(stable.size), "scale": int(m["scale"].sum()),
            "marginal": int(m["marginal"].sum()), "unstable": int(m["unstable"].sum()),
            "lam_min": float(q[0]), "lam_med": float(q[1]), "lam_max": float(q[2]),
            "max_abs": float(mod.max()) if mod.size else np.nan}


def summary_rows(path: str) -> list[dict]:
    """One row per (model, layer) over the blocks the ledger marks done."""
    root = zarr.open_group(str(path), mode="r")
    rows = []
    for name in root.attrs.get("models", []):
        if not group_ready(root, name):
            continue
        g = root[name]
        dtype = g.attrs["model"]["dtype"]
        ledger = g["ledger"][...]                                               # (R, S, nb)
        for r, layer in enumerate(g["layer"][...]):
            zeta, rho, resid = _done_rows(g, ledger[r], r)
            row = {"model": name, "layer": int(layer), "tokens": zeta.shape[0]}
            row.update(layer_summary(zeta, dtype, rho, resid))
            if "a_log" in g:
                lam_a = np.exp(g["a_log"][int(layer)].astype(np.float64))
                row["lam_A"] = (float(lam_a.min()), float(lam_a.max()))
            rows.append(row)
    return rows


def _done_rows(g: zarr.Group, ledger_row: np.ndarray, r: int):
    """(T, d) eigenvalue rows of every done block of one layer row, all sequences, and
    ρ (T, 2), r (T, 2) beside them, columns scale (h_t) and shift (𝟙/√d); NaN columns for
    a store made before the shift arrays, None before the scale arrays."""
    eig, B = g["eigenvalues"], g["eigenvalues"].chunks[2]
    blocks = list(zip(*np.nonzero(ledger_row == DONE)))
    if not blocks:
        return np.zeros((0, eig.shape[-1]), eig.dtype), None, None
    rows = np.concatenate([eig[r, s, b * B:(b + 1) * B] for s, b in blocks])   # (T, d)
    keep = np.isfinite(rows).all(axis=1)
    if not all(a in g for a in SCALE_ARRAYS):
        return rows[keep], None, None

    def col(a):
        if a not in g:
            return np.full(int(keep.sum()), np.nan)
        return np.concatenate([g[a][r, s, b * B:(b + 1) * B] for s, b in blocks])[keep]

    rho, resid = (np.stack([col(a), col(b)], 1) for a, b in zip(SCALE_ARRAYS, SHIFT_ARRAYS))
    return rows[keep], rho, resid


def format_summary(rows: list[dict]) -> str:
    """The table as text, one line per layer."""
    head = (f"{'model':<20} {'layer':>5} {'tokens':>7} {'stable':>9} {'scale':>6} {'ζ=1':>6} {'|ζ|>1':>6} "
            f"{'λ min':>9} {'λ median':>9} {'λ max':>9} {'max|ζ|':>7}  λ_A range")
    lines = [head]
    for r in rows:
        lam_a = "" if "lam_A" not in r else f"{r['lam_A'][0]:.2g} … {r['lam_A'][1]:.2g}"
        share = r["stable"] / r["modes"] if r["modes"] else 0.0
        lines.append(f"{r['model']:<20} {r['layer']:>5} {r['tokens']:>7} {share:>8.1%} "
                     f"{r['scale']:>6} {r['marginal']:>6} {r['unstable']:>6} {r['lam_min']:>9.2e} {r['lam_med']:>9.2e} "
                     f"{r['lam_max']:>9.2e} {r['max_abs']:>7.3f}  {lam_a}")
    return "\n".join(lines)
