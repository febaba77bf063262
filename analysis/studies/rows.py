"""One mode count at one Table I row: every number of a `ModeRow` (analysis/studies/tables.py)
from the per-token rates and the aggregate's per-token histograms, under one `Settings`.
The one computation behind a Table I cell, the primary β (analysis/studies/primary.py) and
the null comparisons' cumulative β."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fit.alternatives import compare_alternatives
from analysis.fit.bootstrap import bootstrap_ir_from_hists
from analysis.fit.fits import fit_ir_exponent, mle_ir_exponent
from analysis.fit.gof import power_law_gof
from analysis.fit.window import bootstrap_mle, edge_exponents, infrared_window, window_density
from analysis.spectrum.observables import token_rate_rows
from analysis.spectrum.rates import N_COLS, floor_edge, resolution_floor


@dataclass(frozen=True)
class ModeRow:
    """One mode count at one Table I row: both β estimators with their CIs, and how well a
    power law describes the in-window rates."""
    beta: float                      # cumulative fit (the paper's estimator)
    ci_lo: float
    ci_hi: float
    r2: float
    n_modes: int                     # rates inside the window
    s: float                         # N(<λ) ∝ λ^s
    ci_unit: str                     # what its bootstrap resampled (BootstrapIR.unit)
    mle_beta: float                  # in-window MLE: the density exponent inside the window
    mle_se: float                    # Fisher se (modes taken as independent)
    mle_ci_lo: float                 # CI resampling the same units as β's
    mle_ci_hi: float
    n_below: int                     # stable modes below the window (they move `beta`, not `mle_beta`)
    ks: float                        # KS distance to the fitted bounded power law
    gof_p: float                     # its Monte-Carlo p
    local_beta_low: float            # MLE in the window's lowest decade
    local_beta_high: float           # MLE in its highest decade
    density: float = np.nan          # stable modes per token in the window (window.window_density)
    density_lo: float = np.nan       # its CI, resampling the same units
    density_hi: float = np.nan
    floor: float = 0.0               # stable modes below this λ not counted (fp32 resolution)
    n_unresolved: int = 0            # how many that left out
    floor_source: str = ""           # where the floor comes from, in words
    R_lognormal: float = np.nan      # normalised log-likelihood ratios (> 0 favours the power law)
    p_lognormal: float = np.nan
    R_exponential: float = np.nan
    p_exponential: float = np.nan
    R_stretched_exponential: float = np.nan
    p_stretched_exponential: float = np.nan
    mle_ci_unit: str = ""            # what the MLE's CI resampled (MLEInterval.unit)

    @property
    def fitted(self) -> bool:
        return self.n_modes > 0 and bool(np.isfinite(self.beta))

    @property
    def estimators_disagree(self) -> bool:
        """The two estimators' CIs do not overlap."""
        return bool(self.fitted and np.isfinite(self.mle_ci_lo)
                    and (self.ci_hi < self.mle_ci_lo or self.mle_ci_hi < self.ci_lo))


def bootstrap_from_agg(agg, layer, L, modes, window, n_boot, level, seed, n_seqs=None, floor=0.0):
    """CI of β under `modes` from the per-token histograms of the done tokens t < L (L None:
    all; positions the aggregate skips are not done) of the first `n_seqs` sequences (None:
    all), each tagged with its sequence so the resampling unit can respect token correlation;
    rates below `floor` (rounded up to a bin edge, `floor_edge`) left out.
    Returns (bootstrap result, (seq, L) done mask)."""
    done = agg.token_done(layer)[:n_seqs, :L]                                # (seq, L)
    units = agg.token_hist(layer, modes=modes)[:n_seqs, :L][done].reshape(-1, N_COLS)
    col = floor_edge(floor)[1]
    if col >= 0:
        units = units.copy()
        units[:, :col + 1] = 0
    seq = np.nonzero(done)[0]                                                # (units,)
    return bootstrap_ir_from_hists(units, window, n_boot=n_boot, level=level, seed=seed,
                                   seq=seq), done


