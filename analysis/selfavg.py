"""Self-averaging (paper App. B) and fp32-vs-fp64 comparison.

Self-averaging: pool T consecutive tokens into one TDOS estimate; over the non-overlapping
windows of T tokens, the relative spread of the fraction of modes in a λ band around the
envelope (all tokens pooled) falls like 1/T when tokens sample one common distribution.
Smallest resolved rate: with ~T·d modes and ρ ∝ λ^β, the smallest expected rate scales
like (T·d)^(−1/(1+β)).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._plot import axes_or_new
from .aggregate import aggregate
from .fits import WINDOW, fit_ir_exponent
from .observables import block_rates, tdos
from .rates import EDGES, N_BINS
from .store import open_store

BANDS = {"deep IR 1e-6–1e-4": (1e-6, 1e-4), "fit window 1e-4–5e-2": (1e-4, 5e-2),
         "UV 5e-2–1e2": (5e-2, 1e2)}


def _band_cols(lo, hi):
    """Histogram columns (1-based bins) whose bins lie inside [lo, hi)."""
    k = np.nonzero((EDGES[:-1] >= lo * (1 - 1e-9)) & (EDGES[1:] <= hi * (1 + 1e-9)))[0]
    return k + 1


@dataclass
class SelfAveraging:
    T: np.ndarray                         # window lengths (tokens)
    rel_var: dict                         # band -> (len(T),) relative variance
    n_windows: np.ndarray
    layer: int

    def plot(self, ax=None):
        ax = axes_or_new(ax)
        for (band, v), c in zip(self.rel_var.items(), ("C0", "C1", "C2")):
            ok = np.isfinite(v) & (v > 0)
            ax.loglog(self.T[ok], v[ok], "o-", color=c, label=band)
            if ok.any():
                i = np.nonzero(ok)[0][0]
                ax.loglog(self.T, v[i] * self.T[i] / self.T, "--", color=c, lw=0.7)
        ax.plot([], [], "k--", lw=0.7, label="1/T reference")
        ax.set_xlabel("tokens pooled T")
        ax.set_ylabel("relative variance of band weight")
        ax.set_title(f"self-averaging, layer {self.layer}")
        ax.legend(fontsize=8)
        return ax


def self_averaging(agg, layer, bands=None) -> SelfAveraging:
    bands = bands or BANDS
    h = agg.token_hist(layer).astype(np.float64)          # (seq, token, col)
    done = agg.token_done(layer)
    per_seq = [h[s][done[s]] for s in range(h.shape[0])]  # (T_s, col) done tokens per sequence
    pooled = np.concatenate(per_seq)
    n_stable = pooled[:, 1:N_BINS + 1].sum(1)
    T_max = max(len(p) for p in per_seq) // 2
    Ts = np.array([2 ** k for k in range(0, 20) if 2 ** k <= max(T_max, 1)])
    out, n_win = {}, []
    for band, (lo, hi) in bands.items():
        cols = _band_cols(lo, hi)
        env = pooled[:, cols].sum() / max(n_stable.sum(), 1)
        vals = []
        for T in Ts:
            fr = []
            for p in per_seq:
                nw = len(p) // T
                w = p[: nw * T].reshape(nw, T, -1).sum(1)
                fr.append(w[:, cols].sum(1) / np.maximum(w[:, 1:N_BINS + 1].sum(1), 1))
            fr = np.concatenate(fr)
            vals.append(((fr - env) ** 2).mean() / env ** 2 if env > 0 else np.nan)
            if band == next(iter(bands)):
                n_win.append(len(fr))
        out[band] = np.array(vals)
    return SelfAveraging(Ts, out, np.array(n_win), layer)


@dataclass
class SmallestRate:
    L: np.ndarray
    Ld: np.ndarray
    lam_min: np.ndarray
    beta: float
    layer: int

    def plot(self, ax=None):
        ax = axes_or_new(ax)
        ax.loglog(self.Ld, self.lam_min, "o-", label="smallest stable rate")
        if np.isfinite(self.beta) and self.beta > -1:
            ref = self.lam_min[-1] * (self.Ld / self.Ld[-1]) ** (-1 / (1 + self.beta))
            ax.loglog(self.Ld, ref, "k--", lw=0.8, label=rf"$(L d)^{{-1/(1+\beta)}}$, β = {self.beta:+.3f}")
        ax.set_xlabel("modes sampled L·d (all sequences)")
        ax.set_ylabel("smallest resolved λ")
        ax.set_title(f"infrared resolution, layer {self.layer}")
        ax.legend(fontsize=8)
        return ax


def smallest_rate_vs_length(agg, layer, lengths, d, beta) -> SmallestRate:
    """Exact smallest stable rate among tokens t < L; `d` = modes per token position
    (d_model × number of sequences when all sequences are pooled)."""
    L = np.asarray(lengths)
    lam = np.array([agg.min_rate(layer, int(x)) for x in L])
    return SmallestRate(L, L * d, lam, beta, layer)


# ----------------------------------------------------------------------------- precision
@dataclass
class PrecisionComparison:
    """One config in two precisions: β and TDOS overlay."""
    names: tuple
    fits: tuple
    spectra: tuple
    layer: int
    L: int

    @property
    def delta_beta(self):
        return self.fits[1].beta - self.fits[0].beta

    def plot(self, ax=None):
        ax = axes_or_new(ax)
        for name, fit, sp, c in zip(self.names, self.fits, self.spectra, ("C0", "C3")):
            sp.plot(ax, color=c, label=f"{name}: β = {fit.beta:+.3f}, min λ = {sp.support()[0]:.1e}")
        for v in fit.window:
            ax.axvline(v, color="0.6", ls=":", lw=0.8)
        ax.set_title(f"precision check, layer {self.layer}, L = {self.L}: Δβ = {self.delta_beta:+.4f}")
        ax.legend(fontsize=8)
        return ax


def compare_precision(path_a, path_b=None, model_a=None, model_b=None, layer=None, L=None,
                      window=WINDOW) -> PrecisionComparison:
    """Compare two stores (or two models of one store) of one config, e.g. fp32 vs fp64."""
    path_b = path_b or path_a
    sts = (open_store(path_a, model_a), open_store(path_b, model_b))
    layer = sts[0].layers[len(sts[0].layers) // 2] if layer is None else layer
    L = L or min(s.layer_length[layer] for s in sts)
    fits, spectra = [], []
    for st in sts:
        agg = aggregate(st.path).model(st.name)
        fits.append(fit_ir_exponent(block_rates(st, layer, L).stable, window))
        spectra.append(tdos(agg, layer, L))
    return PrecisionComparison((f"{sts[0].name} ({sts[0].dtype})", f"{sts[1].name} ({sts[1].dtype})"),
                               tuple(fits), tuple(spectra), layer, L)

