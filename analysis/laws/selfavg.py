"""Self-averaging (paper App. B) as two measured laws, each fitted with a CI (laws.py).
(The fp32-vs-fp64 comparison lives in analysis/studies/precision.py.)

Samples: each sequence is cut into chunks of T_max consecutive tokens (T_max the largest
power of two that leaves at least `MIN_CHUNKS` chunks over all sequences; a sequence's last
tokens short of a chunk are left out), and each chunk into non-overlapping windows of T
tokens, T = 1, 2, 4 … T_max. A window never straddles two sequences.

CIs: every point of a law reuses the same tokens, so the points are correlated and a
least-squares se would be too small. The slope's se comes from a delete-one-chunk jackknife
(each chunk left out in turn, every point recomputed, the slope refitted with the same
weights), its interval from Student's t with (chunks − 1) degrees of freedom. Chunks of
T_max tokens are long against the token correlation, so they are close to independent.

1. Band-weight variance vs T. w = the fraction of a window's stable modes that lie in a λ
   band. Its variance across the n windows is the unbiased sample variance (divisor n − 1,
   about the windows' own mean; the pooled envelope as reference made it low by 1 − 1/n),
   relative to the squared mean. If tokens sample one common spectrum independently, the
   variance falls like 1/T: slope −1. The log of an unbiased variance is itself low by about
   half its own variance, Var ln s² ≈ 2/(n−1) + κ/n (κ the windows' excess kurtosis): that
   half is added back and the same Var weights the fit.
2. Deep-IR resolution vs modes sampled T·d. In each window, the k-th smallest stable rate
   λ_(k) for k in `KS`; the mean of ln λ_(k) over windows (se = sd/√n). For n = T·d modes with
   N(<λ) ∝ λ^(1+β) at the bottom of the spectrum, E ln λ_(k) = (ψ(k) − ln n)/(1+β) + const,
   so the slope is −1/(1+β) for every k; the prediction's interval comes from β's CI.
   λ_(k) is read from the per-token histograms: the bin holding the k-th mode, with the mode
   placed log-uniformly inside it (bins are 1/20 decade; the line spans several decades).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis._plot import axes_or_new
from analysis.laws.laws import fit_law, wls_slope
from analysis.spectrum.rates import EDGES, N_BINS
from sweep.format.settings import DEFAULT_MODES


def window_bands(window) -> dict:
    """The three λ bands of the band-weight law, set by the fit window [lo, hi]: deep IR two
    decades below it, the window itself, and UV from hi up 2000-fold (3.3 decades)."""
    lo, hi = window
    return {f"deep IR {_sci(lo / 100)}–{_sci(lo)}": (lo / 100, lo),
            f"fit window {_sci(lo)}–{_sci(hi)}": (lo, hi),
            f"UV {_sci(hi)}–{_sci(hi * 2000)}": (hi, hi * 2000)}


def _sci(x) -> str:
    """1e-4 → "1e-4", 5e-2 → "5e-2", 100 → "1e2": the band names of the paper's window."""
    m, e = f"{x:.3e}".split("e")
    return f"{m.rstrip('0').rstrip('.')}e{int(e)}"


BANDS = window_bands((1e-4, 5e-2))     # the paper's window: 1e-6–1e-4, 1e-4–5e-2, 5e-2–100
MIN_WINDOWS = 4          # windows needed for a variance (or a mean) at one T
MIN_CHUNKS = 8           # jackknife groups (chunks of T_max tokens)
KS = (1, 2, 4)           # order statistics of the deep-IR resolution


def _band_cols(lo, hi):
    """Histogram columns (1-based bins) whose bins lie inside [lo, hi)."""
    k = np.nonzero((EDGES[:-1] >= lo * (1 - 1e-9)) & (EDGES[1:] <= hi * (1 + 1e-9)))[0]
    return k + 1


