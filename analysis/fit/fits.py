"""Infrared exponent β of a rate spectrum: N(<λ) ∝ λ^s over a fixed window, β = s − 1.

Evaluation points (documented choice): N(<λ) is evaluated at the global log-spaced edges
10^(k/20) that lie inside the window (`points="grid"`, default). Each decade then weighs the
same in the least squares, whatever the mode density, and N at an edge is exactly what the
streaming histograms hold, so a fit from `<store>.agg` equals the fit from raw rates bit for
bit (live β = final β). `points="rates"` evaluates N(≤λ_i) = i at every sorted in-window rate
instead (weights dense regions more; kept for comparison with point-wise fits).
Confidence intervals of β: `bootstrap.py` (resampling units: `resampling.py`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis._plot import axes_or_new
from analysis.spectrum.rates import EDGES, cumulative_at_edges, grid_indices
from sweep.format.settings import WINDOW


@dataclass
class IRFit:
    """Least-squares fit of log10 N(<λ) = intercept + s·log10 λ over `window`."""
    s: float
    beta: float
    r2: float
    n_modes: int                 # rates with lo <= λ <= hi
    window: tuple
    intercept: float
    stderr: float                # standard error of s from the regression residuals
    x: np.ndarray = field(repr=False)     # evaluation points λ_k
    n_cum: np.ndarray = field(repr=False)  # N(<λ_k)
    points: str = "grid"
    n_total: int = 0             # all rates given (N(<λ) counts from zero, not from lo)

    def predict(self, lam):
        return 10.0 ** (self.intercept + self.s * np.log10(lam))

    def plot(self, ax=None, label=None, color=None, data=True, ls="-"):
        ax = axes_or_new(ax)
        if data:
            ax.loglog(self.x, self.n_cum, "o", ms=3, color=color, alpha=0.6)
        xx = np.geomspace(*self.window, 50)
        ax.loglog(xx, self.predict(xx), ls, color=color,
                  label=label or f"s={self.s:.3f}, β={self.beta:+.3f}, R²={self.r2:.3f}")
        ax.set_xlabel("relaxation rate λ (per block)")
        ax.set_ylabel("N(<λ)  (modes)")
        ax.legend(fontsize=8)
        return ax


def _regress(logx, logy):
    """Slope, intercept, R², stderr of a straight line through (logx, logy)."""
    n = len(logx)
    if n < 3:
        return np.nan, np.nan, np.nan, np.nan
    s, a = np.polyfit(logx, logy, 1)
    res = logy - (a + s * logx)
    ss_tot = ((logy - logy.mean()) ** 2).sum()
    r2 = 1 - (res ** 2).sum() / ss_tot if ss_tot > 0 else np.nan
    se = np.sqrt((res ** 2).sum() / (n - 2) / ((logx - logx.mean()) ** 2).sum())
    return float(s), float(a), float(r2), float(se)


def positive_sorted(rates):
    r = np.asarray(rates, np.float64).ravel()
    return np.sort(r[np.isfinite(r) & (r > 0)])


def fit_ir_exponent(rates, window=WINDOW, points="grid") -> IRFit:
    """β of the cumulative count of positive `rates` over `window` (see module docstring)."""
    r = positive_sorted(rates)
    lo, hi = window
    n_modes = int(np.searchsorted(r, hi, "right") - np.searchsorted(r, lo, "left"))
    if points == "grid":
        x = EDGES[grid_indices(window)]
        n_cum = np.searchsorted(r, x, "left").astype(np.float64)
    elif points == "rates":
        i0, i1 = np.searchsorted(r, lo, "left"), np.searchsorted(r, hi, "right")
        x, n_cum = r[i0:i1], np.arange(i0 + 1, i1 + 1, dtype=np.float64)
    else:
        raise ValueError(f"points must be 'grid' or 'rates', not {points!r}")
    return _fit_points(x, n_cum, window, n_modes, points, len(r))


def fit_ir_from_hist(hist, window=WINDOW) -> IRFit:
    """The grid fit from a global-bin histogram: identical to `fit_ir_exponent` on the raw
    rates. n_modes here counts the modes between the first and last grid edge of the window."""
    idx = grid_indices(window)
    cum = cumulative_at_edges(hist)
    n_modes = int(cum[idx[-1]] - cum[idx[0]]) if len(idx) else 0
    return _fit_points(EDGES[idx], cum[idx].astype(np.float64), window, n_modes, "grid",
                       int(np.asarray(hist).sum()))


def _fit_points(x, n_cum, window, n_modes, points, n_total):
    """The line through log N(<λ_k); nothing is fitted (NaN) when the window holds no mode:
    N is flat there, and its slope 0 would read as β = −1."""
    ok = n_cum > 0
    s, a, r2, se = (_regress(np.log10(x[ok]), np.log10(n_cum[ok])) if n_modes > 0
                    else (np.nan,) * 4)
    return IRFit(s=s, beta=s - 1, r2=r2, n_modes=n_modes, window=tuple(window), intercept=a,
                 stderr=se, x=x, n_cum=n_cum, points=points, n_total=n_total)


# ----------------------------------------------------------------------------- MLE
# The bounded power law p(λ) ∝ λ^β on [lo, hi], written in u = ln(λ/lo) ∈ [0, w], w = ln(hi/lo):
# p(u) ∝ e^{s u}, s = β + 1. Its likelihood depends on the data only through n and the mean
# of u, and E_s[u] rises monotonically with s, so the MLE is the root of E_s[u] = mean u:
# one number per data set, solved for many data sets at once (bootstrap replicates, the
# Monte-Carlo sets of analysis/fit/gof.py) by bisection.
S_BOUNDS = (-40.0, 40.0)     # s searched in S_BOUNDS / w: far beyond any exponent a window resolves


def mean_u(s, w):
    """E[u] of p(u) ∝ e^{s u} on [0, w] (array s)."""
    s = np.asarray(s, np.float64)
    x = s * w
    small = np.abs(x) < 1e-6
    xs = np.where(small, 1.0, x)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        big = np.where(x > 0, w / -np.expm1(-xs), w * np.exp(xs) / np.expm1(xs)) - w / xs
    return np.where(small, w / 2 + x * w / 12, big)


def var_u(s, w):
    """Var[u] of p(u) ∝ e^{s u} on [0, w]: the Fisher information per mode, dE[u]/ds."""
    x = np.asarray(s, np.float64) * w
    small = np.abs(x) < 1e-3
    xs = np.where(small, 1.0, x)
    with np.errstate(over="ignore"):
        big = w * w * (1 / xs ** 2 - 1 / (4 * np.sinh(xs / 2) ** 2))
    return np.where(small, w * w * (1 / 12 - x * x / 240), big)


def cdf_u(u, s, w):
    """F(u) of p(u) ∝ e^{s u} on [0, w]; for s > 0 written about u = w (no overflow)."""
    u = np.asarray(u, np.float64)
    x = s * w
    if abs(x) < 1e-9:
        return u / w
    if x > 0:
        return (np.exp(s * (u - w)) - np.exp(-x)) / -np.expm1(-x)
    return np.expm1(s * u) / np.expm1(x)


def inverse_cdf_u(q, s, w):
    """u with F(u) = q (q in [0, 1])."""
    q = np.asarray(q, np.float64)
    x = s * w
    if abs(x) < 1e-9:
        return q * w
    if x > 0:
        return w + np.log(q + (1 - q) * np.exp(-x)) / s
    return np.log1p(q * np.expm1(x)) / s


def solve_s(mean, w, iters=64):
    """s with E_s[u] = mean, elementwise (bisection; NaN where mean is NaN)."""
    m = np.asarray(mean, np.float64)
    lo = np.full(m.shape, S_BOUNDS[0] / w)
    hi = np.full(m.shape, S_BOUNDS[1] / w)
    for _ in range(iters):
        mid = (lo + hi) / 2
        up = mean_u(mid, w) < m
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    return np.where(np.isfinite(m), (lo + hi) / 2, np.nan)


@dataclass
class MLEFit:
    """Maximum likelihood β of the bounded power law p(λ) ∝ λ^β on [lo, hi]."""
    beta: float
    se: float                    # from the Fisher information: modes taken as independent
    n_modes: int
    window: tuple
    loglik: float
    rates: np.ndarray = field(repr=False)

    def plot(self, ax=None):
        ax = axes_or_new(ax)
        lo, hi = self.window
        edges = np.geomspace(lo, hi, 25)
        c, _ = np.histogram(self.rates, edges)
        ax.loglog(np.sqrt(edges[1:] * edges[:-1]), c / np.diff(edges) / max(self.n_modes, 1), "o",
                  label="in-window rates")
        xx = np.geomspace(lo, hi, 50)
        ax.loglog(xx, np.exp(_log_pdf(xx, self.beta, lo, hi)), "-",
                  label=f"MLE β={self.beta:+.3f}±{self.se:.3f}")
        ax.set_xlabel("relaxation rate λ (per block)")
        ax.set_ylabel("p(λ) in window")
        ax.legend(fontsize=8)
        return ax


def _log_norm(beta, lo, hi):
    b1 = beta + 1
    if abs(b1) < 1e-9:
        return -np.log(np.log(hi / lo))
    # log((b+1) / (hi^(b+1) − lo^(b+1))), written stably for either sign of b+1
    return np.log(abs(b1)) - b1 * np.log(hi) - np.log(abs(1 - (lo / hi) ** b1))


def _log_pdf(lam, beta, lo, hi):
    return _log_norm(beta, lo, hi) + beta * np.log(lam)


def in_window(rates, window) -> np.ndarray:
    """The positive finite rates with lo <= λ <= hi, sorted."""
    r = positive_sorted(rates)
    return r[np.searchsorted(r, window[0], "left"):np.searchsorted(r, window[1], "right")]


def mle_ir_exponent(rates, window=WINDOW) -> MLEFit:
    """β of the density inside the window: binning-free, blind to modes outside it.
    Fewer than 2 modes in the window: β and se NaN."""
    lo, hi = window
    r = in_window(rates, window)
    n, w = len(r), np.log(hi / lo)
    if n < 2:
        return MLEFit(np.nan, np.nan, n, tuple(window), np.nan, r)
    s = float(solve_s(np.log(r / lo).mean(), w))
    beta = s - 1
    return MLEFit(beta=beta, se=float(1 / np.sqrt(n * var_u(s, w))), n_modes=n,
                  window=tuple(window), loglik=float(n * _log_norm(beta, lo, hi)
                                                     + beta * np.log(r).sum()), rates=r)