def mode_row(rates_2d, seq, boot, settings, floor=(0.0, "")) -> ModeRow:
    """Every per-count number of one row from per-token rates (N, d) and β's bootstrap; rates
    below floor[0] (rounded up to a bin edge) left out and counted, floor[1] saying why."""
    w = settings.window
    lam_f = floor_edge(floor[0])[0]
    with np.errstate(invalid="ignore"):
        low = np.isfinite(rates_2d) & (rates_2d < lam_f)
    rates_2d = np.where(low, np.nan, rates_2d)
    flat = rates_2d[np.isfinite(rates_2d)]
    fit = fit_ir_exponent(flat, w)           # = boot.fit's β bit for bit; n_modes exact in [lo, hi]
    mle = bootstrap_mle(rates_2d, seq, w, settings.n_boot, settings.level, settings.seed)
    gof = power_law_gof(flat, w, n_sims=settings.n_boot, seed=settings.seed)
    alts = {f"{x}_{name}": getattr(a, x) for name, a in compare_alternatives(flat, w).items()
            for x in ("R", "p")}
    lb, hb = edge_exponents(flat, w)
    dens = window_density(rates_2d, seq, w, settings.n_boot, settings.level, settings.seed)
    return ModeRow(beta=fit.beta, ci_lo=boot.lo, ci_hi=boot.hi, r2=fit.r2, n_modes=fit.n_modes,
                   s=fit.s, ci_unit=boot.unit, mle_beta=mle.beta,
                   mle_se=mle_ir_exponent(flat, w).se, mle_ci_lo=mle.lo, mle_ci_hi=mle.hi,
                   n_below=mle.n_below, ks=gof.ks, gof_p=gof.p_value, local_beta_low=lb,
                   local_beta_high=hb, mle_ci_unit=mle.unit, density=dens.value,
                   density_lo=dens.lo, density_hi=dens.hi, floor=lam_f,
                   n_unresolved=int(low.sum()), floor_source=floor[1], **alts)


def count_row(store, agg, layer, L, modes, settings, rows=None, measured=None):
    """One mode count at tokens skip <= t < L of one layer: its ModeRow (both estimators,
    CIs, goodness of fit) and its cumulative IRFit, under `settings`. The one computation
    behind a Table I cell and the primary β (analysis/studies/primary.py); `agg` already
    skips the settings' positions, `rows` is token_rate_rows of (layer, L) when at hand; the
    all-stable count above the store's resolution floor (`resolution_floor`, `measured`: the
    precision study's (λ*, how) at this layer or None).
    Returns (ModeRow, IRFit, (seq, L) done mask)."""
    rows = rows or token_rate_rows(store, layer, L, skip=settings.skip_positions)
    floor = resolution_floor(store.dtype, measured) if modes == "all-stable" else (0.0, "")
    boot, done = bootstrap_from_agg(agg, layer, L, modes, settings.window, settings.n_boot,
                                    settings.level, settings.seed, floor=floor[0])
    return mode_row(*rows[modes], boot, settings, floor), boot.fit, done


def infrared_subwindow(rates_2d, seq, settings) -> dict | None:
    """The in-window MLE β with its CI and the power law's goodness of fit on the infrared
    sub-window (window.infrared_window), from per-token rates (N, d); None without one."""
    w = infrared_window(settings.window)
    if w is None:
        return None
    flat = rates_2d[np.isfinite(rates_2d)]
    mle = bootstrap_mle(rates_2d, seq, w, settings.n_boot, settings.level, settings.seed)
    gof = power_law_gof(flat, w, n_sims=settings.n_boot, seed=settings.seed)
    return {"window": list(w), "estimator": "in-window MLE", "beta": mle.beta,
            "ci": [mle.lo, mle.hi], "unit": mle.unit, "dof": mle.dof, "n_modes": mle.n_modes,
            "gof_p": gof.p_value,
            "power_law_rejected": bool(np.isfinite(gof.p_value) and gof.p_value < 1 - settings.level)}