def chunked(hists_by_seq):
    """(C, Ts): C (n_chunks, T_max, col) chunks of consecutive tokens within sequences, and
    the pool sizes Ts = 1, 2, … T_max (see module docstring); empty C when too few tokens."""
    T_max = 1
    while sum(len(h) // (2 * T_max) for h in hists_by_seq) >= MIN_CHUNKS:
        T_max *= 2
    C = [h[: len(h) // T_max * T_max].reshape(-1, T_max, h.shape[1]) for h in hists_by_seq]
    C = np.concatenate(C) if C else np.zeros((0, 1, N_BINS + 2))
    Ts = 2 ** np.arange(int(np.log2(T_max)) + 1)
    return (C, Ts) if len(C) >= MIN_CHUNKS else (C[:0], Ts[:0])


def windows(C, T) -> np.ndarray:
    """(n_windows, col): the summed histograms of the T-token windows of chunks C."""
    n, T_max, col = C.shape
    return C.reshape(n * (T_max // T), T, col).sum(1)


def _jackknife_law(C, Ts, stat, x, expected, expected_ci, level, **names):
    """Fit the law y(T) = stat(windows(C, T)) on x; its slope se by delete-one-chunk jackknife.
    stat: windows → (y, var of y)."""
    pts = np.array([stat(windows(C, int(T))) for T in Ts]).reshape(-1, 2)   # (n_T, 2)
    fit = fit_law(x, pts[:, 0], np.sqrt(pts[:, 1]), level, expected, expected_ci, **names)
    ok = np.isfinite(pts).all(1) & (pts[:, 1] > 0)
    if fit.n_points < 3:
        return fit
    w = 1 / pts[ok, 1]
    loo = []
    for i in range(len(C)):
        Ci = np.delete(C, i, axis=0)
        y = np.array([stat(windows(Ci, int(T)))[0] for T in Ts[ok]])
        loo.append(wls_slope(x[ok], y, w)[0] if np.isfinite(y).all() else np.nan)
    loo = np.asarray(loo)
    g = np.isfinite(loo).sum()
    se = np.sqrt((g - 1) / g * np.nansum((loo - np.nanmean(loo)) ** 2)) if g >= 3 else np.nan
    return fit_law(x, pts[:, 0], np.sqrt(pts[:, 1]), level, expected, expected_ci, slope_se=se,
                   dof=max(g - 1, 1), **names)


def _excess_kurtosis(w):
    """Sample excess kurtosis with the small-sample correction (scipy's bias=False, G2)."""
    n, d = len(w), w - w.mean()
    m2, m4 = (d ** 2).mean(), (d ** 4).mean()
    return ((n + 1) * (m4 / m2 ** 2 - 3) + 6) * (n - 1) / ((n - 2) * (n - 3))


def _log_variance(w):
    """(ln of the unbiased variance, corrected for its own bias; its variance) of samples w."""
    n = len(w)
    s2 = w.var(ddof=1)
    if n < MIN_WINDOWS or not s2 > 0:
        return np.nan, np.nan
    kurt = max(_excess_kurtosis(w), -2.0) if n > 3 else 0.0
    v = 2 / (n - 1) + kurt / n
    v = max(v, 2 / (n - 1) - 2 / n + 1e-12)
    return np.log(s2) + v / 2, v


# ----------------------------------------------------------------------------- band variance
@dataclass
class SelfAveraging:
    """Relative band-weight variance vs tokens pooled T, per band, with the fitted slope."""
    T: np.ndarray                          # (n_T,) tokens per window
    n_windows: np.ndarray                  # (n_T,) windows at each T (all sequences)
    rel_var: dict                          # band -> (n_T,) s²/mean², unbiased s²
    fits: dict                             # band -> LawFit (slope vs −1)
    layer: int
    modes: str = DEFAULT_MODES

    def plot(self, ax=None):
        ax = axes_or_new(ax)
        for (band, fit), c in zip(self.fits.items(), ("C0", "C1", "C2", "C3")):
            if fit.n_points:
                fit.plot(ax, color=c, label=f"{band}: {fit.slope:+.2f} [{fit.lo:+.2f}, {fit.hi:+.2f}]")
        ax.plot([], [], "k--", lw=0.8, label="slope −1 through the points' centre")
        ax.set_xlabel("tokens pooled T")
        ax.set_ylabel("relative variance of band weight")
        ax.set_title(f"self-averaging, layer {self.layer} ({self.modes} modes)", fontsize=9)
        ax.legend(fontsize=7)
        return ax


def _band_stat(cols):
    """windows → (ln relative variance of the band weight, its variance), see docstring."""
    def stat(w):
        w = w.astype(np.float64)
        frac = w[:, cols].sum(1) / np.maximum(w[:, 1:N_BINS + 1].sum(1), 1)      # (n_windows,)
        ly, lv = _log_variance(frac)
        m = frac.mean()
        return (ly - 2 * np.log(m), lv) if m > 0 else (np.nan, np.nan)
    return stat


def self_averaging_from_hists(hists_by_seq, bands=None, level=0.9, layer=-1,
                              modes=DEFAULT_MODES) -> SelfAveraging:
    """hists_by_seq: per sequence, (tokens, col) per-token histograms in token order."""
    bands = bands or BANDS
    C, Ts = chunked(hists_by_seq)
    n_win = np.array([len(C) * (C.shape[1] // T) for T in Ts], np.int64)
    rel, fits = {}, {}
    for band, (lo, hi) in bands.items():
        stat = _band_stat(_band_cols(lo, hi))
        rel[band] = np.array([np.exp(stat(windows(C, int(T)))[0]) for T in Ts])
        fits[band] = _jackknife_law(
            C, Ts, stat, np.log(Ts), -1.0, None, level, name=f"band weight var ({band})",
            xlabel="tokens pooled T", method=(
                "unbiased variance (n−1) of the band's share of stable modes over non-overlapping "
                "T-token windows within sequences, relative to the mean², ln-bias corrected; "
                "weighted line in log–log, delete-one-chunk jackknife CI"))
    return SelfAveraging(Ts, n_win, rel, fits, layer, modes)


def self_averaging(agg, layer, bands=None, level=0.9, modes=DEFAULT_MODES) -> SelfAveraging:
    return self_averaging_from_hists(_hists_by_seq(agg, layer, modes), bands, level, layer, modes)


def _hists_by_seq(agg, layer, modes):
    h = agg.token_hist(layer, modes=modes)                                   # (seq, token, col)
    done = agg.token_done(layer)                                             # (seq, token)
    return [np.asarray(h[s][done[s]], np.int64) for s in range(h.shape[0]) if done[s].any()]


# ----------------------------------------------------------------------------- deep-IR resolution
def kth_smallest(window_hists, k) -> np.ndarray:
    """(n_windows,) the k-th smallest stable rate of each window from its histogram, placed
    log-uniformly inside its bin (NaN when the window has < k modes in the bins)."""
    h = np.asarray(window_hists, np.float64)[:, 1:N_BINS + 1]             # bins only
    c = np.cumsum(h, 1)
    j = (c < k).sum(1)                                                     # bin of the k-th mode
    ok = j < N_BINS
    j = np.minimum(j, N_BINS - 1)
    rows = np.arange(len(h))
    before = np.where(j > 0, c[rows, j - 1], 0.0)
    frac = (k - before - 0.5) / np.maximum(h[rows, j], 1)                  # position inside the bin
    lam = EDGES[j] * (EDGES[j + 1] / EDGES[j]) ** frac
    return np.where(ok, lam, np.nan)


@dataclass
class IRResolution:
    """Mean ln λ_(k) (k-th smallest stable rate per window) vs modes sampled T·d, per k."""
    T: np.ndarray                          # (n_T,) tokens per window
    n_modes: np.ndarray                    # (n_T,) T·d
    d: int                                 # modes per token
    fits: dict                             # k -> LawFit (slope vs −1/(1+β))
    beta: float
    beta_ci: tuple
    layer: int
    modes: str = DEFAULT_MODES

    def plot(self, ax=None):
        ax = axes_or_new(ax)
        for (k, fit), c in zip(self.fits.items(), ("C0", "C1", "C2", "C3")):
            if fit.n_points:
                fit.plot(ax, color=c, label=f"k = {k}: {fit.slope:+.2f} [{fit.lo:+.2f}, {fit.hi:+.2f}]")
        ax.plot([], [], "k--", lw=0.8, label=rf"$-1/(1+\beta)$, β = {self.beta:+.3f}")
        ax.set_xlabel("modes sampled T·d")
        ax.set_ylabel(r"$\exp\langle\ln\lambda_{(k)}\rangle$ over windows")
        ax.set_title(f"deep-IR resolution, layer {self.layer} ({self.modes} modes)", fontsize=9)
        ax.legend(fontsize=7)
        return ax


def _kth_stat(k):
    """windows → (mean ln λ_(k), its variance se²) over windows holding ≥ k modes."""
    def stat(w):
        ll = np.log(kth_smallest(w, k))
        ll = ll[np.isfinite(ll)]
        if len(ll) < MIN_WINDOWS:
            return np.nan, np.nan
        return ll.mean(), ll.var(ddof=1) / len(ll)
    return stat


def ir_resolution_from_hists(hists_by_seq, d, beta, beta_ci=None, ks=KS, level=0.9, layer=-1,
                             modes=DEFAULT_MODES) -> IRResolution:
    """hists_by_seq as for `self_averaging_from_hists`; d modes per token (x = T·d)."""
    C, Ts = chunked(hists_by_seq)
    expect = -1 / (1 + beta)
    e_ci = tuple(-1 / (1 + b) for b in beta_ci) if beta_ci is not None else None
    fits = {k: _jackknife_law(C, Ts, _kth_stat(k), np.log(Ts * d), expect, e_ci, level,
                              name=f"λ_({k})", xlabel="modes sampled T·d", method=(
                                  f"mean ln of the {k}-th smallest stable rate over non-overlapping "
                                  "T-token windows within sequences; weighted line, "
                                  "delete-one-chunk jackknife CI"))
            for k in ks}
    return IRResolution(Ts, Ts * d, int(d), fits, float(beta),
                        tuple(beta_ci) if beta_ci is not None else (np.nan, np.nan), layer, modes)


def ir_resolution(agg, layer, d, beta, beta_ci=None, ks=KS, level=0.9,
                  modes=DEFAULT_MODES) -> IRResolution:
    return ir_resolution_from_hists(_hists_by_seq(agg, layer, modes), d, beta, beta_ci, ks, level,
                                    layer, modes)
