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
from sweep.format.settings import MODES


@dataclass
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


def laws_markdown(laws: dict) -> list:
    """report.md lines from `MeasuredLaws.to_dict()` (as stored in fits.json)."""
    if not laws:
        return []
    fits = list(laws["self_averaging"]["fits"].values()) + list(laws["ir_resolution"]["fits"].values())
    sa = fits[0] if fits else {"method": "", "level": 0.9}
    return ([f"### Measured laws (layer {laws['layer']}, App. B and K(t))", ""]
            + [f"- {x}" for x in law_lines(laws)]
            + ["", f"Methods ({sa['level']:.0%} CIs). Band-weight variance and deep-IR resolution: "
               f"{sa['method']}; the jackknife leaves out one chunk of consecutive tokens at a time "
               f"(Student's t, chunks − 1 degrees of freedom). Memory kernel: "
               f"{laws['memory_kernel']['method']}.", ""])


def law_lines(laws: dict) -> list:
    """One line per measured law (β, self-averaging, deep-IR resolution, K(t)) with its CI."""
    ci = laws["beta_ci"]
    md = [f"β = {laws['beta']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] at L = {laws['L']} "
          f"(bootstrap resampling {laws['beta_ci_unit']})"]
    for f in (list(laws["self_averaging"]["fits"].values())
              + list(laws["ir_resolution"]["fits"].values())):
        e = f["expected_ci"]
        pred = (f"{f['expected']:+.3f}" if e[0] == e[1] else
                f"{f['expected']:+.3f} [{e[0]:+.3f}, {e[1]:+.3f}] (from β's CI)")
        md.append(f"{f['name']} vs {f['x']}: slope {f['slope']:+.3f} [{f['ci'][0]:+.3f}, "
                  f"{f['ci'][1]:+.3f}], χ²/dof {f['chi2_red']:.2f}, {f['n_points']} points; "
                  f"predicted {pred}: {_agreement(f)}")
    k = laws["memory_kernel"]
    md.append(f"memory kernel K(t) ~ t^−a over t ∈ [{k['t_range'][0]:g}, {k['t_range'][1]:g}] "
              f"blocks: a = {k['exponent']:.3f} [{k['ci'][0]:.3f}, {k['ci'][1]:.3f}]; 1+β = "
              f"{k['expected_1_plus_beta']:.3f} [{k['expected_ci'][0]:.3f}, {k['expected_ci'][1]:.3f}] "
              f"({k['check']})")
    return md


def _agreement(f) -> str:
    """The band-variance slope's −1 is a law of independent tokens, data-free: a check. The
    deep-IR resolution's −1/(1+β) takes β from the same modes' N(<λ) (which counts the
    deepest rates too): overlap is expected, so it is labelled as such, not as a check."""
    word = "consistent" if f["consistent"] else "not consistent"
    if f["name"].startswith("λ_("):
        return f"{'overlaps' if f['consistent'] else 'does not overlap'} (β from the same modes: not an independent check)"
    return word


def table_note(table, n_seqs) -> str:
    """Table I's honesty line: nested rows, and what each CI resampled."""
    units = sorted({r.get("ci_unit", m) for r in table.rows for m in MODES})
    ks = sorted({int(u.split()[3]) for u in units if u.startswith("circular blocks of ")})
    if len(ks) > 1 and len(ks) == len(units):       # one block length per row: give the range
        units = [f"circular blocks of k = {ks[0]}…{ks[-1]} tokens (k by row and mode count: columns ci_unit_*)"]
    seqs = (f"{n_seqs} sequences; blocks are drawn from all of them, so each CI carries the "
            "variation between sequences" if n_seqs > 1 else
            "one sequence, so the CIs cannot carry variation between sequences")
    return (f"Rows are nested prefixes: row L holds tokens t < L of the same {seqs.split(';')[0]}, "
            f"so every row contains the rows above it and their errors are correlated; they are "
            f"not independent measurements. CIs: {table.level:.0%} percentile bootstrap, "
            f"resampling {', '.join(units)} ({seqs}).")
