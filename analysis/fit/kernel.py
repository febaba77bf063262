"""Long-time exponent of the memory kernel K(t) = ⟨e^{−λt}⟩, with a bootstrap CI.

For ρ(λ) ∝ λ^β at small λ, K(t) ~ t^{−(1+β)} once t is long against the rates that matter,
so the slope of ln K on ln t over the times that mirror the fit window [lo, hi], t from 1/hi
to 1/lo blocks (20 … 1e4 for the paper's window), measures 1+β independently of the N(<λ)
fit; `t_range(window)` is that range for any window. K is read from per-token
histograms with the same within-bin (log-uniform) density as `memory_kernel_from_hist`, so a
replicate's K is a ratio of per-token sums and the resampling plan of `resampling.py` (whole
sequences, circular blocks of k tokens) gives its CI, exactly as for β.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import exp1

from analysis._plot import axes_or_new
from analysis.fit.fits import WINDOW
from analysis.fit.resampling import (Resampling, group_by_sequence, log_slope_influence,
                                     resampling_for)
from analysis.spectrum.rates import EDGES, N_COLS


def t_range(window=WINDOW) -> tuple:
    """The times that mirror the rate window: (1/hi, 1/lo) blocks."""
    return (1 / window[1], 1 / window[0])


T_RANGE = t_range(WINDOW)     # 20 … 1e4 blocks


def bin_kernels(t) -> np.ndarray:
    """(n_t, N_COLS) ⟨e^{−λt}⟩ of one mode in each histogram column: log-uniform inside a
    bin, 1 below the first edge, 0 at or above the last (as memory_kernel_from_hist)."""
    t = np.asarray(t, np.float64)[:, None]
    a, b = EDGES[:-1], EDGES[1:]
    inner = (exp1(a * t) - exp1(b * t)) / np.log(b / a)                  # (n_t, N_BINS)
    return np.hstack([np.ones((len(t), 1)), inner, np.zeros((len(t), 1))])


@dataclass
class KernelExponent:
    """Slope of ln K(t) on ln t over `t_range`: K ~ t^−exponent, compared with 1+β."""
    exponent: float            # −slope
    lo: float                  # CI of the exponent
    hi: float
    level: float
    n_boot: int
    unit: str                  # what the bootstrap resampled
    rule: str
    expected: float            # 1+β from the N(<λ) fit
    expected_lo: float
    expected_hi: float
    t_range: tuple
    n_modes: int               # modes in K's normalisation (all columns)
    t: np.ndarray = field(repr=False)
    K: np.ndarray = field(repr=False)
    exponents: np.ndarray = field(repr=False)     # (n_boot,) replicate exponents
    resampling: Resampling = field(repr=False, default=None)

    NOT_A_CHECK = ("not a check: K(t) is the Laplace transform of the same rates whose N(<λ) "
                   "gave β, so it agrees with 1+β by construction (docs/analysis.md, \"Memory kernel\")")

    @property
    def method(self) -> str:
        return (f"least-squares slope of ln K on ln t at {len(self.t)} log-spaced t in "
                f"[{self.t_range[0]:g}, {self.t_range[1]:g}] blocks; {self.level:.0%} CI, "
                f"{self.n_boot} replicates, {self.unit} ({self.rule})")

    def describe(self) -> str:
        return (f"K(t) ~ t^-{self.exponent:.3f} [{self.lo:.3f}, {self.hi:.3f}] "
                f"({self.level:.0%} CI, {self.unit}); 1+β = {self.expected:.3f} "
                f"[{self.expected_lo:.3f}, {self.expected_hi:.3f}] ({self.NOT_A_CHECK})")

    def to_dict(self) -> dict:
        return {"exponent": self.exponent, "ci": [self.lo, self.hi], "level": self.level,
                "expected_1_plus_beta": self.expected, "expected_ci": [self.expected_lo, self.expected_hi],
                "check": self.NOT_A_CHECK, "t_range": list(self.t_range), "unit": self.unit,
                "n_boot": self.n_boot, "n_modes": self.n_modes, "method": self.method}

    def plot(self, ax=None, color="C0"):
        ax = axes_or_new(ax)
        ax.loglog(self.t, self.K, "o", ms=3, color=color, label="K(t) (binned)")
        t0 = np.sqrt(self.t[0] * self.t[-1])
        k0 = np.exp(np.interp(np.log(t0), np.log(self.t), np.log(self.K)))
        ax.loglog(self.t, k0 * (self.t / t0) ** -self.exponent, "-", color=color,
                  label=f"fit: t^-{self.exponent:.3f} [{self.lo:.3f}, {self.hi:.3f}]")
        ax.loglog(self.t, k0 * (self.t / t0) ** -self.expected, "k--", lw=0.8,
                  label=f"t^-(1+β), 1+β = {self.expected:.3f}")
        ax.set_xlabel("t (blocks)")
        ax.set_ylabel("K(t)")
        ax.legend(fontsize=7)
        return ax


def kernel_exponent_from_hists(token_hists, seq=None, beta=np.nan, beta_ci=None, t_range=T_RANGE,
                               n_t=30, n_boot=500, level=0.9, seed=0, unit="auto",
                               block_length=None) -> KernelExponent:
    """token_hists (N, N_COLS) per-token histograms in token order, seq (N,) their sequences."""
    h = np.asarray(token_hists, np.float64).reshape(-1, N_COLS)
    order, s = group_by_sequence(seq, len(h))
    h = h[order]
    t = np.geomspace(*t_range, n_t)
    num = h @ bin_kernels(t).T                                          # (N, n_t) Σ_modes e^{−λt}
    vals = np.hstack([num, h.sum(1, keepdims=True)])                    # last column: modes
    logt = np.log(t)
    plan = resampling_for(log_slope_influence(num, logt), s, unit, block_length)
    tot = vals.sum(0)
    K = tot[:-1] / max(tot[-1], 1)
    point = -_slope(logt, np.log(K))
    reps = plan.replicate_sums(vals, n_boot, seed)                      # (n_boot, n_t + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        exps = -_slope(logt, np.log(reps[:, :-1] / reps[:, -1:]))
    lo, hi = plan.interval(point, exps, level)
    elo, ehi = sorted(1 + np.asarray(beta_ci)) if beta_ci is not None else (1 + beta, 1 + beta)
    return KernelExponent(float(point), lo, hi, level, len(reps), plan.unit, plan.rule, float(1 + beta),
                          float(elo), float(ehi), tuple(t_range), int(tot[-1]), t, K, exps, plan)


def kernel_exponent(agg, layer, L=None, beta=np.nan, beta_ci=None, modes=None, **kw) -> KernelExponent:
    """From the aggregate: done tokens t < L of every sequence, in token order (positions the
    aggregate skips are not done); `t_range` in kw (default: the paper window's)."""
    done = agg.token_done(layer)[:, :L]                                 # (seq, L)
    h = agg.token_hist(layer, **({"modes": modes} if modes else {}))[:, :L][done]
    return kernel_exponent_from_hists(h, np.nonzero(done)[0], beta, beta_ci, **kw)


def _slope(x, y):
    """Least-squares slope(s) of y (…, n) on x (n,)."""
    dx = x - x.mean()
    return ((y - y.mean(-1, keepdims=True)) * dx).sum(-1) / (dx * dx).sum()

