"""The measured laws of one layer with their CIs, for `tdos analyze` (report.py calls this).

- self-averaging of the band weights (slope vs −1) and the deep-IR resolution (slope vs
  −1/(1+β), β's CI from Table I's bootstrap): selfavg.py, every done token of the layer;
- the memory kernel's long-time exponent (vs 1+β): kernel.py, tokens t < L as β's row.

Bands and the kernel's time range follow the settings' window (selfavg.window_bands,
kernel.t_range).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis._plot import axes_or_new
from analysis.fit.kernel import KernelExponent, kernel_exponent, t_range
from analysis.laws.selfavg import (IRResolution, SelfAveraging, ir_resolution, self_averaging,
                                   window_bands)


@dataclass(frozen=True)
class MeasuredLaws:
    layer: int
    L: int
    beta: float
    beta_ci: tuple
    beta_unit: str             # what β's bootstrap resampled
    self_averaging: SelfAveraging
    resolution: IRResolution
    kernel: KernelExponent

    def plot(self, ax=None):
        """Forest plot: each law's fitted slope with its CI (dots, bars) beside its predicted
        slope or interval (grey band)."""
        ax = axes_or_new(ax)
        rows = [(f"var {b.split()[0]} {b.split()[1]}", f.slope, f.lo, f.hi, f.expected_lo, f.expected_hi)
                for b, f in self.self_averaging.fits.items()]
        rows += [(f"λ_({k})", f.slope, f.lo, f.hi, f.expected_lo, f.expected_hi)
                 for k, f in self.resolution.fits.items()]
        kr = self.kernel
        rows.append(("−K exponent", -kr.exponent, -kr.hi, -kr.lo, -kr.expected_hi, -kr.expected_lo))
        for i, (name, s, lo, hi, elo, ehi) in enumerate(rows):
            ax.fill_betweenx([i - 0.3, i + 0.3], elo - 0.005, ehi + 0.005, color="0.8")
            ax.errorbar([s], [i], xerr=[[s - lo], [hi - s]], fmt="o", color="C0", capsize=3)
        ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
        ax.set_xlabel(f"slope ({self.self_averaging.fits and next(iter(self.self_averaging.fits.values())).level:.0%} CI) vs prediction (grey)")
        ax.set_title(f"measured laws, layer {self.layer}", fontsize=9)
        return ax

    def to_dict(self) -> dict:
        return {"layer": self.layer, "L": self.L, "beta": self.beta, "beta_ci": list(self.beta_ci),
                "beta_ci_unit": self.beta_unit,
                "self_averaging": {"T": self.self_averaging.T.tolist(),
                                   "n_windows": self.self_averaging.n_windows.tolist(),
                                   "fits": {b: f.to_dict() for b, f in self.self_averaging.fits.items()}},
                "ir_resolution": {"d": self.resolution.d,
                                  "fits": {str(k): f.to_dict() for k, f in self.resolution.fits.items()}},
                "memory_kernel": self.kernel.to_dict()}


def measured_laws(st, agg, layer, L, row, settings) -> MeasuredLaws | None:
    """`row`: the Table I row (IRRow) at (layer, L) whose β and CI the laws are compared with;
    None when that β was not fitted (no mode in the window). Every band, time range and
    interval follows `settings` (the aggregate already skips its positions)."""
    modes = settings.modes
    beta, ci = row.get("beta", modes), (row.get("ci_lo", modes), row.get("ci_hi", modes))
    if not np.isfinite(beta):
        return None
    kw = dict(level=settings.level, modes=modes)
    sa = self_averaging(agg, layer, bands=window_bands(settings.window), **kw)
    res = ir_resolution(agg, layer, st.d_model, beta, ci, **kw)
    ker = kernel_exponent(agg, layer, L, beta, ci, t_range=t_range(settings.window),
                          n_boot=settings.n_boot, seed=settings.seed, **kw)
    return MeasuredLaws(int(layer), int(L), float(beta), tuple(ci), str(row.get("ci_unit", modes)),
                        sa, res, ker)
